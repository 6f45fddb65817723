"""One pusher of benchmarks.ps_capacity: a worker task that does nothing but the learner's
update, as fast as the ps lets it.

    python -m benchmarks.ps_capacity.pusher --cluster FILE --task I --net cartpole|pong

The update is the worker graph's own (worker_graph.exchange_with_ps): the gradients of every global
variable and the learning rate, packed into one message per ps task by distributed.transfer
(with, to the ps of the episode statistics, the rollout's finished episodes), each ps task's
Adam with the preset's settings, EpisodeStats.record, then the updated variables and the
counters packed back and assigned to the worker's local copy. What is left out is the
worker's own compute: no env, no rollout, no forward or backward pass; the gradients are
random values made once, kept in local variables of the worker, so no step feeds anything.
The network is the one a run of the env builds (model.build_network with the env's preset).

Protocol with the harness: after --warmup updates, one JSON line on stdout, {"ready": task,
"parameters", "tensor_bytes", "rpcs"}, where rpcs counts what crosses tasks in one update,
read from the partition graphs TF ran (count_rpcs). From then on it pushes without a pause
and keeps the number of updates it has made in the --counter file (read_counter), which the
harness reads together with the link and CPU counters. It exits when stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import threading

PROG = "benchmarks.ps_capacity.pusher"
NET_ENVS = {"cartpole": "CartPole-v1", "pong": "ALE/Pong-v5"}
# The gradients' values do not matter to the ps (Adam does the same work for any), only
# their size; small ones keep the globals' random walk small over any number of updates.
GRADIENT_STDDEV = 1e-3
COUNTER = struct.Struct("<Q")  # the updates made so far, in --counter


def read_counter(path) -> int:
    """The count of updates a pusher keeps in `path` (0 before its first)."""
    with open(path, "rb") as handle:
        data = handle.read(COUNTER.size)
    return COUNTER.unpack(data)[0] if len(data) == COUNTER.size else 0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", required=True, help="Cluster JSON file.")
    parser.add_argument("--task", type=int, required=True, help="This worker task's index.")
    parser.add_argument("--net", choices=sorted(NET_ENVS), required=True)
    parser.add_argument("--warmup", type=int, default=20, help="Updates before 'ready'.")
    parser.add_argument("--counter", required=True,
                        help="File this pusher keeps its count of updates in.")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def build_update(tf, config, info, spec):
    """The learner's update of worker `spec.task` on random gradients: (the update op, the
    initializers to run once, the global network). The globals and the round trip are
    build_worker_graph's own (worker_graph.build_globals, worker_graph.exchange_with_ps)."""
    from a3c_graph.core.learner import LearnerUpdate
    from a3c_graph.distributed.worker_graph import (
        Learner,
        build_globals,
        build_local_copy,
        exchange_with_ps,
    )

    tf1 = tf.compat.v1
    worker_device = f"/job:worker/task:{spec.task}/cpu:0"
    globals_ = build_globals(config, spec, info, worker_device)
    with tf1.device(worker_device):
        local = build_local_copy(info, config)
        gradients = [tf1.Variable(tf1.random_normal(v.shape, stddev=GRADIENT_STDDEV),
                                  trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES],
                                  name="gradient").read_value()
                     for v in globals_.network.variables]
        no_episode = tf.zeros([0], tf.float32)  # no episode ends in these "rollouts"
        zero = tf.constant(0.0)
        learner = Learner(LearnerUpdate(zero, zero, {}, tf.constant(True), gradients),
                          tf.constant(config.learning_rate), no_episode,
                          tf.zeros([0], tf.int32),
                          config.rollout_length * config.envs_per_worker, None,
                          tf.constant(0, tf.int64))
    counters, _ = exchange_with_ps(globals_, local, learner, spec.task, worker_device, config)
    update = tf.group(*counters, name="update")
    initializers = [tf1.global_variables_initializer(), tf1.local_variables_initializer()]
    return update, initializers, globals_.network


def _task(device: str) -> str:
    """"/job:ps/replica:0/task:1/device:CPU:0" -> "ps:1"."""
    parts = dict(part.split(":", 1) for part in device.strip("/").split("/") if ":" in part)
    return f"{parts.get('job', '?')}:{parts.get('task', '0')}"


def count_rpcs(partition_graphs, worker: str) -> dict:
    """What one step sends between tasks, from the partition graphs TF ran it as.

    Every tensor (or control edge) that crosses tasks is a _Recv node on the receiving side,
    and TF fetches it with one RecvTensor RPC that the receiver sends to the sender. The
    master on `worker` (e.g. "worker:0") also sends one RunGraph RPC to every other task
    that holds a partition. Returns counts by direction of the data: "to_ps" (tensors a ps
    receives from the worker), "from_ps" (tensors the worker receives from a ps),
    "ps_to_ps", and "run_graph".
    """
    counts = {"to_ps": 0, "from_ps": 0, "ps_to_ps": 0, "run_graph": 0}
    for graph in partition_graphs:
        tasks = set()
        for node in graph.node:
            if node.device:
                tasks.add(_task(node.device))
            if node.op not in ("_Recv", "_HostRecv") or node.attr["client_terminated"].b:
                continue
            source = _task(node.attr["send_device"].s.decode())
            target = _task(node.attr["recv_device"].s.decode())
            if source == target:
                continue
            if source == worker:
                counts["to_ps"] += 1
            elif target == worker:
                counts["from_ps"] += 1
            else:
                counts["ps_to_ps"] += 1
        counts["run_graph"] += len(tasks - {worker}) > 0
    return counts


def main(argv=None) -> int:
    args = parse_args(argv)
    from a3c_graph.system import process_env

    process_env.before_tf_import()
    import tensorflow as tf

    from a3c_graph.core.config import resolve_config
    from a3c_graph.core.envs import env_info, env_options
    from a3c_graph.distributed.cluster import TaskSpec, cluster_from_file
    from a3c_graph.distributed.server import session_config, start_server
    from a3c_graph.distributed.sessions import describe_duplicate, retry_duplicates, wait_for_ps

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    config = resolve_config({"env": NET_ENVS[args.net]})
    info = env_info(config.env, **env_options(config))
    spec = TaskSpec(cluster=cluster_from_file(args.cluster), job="worker", task=args.task)
    server_config = session_config(spec, config.intra_op_threads, config.inter_op_threads)
    server = start_server(spec, server_config)
    tf1.set_random_seed(args.seed + args.task)
    update, initializers, global_network = build_update(tf, config, info, spec)
    wait_for_ps(spec, config.connect_timeout)
    session = tf1.Session(server.target, config=server_config)
    # Every pusher initializes the globals: their values do not matter, only their traffic.
    session.run(initializers)
    metadata = tf1.RunMetadata()
    session.run(update, options=tf1.RunOptions(output_partition_graphs=True),
                run_metadata=metadata)
    def push():
        # A ps that served 100,000 updates refuses one in 43,000 as a duplicate request and
        # runs none of it (a3c_graph/distributed/sessions.py): push again, as a worker does.
        retry_duplicates(lambda: session.run(update), lambda error, count: print(
            f"{PROG}: worker {spec.task}: {describe_duplicate(error)}; pushing again "
            f"({count} in a row)", file=sys.stderr, flush=True))

    for _ in range(args.warmup):
        push()
    # The harness reads the count whenever it samples its other counters, so updates and
    # bytes are counted over the same interval. 8 bytes at offset 0, after every update.
    counter = os.open(args.counter, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    parameters = sum(v.shape.num_elements() for v in global_network.variables)
    print(json.dumps({"ready": spec.task, "parameters": parameters,
                      "tensor_bytes": 4 * parameters,
                      "rpcs": count_rpcs(metadata.partition_graphs, f"worker:{spec.task}")}),
          flush=True)

    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    updates = 0
    while not done.is_set():
        push()
        updates += 1
        os.pwrite(counter, COUNTER.pack(updates), 0)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    # TF's teardown with live gRPC peers can take seconds; there is nothing left to flush.
    os._exit(code)

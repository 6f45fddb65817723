"""How often does a ps refuse a step as a duplicate request? A probe of TF's request ids.

    python -m benchmarks.probes.request_ids [--steps 300000] [--allow-remote]

A long run's workers, and benchmarks.ps_capacity's pushers, now and then stop on
"ABORTED: The same RunGraph (Worker) request was received twice". Its cause, read in TF
2.21's source and binary (docs/operations.md): a task refuses a request whose id is among
the last 100,000 it saw (RecentRequestIds); the master runs each step in a new thread
(Master::RunStep -> Env::SchedClosure, a std::thread per call), where GetUniqueRequestId draws
the RunGraph ids from a thread-local mt19937_64 seeded with one 32-bit std::random_device
value. So a step's id to the ps is one of about 2^32, not 2^64: after n steps the ps has
seen about n^2 / 2^33 repeats, then one in 2^32 / 100,000 = 43,000 steps once its window is
full.

The probe runs one ps and one worker server in this process, in a private network (TF's
servers listen on every interface), and a session on the worker that adds 1 to a variable on
the ps, --steps times, counting the steps refused (each is run again, as a worker does:
sessions.retry_duplicates). A step has a part on each task, and the master draws both parts'
ids in the step's own thread, from the one seed: a repeated seed repeats the ids of every
part at once, so each repeat is one refused step (reported by the task that answers first,
the worker's local part), and expected_repeats of them are expected. It prints the count
beside the expected one; a count near it, where 64-bit ids would give 0, confirms the cause. It also
checks that no refused step was applied: the variable ends equal to the steps. About 1 ms of
CPU a step.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from benchmarks import common

PROG = "benchmarks.probes.request_ids"
WINDOW = 100_000  # RecentRequestIds of a TF worker: the ids it remembers
ID_SPACE = 2**32  # seeds of the thread-local generator a step's ids come from


def expected_repeats(steps: int, window: int = WINDOW, space: int = ID_SPACE) -> float:
    """Repeats among `steps` ids drawn uniformly from `space` values when each is checked
    against the last `window`: sum over the steps of min(i, window) / space."""
    filling = min(steps, window)
    return (filling * (filling - 1) / 2 + max(0, steps - window) * window) / space


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300_000)
    common.add_allow_remote_argument(parser)
    args = parser.parse_args(argv)
    common.enter_private_network(PROG, args.allow_remote)
    from a3c_graph.system import process_env

    process_env.before_tf_import()
    import portpicker
    import tensorflow as tf

    from a3c_graph.distributed.sessions import describe_duplicate, retry_duplicates

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    ps_port, worker_port = portpicker.pick_unused_port(), portpicker.pick_unused_port()
    cluster = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"],
                                    "worker": [f"127.0.0.1:{worker_port}"]})
    config = tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2)
    _ps = tf.distribute.Server(cluster, job_name="ps", task_index=0, config=config)
    worker = tf.distribute.Server(cluster, job_name="worker", task_index=0, config=config)
    with tf1.device("/job:ps/task:0"):
        counter = tf1.get_variable("counter", [], tf.int64, tf1.zeros_initializer())
    with tf1.device("/job:worker/task:0"):
        step = counter.assign_add(1)
    session = tf1.Session(worker.target, config=config)
    session.run(tf1.global_variables_initializer())
    refused = []
    began = time.monotonic()
    for done in range(1, args.steps + 1):
        retry_duplicates(lambda: session.run(step), lambda error, _count, done=done: (
            refused.append(done), print(f"{PROG}: step {done:,}: {describe_duplicate(error)}",
                                        flush=True)))
        if done % 50_000 == 0:
            print(f"{PROG}: {done:,} steps, {len(refused)} refused "
                  f"({expected_repeats(done):.2f} expected)", flush=True)
    applied = int(session.run(counter))
    expected = expected_repeats(args.steps)
    print(f"{PROG}: {args.steps:,} steps in {time.monotonic() - began:.0f} s: {len(refused)} "
          f"refused as duplicates (at steps {refused}); {expected:.2f} expected of ids drawn "
          f"from 2^32 values, {expected_repeats(args.steps, space=2**64):.1e} of "
          f"64-bit ids; the counter is {applied:,}", flush=True)
    sys.stdout.flush()
    # Poisson(expected): a count this far out would say the cause is another one.
    low, high = poisson_interval(expected)
    os._exit(0 if applied == args.steps and low <= len(refused) <= high else 1)


def poisson_interval(mean: float, tail: float = 0.001) -> tuple[int, int]:
    """Counts outside which a Poisson(mean) count falls with probability below 2 x tail."""
    cumulative, k, low, high = 0.0, 0, None, None
    while high is None:
        cumulative += math.exp(-mean) * mean**k / math.factorial(k)
        if low is None and cumulative > tail:
            low = k
        if cumulative >= 1 - tail:
            high = k
        k += 1
    return low, high


if __name__ == "__main__":
    sys.exit(main())

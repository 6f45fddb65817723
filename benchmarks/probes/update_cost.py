"""What one update costs, part by part: a worker's training step in a real ps/worker cluster.

    python -m benchmarks.probes.update_cost [--env ALE/Pong-v5] [--updates 40]
        [--allow-remote] [any A3C flag, e.g. --envs-per-worker 8]

The step budget (benchmarks.step_budget) finds "the rest of an update" only as a difference
of whole runs. Here one ps and one worker server run in this process (in a private network),
the worker graph is built from worker_graph.py's own steps, and one rollout, collected once
by the actors' graph, is put on the queue before every update, so an update is timed alone:
no actor runs beside it. CPU time (this process's, every thread: the ps's work included)
per update, for three nested steps:

  the learner's passes    the loss and the clipped gradients of a dequeued rollout
  + the exchange          the training step of the cluster: + the packed messages, Adam on
                          the ps, the counters, the refresh of the local copy
  + the session           the same through the worker's MonitoredSession and its hooks, as
                          the learner's loop runs it (training.py)

and where the training step's time goes: TF's step stats of traced runs (RunOptions
FULL_TRACE) by device and op type, microseconds per update.
"""

from __future__ import annotations

import statistics
import sys
import time

from a3c_graph.core.config import add_config_arguments, config_from_args
from a3c_graph.core.run_spec import resolve_run
from a3c_graph.system.cli import OneLineParser, UsageError, fail
from benchmarks import common
from benchmarks.probes.traces import op_micros

PROG = "benchmarks.probes.update_cost"


def traced_ops(session, fetches, feed_step, runs: int = 5) -> dict[str, float]:
    """{"device op type": microseconds per run} of `fetches`, from TF's step stats."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    by_type: dict[str, float] = {}
    for _ in range(runs):
        feed_step()
        metadata = tf1.RunMetadata()
        session.run(fetches, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                    run_metadata=metadata)
        for device, kind, micros in op_micros(metadata):
            key = f"{'ps' if '/job:ps' in device else 'worker'} {kind}"
            by_type[key] = by_type.get(key, 0.0) + micros / runs
    return dict(sorted(by_type.items(), key=lambda item: -item[1]))


def measure(run, updates: int) -> dict:
    """CPU ms per update of the three steps, and the traced op types of the training step."""
    import tempfile

    import portpicker
    import tensorflow as tf

    from a3c_graph.core.envs import EnvBatch, env_options
    from a3c_graph.distributed import worker_graph as wg
    from a3c_graph.distributed.cluster import TaskSpec
    from a3c_graph.distributed.server import session_config, start_server
    from a3c_graph.distributed.sessions import run_step
    from a3c_graph.rundir import checkpoints

    tf1 = tf.compat.v1
    config, info = run.config, run.info
    cluster = {job: [f"127.0.0.1:{portpicker.pick_unused_port()}"] for job in ("ps", "worker")}
    spec = TaskSpec(cluster, "worker", 0)
    tasks = {job: TaskSpec(cluster, job, 0) for job in ("ps", "worker")}
    servers = {job: start_server(task, session_config(task)) for job, task in tasks.items()}
    device = "/job:worker/task:0/cpu:0"
    batch = EnvBatch(config.env, config.envs_per_worker, seed=0, **env_options(config))
    with tf.Graph().as_default() as graph:
        globals_ = wg.build_globals(config, spec, info, device)
        with tf1.device(device):
            local = wg.build_local_copy(info, config)
            queue = wg.build_actors_and_queue(local, [batch], config)
            learner = wg.build_learner(queue.dequeue(), config, info, local)
        counters, own_updates = wg.exchange_with_ps(globals_, local, learner, 0, device, config)
        with tf1.device(device):
            counters = wg.note_for_next_update(learner, counters, own_updates)
            fetches = wg.train_fetches(learner, counters, queue)
            local_init_op = wg.build_sync(globals_, local, learner.env_steps_seen)
            saver = checkpoints.build_saver()
            # The actors' rollout, by field, and an enqueue of one fed back (no actor runs).
            [runner] = graph.get_collection(tf1.GraphKeys.QUEUE_RUNNERS)
            rollout = dict(zip(queue.queue.names, list(runner.enqueue_ops[0].inputs)[1:]))
            fed = {name: tf1.placeholder(t.dtype, t.shape) for name, t in rollout.items()}
            enqueue_fed = queue.queue.enqueue(fed)
        graph.clear_collection(tf1.GraphKeys.QUEUE_RUNNERS)
        found = {}
        with tf1.Session(servers["worker"].target, config=session_config(spec)) as session:
            session.run([tf1.global_variables_initializer(), local_init_op])
            feed = {fed[name]: value for name, value in session.run(rollout).items()}
            found["the learner's passes"] = _cpu_per_run(
                session, [learner.update.loss, *learner.update.gradients],
                lambda: session.run(enqueue_fed, feed), updates)
            found["+ the exchange (the training step)"] = _cpu_per_run(
                session, fetches, lambda: session.run(enqueue_fed, feed), updates)
            ops = traced_ops(session, fetches, lambda: session.run(enqueue_fed, feed))
        scaffold = tf1.train.Scaffold(saver=saver, local_init_op=local_init_op)
        with tempfile.TemporaryDirectory() as logdir, tf1.train.MonitoredSession(
                session_creator=tf1.train.ChiefSessionCreator(
                    scaffold=scaffold, master=servers["worker"].target,
                    config=session_config(spec)),
                hooks=[tf1.train.CheckpointSaverHook(logdir, save_secs=10**6,
                                                     scaffold=scaffold)]) as monitored:
            found["+ the session (MonitoredSession, the chief's hooks)"] = _cpu_per_run(
                monitored, None, lambda: monitored.run(enqueue_fed, feed), updates,
                run=lambda: run_step(monitored, fetches))
    batch.close()
    return {"cpu ms per update": found, "traced us per update": ops}


def _cpu_per_run(session, op, feed_step, runs: int, run=None) -> float:
    """Median CPU milliseconds of this process per session.run(op) (or run()), each after
    feed_step, after 5 to warm up."""
    run = run or (lambda: session.run(op))
    for _ in range(5):
        feed_step()
        run()
    samples = []
    for _ in range(runs):
        feed_step()
        start = time.process_time()
        run()
        samples.append((time.process_time() - start) * 1e3)
    return statistics.median(samples)


def main(argv=None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=40, help="Timed updates per step.")
    common.add_allow_remote_argument(parser)
    add_config_arguments(parser)
    parser.set_defaults(env="ALE/Pong-v5")
    try:
        args = parser.parse_args(argv if argv is not None else sys.argv[1:])
        run = resolve_run(config_from_args(args))
    except (ValueError, UsageError) as error:
        return fail(PROG, error)
    common.enter_private_network(PROG, args.allow_remote)
    from a3c_graph.system import process_env

    process_env.before_tf_import()
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    found = measure(run, args.updates)
    B, T = run.config.envs_per_worker, run.config.rollout_length
    print(f"{run.config.env}, {B} envs x {T} steps = {B * T} agent steps per update\n")
    print("| step | CPU ms per update | us per agent step |\n|---|---:|---:|")
    for name, ms in found["cpu ms per update"].items():
        print(f"| {name} | {ms:.1f} | {ms * 1e3 / (B * T):.0f} |")
    print("\nthe training step, traced (us per update, top 25):")
    for kind, micros in list(found["traced us per update"].items())[:25]:
        print(f"  {kind:48s} {micros:9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

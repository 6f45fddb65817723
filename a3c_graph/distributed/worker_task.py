"""A worker task's start-up and end: its server, its graph, the chief's checkpoint, its
session to the ps, and then the learner's loop (training.py).

Worker 0 is the chief: it initializes the globals or restores them from the latest
checkpoint in --logdir, and writes checkpoints (a3c_graph/rundir/checkpoints.py says what,
when and what it refuses). A lost ps is not handled here: the session's error reaches
a3c_graph/worker.py, which exits 75 for the launcher to restart the task (sessions.py says
why).
"""

from __future__ import annotations

import tensorflow as tf

from a3c_graph.core.envs import EnvBatch, actor_seed, env_options
from a3c_graph.core.stop_rule import Counters
from a3c_graph.distributed import ps_release, server
from a3c_graph.distributed.cluster import releases_ps
from a3c_graph.distributed.sessions import GaveUp, session_creator
from a3c_graph.distributed.training import ProgressReporter, learner_loop
from a3c_graph.distributed.worker_graph import build_worker_graph
from a3c_graph.rundir import checkpoints
from a3c_graph.rundir.run_config import CheckpointError
from a3c_graph.system.cli import WORKER_PROG as PROG
from a3c_graph.system.cli import UsageError
from a3c_graph.system.devices import describe_task


def run_worker(spec, run, args, stop, device) -> int:
    """Start worker `spec.task` of `run` (core/run_spec.py), train until a stop rule or a
    signal, and leave: 0, or GaveUp when its updates stayed NaN/inf."""
    config = run.config
    progress = ProgressReporter(args.logdir, spec.task, run.target_return, config)
    progress.write("starting")
    sess_config = server.task_config(spec, config, device)
    task_server = server.start_server(spec, sess_config)
    print(f"{PROG}: {describe_task(device)}", flush=True)

    graph = tf.Graph()
    with graph.as_default():
        worker_graph, env_batches = _build_graph(spec, config, run.info, device)
        if spec.is_chief:  # TensorBoard's graph view: the parts of worker_graph.py by name
            progress.writer.add_graph(graph)
        # Under Slurm the ps ends once every worker has left its token (ps_release.py).
        tokens = ps_release.token_ops(spec.num_ps, spec.task) if releases_ps(args) else []
        scaffold = tf.compat.v1.train.Scaffold(saver=worker_graph.saver,
                                               local_init_op=worker_graph.local_init_op)
        checkpoint, hooks = _chief_checkpoints(spec, config, args.logdir, scaffold)
        creator = session_creator(spec, scaffold, task_server.target, sess_config,
                                  config.connect_timeout, checkpoint)
        print(f"{PROG}: worker {spec.task} connecting to the ps at {','.join(spec.cluster['ps'])} "
              "(if this hangs, the ps is not reachable)", flush=True)
        reason, error = learner_loop(creator, hooks, worker_graph, config, spec, progress, stop,
                                     run.target_return)
        if tokens:  # after the session closed: the chief's last checkpoint is written
            stop.in_loop = True  # a second SIGTERM (Slurm may send two) must not cut this
            problem = ps_release.leave_token(task_server.target, graph, sess_config, tokens)
            if problem:
                print(f"{PROG}: warning: worker {spec.task} could not tell the ps it is done: "
                      f"{problem}", flush=True)
    progress.close()
    for batch in env_batches:
        batch.close()
    _print_done(spec.task, reason, progress.fetched)
    if error:
        raise GaveUp(error)
    return 0


def _build_graph(spec, config, info, device):
    """(WorkerGraph, the actors' EnvBatches) of this worker, seeded by task and actor."""
    tf.compat.v1.set_random_seed(config.seed + 1000 * spec.task)
    env_batches = [EnvBatch(config.env, config.envs_per_worker,
                            seed=actor_seed(config.seed, spec.task, actor),
                            **env_options(config))
                   for actor in range(config.actor_threads)]
    return (build_worker_graph(config, spec, info, env_batches, worker_device=device.device),
            env_batches)


def _chief_checkpoints(spec, config, logdir: str, scaffold):
    """(the checkpoint to restore or None, the session's hooks): the chief's
    (checkpoints.chief_checkpointing; a refused checkpoint is a UsageError, one line).
    Other workers restore nothing and save nothing."""
    if not spec.is_chief:
        return None, []
    try:
        return checkpoints.chief_checkpointing(
            logdir, config, scaffold,
            warn=lambda message: print(f"{PROG}: warning: {message}", flush=True))
    except CheckpointError as error:
        raise UsageError(str(error)) from None


def _print_done(task: int, reason: str | None, fetched) -> None:
    """The worker's last line: why it stopped and the cluster's counters it last read."""
    counters = fetched.counters if fetched is not None else Counters(0, 0, 0, 0, float("nan"))
    print(f"{PROG}: worker {task} done ({reason}): global step {int(counters.global_step)}, "
          f"env steps {int(counters.env_steps)}, mean return(100) "
          f"{float(counters.mean_return_100):.1f}", flush=True)

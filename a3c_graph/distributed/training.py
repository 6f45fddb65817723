"""A worker task's training: its graph built, its session to the ps, and the learner's loop.

Actor threads fill the rollout queue while the main thread dequeues rollouts and applies
gradients to the globals on the ps (worker_graph.py). Worker 0 is the chief: it initializes
the globals or restores them from the latest checkpoint in --logdir, and writes checkpoints
every --checkpoint-secs. Every worker writes TensorBoard summaries to <logdir>/tb/worker_<i>
and its progress to <logdir>/progress/worker_<i>.json, which the launcher reads.

TensorFlow is imported inside the functions: task_runner.py imports this module before it
has checked its flags.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections import deque

from a3c_graph.cli import WORKER_PROG as PROG
from a3c_graph.cli import UsageError
from a3c_graph.core.stats import RECENT_EPISODES, training_stop_reason
from a3c_graph.distributed.ps_release import releases_ps
from a3c_graph.distributed.sessions import (
    WAIT_MESSAGE_SECS,
    GaveUp,
    describe_duplicate,
    run_step,
    session_creator,
)
from a3c_graph.progress import ProgressFile, write_json_atomic

# Updates in a row whose loss or gradients are NaN/inf before a worker stops.
NONFINITE_PATIENCE = 20


class ProgressReporter:
    """This worker's progress file (a3c_graph.progress) and its TensorBoard summaries."""

    def __init__(self, logdir: str, task: int, target_return: float, config):
        import tensorflow as tf

        self.config = config
        self.file = ProgressFile(logdir, task, target_return, config.progress_secs)
        self.writer = tf.compat.v1.summary.FileWriter(os.path.join(logdir, "tb", f"worker_{task}"))
        # This worker's own recent episodes, as TensorBoard's episode/return and length.
        self.returns: deque = deque(maxlen=RECENT_EPISODES)
        self.lengths: deque = deque(maxlen=RECENT_EPISODES)
        self.losses: dict = {}
        self.fetched: dict = {}

    def update(self, fetched: dict) -> None:
        self.fetched = fetched
        learned = self.config.learn and not fetched["update_skipped"]
        self.file.update(fetched, int(fetched["rollout_steps"]),
                         float(fetched["entropy"]) if learned else None)
        self.returns.extend(float(r) for r in fetched["finished_returns"])
        self.lengths.extend(int(n) for n in fetched["finished_lengths"])
        for key in ("loss", "policy_loss", "value_loss", "entropy", "grad_norm", "queue_size"):
            self.losses.setdefault(key, []).append(float(fetched[key]))

    def due(self) -> bool:
        return self.file.due()

    def write(self, state: str, stop_reason: str | None = None) -> None:
        self.file.write(state, stop_reason)
        if self.fetched:
            self._summaries(int(self.fetched["global_step"]), self.file.mean_return_100)

    def _summaries(self, global_step: int, mean_100: float) -> None:
        import tensorflow as tf

        values = {"perf/env_steps_per_sec": self.file.steps_per_sec,
                  "train/learning_rate": self.config.learning_rate_at(
                      int(self.fetched["env_steps"]))}
        if self.returns:
            values["episode/return"] = sum(self.returns) / len(self.returns)
            values["episode/length"] = sum(self.lengths) / len(self.lengths)
        if not math.isnan(mean_100):
            values["episode/cluster_mean_return_100"] = mean_100
        for key, series in self.losses.items():
            prefix = "perf" if key == "queue_size" else "loss"
            values[f"{prefix}/{key}"] = sum(series) / len(series)
        self.losses = {}
        Value = tf.compat.v1.Summary.Value
        summary = tf.compat.v1.Summary(
            value=[Value(tag=tag, simple_value=value) for tag, value in values.items()])
        self.writer.add_summary(summary, global_step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def run_worker(spec, config, args, info, target_return: float, stop,
               device) -> int:
    import tensorflow as tf

    from a3c_graph.checkpoints import CheckpointError, restorable_checkpoint
    from a3c_graph.core.envs import EnvBatch, env_options
    from a3c_graph.distributed import ps_release
    from a3c_graph.distributed.cluster import session_config, start_server
    from a3c_graph.distributed.worker_graph import build_worker_graph
    from a3c_graph.system.devices import apply_to_config, describe_task

    tf1 = tf.compat.v1
    progress = ProgressReporter(args.logdir, spec.task, target_return, config)
    progress.write("starting")
    sess_config = apply_to_config(
        session_config(spec, config.intra_op_threads, config.inter_op_threads), device)
    server = start_server(spec, sess_config)
    print(f"{PROG}: {describe_task(device)}", flush=True)

    graph = tf.Graph()
    env_batches = []
    with graph.as_default():
        tf1.set_random_seed(config.seed + 1000 * spec.task)
        for actor in range(config.actor_threads):
            env_batches.append(EnvBatch(config.env, config.envs_per_worker,
                                        seed=config.seed + 1000 * spec.task + 100 * actor,
                                        **env_options(config)))
        worker_graph = build_worker_graph(config, spec, info, env_batches,
                                          worker_device=device.device)
        # Under Slurm the ps ends once every worker has left its token (ps_release.py).
        tokens = ps_release.token_ops(spec.num_ps, spec.task) if releases_ps(args) else []
        scaffold = tf1.train.Scaffold(saver=worker_graph.saver,
                                      local_init_op=worker_graph.local_init_op)
        hooks = []
        if spec.is_chief:
            try:
                checkpoint = restorable_checkpoint(
                    args.logdir, worker_graph.saver,
                    warn=lambda message: print(f"{PROG}: warning: {message}", flush=True))
            except CheckpointError as error:
                raise UsageError(str(error)) from None
            # What evaluate.py needs to rebuild the network of this run's checkpoints;
            # written once the checkpoints are known to fit it.
            write_json_atomic(os.path.join(args.logdir, "config.json"),
                              dataclasses.asdict(config))
            hooks.append(tf1.train.CheckpointSaverHook(
                args.logdir, save_secs=config.checkpoint_secs, scaffold=scaffold))
        else:
            checkpoint = None
        creator = session_creator(spec, scaffold, server.target, sess_config,
                                  config.connect_timeout, checkpoint)
        print(f"{PROG}: worker {spec.task} connecting to the ps at {','.join(spec.cluster['ps'])} "
              "(if this hangs, the ps is not reachable)", flush=True)
        reason, error = train(creator, hooks, worker_graph, config, spec, progress, stop,
                              target_return)
        if tokens:  # after the session closed: the chief's last checkpoint is written
            stop.in_loop = True  # a second SIGTERM (Slurm may send two) must not cut this
            problem = ps_release.leave_token(server.target, graph, sess_config, tokens)
            if problem:
                print(f"{PROG}: warning: worker {spec.task} could not tell the ps it is done: "
                      f"{problem}", flush=True)
    progress.close()
    for batch in env_batches:
        batch.close()
    f = progress.fetched
    print(f"{PROG}: worker {spec.task} done ({reason}): "
          f"global step {int(f.get('global_step', 0))}, "
          f"env steps {int(f.get('env_steps', 0))}, mean return(100) "
          f"{float(f.get('mean_return_100', float('nan'))):.1f}", flush=True)
    if error:
        raise GaveUp(error)
    return 0


def train(creator, hooks, worker_graph, config, spec, progress: ProgressReporter, stop,
          target_return: float) -> tuple[str | None, str | None]:
    """The learner loop: (stop reason, error to give up with or None).

    Its budget counts from its first applied update, and the final report is written as
    soon as it decides to stop (progress.py: one clock for every variant). Leaving the
    MonitoredSession afterwards runs the hooks' end (the chief's final checkpoint), stops
    the actor threads and closes the queue.
    """
    import tensorflow as tf

    reason = error = None
    # A step that takes this long is stuck on an unreachable ps (a network cut can leave a
    # connection that neither side closes): DeadlineExceeded, handled like a lost ps.
    options = tf.compat.v1.RunOptions(timeout_in_ms=int(config.connect_timeout * 1000))
    skipped_in_a_row = 0
    last_skip_message = 0.0
    with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks,
                                             stop_grace_period_secs=5) as session:
        stop.in_loop = True
        print(f"{PROG}: worker {spec.task} training "
              f"({config.actor_threads} actor thread(s) x {config.envs_per_worker} envs)",
              flush=True)
        while not session.should_stop():
            fetched = run_step(session, worker_graph.train_fetches, options,
                               on_duplicate=lambda error, count: print(
                                   f"{PROG}: warning: worker {spec.task}: "
                                   f"{describe_duplicate(error)}; running the step again "
                                   f"({count} in a row)", flush=True))
            progress.update(fetched)
            if fetched["update_skipped"]:
                skipped_in_a_row += 1
                if time.monotonic() - last_skip_message >= WAIT_MESSAGE_SECS:
                    last_skip_message = time.monotonic()
                    print(f"{PROG}: warning: worker {spec.task} skipped an update at global step "
                          f"{int(fetched['global_step'])}: loss {float(fetched['loss']):g}, "
                          f"gradient norm {float(fetched['grad_norm']):g} "
                          f"({skipped_in_a_row} in a row)", flush=True)
                if skipped_in_a_row >= NONFINITE_PATIENCE:
                    reason = "non_finite"
                    error = (f"worker {spec.task}: {skipped_in_a_row} updates in a row had a "
                             "NaN/inf loss or gradients (NaN/inf observations or rewards, or a "
                             "diverged network); stopped without applying them")
                    break
            else:
                skipped_in_a_row = 0
            reason = training_stop_reason(fetched, config, target_return,
                                          progress.file.training_started)
            if stop.received is not None:
                reason = "signal"
            if reason:
                break
            if progress.due():
                progress.write("running")
        progress.write("done", stop_reason=reason)
    stop.in_loop = False
    return reason, error

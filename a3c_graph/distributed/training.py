"""The learner's loop of a worker task, and what it reports.

The loop runs one training step per rollout (worker_graph.py: dequeue, loss, apply on the
ps, refresh the local copy) while the actor threads fill the queue, and after each step
decides whether to stop (core/stats.py's rules, a signal, updates that stay NaN/inf).
Every worker writes TensorBoard summaries to <logdir>/tb/worker_<i> and its progress to
<logdir>/progress/worker_<i>.json, which the launcher reads. The task's start-up is
worker_task.py's.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import deque

import tensorflow as tf

from a3c_graph.core.stop_rule import RECENT_EPISODES, training_stop_reason
from a3c_graph.distributed.sessions import (
    STEP_DEADLINE_GRACE_SECS,
    WAIT_MESSAGE_SECS,
    StepWatchdog,
    describe_duplicate,
    run_step,
)
from a3c_graph.rundir.progress import LEARNER_DIAGNOSTICS, ProgressFile
from a3c_graph.system.cli import EXIT_LOST_PS
from a3c_graph.system.cli import WORKER_PROG as PROG

# Updates in a row whose loss or gradients are NaN/inf before a worker stops.
NONFINITE_PATIENCE = 20
# The training step's scalars TensorBoard shows as the mean over each progress interval.
LOSS_SCALARS = ("loss", "policy_loss", "value_loss", "entropy", "grad_norm")
LAG_SCALARS = ("lag_apply",)


class ProgressReporter:
    """This worker's progress file (a3c_graph.rundir.progress) and its TensorBoard summaries."""

    def __init__(self, logdir: str, task: int, target_return: float, config):

        self.config = config
        self.file = ProgressFile(logdir, task, target_return, config.progress_secs)
        self.writer = tf.compat.v1.summary.FileWriter(os.path.join(logdir, "tb", f"worker_{task}"))
        # This worker's own recent episodes, as TensorBoard's episode/return and length.
        self.returns: deque = deque(maxlen=RECENT_EPISODES)
        self.lengths: deque = deque(maxlen=RECENT_EPISODES)
        self.scalars: dict = {}  # tag -> this interval's values
        self.fetched = None  # the last TrainFetches

    def update(self, fetched) -> None:
        """After each training step: `fetched` is its TrainFetches (worker_graph.py)."""
        self.fetched = fetched
        learned = self.config.learn and not fetched.update_skipped
        diagnostics = ({key: float(getattr(fetched, key)) for key in LEARNER_DIAGNOSTICS}
                       if learned else None)
        self.file.update(fetched.counters._asdict(), int(fetched.rollout_steps),
                         float(fetched.entropy) if learned else None, diagnostics)
        self.returns.extend(float(r) for r in fetched.finished_returns)
        self.lengths.extend(int(n) for n in fetched.finished_lengths)
        for key in LOSS_SCALARS:
            self.scalars.setdefault(f"loss/{key}", []).append(float(getattr(fetched, key)))
        self.scalars.setdefault("perf/queue_size", []).append(float(fetched.queue_size))
        for key in LAG_SCALARS:
            self.scalars.setdefault(f"policy_lag/{key}", []).append(float(getattr(fetched, key)))
        # The rollout's rate (annealed, scaled by its lag); a skipped update's 0 is not a
        # rate the schedule gave.
        if learned:
            self.scalars.setdefault("train/learning_rate", []).append(
                float(fetched.learning_rate))

    def due(self) -> bool:
        return self.file.due()

    def write(self, state: str, stop_reason: str | None = None,
              extra: dict | None = None) -> None:
        """The progress file, and the interval's summaries with `extra` scalars (by tag)."""
        self.file.write(state, stop_reason)
        if self.fetched is not None:
            self._summaries(int(self.fetched.counters.global_step), self.file.mean_return_100,
                            extra or {})

    def _summaries(self, global_step: int, mean_100: float, extra: dict) -> None:

        values = {"perf/env_steps_per_sec": self.file.steps_per_sec, **extra}
        if self.returns:
            values["episode/return"] = sum(self.returns) / len(self.returns)
            values["episode/length"] = sum(self.lengths) / len(self.lengths)
        if not math.isnan(mean_100):
            values["episode/cluster_mean_return_100"] = mean_100
        for tag, series in self.scalars.items():
            values[tag] = sum(series) / len(series)
        self.scalars = {}
        Value = tf.compat.v1.Summary.Value
        summary = tf.compat.v1.Summary(
            value=[Value(tag=tag, simple_value=value) for tag, value in values.items()])
        self.writer.add_summary(summary, global_step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def learner_loop(creator, hooks, worker_graph, config, spec, progress: ProgressReporter, stop,
                 target_return: float) -> tuple[str | None, str | None]:
    """The learner's loop: (stop reason, error to give up with or None).

    Its budget counts from its first applied update, and the final report is written as
    soon as it decides to stop (progress.py: one clock for every variant). Leaving the
    MonitoredSession afterwards runs the hooks' end (the chief's final checkpoint), stops
    the actor threads and closes the queue.
    """

    reason = error = None
    # A step that takes this long is stuck on an unreachable ps (a network cut can leave a
    # connection that neither side closes): DeadlineExceeded, handled like a lost ps. One
    # still out STEP_DEADLINE_GRACE_SECS after that never returns: the watchdog ends the
    # worker with the lost ps's exit status.
    options = tf.compat.v1.RunOptions(timeout_in_ms=int(config.connect_timeout * 1000))
    skipped_in_a_row = 0
    last_skip_message = 0.0
    with StepWatchdog(config.connect_timeout + STEP_DEADLINE_GRACE_SECS,
                      lambda seconds: wedged(spec, seconds)) as watchdog, \
            tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks,
                                                stop_grace_period_secs=5) as session:
        stop.in_loop = True
        print(f"{PROG}: worker {spec.task} training "
              f"({config.actor_threads} actor thread(s) x {config.envs_per_worker} envs)",
              flush=True)
        while not session.should_stop():
            with watchdog.step():
                fetched = training_step(session, worker_graph, options, spec)
            progress.update(fetched)
            if fetched.update_skipped:
                skipped_in_a_row += 1
                if time.monotonic() - last_skip_message >= WAIT_MESSAGE_SECS:
                    last_skip_message = time.monotonic()
                    print(f"{PROG}: warning: worker {spec.task} skipped an update at global step "
                          f"{int(fetched.counters.global_step)}: loss {float(fetched.loss):g}, "
                          f"gradient norm {float(fetched.grad_norm):g} "
                          f"({skipped_in_a_row} in a row)", flush=True)
                if skipped_in_a_row >= NONFINITE_PATIENCE:
                    reason = "non_finite"
                    error = (f"worker {spec.task}: {skipped_in_a_row} updates in a row had a "
                             "NaN/inf loss or gradients (NaN/inf observations or rewards, or a "
                             "diverged network); stopped without applying them")
                    break
            else:
                skipped_in_a_row = 0
            reason = training_stop_reason(fetched.counters._asdict(), config, target_return,
                                          progress.file.training_started)
            if stop.received is not None:
                reason = "signal"
            if reason:
                break
            if progress.due():
                # The chief alone reads the optimizer's state off the ps (the same for all).
                extra = (session.run(worker_graph.optimizer_state, options=options)
                         if spec.is_chief and worker_graph.optimizer_state else None)
                progress.write("running", extra=extra)
        progress.write("done", stop_reason=reason)
    stop.in_loop = False
    return reason, error


def training_step(session, worker_graph, options, spec):
    """One step of the learner (its fetches), run again with a warning when the ps refused
    it as a duplicate request."""
    return run_step(session, worker_graph.train_fetches, options,
                    on_duplicate=lambda error, count: print(
                        f"{PROG}: warning: worker {spec.task}: {describe_duplicate(error)}; "
                        f"running the step again ({count} in a row)", flush=True))


def wedged(spec, seconds: float) -> None:
    """StepWatchdog's end of a worker whose step never returned: one line on stderr, and
    the lost ps's exit status, so the launcher starts the worker again at once."""
    print(f"{PROG}: worker {spec.task}: a training step has not returned in {seconds:.0f} s, "
          "past its deadline (a session TF left wedged); exiting to be restarted",
          file=sys.stderr, flush=True)
    os._exit(EXIT_LOST_PS)

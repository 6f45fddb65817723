"""The supervisor's decisions, as pure functions: whether and when a task that exited starts
again, and whether a run that ended failed.

A task's exit status is the worker's contract (a3c_graph/system/cli.py, a3c_graph/worker.py):
bad input, giving up and a log dir that cannot be written are not cured by a restart, so the
run ends; a worker that lost the ps starts again at once; anything else is a crash,
restarted after a back-off that doubles with each crash in a row. Nothing here starts,
signals or prints: supervisor.py acts on these answers and report.py words them.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from a3c_graph.system.cli import EXIT_GAVE_UP, EXIT_LOST_PS, EXIT_STORAGE, EXIT_USAGE

# A task's restarts: after its n-th crash in a row it waits RESTART_BACKOFF_SECS[n-1] (the
# last entry from then on); a task that ran HEALTHY_SECS before crashing starts counting
# again. The number of restarts in a row before the run gives up is --max-restarts.
RESTART_BACKOFF_SECS = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
HEALTHY_SECS = 60.0


class TaskExit(enum.Enum):
    """What a task's exit status says."""

    DONE = "done"  # a worker stopped on its own: solved, its budget spent, or told to
    USAGE = "usage"  # bad input: a restart would fail the same way; the run ends, exit 2
    GAVE_UP = "gave up"  # a reason a restart would not cure (no ps in time, NaN losses)
    STORAGE = "storage"  # the log dir cannot be written (full, read-only): nor can a restart
    LOST_PS = "lost the ps"  # it wants to start again at once: it waits for the ps
    CRASH = "crash"  # anything else, a ps that exited at all included


@dataclass(frozen=True)
class RestartDecision:
    exit: TaskExit
    crashes_in_a_row: int  # the task's count once this exit is counted
    restart_in: float | None  # seconds until it starts again; None: it does not


def restart_decision(job: str, code: int, ran_secs: float, crashes_before: int,
                     max_restarts: int) -> RestartDecision:
    """What to do about a `job` task that exited with status `code` after `ran_secs`
    seconds, its previous processes having crashed `crashes_before` times in a row.

    A worker that lost the ps starts again after the shortest back-off and the crash is not
    counted: the new process waits for the ps, and the chief restores the latest checkpoint.
    A crash is restarted after a back-off that doubles with each crash in a row, up to
    `max_restarts` of them; a process that ran HEALTHY_SECS first counts as a new series.
    Bad input, giving up and a log dir that cannot be written are never restarted: the run
    ends.
    """
    if job == "worker" and code == 0:
        return RestartDecision(TaskExit.DONE, crashes_before, None)
    final = {EXIT_USAGE: TaskExit.USAGE, EXIT_GAVE_UP: TaskExit.GAVE_UP,
             EXIT_STORAGE: TaskExit.STORAGE}
    if code in final:
        return RestartDecision(final[code], crashes_before, None)
    if code == EXIT_LOST_PS:
        return RestartDecision(TaskExit.LOST_PS, crashes_before, RESTART_BACKOFF_SECS[0])
    crashes = 1 if ran_secs >= HEALTHY_SECS else crashes_before + 1
    if crashes > max_restarts:
        return RestartDecision(TaskExit.CRASH, crashes, None)
    return RestartDecision(TaskExit.CRASH, crashes,
                           RESTART_BACKOFF_SECS[min(crashes, len(RESTART_BACKOFF_SECS)) - 1])


class RunVerdict(enum.Enum):
    OK = "ok"  # every worker stopped by itself (solved, budget, signal): exit 0
    NEVER_TRAINED = "never trained"  # no worker ever made an update
    STUCK = "stuck"  # trained, then a worker had to be stopped at the deadline
    CRASHED = "crashed"  # trained, but some worker's last process crashed


def run_verdict(worker_exits: Sequence[int | None], trained: bool,
                at_deadline: bool) -> RunVerdict:
    """How a run ended whose workers all stopped (`at_deadline` false) or that reached the
    backstop deadline, from each worker's last exit status (None: still running) and
    whether any worker ever trained. Only OK exits 0. No workers (a launcher of only ps
    tasks, which serves until the deadline) is OK."""
    if not worker_exits:
        return RunVerdict.OK
    if not trained:
        return RunVerdict.NEVER_TRAINED
    if at_deadline and any(code is None for code in worker_exits):
        return RunVerdict.STUCK
    # A crashed worker still stopped is one whose budget was spent when it crashed, so it
    # was not started again.
    if any(code not in (0, None) for code in worker_exits):
        return RunVerdict.CRASHED
    return RunVerdict.OK

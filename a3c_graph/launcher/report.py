"""What a run tells its user: the progress line, stall warnings, why a task or the run
ended, and the summary.

The supervisor (supervisor.py) runs the tasks and decides (restarts.py); every line it
prints about them, and the summary.json it writes, is worded here. `status` prints the same
progress line from the same progress files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from a3c_graph.launcher.plan import PROG, LaunchPlan
from a3c_graph.launcher.restarts import RestartDecision, RunVerdict, TaskExit
from a3c_graph.launcher.running import RunningTask
from a3c_graph.rundir import storage
from a3c_graph.rundir.progress import Totals, json_number, summary_fields
from a3c_graph.system.cli import EXIT_CRASH, EXIT_STORAGE, EXIT_USAGE, WORKER_PROG

# A training worker whose progress file is older than this (or 10 x --progress-secs) is
# reported as stalled.
STALL_SECS = 30.0
# The worker's own error line (a3c_graph/worker.py), relayed without its prefix.
WORKER_ERROR_PREFIX = f"{WORKER_PROG}: error:"


@dataclass
class Outcome:
    """How a run ended, as the summary and the exit status tell it."""

    exit_code: int
    stop_reason: str | None = None  # overrides the workers' own reason
    error: str | None = None  # one line for stderr


# --------------------------------------------------------------------------- while it runs

def clock(seconds: float) -> str:
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    return f"{minutes:3d}:{secs:02d}"


def progress_line(elapsed: float, totals: Totals | None, steps_per_sec: float | None) -> str:
    head = f"[{clock(elapsed)}]"
    if totals is None:
        return f"{head} waiting for the workers' first progress (connecting to the ps)"
    mean = "-" if totals.mean_return_100 is None else f"{totals.mean_return_100:.1f}"
    rate = "-" if steps_per_sec is None else f"{steps_per_sec:,.0f}"
    return (f"{head} step {totals.global_step:,}  env steps {totals.env_steps:,}  "
            f"{rate} steps/s  episodes {totals.episodes:,}  mean return(100) {mean}")


def steps_per_sec_between(last: Totals | None, totals: Totals | None) -> float | None:
    """The run's env steps/s from the `last` reading to `totals`; None without two readings,
    and across a restart: a restarted task's counters start from zero, and a restored
    checkpoint can step back."""
    if (totals is None or last is None or totals.time <= last.time or last.global_step <= 0
            or totals.env_steps < last.env_steps):
        return None
    return (totals.env_steps - last.env_steps) / (totals.time - last.time)


class StallWarnings:
    """One warning per stall of a training worker that stopped reporting (e.g. a network
    cut: its step waits on the ps until --connect-timeout turns it into a restart)."""

    def __init__(self, progress_secs: float) -> None:
        self.limit = max(STALL_SECS, 10 * progress_secs)
        self.warned: set[int] = set()

    def new_stalls(self, progress: Mapping[int, dict], live_pids: Mapping[int, int],
                   now: float) -> list[str]:
        """The warnings due now, from the progress files by worker index and the pid of
        each worker still running."""
        lines = []
        for task, data in progress.items():
            # A file written by an earlier process of a restarted task is not a stall: the
            # new process is still starting (TF import can take a minute on a busy machine).
            stalled = (data.get("state") == "running" and now - data["time"] > self.limit
                       and task in live_pids
                       and data.get("pid", live_pids[task]) == live_pids[task])
            if stalled and task not in self.warned:
                lines.append(f"{PROG}: warning: worker task {task} has not reported for "
                             f"{now - data['time']:.0f} s (cannot reach the ps?)")
                self.warned.add(task)
            elif not stalled:
                self.warned.discard(task)
        return lines


# --------------------------------------------------------------------------- a task's exit

def newest_output(log_path: Path) -> list[str]:
    """The lines of a task's log that its newest process wrote: those after the last
    "# <time> launch_cluster: <command>" line, which the supervisor writes at each start."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    starts = [i for i, line in enumerate(lines) if line.startswith("# ") and f" {PROG}: " in line]
    return lines[starts[-1] + 1:] if starts else lines


def task_error(lines: Sequence[str]) -> str | None:
    """The error a task's output tells of: the worker's own one-line error (its prefix cut),
    else the exception of the last Python traceback, else None (e.g. a process killed by a
    signal says nothing)."""
    for line in reversed(lines):
        if line.startswith(WORKER_ERROR_PREFIX):
            return line[len(WORKER_ERROR_PREFIX):].strip()
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if tracebacks:
        # The frames are indented; the first line that is not names the exception.
        for line in lines[tracebacks[-1] + 1:]:
            if line.strip() and not line[0].isspace():
                return line.strip()
    return None


def final_exit_outcome(exit: TaskExit, label: str, log_path: Path, error: str | None,
                       logdir: Path) -> Outcome | None:
    """The end of a run that a task's bad input, giving up or unwritable log dir ends at
    once; None for any other exit."""
    if exit is TaskExit.USAGE:
        return Outcome(EXIT_USAGE, "error", f"{label}: " + (
            error or f"rejected its arguments (exit 2); see {log_path}"))
    if exit is TaskExit.GAVE_UP:
        reason = f": {error}" if error else ""
        return Outcome(EXIT_CRASH, "crash", f"{label} gave up{reason}; its log is {log_path}")
    if exit is TaskExit.STORAGE:
        return Outcome(EXIT_STORAGE, "storage", storage.task_fault_line(
            logdir, label, error, storage.diagnose(logdir)))
    return None


def how_it_exited(job: str, code: int, error: str | None) -> str:
    how = f"exited with status {code}" if code >= 0 else f"was killed by signal {-code}"
    if job == "ps" and code == 0:
        how = "exited although a ps serves until it is stopped"
    return f"{how} ({error})" if error else how


def crash_outcome(label: str, how: str, decision: RestartDecision, max_restarts: int,
                  log_path: Path) -> Outcome:
    """The end of a run whose task crashed once more than --max-restarts allow."""
    tries = (f" after {decision.crashes_in_a_row - 1} restart(s) in a row"
             if max_restarts else "")
    return Outcome(EXIT_CRASH, "crash", f"{label} {how}{tries}; its log is {log_path}")


def restart_line(label: str, how: str, decision: RestartDecision, max_restarts: int,
                 log_path: Path) -> str:
    """The stderr line for a task that will be started again."""
    if decision.exit is TaskExit.LOST_PS:
        return f"{PROG}: {label} lost the ps; restarting it"
    return (f"{PROG}: warning: {label} {how}; restarting it in {decision.restart_in:g} s "
            f"(crash {decision.crashes_in_a_row} in a row, at most {max_restarts}); its log "
            f"is {log_path}")


# --------------------------------------------------------------------------- the run's end

def verdict_outcome(verdict: RunVerdict, workers: Sequence[RunningTask],
                    last_failure: str | None, at_deadline: bool, max_seconds: float,
                    grace_secs: float) -> Outcome:
    """The exit status, stop reason and error line of a run judged `verdict` (run_verdict):
    a run that never trained relays the last task failure, or where its first worker is."""
    waited = (f" within --max-seconds {max_seconds:g} + {grace_secs:.0f} s"
              if at_deadline else "")
    stop_reason = "deadline" if at_deadline else None
    if verdict is RunVerdict.NEVER_TRAINED:
        first = workers[0]
        last_words = ([line.strip() for line in newest_output(first.log_path)
                       if line.strip()] or ["(nothing)"])[-1]
        why = last_failure or (f"{first.plan.label} has not trained yet; its log "
                               f"{first.log_path} ends: {last_words}")
        return Outcome(EXIT_CRASH, stop_reason or "crash", f"no worker trained{waited}: {why}")
    if verdict is RunVerdict.STUCK:
        stuck = [t.plan.label for t in workers if t.returncode is None]
        return Outcome(EXIT_CRASH, stop_reason,
                       f"the workers did not stop{waited} (still running: "
                       f"{', '.join(stuck)}); they were stopped")
    if verdict is RunVerdict.CRASHED:
        return Outcome(EXIT_CRASH, "crash", last_failure or "a worker crashed")
    return Outcome(0, stop_reason)


def build_summary(plan: LaunchPlan, started: float, outcome: Outcome,
                  tasks: Sequence[RunningTask], restarts: Mapping[str, int],
                  first_training: float | None = None) -> dict:
    summary, totals = summary_fields(plan.logdir, started)
    summary.update({
        "env": plan.config.env,
        # Emulator frames, the unit Atari results are reported in (4 per agent step on ALE).
        "frames": summary["env_steps"] * plan.run.info.frame_skip,
        "workers": len(plan.cluster["worker"]),
        "ps": len(plan.cluster["ps"]),
        "target_return": json_number(plan.config.target_return),
        "stop_reason": outcome.stop_reason or (totals.stop_reason if totals else None),
        "logdir": str(plan.logdir),
        "exit_code": outcome.exit_code,
        "task_exit_codes": {t.plan.name: t.returncode for t in tasks},
        "restarts": dict(restarts),
    })
    if first_training is not None and summary["startup_seconds"] is not None:
        summary["startup_seconds"] = round(min(first_training - started,
                                               summary["startup_seconds"]), 1)
    return summary

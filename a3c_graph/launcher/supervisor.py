"""The supervisor: runs the planned tasks, restarts the ones that crash, and stops them all.

Each task is one process (`python -m a3c_graph.worker ...`) in its own session, so a Ctrl-C
in the terminal reaches only the launcher, which then stops the tasks in order: workers
first (the chief writes its final checkpoint to the ps), then the ps. Every process is
recorded in <logdir>/pids/ (launcher/processes.py) and signalled only by its own pid.

A task that exits is judged by its exit status, the worker's contract (task_runner.py):
restart_decision, a pure function, says whether and when it starts again. While the tasks
run, a progress line is printed every PROGRESS_LINE_SECS from the workers' progress files;
when the run ends, its summary is written to <logdir>/summary.json and printed as the last
line.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from a3c_graph import storage
from a3c_graph.cli import (
    EXIT_CRASH,
    EXIT_GAVE_UP,
    EXIT_LOST_PS,
    EXIT_STORAGE,
    EXIT_USAGE,
    WORKER_PROG,
    StopSignals,
)
from a3c_graph.launcher import processes
from a3c_graph.launcher.plan import PROG, LaunchPlan, TaskPlan, command_line
from a3c_graph.progress import (
    Totals,
    json_number,
    read_history,
    read_progress,
    run_totals,
    summary_fields,
    write_atomic,
)

PROGRESS_LINE_SECS = 5.0
POLL_SECS = 0.2
# SIGTERM -> SIGKILL: long enough for the chief's final checkpoint of a small model.
STOP_TIMEOUT_SECS = 10.0
# The ps must outlive the workers' final checkpoint, and gets at least this after them.
PS_STOP_MIN_SECS = 2.0
# Workers enforce --max-seconds themselves; this backstop only catches a stuck run.
DEADLINE_GRACE_SECS = 60.0
# A training worker whose progress file is older than this (or 10 x --progress-secs) is
# reported as stalled.
STALL_SECS = 30.0

# The tasks run in their own sessions, so a terminal's Ctrl-C or hang-up reaches only the
# launcher; it must outlive the signal to stop them in order.
LAUNCHER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The worker's own error line (a3c_graph/distributed/task_runner.py), relayed without its prefix.
WORKER_ERROR_PREFIX = f"{WORKER_PROG}: error:"

# A task's restarts: after its n-th crash in a row it waits RESTART_BACKOFF_SECS[n-1] (the
# last entry from then on); a task that ran HEALTHY_SECS before crashing starts counting
# again. The number of restarts in a row before the run gives up is --max-restarts.
RESTART_BACKOFF_SECS = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
HEALTHY_SECS = 60.0


# --------------------------------------------------------------------------- restarts

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


# --------------------------------------------------------------------------- running tasks

@dataclass
class RunningTask:
    plan: TaskPlan
    popen: subprocess.Popen
    log_path: Path
    returncode: int | None = None
    started: float = field(default_factory=time.monotonic)
    crashes_in_a_row: int = 0  # crashes of the processes before this one, healthy runs reset

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.popen.poll()
        return self.returncode


@dataclass
class Outcome:
    """How a run ended, as the summary and the exit status tell it."""

    exit_code: int
    stop_reason: str | None = None  # overrides the workers' own reason
    error: str | None = None  # one line for stderr


class Supervisor:
    """Starts the planned tasks, watches them, and stops them, always by their own pids."""

    def __init__(self, plan: LaunchPlan, signals: StopSignals) -> None:
        self.plan = plan
        self.signals = signals
        self.tasks: list[RunningTask] = []  # the newest process of each task
        self.started = time.time()
        self._descendants: dict[int, object] = {}
        # Restarts due: (when, the task that exited); and how many each task had.
        self.pending: list[tuple[float, RunningTask]] = []
        self.restarts: dict[str, int] = {}
        # When the first worker began to train: a restarted worker's own progress file
        # only knows when *it* began.
        self.first_training: float | None = None
        self._stalled: set[int] = set()  # workers already warned about
        # The latest crash or lost ps of any task: what a run that never trained relays.
        self.last_failure: str | None = None

    # ---- start

    def prepare_logdir(self) -> None:
        for sub in ("logs", "pids", "progress"):
            (self.plan.logdir / sub).mkdir(parents=True, exist_ok=True)
        # Leftovers of an earlier run in the same logdir would be read as this run's.
        for stale in [*processes.pid_dir(self.plan.logdir).glob("*.pid"),
                      *(self.plan.logdir / "progress").glob("worker_*.json*"),
                      self.plan.logdir / "summary.json"]:
            stale.unlink(missing_ok=True)
        write_atomic(processes.pid_dir(self.plan.logdir) / "launcher.pid", f"{os.getpid()}\n")

    def start_tasks(self) -> None:
        for task in self.plan.tasks:
            if self.signals.received is not None:
                return
            self.tasks.append(self._start(task, task.argv))

    def _start(self, task: TaskPlan, argv: Sequence[str]) -> RunningTask:
        """Start one process of `task`; its log is appended to, its pid file rewritten."""
        log_path = self.plan.logdir / "logs" / f"{task.name}.log"
        shown = dataclasses.replace(task, argv=tuple(argv))
        with open(log_path, "ab") as log:
            log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {PROG}: "
                      f"{command_line(shown)}\n".encode())
            log.flush()
            popen = subprocess.Popen(list(argv), env={**os.environ, **task.env_overrides},
                                     stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        write_atomic(processes.pid_dir(self.plan.logdir) / f"{task.name}.pid", f"{popen.pid}\n")
        return RunningTask(task, popen, log_path)

    # ---- watch

    def backstop(self) -> float:
        """When a run whose workers have not all stopped is stuck (unix time): the workers'
        budget counts from their first applied update, so the backstop does too, or from
        the launch while no worker has trained."""
        return ((self.first_training or self.started) + self.plan.config.max_seconds
                + DEADLINE_GRACE_SECS)

    def watch(self) -> Outcome:
        next_line = time.monotonic() + PROGRESS_LINE_SECS
        last: Totals | None = None
        while True:
            if self.signals.received is not None:
                return Outcome(self.signals.exit_code, "interrupted")
            for task in self.tasks:
                if task.returncode is None and task.poll() is not None:
                    outcome = self.on_task_exit(task)
                    if outcome is not None:
                        return outcome
            self._restart_due()
            # A machine with only ps tasks of a bigger cluster has no worker to wait for: it
            # serves until a signal or the backstop deadline.
            workers = [t for t in self.tasks if t.plan.job == "worker"]
            waiting = any(t.plan.job == "worker" for _, t in self.pending)
            if workers and not waiting and all(t.returncode is not None for t in workers):
                return self.run_over()
            if time.time() >= self.backstop():
                return self.run_over(at_deadline=True)
            if time.monotonic() >= next_line:
                next_line += PROGRESS_LINE_SECS
                self._remember_descendants()
                progress = read_progress(self.plan.logdir)
                self._warn_about_stalls(progress)
                totals = run_totals(progress)
                self._note_training(totals)
                rate = None
                # No rate across a restart: a restarted task's counters start from zero, and
                # a restored checkpoint can step back.
                if (totals is not None and last is not None and totals.time > last.time
                        and last.global_step > 0 and totals.env_steps >= last.env_steps):
                    rate = (totals.env_steps - last.env_steps) / (totals.time - last.time)
                last = totals or last
                print(progress_line(time.time() - self.started, totals, rate), flush=True)
            time.sleep(POLL_SECS)

    def on_task_exit(self, task: RunningTask) -> Outcome | None:
        """What one task's exit means for the run (restart_decision); None lets it go on."""
        code = task.returncode
        decision = restart_decision(task.plan.job, code, time.monotonic() - task.started,
                                    task.crashes_in_a_row, self.plan.max_restarts)
        if decision.exit is TaskExit.DONE:
            return None
        label, log_path = task.plan.label, task.log_path
        error = task_error(newest_output(log_path))
        if decision.exit is TaskExit.USAGE:
            return Outcome(EXIT_USAGE, "error", f"{label}: " + (
                error or f"rejected its arguments (exit 2); see {log_path}"))
        if decision.exit is TaskExit.GAVE_UP:
            reason = f": {error}" if error else ""
            return Outcome(EXIT_CRASH, "crash", f"{label} gave up{reason}; its log is {log_path}")
        if decision.exit is TaskExit.STORAGE:
            return Outcome(EXIT_STORAGE, "storage", storage.task_fault_line(
                self.plan.logdir, label, error, storage.diagnose(self.plan.logdir)))
        how = f"exited with status {code}" if code >= 0 else f"was killed by signal {-code}"
        if task.plan.job == "ps" and code == 0:
            how = "exited although a ps serves until it is stopped"
        if error:
            how += f" ({error})"
        self.last_failure = f"{label} {how}; its log is {log_path}"
        task.crashes_in_a_row = decision.crashes_in_a_row
        if decision.restart_in is None:
            tries = (f" after {decision.crashes_in_a_row - 1} restart(s) in a row"
                     if self.plan.max_restarts else "")
            return Outcome(EXIT_CRASH, "crash", f"{label} {how}{tries}; its log is {log_path}")
        if decision.exit is TaskExit.LOST_PS:
            print(f"{PROG}: {label} lost the ps; restarting it", file=sys.stderr, flush=True)
        else:
            print(f"{PROG}: warning: {label} {how}; restarting it in {decision.restart_in:g} s "
                  f"(crash {decision.crashes_in_a_row} in a row, at most "
                  f"{self.plan.max_restarts}); its log is {log_path}", file=sys.stderr,
                  flush=True)
        self.pending.append((time.monotonic() + decision.restart_in, task))
        return None

    def _note_training(self, totals: Totals | None) -> None:
        if totals is not None and totals.training_started:
            self.first_training = min(self.first_training or math.inf, totals.training_started)

    def _warn_about_stalls(self, progress: Mapping[int, dict]) -> None:
        """One warning per stall of a training worker that stopped reporting (e.g. a network
        cut: its step waits on the ps until --connect-timeout turns it into a restart)."""
        limit = max(STALL_SECS, 10 * self.plan.config.progress_secs)
        live = {t.plan.index: t.popen.pid for t in self.tasks
                if t.plan.job == "worker" and t.returncode is None}
        for task, data in progress.items():
            # A file written by an earlier process of a restarted task is not a stall: the
            # new process is still starting (TF import can take a minute on a busy machine).
            stalled = (data.get("state") == "running" and time.time() - data["time"] > limit
                       and task in live and data.get("pid", live[task]) == live[task])
            if stalled and task not in self._stalled:
                print(f"{PROG}: warning: worker task {task} has not reported for "
                      f"{time.time() - data['time']:.0f} s (cannot reach the ps?)",
                      file=sys.stderr, flush=True)
                self._stalled.add(task)
            elif not stalled:
                self._stalled.discard(task)

    def _restart_due(self) -> None:
        """Start again the tasks whose back-off is over, with the budget they have left."""
        now = time.monotonic()
        due = [task for when, task in self.pending if when <= now]
        self.pending = [(when, task) for when, task in self.pending if when > now]
        for old in due:
            argv = list(old.plan.argv)
            if old.plan.job == "worker":
                # A worker's budget counts from its first applied update (progress.py): the
                # run's first, or the launch while none has trained yet.
                left = self.plan.config.max_seconds - (
                    time.time() - (self.first_training or self.started))
                if left <= 0:
                    continue  # its budget is spent: it stays stopped
                argv.append(f"--max-seconds={left:.1f}")
            new = self._start(old.plan, argv)
            new.crashes_in_a_row = old.crashes_in_a_row
            self.tasks[self.tasks.index(old)] = new
            self.restarts[old.plan.name] = self.restarts.get(old.plan.name, 0) + 1
            print(f"{PROG}: restarted {old.plan.label} (pid {new.popen.pid}, restart "
                  f"{self.restarts[old.plan.name]})", flush=True)

    def run_over(self, at_deadline: bool = False) -> Outcome:
        """How a run ends whose workers all stopped, or that reached the backstop deadline
        (--max-seconds + DEADLINE_GRACE_SECS: the workers stop at --max-seconds themselves,
        so something is stuck; a launcher of only ps tasks serves until then).

        A run whose workers never trained has failed, however it got here: each crashed, or
        hung, before its first update (a crashed worker whose budget is spent is not started
        again). Exit 1, with the last task failure, or where a worker is stuck, relayed. So
        has a run that trained and then had to be stopped at the deadline, or whose last
        process of some worker crashed: only a run whose workers all stopped by themselves
        (solved, budget, signal) exits 0.
        """
        waited = (f" within --max-seconds {self.plan.config.max_seconds:g} + "
                  f"{DEADLINE_GRACE_SECS:.0f} s" if at_deadline else "")
        stop_reason = "deadline" if at_deadline else None
        workers = [t for t in self.tasks if t.plan.job == "worker"]
        # The history too: a restarted worker's progress file forgets that an earlier
        # process of it trained.
        reports = [*read_progress(self.plan.logdir).values(), *read_history(self.plan.logdir)]
        trained = self.first_training is not None or any(
            report.get("training_started") for report in reports)
        verdict = run_verdict([t.returncode for t in workers], trained, at_deadline)
        if verdict is RunVerdict.NEVER_TRAINED:
            first = workers[0]
            last_words = ([line.strip() for line in newest_output(first.log_path)
                           if line.strip()] or ["(nothing)"])[-1]
            why = self.last_failure or (f"{first.plan.label} has not trained yet; its log "
                                        f"{first.log_path} ends: {last_words}")
            return Outcome(EXIT_CRASH, stop_reason or "crash",
                           f"no worker trained{waited}: {why}")
        if verdict is RunVerdict.STUCK:
            stuck = [t.plan.label for t in workers if t.returncode is None]
            return Outcome(EXIT_CRASH, stop_reason,
                           f"the workers did not stop{waited} (still running: "
                           f"{', '.join(stuck)}); they were stopped")
        if verdict is RunVerdict.CRASHED:
            return Outcome(EXIT_CRASH, "crash", self.last_failure or "a worker crashed")
        return Outcome(0, stop_reason)

    # ---- stop

    def _remember_descendants(self) -> None:
        """Children of tasks, so none is left behind once its parent is gone."""
        import psutil

        for task in self.tasks:
            if task.returncode is None:
                try:
                    proc = psutil.Process(task.popen.pid)
                except psutil.Error:
                    continue
                self._descendants.update((child.pid, child)
                                        for child in processes.descendants(proc))

    def stop_tasks(self) -> list[str]:
        """SIGTERM workers, then the ps; SIGKILL what is left; returns the killed names."""
        self._remember_descendants()
        began = time.monotonic()
        hurry = lambda: self.signals.repeated  # noqa: E731
        for job in ("worker", "ps"):
            group = [t for t in self.tasks if t.plan.job == job and t.poll() is None]
            for task in group:
                task.popen.send_signal(signal.SIGTERM)
            budget = max(STOP_TIMEOUT_SECS - (time.monotonic() - began),
                         PS_STOP_MIN_SECS if job == "ps" else 0.0)
            processes.wait_until(lambda group=group: all(t.poll() is not None for t in group),
                                 budget, hurry)
        killed = []
        for task in self.tasks:
            if task.poll() is None:
                task.popen.kill()
                killed.append(task.plan.name)
        for task in self.tasks:
            try:
                task.returncode = task.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass  # stuck in the kernel; status/stop will still see it
        for child in self._descendants.values():
            if not processes.is_gone(child):
                processes.quietly(child.kill)
        return killed


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


def build_summary(plan: LaunchPlan, started: float, outcome: Outcome,
                  tasks: Sequence[RunningTask], restarts: Mapping[str, int],
                  first_training: float | None = None) -> dict:
    summary, totals = summary_fields(plan.logdir, started)
    from a3c_graph.core.envs import env_info, env_options  # cached from the plan's env check

    # Emulator frames, the unit Atari results are reported in (4 per agent step on ALE ids).
    frame_skip = env_info(plan.config.env, **env_options(plan.config)).frame_skip
    summary.update({
        "env": plan.config.env,
        "frames": summary["env_steps"] * frame_skip,
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


# --------------------------------------------------------------------------- progress line

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

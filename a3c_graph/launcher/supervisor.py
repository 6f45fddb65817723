"""The supervisor: runs the planned tasks, restarts the ones that crash, and stops them all.

Each task is one process (`python -m a3c_graph.worker ...`) in its own session, so a Ctrl-C
in the terminal reaches only the launcher, which then stops the tasks in order
(processes.stop_in_order): workers first (the chief writes its final checkpoint to the ps),
then the ps. Every process is recorded in <logdir>/pids/ (system/processes.py) and
signalled only by its own pid.

This file is the processes' lifecycle. A task that exits is judged by its exit status, the
worker's contract (a3c_graph/worker.py): restarts.py's pure functions say whether and when it
starts again and how the run ended; report.py words the progress line printed every
PROGRESS_LINE_SECS from the workers' progress files, the warnings, and the summary that
commands.py writes to <logdir>/summary.json and prints as the last line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import psutil

from a3c_graph.launcher.plan import PROG, LaunchPlan, TaskPlan, command_line
from a3c_graph.launcher.report import (
    Outcome,
    StallWarnings,
    crash_outcome,
    final_exit_outcome,
    how_it_exited,
    newest_output,
    progress_line,
    restart_line,
    steps_per_sec_between,
    task_error,
    verdict_outcome,
)
from a3c_graph.launcher.restarts import TaskExit, restart_decision, run_verdict
from a3c_graph.launcher.running import RunningTask
from a3c_graph.rundir.progress import (
    LAUNCHES_FILE,
    Totals,
    read_history,
    read_progress,
    record_launch,
    run_totals,
    write_atomic,
)
from a3c_graph.system import processes
from a3c_graph.system.cli import StopSignals

PROGRESS_LINE_SECS = 5.0
POLL_SECS = 0.2
# SIGTERM -> SIGKILL: long enough for the chief's final checkpoint of a small model.
STOP_TIMEOUT_SECS = 10.0
# The ps must outlive the workers' final checkpoint, and gets at least this after them.
PS_STOP_MIN_SECS = 2.0
# Workers enforce --max-seconds themselves; this backstop only catches a stuck run.
DEADLINE_GRACE_SECS = 60.0

# The tasks run in their own sessions, so a terminal's Ctrl-C or hang-up reaches only the
# launcher; it must outlive the signal to stop them in order.
LAUNCHER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def print_progress(line: str, _totals: Totals | None) -> None:
    """The command line's progress hook: the progress line on stdout."""
    print(line, flush=True)


class Supervisor:
    """Starts the planned tasks, watches them, and stops them, always by their own pids.

    on_progress(line, totals) gets every progress reading of the watch, every
    PROGRESS_LINE_SECS: the line the command prints (print_progress) and the run's totals
    (None before any worker reported); the Python API reports from the same readings."""

    def __init__(self, plan: LaunchPlan, signals: StopSignals,
                 on_progress: Callable[[str, Totals | None], None] = print_progress) -> None:
        self.plan = plan
        self.signals = signals
        self.on_progress = on_progress
        self._last_totals: Totals | None = None
        self.tasks: list[RunningTask] = []  # the newest process of each task
        self.started = time.time()
        self._descendants: dict[int, object] = {}
        # Restarts due: (when, the task that exited); and how many each task had.
        self.pending: list[tuple[float, RunningTask]] = []
        self.restarts: dict[str, int] = {}
        # When the first worker began to train: a restarted worker's own progress file
        # only knows when *it* began.
        self.first_training: float | None = None
        self.stalls = StallWarnings(plan.config.progress_secs)
        # The latest crash or lost ps of any task: what a run that never trained relays.
        self.last_failure: str | None = None

    # ---- start

    def prepare_logdir(self) -> None:
        logdir = self.plan.logdir
        for sub in ("logs", "pids", "progress"):
            (logdir / sub).mkdir(parents=True, exist_ok=True)
        # Leftovers of an earlier run in the same logdir would be read as this run's. A run
        # that resumes from a checkpoint keeps its history (the learning curve goes on);
        # one that starts afresh drops it and the launches of the run before.
        resumes = (logdir / "checkpoint").exists()
        history = [] if resumes else [*(logdir / "progress").glob("worker_*.jsonl"),
                                      logdir / LAUNCHES_FILE]
        for stale in [*processes.pid_dir(logdir).glob("*.pid"),
                      *(logdir / "progress").glob("worker_*.json"), *history,
                      logdir / "summary.json"]:
            stale.unlink(missing_ok=True)
        write_atomic(processes.pid_dir(logdir) / "launcher.pid", f"{os.getpid()}\n")
        record_launch(logdir, self.started)

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
                self._report(run_totals(progress))
            time.sleep(POLL_SECS)

    def report_progress(self) -> None:
        """One progress reading of the progress files as they are now, to on_progress."""
        self._report(run_totals(read_progress(self.plan.logdir)))

    def _report(self, totals: Totals | None) -> None:
        """The reading `totals` (None before any worker reported) to on_progress."""
        self._note_training(totals)
        rate = steps_per_sec_between(self._last_totals, totals)
        self._last_totals = totals or self._last_totals
        self.on_progress(progress_line(time.time() - self.started, totals, rate), totals)

    def on_task_exit(self, task: RunningTask) -> Outcome | None:
        """What one task's exit means for the run (restart_decision); None lets it go on."""
        code = task.returncode
        decision = restart_decision(task.plan.job, code, time.monotonic() - task.started,
                                    task.crashes_in_a_row, self.plan.max_restarts)
        if decision.exit is TaskExit.DONE:
            return None
        label, log_path = task.plan.label, task.log_path
        error = task_error(newest_output(log_path))
        final = final_exit_outcome(decision.exit, label, log_path, error, self.plan.logdir)
        if final is not None:
            return final
        how = how_it_exited(task.plan.job, code, error)
        self.last_failure = f"{label} {how}; its log is {log_path}"
        task.crashes_in_a_row = decision.crashes_in_a_row
        if decision.restart_in is None:
            return crash_outcome(label, how, decision, self.plan.max_restarts, log_path)
        print(restart_line(label, how, decision, self.plan.max_restarts, log_path),
              file=sys.stderr, flush=True)
        self.pending.append((time.monotonic() + decision.restart_in, task))
        return None

    def _note_training(self, totals: Totals | None) -> None:
        if totals is not None and totals.training_started:
            self.first_training = min(self.first_training or math.inf, totals.training_started)

    def _warn_about_stalls(self, progress: Mapping[int, dict]) -> None:
        live = {t.plan.index: t.popen.pid for t in self.tasks
                if t.plan.job == "worker" and t.returncode is None}
        for line in self.stalls.new_stalls(progress, live, time.time()):
            print(line, file=sys.stderr, flush=True)

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
        again). So has a run that trained and then had to be stopped at the deadline, or
        whose last process of some worker crashed: only a run whose workers all stopped by
        themselves (solved, budget, signal) exits 0 (run_verdict).
        """
        workers = [t for t in self.tasks if t.plan.job == "worker"]
        # The history too: a restarted worker's progress file forgets that an earlier
        # process of it trained.
        reports = [*read_progress(self.plan.logdir).values(), *read_history(self.plan.logdir)]
        trained = self.first_training is not None or any(
            report.get("training_started") for report in reports)
        verdict = run_verdict([t.returncode for t in workers], trained, at_deadline)
        return verdict_outcome(verdict, workers, self.last_failure, at_deadline,
                               self.plan.config.max_seconds, DEADLINE_GRACE_SECS)

    # ---- stop

    def _remember_descendants(self) -> None:
        """Children of tasks, so none is left behind once its parent is gone."""

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

        running: dict[int, RunningTask] = {}
        groups = []
        for job in ("worker", "ps"):
            group = []
            for task in self.tasks:
                if task.plan.job == job and task.poll() is None:
                    with contextlib.suppress(psutil.Error):
                        group.append(psutil.Process(task.popen.pid))
                        running[task.popen.pid] = task
            groups.append(group)
        killed = processes.stop_in_order(groups, STOP_TIMEOUT_SECS,
                                         hurry=lambda: self.signals.repeated,
                                         last_group_min_secs=PS_STOP_MIN_SECS)
        killed_pids = {proc.pid for proc in killed}
        for task in self.tasks:
            try:
                task.returncode = task.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass  # stuck in the kernel; status/stop will still see it
        # Children of earlier processes of a restarted task, orphaned since.
        for child in self._descendants.values():
            if not processes.is_gone(child):
                processes.quietly(child.kill)
        return [task.plan.name for task in self.tasks
                if running.get(task.popen.pid) is task and task.popen.pid in killed_pids]

"""The pid files of a run, and the processes they name: signalled only while they are ours.

Every process the launcher starts is recorded in <logdir>/pids/<name>.pid (launcher.pid,
ps_0.pid, worker_1.pid, ...). `status`, `stop`, the tests and the benchmarks find a run's
processes there, never by name, so other people's jobs on the same machine are safe. A pid
is reused once its process is gone, so a pid file is trusted only while its pid still runs
our module and started before the file was written (read_pid_file).

stop_in_order is the one way anything here stops processes (the supervisor, `stop`, the
benchmarks): SIGTERM group by group, workers before the ps, then SIGKILL to what is left and
to the children they had started.

psutil is imported inside the functions: the launcher's `--help` and its one-line errors
need none of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    import psutil

# The modules our processes run: a pid whose command line runs neither is not ours. Tests
# set WORKER_MODULE to a fake worker's, for the task commands and this check alike.
LAUNCH_MODULE = "a3c_graph.launch"
WORKER_MODULE = "a3c_graph.worker"
# A pid file is written right after its process starts; a process that started later than
# this after the file was written reuses the pid and is not ours.
PID_CLOCK_SLACK_SECS = 2.0


def pid_dir(logdir: Path) -> Path:
    return logdir / "pids"


@dataclass(frozen=True)
class PidRecord:
    """What a pid file of a run names now."""

    name: str  # "launcher", "ps_0", "worker_1", ...
    pid: int | None
    proc: object | None  # a psutil.Process, only while the pid is alive and ours
    state: str  # "alive", "exited", "pid reused by another program", "unreadable pid file"


def read_pid_file(pid_file: Path, logdir: Path) -> PidRecord:
    """Trust a pid file only while its pid is still the process we started.

    A pid is ours when its command line runs our module (the launcher, or a worker of this
    logdir) and the process started no later than the pid file was written: a recycled pid
    fails one of the two.
    """

    name = pid_file.stem
    try:
        pid = int(pid_file.read_text(encoding="utf-8").strip())
        written = pid_file.stat().st_mtime
    except (OSError, ValueError):
        return PidRecord(name, None, None, "unreadable pid file")
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return PidRecord(name, pid, None, "exited")
        cmdline = proc.cmdline()
        started = proc.create_time()
    except psutil.NoSuchProcess:
        return PidRecord(name, pid, None, "exited")
    except psutil.Error:  # AccessDenied: someone else's process
        return PidRecord(name, pid, None, "pid reused by another program")
    if name == "launcher":
        ours = LAUNCH_MODULE in cmdline
    else:
        ours = WORKER_MODULE in cmdline and str(logdir) in cmdline
    if not ours or started > written + PID_CLOCK_SLACK_SECS:
        return PidRecord(name, pid, None, "pid reused by another program")
    return PidRecord(name, pid, proc, "alive")


def read_pid_files(logdir: Path) -> dict[str, PidRecord]:
    """Every pid file of `logdir` by name, the launcher first."""
    files = sorted(pid_dir(logdir).glob("*.pid"), key=lambda p: (p.stem != "launcher", p.stem))
    return {path.stem: read_pid_file(path, logdir) for path in files}


def is_gone(proc) -> bool:
    """Whether a psutil.Process has ended (a zombie waiting to be reaped has)."""

    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def descendants(proc) -> list:
    """The processes a psutil.Process started, and theirs: to be sure none is left behind
    once it is gone (they would then be re-parented, and lost to us)."""

    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def quietly(action: Callable[[], object]) -> None:
    """Signal a psutil.Process that may have ended meanwhile (psutil checks the pid still
    names that very process, and raises if not: then there is nothing to signal)."""

    try:
        action()
    except psutil.Error:
        pass


def wait_until(done: Callable[[], bool], timeout: float,
               hurry: Callable[[], bool] = lambda: False) -> bool:
    """Poll `done` until it is true (True), `timeout` seconds pass or `hurry` says to stop
    waiting (False)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline or hurry():
            return False
        time.sleep(0.1)
    return True


def stop_in_order(groups: Sequence[Sequence[psutil.Process]], timeout: float,
                  hurry: Callable[[], bool] = lambda: False,
                  last_group_min_secs: float = 0.0) -> list[psutil.Process]:
    """Stop psutil.Processes group by group (e.g. [workers], [ps]); return those killed.

    Each group gets SIGTERM once the group before it has ended, or its wait ran out: the
    workers' final checkpoint needs the ps. The groups share `timeout` seconds, the last one
    gets at least `last_group_min_secs`, and `hurry()` (a second Ctrl-C) cuts the waits
    short. Then SIGKILL goes to what is left of every group and of the processes they had
    started when this began (remembered first: once a parent is gone its children are
    re-parented, and lost to us). psutil checks a pid still names the process it saw, so a
    recycled pid is never signalled. Nothing is reaped: a caller holding a Popen or a
    multiprocessing.Process waits on it afterwards.
    """
    groups = [list(group) for group in groups]
    in_groups = {proc.pid for group in groups for proc in group}
    remembered = {child.pid: child for group in groups for proc in group
                  for child in descendants(proc) if child.pid not in in_groups}
    began = time.monotonic()
    for number, group in enumerate(groups, start=1):
        for proc in group:
            if not is_gone(proc):
                quietly(proc.terminate)
        budget = timeout - (time.monotonic() - began)
        if number == len(groups):
            budget = max(budget, last_group_min_secs)
        wait_until(lambda group=group: all(is_gone(proc) for proc in group), max(budget, 0.0),
                   hurry)
    killed = []
    for proc in [*(proc for group in groups for proc in group), *remembered.values()]:
        if not is_gone(proc):
            quietly(proc.kill)
            killed.append(proc)
    return killed

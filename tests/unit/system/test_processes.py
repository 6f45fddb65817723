"""A run's pid files (a3c_graph/system/processes.py): a pid is trusted only while it is still the
process we started, so `status`, `stop`, the tests and the benchmarks never signal someone else's;
and stop_in_order, the one way they all stop processes: workers before the ps, nothing left.

The launcher's `status` and `stop` on stale pid files are in test_launch_checks.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from a3c_graph.system import processes


def write_pid_file(logdir: Path, name: str, pid: int) -> Path:
    path = processes.pid_dir(logdir) / f"{name}.pid"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{pid}\n")
    return path


@pytest.fixture
def task_process(tmp_path):
    """A process whose command line runs the worker module for tmp_path, as a task's does
    (it only waits on its stdin; stopped by its pid)."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", processes.WORKER_MODULE,
         "--logdir", str(tmp_path)], stdin=subprocess.PIPE)
    yield process
    process.kill()
    process.wait()


def test_a_live_task_of_this_logdir_is_ours(tmp_path, task_process):
    write_pid_file(tmp_path, "worker_0", task_process.pid)
    record = processes.read_pid_files(tmp_path)["worker_0"]
    assert (record.pid, record.state) == (task_process.pid, "alive")
    assert record.proc is not None and record.proc.pid == task_process.pid


def test_a_task_of_another_logdir_is_not_ours(tmp_path, task_process):
    other = tmp_path / "other"
    write_pid_file(other, "worker_0", task_process.pid)
    record = processes.read_pid_files(other)["worker_0"]
    assert (record.proc, record.state) == (None, "pid reused by another program")


def test_a_process_that_started_after_its_pid_file_was_written_is_not_ours(tmp_path,
                                                                          task_process):
    path = write_pid_file(tmp_path, "worker_0", task_process.pid)
    written = time.time() - 10 * processes.PID_CLOCK_SLACK_SECS
    os.utime(path, (written, written))
    assert processes.read_pid_files(tmp_path)["worker_0"].state == "pid reused by another program"


def test_a_pid_that_is_gone_or_unreadable_names_nothing(tmp_path):
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    write_pid_file(tmp_path, "ps_0", finished.pid)
    (processes.pid_dir(tmp_path) / "worker_0.pid").write_text("not a pid\n")
    records = processes.read_pid_files(tmp_path)
    assert (records["ps_0"].proc, records["ps_0"].state) == (None, "exited")
    assert (records["worker_0"].pid, records["worker_0"].state) == (None, "unreadable pid file")


def test_the_launcher_is_listed_first(tmp_path):
    for name in ("worker_1", "ps_0", "launcher", "worker_0"):
        write_pid_file(tmp_path, name, 0)
    assert list(processes.read_pid_files(tmp_path)) == ["launcher", "ps_0", "worker_0", "worker_1"]


def test_wait_until_returns_whether_it_was_done_before_the_deadline_or_a_hurry():
    assert processes.wait_until(lambda: True, timeout=0.0) is True
    assert processes.wait_until(lambda: False, timeout=0.2) is False
    assert processes.wait_until(lambda: False, timeout=60.0, hurry=lambda: True) is False


# A task stand-in: on SIGTERM it either ignores it, or takes DELAY seconds (a worker's final
# checkpoint) and then records its name in the RECORD file and exits 0. With a fifth
# argument it first starts a child of its own and prints the child's pid.
STAND_IN = """
import signal, subprocess, sys, time
name, on_sigterm, delay, record = sys.argv[1:5]
def stop(signum, frame):
    time.sleep(float(delay))
    with open(record, "a") as out:
        out.write(name + "\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN if on_sigterm == "ignore" else stop)
if len(sys.argv) > 5:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(child.pid, flush=True)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def start_stand_in(tmp_path):
    """start(name, on_sigterm, delay, with_child) -> (Popen, its child's psutil.Process or
    None), once its SIGTERM handler is in place; whatever is left is killed by its pid."""
    started = []

    def start(name, on_sigterm="exit", delay=0.0, with_child=False):
        argv = [sys.executable, "-c", STAND_IN, name, on_sigterm, str(delay),
                str(tmp_path / "stopped")] + (["with-child"] if with_child else [])
        popen = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        started.append(popen)
        child = psutil.Process(int(popen.stdout.readline())) if with_child else None
        if child is not None:
            started.append(child)
        assert popen.stdout.readline().strip() == "ready"
        return popen, child

    yield start
    for proc in started:
        if isinstance(proc, psutil.Process):
            if not processes.is_gone(proc):
                processes.quietly(proc.kill)
            continue
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def stopped_names(tmp_path: Path) -> list[str]:
    path = tmp_path / "stopped"
    return path.read_text().split() if path.exists() else []


def test_stop_in_order_signals_the_ps_only_once_the_workers_have_stopped(tmp_path,
                                                                        start_stand_in):
    worker, _ = start_stand_in("worker", delay=0.5)
    ps, _ = start_stand_in("ps")
    killed = processes.stop_in_order([[psutil.Process(worker.pid)], [psutil.Process(ps.pid)]],
                                     timeout=60.0)
    assert killed == []
    # The ps records itself at once on SIGTERM: had it been signalled with the worker, it
    # would come first.
    assert stopped_names(tmp_path) == ["worker", "ps"]
    assert (worker.wait(timeout=5), ps.wait(timeout=5)) == (0, 0)


def test_stop_in_order_kills_a_group_that_ignores_sigterm_and_what_it_started(
        tmp_path, start_stand_in):
    stubborn, its_child = start_stand_in("worker", on_sigterm="ignore", with_child=True)
    ps, _ = start_stand_in("ps")
    killed = processes.stop_in_order([[psutil.Process(stubborn.pid)], [psutil.Process(ps.pid)]],
                                     timeout=1.0, last_group_min_secs=30.0)
    assert {proc.pid for proc in killed} == {stubborn.pid, its_child.pid}
    assert stubborn.wait(timeout=5) == -signal.SIGKILL
    # The ps still got its SIGTERM, and its own time to stop on it, after the workers' ran out.
    assert ps.wait(timeout=5) == 0
    assert stopped_names(tmp_path) == ["ps"]
    assert processes.wait_until(lambda: processes.is_gone(its_child), timeout=10.0)


def test_stop_in_order_in_a_hurry_kills_what_has_not_stopped_yet(tmp_path, start_stand_in):
    slow, _ = start_stand_in("worker", delay=60.0)
    killed = processes.stop_in_order([[psutil.Process(slow.pid)]], timeout=60.0,
                                     hurry=lambda: True)
    assert [proc.pid for proc in killed] == [slow.pid]
    assert slow.wait(timeout=5) == -signal.SIGKILL
    assert stopped_names(tmp_path) == []

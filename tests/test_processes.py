"""A run's pid files (a3c_graph/processes.py): a pid is trusted only while it is still the process
we started, so `status`, `stop`, the tests and the benchmarks never signal someone else's.

The launcher's `status` and `stop` on stale pid files are in test_launch.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from a3c_graph.launcher import processes


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

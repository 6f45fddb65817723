"""What the launcher's tests share (test_launch_checks.py, test_launch_supervision.py,
test_launch_e2e.py): scripts/launch_cluster.sh run as a subprocess in its own session and
stopped through its launcher, and the checks on what a run leaves: its processes gone, its
summary as the last line of stdout.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from conftest import REPO, SCRIPT


def launcher_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(extra)
    return env


def run_script(*args: str, cwd: Path = REPO, timeout: float = 120, **env: str
               ) -> subprocess.CompletedProcess:
    """scripts/launch_cluster.sh ARGS in its own session; a run that outlives `timeout` is
    stopped through its launcher (SIGTERM stops its tasks) before the test fails."""
    process = subprocess.Popen([str(SCRIPT), *args], cwd=cwd, env=launcher_env(**env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_launcher(process)
        pytest.fail(f"launch_cluster.sh {shlex.join(args)} did not finish in {timeout} s")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def stop_launcher(process: subprocess.Popen) -> None:
    """SIGTERM a launcher we started (it stops its own tasks), SIGKILL it if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def assert_all_gone(pids: list[int]) -> None:
    for pid in pids:
        try:
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"pid {pid} still runs"
        except psutil.NoSuchProcess:
            pass


def processes_mentioning(path: Path) -> list[int]:
    """Pids whose command line names `path` (read-only: to assert nothing was left running)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(str(path) in part for part in proc.info["cmdline"] or []):
            found.append(proc.info["pid"])
    return found


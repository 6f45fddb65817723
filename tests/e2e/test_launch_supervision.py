"""The launcher supervising a run: the summary of a solved run, a worker's usage error relayed
in one line, a crash named with its log, restarts with back-off, a worker that cannot write the
log dir, lost the ps, stopped reporting or gave up, runs whose workers never trained, Ctrl-C
(once, and again for a task that ignores SIGTERM), and `status` / `stop` of a run whose
launcher was killed.

Each test starts the real launcher (`python -m a3c_graph.launch`) as a subprocess with a tiny
fake worker module that speaks the worker's exit-status and progress-file contract in
milliseconds, started through the same launcher code with only the module name swapped.

Every process a test starts is stopped by the test, by its own pid (or by the pids in the
run's pid files, after checking they are still ours), never by name.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, alive, last_json_line

from a3c_graph.launcher.supervisor import PROGRESS_LINE_SECS
from tests.support.launch_helpers import (
    assert_all_gone,
    launcher_env,
    stop_launcher,
)

# --------------------------------------------------------------------------- supervision

FAKE_WORKER = textwrap.dedent('''
    """Speaks a3c_graph.worker's contract (exit status, progress files) in milliseconds."""
    import argparse, json, os, signal, sys, time

    parser = argparse.ArgumentParser()
    parser.add_argument("--job")
    parser.add_argument("--task", type=int)
    parser.add_argument("--logdir")
    args, _ = parser.parse_known_args()
    mode = os.environ["FAKE_MODE"]
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    if mode == "stubborn" and args.job == "ps":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a ps stuck in teardown
    # Signals are handled from here on.
    open(os.path.join(args.logdir, f"ready_{args.job}_{args.task}_{os.getpid()}"), "w").close()


    def progress(state, stop_reason, age=0.0, pid=None):
        path = os.path.join(args.logdir, "progress", f"worker_{args.task}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = dict(task=args.task, pid=pid or os.getpid(), time=time.time() - age,
                    state=state, global_step=40,
                    env_steps=12800, episodes=150, mean_return_100=199.5, local_env_steps=6400,
                    local_steps_per_sec=900.0, target_return=195.0, stop_reason=stop_reason,
                    training_started=time.time() - age)
        with open(path + ".tmp", "w") as handle:
            json.dump(data, handle)
        os.replace(path + ".tmp", path)


    if args.job == "worker" and mode == "never_train":
        raise RuntimeError("fake failure before the first update")
    if args.job == "worker" and mode == "quit":  # stopped before it trained, e.g. by a kill
        sys.exit(0)
    if args.job == "worker" and args.task == 1:
        time.sleep(0.3)
        if mode == "usage":
            print("some noise first", flush=True)
            print("a3c_graph.worker: error: --envs-per-worker 9999 is too many", file=sys.stderr)
            sys.exit(2)
        if mode == "crash":
            print("Segmentation fault (pretend)", flush=True)
            sys.exit(1)
        if mode == "gave_up":
            print("a3c_graph.worker: error: ps task 0 at 127.0.0.1:1 did not answer",
                  file=sys.stderr)
            sys.exit(69)
        if mode == "storage":  # what a failed graph write of TF's leaves, then exit 74
            open(os.path.join(args.logdir, "graph.pbtxt.tmp" + "5f" * 16), "w").close()
            print(f"a3c_graph.worker: error: worker 1 cannot write the log dir {args.logdir}: "
                  "the file system is read-only; make it writable again", file=sys.stderr)
            sys.exit(74)
        if mode == "stall":
            progress("running", None, age=100.0)  # its last report, long ago
        if mode == "stale":
            # The last report of an earlier process of this task (another pid): this one
            # is still starting and has not written its own yet.
            progress("running", None, age=100.0, pid=os.getppid())
        first = os.path.join(args.logdir, "lost_ps_once")
        if mode == "lost_ps" and not os.path.exists(first):
            open(first, "w").close()
            sys.exit(75)
    if args.job == "worker" and mode == "solve":
        progress("running", None)
        time.sleep(0.5)
        progress("done", "solved")
        sys.exit(0)
    while not stopped:  # a ps, or a worker that trains until it is told to stop
        time.sleep(0.05)
    if args.job == "worker":
        progress("done", "signal")
''')


@pytest.fixture
def fake_launcher(tmp_path):
    """Start the real launcher (launch.main) with the fake worker module in place."""
    (tmp_path / "fake_worker.py").write_text(FAKE_WORKER)
    started: list[tuple[subprocess.Popen, Path]] = []

    def start(mode: str, *args: str) -> tuple[subprocess.Popen, Path]:
        logdir = tmp_path / f"run_{mode}"
        code = ("import sys, a3c_graph.launch as launch, a3c_graph.system.processes as pids; "
                "pids.WORKER_MODULE = 'fake_worker'; sys.exit(launch.main())")
        env = launcher_env(FAKE_MODE=mode,
                           PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
        process = subprocess.Popen([sys.executable, "-c", code, "--logdir", str(logdir), *args],
                                   env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        started.append((process, logdir))
        return process, logdir

    yield start
    for process, logdir in started:
        stop_launcher(process)
        for pid_file in logdir.glob("pids/*.pid"):
            _kill_if_still_fake_task(pid_file)


def _kill_if_still_fake_task(pid_file: Path) -> None:
    try:
        proc = psutil.Process(int(pid_file.read_text()))
        if "fake_worker" in proc.cmdline():
            proc.kill()
    except (psutil.Error, ValueError, OSError):
        pass


def task_pids(logdir: Path) -> list[int]:
    return [int(p.read_text()) for p in logdir.glob("pids/*_*.pid")]


def test_a_run_that_solves_ends_with_the_summary_as_last_line(fake_launcher):
    process, logdir = fake_launcher("solve")
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    summary = last_json_line(stdout)
    assert summary == json.loads((logdir / "summary.json").read_text())
    assert summary["solved"] is True and summary["stop_reason"] == "solved"
    assert (summary["env_steps"], summary["episodes"], summary["global_step"]) == (12800, 150, 40)
    assert summary["mean_return_100"] == 199.5
    assert (summary["workers"], summary["ps"], summary["target_return"]) == (2, 1, 475.0)
    assert summary["logdir"] == str(logdir)
    assert sorted(p.name for p in (logdir / "pids").iterdir()) == [
        "launcher.pid", "ps_0.pid", "worker_0.pid", "worker_1.pid"]
    assert (logdir / "logs" / "ps_0.log").exists()
    assert_all_gone(task_pids(logdir))


def test_a_worker_usage_error_is_relayed_as_one_line_and_everything_stops(fake_launcher):
    process, logdir = fake_launcher("usage")
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert stderr.splitlines() == [
        "launch_cluster: error: worker task 1: --envs-per-worker 9999 is too many"]
    assert last_json_line(stdout)["stop_reason"] == "error"
    assert_all_gone(task_pids(logdir))


def test_a_crashed_worker_is_named_with_its_log_and_everything_stops(fake_launcher):
    process, logdir = fake_launcher("crash", "--max-restarts", "0")
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    [line] = stderr.splitlines()
    assert "worker task 1 exited with status 1;" in line
    assert str(logdir / "logs" / "worker_1.log") in line
    assert last_json_line(stdout)["stop_reason"] == "crash"
    assert_all_gone(task_pids(logdir))


def test_a_worker_that_keeps_crashing_is_restarted_with_back_off_then_the_run_stops(
        fake_launcher):
    process, logdir = fake_launcher("crash", "--max-restarts", "2")
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    *warnings, error = stderr.splitlines()
    assert ["restarting it in 1 s" in warnings[0], "restarting it in 2 s" in warnings[1]] == [
        True, True], warnings
    assert len(warnings) == 2
    assert error.startswith("launch_cluster: error: worker task 1 exited with status 1 after "
                            "2 restart(s) in a row; its log is")
    assert error.endswith(str(logdir / "logs" / "worker_1.log"))
    summary = last_json_line(stdout)
    assert summary["restarts"] == {"worker_1": 2}
    # Every attempt appended its command to the one log.
    log = (logdir / "logs" / "worker_1.log").read_text()
    assert log.count("launch_cluster: ") == 3
    assert_all_gone(task_pids(logdir))


def test_a_worker_that_cannot_write_the_log_dir_stops_the_run_in_one_line_exit_74(
        fake_launcher):
    """No restart (--max-restarts is not even consulted), the temporary file removed."""
    process, logdir = fake_launcher("storage", "--max-restarts", "5")
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 74, stderr
    assert stderr.splitlines() == [
        f"launch_cluster: error: worker task 1 cannot write the log dir {logdir}: the file "
        "system is read-only; make it writable again (or copy the log dir to a writable file "
        "system and give that --logdir), then start the run again with the same --logdir: it "
        "goes on from its last checkpoint"]
    summary = last_json_line(stdout)
    assert (summary["exit_code"], summary["stop_reason"], summary["restarts"]) == (
        74, "storage", {})
    assert not list(logdir.glob("*.tmp*"))
    assert_all_gone(task_pids(logdir))


def test_a_worker_that_lost_the_ps_is_restarted_without_counting_as_a_crash(fake_launcher):
    process, logdir = fake_launcher("lost_ps", "--max-restarts", "0")
    deadline = time.monotonic() + 60
    while not _restarted_and_ready(logdir):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "worker 1 was never restarted"
        time.sleep(0.1)
    pids = wait_for_tasks(process, logdir, 3)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    summary = last_json_line(stdout)
    assert summary["restarts"] == {"worker_1": 1}
    assert set(summary["task_exit_codes"].values()) == {0}
    assert "worker task 1 lost the ps; restarting it" in stderr
    assert_all_gone(pids)


def _restarted_and_ready(logdir: Path) -> bool:
    """worker 1's second process has its signal handlers in place."""
    return len(list(logdir.glob("ready_worker_1_*"))) == 2


@pytest.mark.parametrize("mode, warned", [
    ("stall", True),   # worker 1's own last report is 100 s old: named, once
    ("stale", False),  # the old report is an earlier process's: this one is still starting
], ids=["stopped_reporting", "restarted_still_starting"])
def test_only_a_worker_that_stopped_reporting_is_named(fake_launcher, mode, warned):
    process, logdir = fake_launcher(mode)
    output = Output(process)
    wait_for_tasks(process, logdir, 3)
    # A progress line with totals is printed from the very reading of the progress files that
    # the stall check ran on just before it: worker 1's report (the only one) was checked.
    output.wait_for(r"^\[ *\d+:\d\d\] step ", timeout=PROGRESS_LINE_SECS + 60)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    stderr = process.stderr.read()
    warnings = [line for line in stderr.splitlines() if "has not reported" in line]
    assert len(warnings) == (1 if warned else 0), stderr
    if warned:
        assert warnings[0].startswith(
            "launch_cluster: warning: worker task 1 has not reported for ")


def test_a_worker_that_gave_up_ends_the_run_with_its_reason(fake_launcher):
    process, logdir = fake_launcher("gave_up")
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert stderr.splitlines() == [
        "launch_cluster: error: worker task 1 gave up: ps task 0 at 127.0.0.1:1 did not answer; "
        f"its log is {logdir / 'logs' / 'worker_1.log'}"]
    assert last_json_line(stdout)["restarts"] == {}
    assert_all_gone(task_pids(logdir))


@pytest.mark.parametrize("mode, why", [
    # Restarted while the budget lasts (a back-off of 1 s is past --max-seconds 0.5).
    ("never_train", r"worker task \d exited with status 1 \(RuntimeError: fake failure before "
                    r"the first update\); its log is \S+worker_\d\.log"),
    ("quit", r"worker task 0 has not trained yet; its log \S+worker_0\.log ends: \(nothing\)"),
])
def test_a_run_whose_workers_stopped_without_training_fails_and_says_why(fake_launcher, mode,
                                                                         why):
    process, logdir = fake_launcher(mode, "--max-seconds", "0.5")
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1, stderr
    assert re.fullmatch("launch_cluster: error: no worker trained: " + why,
                        stderr.splitlines()[-1]), stderr
    summary = last_json_line(stdout)
    assert (summary["stop_reason"], summary["exit_code"]) == ("crash", 1)
    assert_all_gone(task_pids(logdir))


def wait_for_tasks(process: subprocess.Popen, logdir: Path, count: int) -> list[int]:
    """Pids of `count` fake tasks once each handles signals (a signal before that kills)."""
    deadline = time.monotonic() + 60
    while len(task_pids(logdir)) < count or not all(
            list(logdir.glob(f"ready_*_{pid}")) for pid in task_pids(logdir)):
        assert time.monotonic() < deadline, "the tasks never started"
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    return task_pids(logdir)


def pid_of_task(logdir: Path, name: str) -> int:
    return int((logdir / "pids" / f"{name}.pid").read_text())


def wait_until_gone(pids: list[int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running after {timeout:g} s: {pids}"
        time.sleep(0.05)


class Output:
    """The lines a running launcher prints on stdout, read as they come by a thread of ours,
    so that a test can wait for one with a deadline instead of sleeping."""

    def __init__(self, process: subprocess.Popen):
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(process.stdout,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)  # end of output: the launcher exited

    def wait_for(self, pattern: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no stdout line matched {pattern!r} within {timeout:g} s: "
                            f"{self.seen}")
            if line is None:
                pytest.fail(f"the launcher exited before a line matched {pattern!r}: "
                            f"{self.seen}")
            self.seen.append(line)
            if re.search(pattern, line):
                return line


def test_sigint_stops_every_task_and_writes_an_interrupted_summary(fake_launcher):
    process, logdir = fake_launcher("serve")
    pids = wait_for_tasks(process, logdir, 3)  # ps_0, worker_0, worker_1
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    summary = last_json_line(stdout)
    assert summary["stop_reason"] == "interrupted"
    assert summary == json.loads((logdir / "summary.json").read_text())
    assert set(summary["task_exit_codes"].values()) == {0}, "SIGTERM, not SIGKILL, was enough"
    assert_all_gone(pids)


def test_a_second_sigint_kills_a_task_that_ignores_sigterm(fake_launcher):
    process, logdir = fake_launcher("stubborn")
    pids = wait_for_tasks(process, logdir, 3)
    process.send_signal(signal.SIGINT)
    # The workers stop on their SIGTERM (sent only once the launcher took the first SIGINT);
    # the ps ignores its own, and the launcher waits for it.
    wait_until_gone([pid_of_task(logdir, f"worker_{i}") for i in range(2)])
    process.send_signal(signal.SIGINT)  # the user presses Ctrl-C again: no more waiting
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    summary = last_json_line(stdout)
    assert summary["task_exit_codes"] == {"ps_0": -signal.SIGKILL, "worker_0": 0, "worker_1": 0}
    assert "killed ps_0" in stderr
    assert_all_gone(pids)


def run_with_fake_worker(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`status`/`stop` as the fake launcher's tasks are recognised: by the fake module."""
    code = ("import sys, a3c_graph.launch as launch, a3c_graph.system.processes as pids; "
            "pids.WORKER_MODULE = 'fake_worker'; sys.exit(launch.main())")
    env = launcher_env(PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    return subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_stop_ends_the_tasks_of_a_launcher_that_was_killed(fake_launcher, tmp_path):
    process, logdir = fake_launcher("serve")
    pids = wait_for_tasks(process, logdir, 3)
    process.kill()  # its tasks run in sessions of their own: they outlive it
    process.communicate(timeout=60)
    status = run_with_fake_worker(tmp_path, "status", "--logdir", str(logdir))
    assert status.returncode == 0, status.stderr
    assert f"run {logdir}: live, but its launcher is gone" in status.stdout

    stop = run_with_fake_worker(tmp_path, "stop", "--logdir", str(logdir))
    assert stop.returncode == 0, stop.stderr
    assert stop.stderr == "", "SIGTERM was enough: nothing had to be killed"
    assert "launcher" in stop.stdout and "stale pid file, left alone" in stop.stdout
    assert f"stopped run {logdir}: ps_0, worker_0, worker_1 gone in " in stop.stdout
    wait_until_gone(pids)
    # Each worker wrote its last progress on SIGTERM, as it would its final checkpoint.
    for index in range(2):
        report = json.loads((logdir / "progress" / f"worker_{index}.json").read_text())
        assert (report["state"], report["stop_reason"]) == ("done", "signal")
    after = run_with_fake_worker(tmp_path, "status", "--logdir", str(logdir))
    assert after.returncode == 3 and "not live" in after.stdout


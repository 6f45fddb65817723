"""The launcher as a user meets it: scripts/launch_cluster.sh and `python -m a3c_graph.launch`.

Every test runs the real entry point as a subprocess. Supervision (relaying a worker's usage
error, reporting a crash, Ctrl-C) is checked against a tiny fake worker module that speaks
the worker's exit-status and progress-file contract in milliseconds, started through the same
launcher code with only the module name swapped. The two @pytest.mark.e2e tests run the real
worker and train CartPole.

Every process a test starts is stopped by the test, by its own pid (or by the pids in the
run's pid files, after checking they are still ours), never by name.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import alive

from a3c_graph.launcher.processes import read_pid_files
from a3c_graph.launcher.supervisor import PROGRESS_LINE_SECS
from a3c_graph.progress import read_history

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "launch_cluster.sh"
ERROR_PREFIX = "launch_cluster: error: "
COMMAND = re.compile(r"^\S*python\S* -m a3c_graph\.worker --job (?P<job>ps|worker) "
                     r"--task (?P<task>\d+) ")
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


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


def processes_mentioning(path: Path) -> list[int]:
    """Pids whose command line names `path` (read-only: to assert nothing was left running)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if any(str(path) in part for part in proc.info["cmdline"] or []):
            found.append(proc.info["pid"])
    return found


def assert_one_line_usage_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


def worker_commands(stdout: str) -> list[tuple[str, int, list[str]]]:
    """(job, task, argv) of each dry-run line; fails on any line that is not a task command.

    argv keeps the leading VAR=value environment assignments of the line, if any.
    """
    commands = []
    for line in stdout.splitlines():
        argv = shlex.split(line)
        command = list(itertools.dropwhile(ENV_ASSIGNMENT.match, argv))
        match = COMMAND.match(shlex.join(command))
        assert match, f"not a task command: {line!r}"
        commands.append((match["job"], int(match["task"]), argv))
    return commands


def flag_value(argv: list[str], flag: str) -> str:
    for i, token in enumerate(argv):
        if token == flag:
            return argv[i + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    raise AssertionError(f"{flag} not in {argv}")


# --------------------------------------------------------------------------- dry run

def test_dry_run_prints_one_ps_and_one_command_per_worker_and_writes_nothing(tmp_path):
    result = run_script("--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    commands = worker_commands(result.stdout)
    assert [(job, task) for job, task, _ in commands] == [("ps", 0), ("worker", 0), ("worker", 1)]
    ps_hosts = flag_value(commands[0][2], "--ps-hosts").split(",")
    worker_hosts = flag_value(commands[0][2], "--worker-hosts").split(",")
    addresses = ps_hosts + worker_hosts
    assert len(addresses) == 3 and len(set(addresses)) == 3
    assert len({address.rsplit(":", 1)[1] for address in addresses}) == 3, "ports must differ"
    assert all(address.startswith("127.0.0.1:") for address in addresses)
    for _, _, argv in commands:  # every task gets the same cluster, logdir and target
        assert flag_value(argv, "--ps-hosts") == ",".join(ps_hosts)
        assert flag_value(argv, "--worker-hosts") == ",".join(worker_hosts)
        assert flag_value(argv, "--target-return") == "475.0"  # CartPole-v1's reward_threshold
        assert Path(flag_value(argv, "--logdir")).parent == tmp_path / "runs"
    assert list(tmp_path.iterdir()) == [], "a dry run must not create the logdir"


def test_dry_run_shape_with_three_workers_and_two_ps(tmp_path):
    logdir = tmp_path / "run"
    result = run_script("--dry-run", "--workers", "3", "--ps", "2", "--logdir", str(logdir))
    assert result.returncode == 0, result.stderr
    commands = worker_commands(result.stdout)
    assert [(job, task) for job, task, _ in commands] == [
        ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1), ("worker", 2)]
    argv = commands[0][2]
    assert len(flag_value(argv, "--ps-hosts").split(",")) == 2
    assert len(flag_value(argv, "--worker-hosts").split(",")) == 3
    assert not logdir.exists()


def test_dry_run_forwards_changed_hyperparameters_and_the_given_target(tmp_path):
    result = run_script("--dry-run", "--env", "Acrobot-v1", "--learning-rate", "3e-4",
                        "--hidden-sizes", "32,32", "--target-return", "-90",
                        "--logdir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    for _, _, argv in worker_commands(result.stdout):
        assert flag_value(argv, "--env") == "Acrobot-v1"
        assert flag_value(argv, "--learning-rate") == "0.0003"
        assert flag_value(argv, "--hidden-sizes") == "32,32"
        assert flag_value(argv, "--target-return") == "-90.0"
        assert "--gamma" not in " ".join(argv), "defaults are not repeated"


def test_dry_run_with_tf_config_starts_just_its_task_with_tf_config_in_the_environment(tmp_path):
    tf_config = json.dumps({"cluster": {"ps": ["127.0.0.1:2222"],
                                        "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]},
                            "task": {"type": "worker", "index": 1}})
    # One task per launcher meets the others on the host network: --allow-remote.
    result = run_script("--dry-run", "--allow-remote", "--logdir", str(tmp_path / "run"),
                        TF_CONFIG=tf_config)
    assert result.returncode == 0, result.stderr
    [(job, task, argv)] = worker_commands(result.stdout)
    assert (job, task) == ("worker", 1)
    assert argv[0] == "TF_CONFIG=" + tf_config
    assert "--ps-hosts" not in argv


def test_dry_run_of_a_cluster_file_starts_the_named_tasks_and_warns_about_remote(tmp_path):
    cluster_file = tmp_path / "cluster.json"
    cluster_file.write_text(json.dumps({"ps": ["10.1.2.3:2222"],
                                        "worker": ["10.1.2.4:2222", "10.1.2.5:2222"]}))
    result = run_script("--dry-run", "--cluster", str(cluster_file), "--tasks", "worker:1,ps:0",
                        "--allow-remote", "--logdir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    commands = worker_commands(result.stdout)
    assert [(job, task) for job, task, _ in commands] == [("ps", 0), ("worker", 1)]
    assert all("--allow-remote" in argv for _, _, argv in commands)
    [warning] = result.stderr.splitlines()
    assert "unauthenticated gRPC" in warning and "trusted network" in warning


# --------------------------------------------------------------------------- bad input

def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


BAD_INPUTS = {
    "unknown env": lambda tmp: ["--env", "NoSuchEnv-v0"],
    "continuous actions": lambda tmp: ["--env", "MountainCarContinuous-v0"],
    "zero workers": lambda tmp: ["--workers", "0"],
    "zero ps": lambda tmp: ["--ps", "0"],
    "bad gamma": lambda tmp: ["--gamma", "1.5"],
    "zero rollout": lambda tmp: ["--rollout-length", "0"],
    "not an int": lambda tmp: ["--workers", "two"],
    "unknown flag": lambda tmp: ["--no-such-flag"],
    "unknown command": lambda tmp: ["frobnicate"],
    "cluster not json": lambda tmp: ["--cluster", _write(tmp / "c.json", "{ps: [")],
    "cluster missing worker": lambda tmp: ["--cluster",
                                           _write(tmp / "c.json", '{"ps": ["127.0.0.1:2222"]}')],
    "cluster file missing": lambda tmp: ["--cluster", str(tmp / "nowhere.json")],
    "remote without allow-remote": lambda tmp: [
        "--cluster", _write(tmp / "c.json", '{"ps": ["10.1.2.3:2222"], '
                                            '"worker": ["127.0.0.1:2223"]}')],
    "tasks without cluster": lambda tmp: ["--tasks", "worker:0"],
    "negative max-restarts": lambda tmp: ["--max-restarts", "-1"],
    "zero connect-timeout": lambda tmp: ["--connect-timeout", "0"],
    "nan learning rate": lambda tmp: ["--learning-rate", "nan"],
    "zero checkpoint interval": lambda tmp: ["--checkpoint-secs", "0"],
    "dry run in the background": lambda tmp: ["--dry-run", "--background"],
    "cnn on vector observations": lambda tmp: ["--policy", "cnn"],
    "workers disagree with the cluster file": lambda tmp: [
        "--workers", "3", "--cluster", _write(tmp / "c.json", '{"ps": ["127.0.0.1:2222"], '
                                                              '"worker": ["127.0.0.1:2223"]}')],
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(case, tmp_path):
    logdir = tmp_path / "run"
    # Not a dry run: if the check were missing, tasks would really start.
    result = run_script(*BAD_INPUTS[case](tmp_path), "--logdir", str(logdir), cwd=tmp_path)
    assert_one_line_usage_error(result)
    assert result.stdout == ""
    assert not logdir.exists()
    assert not (tmp_path / "runs").exists()
    assert processes_mentioning(logdir) == []


def test_malformed_tf_config_is_a_usage_error(tmp_path):
    result = run_script("--logdir", str(tmp_path / "run"), TF_CONFIG='{"cluster": {"ps": [')
    line = assert_one_line_usage_error(result)
    assert "TF_CONFIG" in line
    assert not (tmp_path / "run").exists()


def test_logdir_that_cannot_be_created_is_a_usage_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    result = run_script("--logdir", str(blocker / "run"))
    line = assert_one_line_usage_error(result)
    assert "--logdir" in line
    assert blocker.read_text() == ""


def test_taken_port_in_a_cluster_file_is_a_usage_error(tmp_path):
    # On the host network (--allow-remote); a private network has every port free
    # (test_security.py).
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        cluster_file = _write(tmp_path / "c.json", json.dumps(
            {"ps": [f"127.0.0.1:{taken}"], "worker": ["127.0.0.1:1"]}))
        result = run_script("--cluster", cluster_file, "--allow-remote",
                            "--logdir", str(tmp_path / "run"))
    line = assert_one_line_usage_error(result)
    assert str(taken) in line and "in use" in line
    assert not (tmp_path / "run").exists()


def test_default_logdir_is_not_created_on_bad_input(tmp_path):
    result = run_script("--workers", "0", cwd=tmp_path)
    assert_one_line_usage_error(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("logdir", ["/proc/nope", "/proc/nope/run", "/proc"])
def test_a_logdir_where_no_directory_can_be_made_is_a_usage_error(logdir, tmp_path):
    """/proc takes no directory whatever its permission bits say (root may write anywhere)."""
    result = run_script("--logdir", logdir, cwd=tmp_path)
    line = assert_one_line_usage_error(result)
    assert line.startswith(f"{ERROR_PREFIX}--logdir {logdir} cannot be ")
    assert not Path("/proc/nope").exists()
    assert list(tmp_path.iterdir()) == []
    assert not [proc for proc in psutil.process_iter(["cmdline"])  # "/proc" is in others' too
                if logdir in (proc.info["cmdline"] or [])]


# --------------------------------------------------------------------------- too big to fit

# The launcher with its two ways of starting tasks replaced by a failure: should a check let
# one of these clusters through, the test fails instead of starting thousands of TF processes.
GUARDED_LAUNCHER = textwrap.dedent('''
    import sys
    import a3c_graph.launcher.commands as launch

    def start(plan):
        sys.exit(f"guard: the launcher would have started {len(plan.tasks)} tasks")

    launch.run_foreground = launch.start_background = start
    sys.exit(launch.main())
''')


def run_guarded(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", GUARDED_LAUNCHER, *args], cwd=cwd,
                          env=launcher_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=120)


# Flags, and what the one line must say. A task is a TF process of some 600 MB, a layer of
# 10^8 units makes a network of 1.3e9 parameters (5.2 GB a copy; the ps holds three), and a
# CartPole observation is 16 bytes (a rollout holds T x B of them twice).
TOO_BIG = {
    "thousands of workers": (["--workers", "5000"], ["need at least", "fewer workers",
                                                     "several machines"]),
    "more workers than ports": (["--workers", "100000"], ["fewer workers"]),
    "a layer too wide": (["--hidden-sizes", "100000000"], ["need at least",
                                                           "smaller --hidden-sizes"]),
    "rollouts too long": (["--rollout-length", "10000000", "--envs-per-worker", "100"],
                          ["need at least", "shorter --rollout-length"]),
    "too many envs": (["--envs-per-worker", "10000000"], ["need at least",
                                                          "fewer --envs-per-worker"]),
    "too many actor threads": (["--actor-threads", "10000000"], ["need at least",
                                                                 "--actor-threads"]),
    "a queue too long": (["--queue-capacity", "100000000"], ["need at least",
                                                             "smaller --queue-capacity"]),
    "convolutions too wide": (["--env", "ALE/Pong-v5", "--conv-filters", "1000000"],
                              ["need at least", "--conv-filters"]),
    "an LSTM too big": (["--policy", "lstm", "--lstm-size", "1000000"],
                        ["need at least", "--lstm-size"]),
    # A stack of 10^6 42x42 frames is 1.8 GB an observation: the launcher must not make one.
    "a frame stack too deep": (["--env", "ALE/Pong-v5", "--frame-stack", "1000000"],
                               ["need at least", "--frame-stack"]),
    "screens too big for the envs": (["--env", "ALE/Pong-v5", "--screen-size", "210",
                                      "--envs-per-worker", "100000"],
                                     ["need at least", "--screen-size"]),
    # Threads, not memory: each is a pid, and Linux has at most 4,194,304 of them.
    "too many TF threads": (["--intra-op-threads", "10000000"],
                            ["need at least", "threads", "fewer --intra-op-threads"]),
    "thousands of ps tasks": (["--ps", "5000"], ["need at least", "fewer"]),
}


@pytest.mark.parametrize("case", sorted(TOO_BIG))
def test_a_cluster_too_big_for_this_machine_is_one_line_exit_2_and_starts_nothing(case,
                                                                                  tmp_path):
    flags, words = TOO_BIG[case]
    logdir = tmp_path / "run"
    result = run_guarded(*flags, "--logdir", str(logdir), cwd=tmp_path)
    line = assert_one_line_usage_error(result)
    assert all(word in line for word in words), line
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []
    assert processes_mentioning(logdir) == []


def test_a_dry_run_too_big_for_this_machine_warns_and_prints_the_commands(tmp_path):
    """A dry run may plan for a bigger machine than this one."""
    result = run_script("--dry-run", "--hidden-sizes", "100000000",
                        "--logdir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    [warning] = [line for line in result.stderr.splitlines() if "need at least" in line]
    assert warning.startswith("launch_cluster: warning: the 3 task(s) to start here need ")
    assert len(worker_commands(result.stdout)) == 3
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- status / stop

@pytest.mark.parametrize("command", ["status", "stop"])
def test_status_and_stop_of_a_logdir_without_a_run(command, tmp_path):
    for logdir in (tmp_path, tmp_path / "missing"):
        result = run_script(command, "--logdir", str(logdir))
        assert result.returncode == 3
        [line] = result.stderr.splitlines()
        assert "no run in" in line and str(logdir) in line


def test_stale_pid_files_are_reported_and_their_pids_left_alone(tmp_path):
    """A pid reused by some other program is never signalled."""
    bystander = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        (tmp_path / "pids").mkdir()
        for name in ("launcher", "worker_0"):
            (tmp_path / "pids" / f"{name}.pid").write_text(f"{bystander.pid}\n")
        (tmp_path / "pids" / "ps_0.pid").write_text("999999999\n")

        status = run_script("status", "--logdir", str(tmp_path))
        assert status.returncode == 3
        assert "pid reused by another program" in status.stdout
        assert "exited" in status.stdout
        assert "not live; no summary.json" in status.stdout

        stop = run_script("stop", "--logdir", str(tmp_path))
        assert stop.returncode == 0, stop.stderr
        assert "stale pid file" in stop.stdout and "nothing to stop" in stop.stdout
        assert bystander.poll() is None, "stop signalled a process that is not ours"
    finally:
        bystander.kill()
        bystander.wait()


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
            sys.exit(3)
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
        code = ("import sys, a3c_graph.launch as launch, a3c_graph.launcher.processes as pids; "
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


def assert_all_gone(pids: list[int]) -> None:
    for pid in pids:
        try:
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"pid {pid} still runs"
        except psutil.NoSuchProcess:
            pass


def last_json_line(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


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
    code = ("import sys, a3c_graph.launch as launch, a3c_graph.launcher.processes as pids; "
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


# --------------------------------------------------------------------------- end to end

@pytest.mark.e2e
def test_cartpole_is_solved_end_to_end(tmp_path, run_cleanup):
    logdir = tmp_path / "run"
    run_cleanup(logdir)
    result = run_script("--env", "CartPole-v1", "--workers", "2", "--target-return", "195",
                        "--max-seconds", "150", "--logdir", str(logdir), timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = last_json_line(result.stdout)
    assert summary["solved"] is True, summary
    assert summary["stop_reason"] == "solved"
    assert summary["mean_return_100"] >= 195 and summary["episodes"] >= 100
    assert summary == json.loads((logdir / "summary.json").read_text())
    # The run's history: every worker's progress writes, the cluster's env steps growing.
    history = read_history(logdir)
    assert {row["task"] for row in history} == {0, 1}
    for task in (0, 1):  # each worker reads the global counters at its own moments
        steps = [row["env_steps"] for row in history
                 if row["task"] == task and row["state"] != "starting"]
        assert steps and steps == sorted(steps), steps
    assert summary["env_steps"] in {row["env_steps"] for row in history}
    assert any(row["entropy"] is not None and 0 < row["entropy"] <= math.log(2)
               for row in history)
    assert summary["env_steps_per_sec"] > 0
    assert 0 < summary["startup_seconds"] < summary["wall_seconds"]
    records = read_pid_files(logdir)
    assert set(records) == {"launcher", "ps_0", "worker_0", "worker_1"}
    assert all(record.proc is None for record in records.values()), records
    assert_all_gone([record.pid for record in records.values()])

    # The trained agent plays from its checkpoint in a fresh graph, far better than random
    # (a random CartPole policy averages about 22).
    played = subprocess.run([sys.executable, "-m", "a3c_graph.evaluate", "--logdir", str(logdir),
                             "--episodes", "3"], capture_output=True, text=True, timeout=120,
                            cwd=REPO, env=launcher_env(PYTHONPATH=str(REPO)))
    assert played.returncode == 0, played.stderr[-2000:]
    evaluation = last_json_line(played.stdout)
    assert evaluation["episodes"] == 3
    assert evaluation["checkpoint"].startswith(str(logdir))
    assert evaluation["mean_return"] > 100, evaluation

    # TensorBoard (installed with the project) finds the curves the README lists, per worker.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for task in (0, 1):
        events = EventAccumulator(str(logdir / "tb" / f"worker_{task}"))
        events.Reload()
        tags = set(events.Tags()["scalars"])
        assert TENSORBOARD_TAGS <= tags, sorted(TENSORBOARD_TAGS - tags)
        returns = events.Scalars("episode/cluster_mean_return_100")
        assert returns and returns[-1].value > 22  # random play averages about 22


@pytest.mark.e2e
@pytest.mark.parametrize("env, why", [
    # Each process of a worker fails before its first update, and is restarted while its
    # budget lasts: the run ends when none is left, or at the deadline.
    ("BrokenResetCartPole-v0", r"worker task \d exited with status 1 \(RuntimeError: "
                               r"simulated env failure at reset\); its log is "),
    # The workers hang before their first update: the backstop deadline ends the run.
    ("HangingResetCartPole-v0", r"worker task 0 has not trained yet; its log .* ends: "),
], ids=["crashing", "hanging"])
def test_a_run_whose_workers_never_train_fails_and_says_why(env, why, tmp_path, run_cleanup):
    """It used to end with exit 0 and stop_reason "deadline"; a failed run must not."""
    logdir = tmp_path / "run"
    run_cleanup(logdir)
    result = run_script("--env", f"tests.faulty_env:{env}", "--max-seconds", "1",
                        "--max-restarts", "100", "--logdir", str(logdir), timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    error = result.stderr.splitlines()[-1]
    assert re.match(r"launch_cluster: error: no worker trained( within --max-seconds 1 \+ 60 "
                    r"s)?: " + why, error), error
    summary = last_json_line(result.stdout)
    assert summary["exit_code"] == 1 and summary["stop_reason"] in ("crash", "deadline")
    assert summary == json.loads((logdir / "summary.json").read_text())
    records = read_pid_files(logdir)
    assert set(records) == {"launcher", "ps_0", "worker_0", "worker_1"}
    assert all(record.proc is None for record in records.values()), records
    assert_all_gone([record.pid for record in records.values()])


# The scalars the README documents for TensorBoard.
TENSORBOARD_TAGS = {
    "episode/return", "episode/length", "episode/cluster_mean_return_100", "loss/loss",
    "loss/policy_loss", "loss/value_loss", "loss/entropy", "loss/grad_norm",
    "perf/env_steps_per_sec", "perf/queue_size", "train/learning_rate",
}


@pytest.mark.e2e
def test_background_run_reports_live_and_stops_on_request(tmp_path, run_cleanup):
    logdir = tmp_path / "run"
    run_cleanup(logdir)
    started = run_script("--background", "--max-seconds", "120", "--logdir", str(logdir))
    assert started.returncode == 0, started.stderr
    assert str(logdir) in started.stdout and "stop --logdir" in started.stdout

    status = run_script("status", "--logdir", str(logdir))
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"run {logdir}: live" in status.stdout
    pids = [record.pid for record in read_pid_files(logdir).values()]
    assert len(pids) == 4

    stop = run_script("stop", "--logdir", str(logdir), timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert_all_gone(pids)
    assert json.loads((logdir / "summary.json").read_text())["stop_reason"] == "interrupted"

    after = run_script("status", "--logdir", str(logdir))
    assert after.returncode == 3
    assert "not live; summary.json exists" in after.stdout

"""The launcher's checks and plans, where no task of a run starts: dry runs (the commands it
would run), bad input (one line on stderr, exit status 2, nothing created, nothing started),
clusters too big for this machine, and `status` / `stop` on a log dir without a live run.

Every test runs the real entry point (scripts/launch_cluster.sh, or `python -m
a3c_graph.launch` with its starting of tasks replaced by a failure) as a subprocess. A run's
supervision is in test_launch_supervision.py, the real runs in test_launch_e2e.py.

Every process a test starts is stopped by the test, by its own pid, never by name.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from conftest import REPO

from tests.support.launch_helpers import launcher_env, processes_mentioning, run_script

ERROR_PREFIX = "launch_cluster: error: "
COMMAND = re.compile(r"^\S*python\S* -m a3c_graph\.worker --job (?P<job>ps|worker) "
                     r"--task (?P<task>\d+) ")
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=")


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


@pytest.mark.parametrize("flags, envs", [
    (["--workers", "16"], "1"),  # the preset's 8 envs for 2 workers, spread over 16
    (["--workers", "4", "--env", "ALE/Pong-v5"], "4"),
    (["--workers", "2"], "8"),
    (["--workers", "16", "--envs-per-worker", "8"], "8"),  # given: kept, though the preset's
])
def test_dry_run_spreads_the_presets_envs_over_the_workers(tmp_path, flags, envs):
    """Every task is told its envs per worker, so a task never spreads them on its own."""
    result = run_script("--dry-run", *flags, "--logdir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    workers = [argv for job, _, argv in worker_commands(result.stdout) if job == "worker"]
    assert len(workers) == int(flags[1])
    assert {flag_value(argv, "--envs-per-worker") for argv in workers} == {envs}


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
    "unbounded actions": lambda tmp: ["--env", "tests.support.action_space_envs:UnboundedBox-v0"],
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

"""Bad input to ``python -m a3c_graph.worker``: one line on stderr, exit status 2, nothing left.

Each case runs the real entry point in a subprocess, the way a user or the launcher does.
Cases whose check comes after the worker's network check run it in the tests' private network
(conftest.PrivateNetwork), as the launcher runs its tasks; the check itself is in
test_security.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import portpicker
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
PREFIX = "a3c_graph.worker: error:"
TIMEOUT_SECS = 60  # a bad-input run ends in seconds; longer means it hangs


def run_worker(args: list[str], env_extra: dict | None = None,
               network=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the worker's own default must keep stderr clean
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(env_extra or {})
    command = [sys.executable, "-m", "a3c_graph.worker", *args]
    proc = subprocess.Popen(network.command(command) if network else command, cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        proc.kill()  # this child only, by its pid
        stdout, stderr = proc.communicate()
        pytest.fail(f"worker {args} still running after {TIMEOUT_SECS}s\n"
                    f"stdout:\n{stdout}\nstderr:\n{stderr}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def usage_error(args: list[str], env_extra: dict | None = None, network=None) -> str:
    """The one error line of a worker run on bad input (checked: status 2, no traceback)."""
    result = run_worker(args, env_extra, network)
    shown = f"status {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stdout + result.stderr, shown
    assert result.returncode == 2, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"want exactly one line on stderr\n{shown}"
    assert lines[0].startswith(PREFIX), shown
    return lines[0]


@pytest.fixture
def hosts() -> list[str]:
    """--ps-hosts/--worker-hosts of a loopback cluster with 1 ps and 2 workers on free ports."""
    ports = [portpicker.pick_unused_port() for _ in range(3)]
    yield ["--ps-hosts", f"127.0.0.1:{ports[0]}",
           "--worker-hosts", f"127.0.0.1:{ports[1]},127.0.0.1:{ports[2]}"]
    for port in ports:
        portpicker.return_port(port)


@pytest.mark.parametrize("env, words", [
    ("CartPol-v1", ["unknown env id 'CartPol-v1'", "CartPole"]),  # and the id it may mean
    ("tests.support.action_space_envs:UnboundedBox-v0",
     ["'tests.support.action_space_envs:UnboundedBox-v0'", "unbounded Box action space"]),
], ids=["unknown env id", "unbounded actions"])
def test_an_env_it_cannot_train_is_one_line_and_writes_nothing(hosts, tmp_path, env, words):
    logdir = tmp_path / "run"
    line = usage_error([*hosts, "--job", "worker", "--task", "0", "--logdir", str(logdir),
                        "--env", env])
    assert all(word in line for word in words), line
    assert not logdir.exists()


def test_malformed_cluster_file(tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text('{"ps": ["127.0.0.1:2222"],\n "worker": ["127.0.0.1:2223",]}\n')
    logdir = tmp_path / "run"
    line = usage_error(["--cluster", str(cluster), "--job", "worker", "--task", "0",
                        "--logdir", str(logdir)])
    assert f"cluster file {cluster} is not valid JSON" in line and "line 2" in line
    assert not logdir.exists()


def test_malformed_tf_config(tmp_path):
    logdir = tmp_path / "run"
    line = usage_error(["--logdir", str(logdir)], {"TF_CONFIG": '{"cluster": {"ps": ['})
    assert "TF_CONFIG is not valid JSON" in line
    assert not logdir.exists()


def test_tf_config_task_type_chief(tmp_path):
    logdir = tmp_path / "run"
    tf_config = {"cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]},
                 "task": {"type": "chief", "index": 0}}
    line = usage_error(["--logdir", str(logdir)], {"TF_CONFIG": json.dumps(tf_config)})
    assert "TF_CONFIG task type 'chief' is not 'ps' or 'worker'" in line
    assert not logdir.exists()


def test_task_index_outside_the_cluster(hosts, tmp_path):
    logdir = tmp_path / "run"
    line = usage_error([*hosts, "--job", "worker", "--task", "5", "--logdir", str(logdir)])
    assert "--task 5 is outside the cluster" in line and "has 2 task(s)" in line
    assert not logdir.exists()


def test_unknown_job_name(hosts, tmp_path):
    logdir = tmp_path / "run"
    line = usage_error([*hosts, "--job", "chief", "--task", "0", "--logdir", str(logdir)])
    assert "--job" in line and "'chief'" in line
    assert not logdir.exists()


def test_unknown_job_in_cluster_file(tmp_path):
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"],
                                   "chief": ["127.0.0.1:2224"]}))
    logdir = tmp_path / "run"
    line = usage_error(["--cluster", str(cluster), "--job", "worker", "--task", "0",
                        "--logdir", str(logdir)])
    assert "unknown job 'chief'" in line
    assert not logdir.exists()


def test_port_already_in_use(tmp_path, private_network):
    # Taken in the network the worker runs in, as by another task of its launcher.
    ps_port = portpicker.pick_unused_port()
    logdir = tmp_path / "run"
    with private_network.taken_port() as port:
        line = usage_error(["--ps-hosts", f"127.0.0.1:{ps_port}",
                            "--worker-hosts", f"127.0.0.1:{port}",
                            "--job", "worker", "--task", "0", "--logdir", str(logdir)],
                           network=private_network)
    portpicker.return_port(ps_port)
    assert f"port {port}" in line and "already in use" in line
    assert not logdir.exists()


def test_ps_port_already_in_use_on_the_host_network():
    # --allow-remote: the task is on the host network, where TF would listen on every
    # interface; a port taken on loopback only is taken for it too.
    worker_port = portpicker.pick_unused_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = usage_error(["--ps-hosts", f"127.0.0.1:{port}",
                            "--worker-hosts", f"127.0.0.1:{worker_port}",
                            "--job", "ps", "--task", "0", "--allow-remote"])
    portpicker.return_port(worker_port)
    assert f"port {port}" in line and "already in use" in line


def test_unwritable_log_dir(hosts, tmp_path, private_network):
    blocker = tmp_path / "file"
    blocker.write_text("a regular file, not a directory\n")
    logdir = blocker / "sub"
    line = usage_error([*hosts, "--job", "worker", "--task", "0", "--logdir", str(logdir)],
                       network=private_network)
    assert f"cannot create log dir {logdir}" in line
    assert blocker.is_file() and blocker.read_text() == "a regular file, not a directory\n"


def test_worker_without_log_dir(hosts):
    line = usage_error([*hosts, "--job", "worker", "--task", "0"])
    assert "--logdir is required" in line


def test_non_loopback_address_needs_allow_remote(tmp_path):
    worker_port = portpicker.pick_unused_port()
    logdir = tmp_path / "run"
    line = usage_error(["--ps-hosts", "10.1.2.3:2222", "--worker-hosts", f"127.0.0.1:{worker_port}",
                        "--job", "worker", "--task", "0", "--logdir", str(logdir)])
    portpicker.return_port(worker_port)
    assert "10.1.2.3:2222" in line and "--allow-remote" in line
    assert not logdir.exists()


@pytest.mark.parametrize("flags, words", [
    (["--gamma", "1.5"], "--gamma must be in [0, 1], got 1.5"),
    (["--rollout-length", "0"], "--rollout-length must be at least 1, got 0"),
    (["--learning-rate", "nan"], "--learning-rate must be a positive number"),
    (["--rollout-length", "ten"], "--rollout-length"),
])
def test_invalid_hyperparameter(hosts, tmp_path, flags, words):
    logdir = tmp_path / "run"
    line = usage_error([*hosts, "--job", "worker", "--task", "0", "--logdir", str(logdir),
                        *flags])
    assert words in line
    assert not logdir.exists()


def test_unknown_flag(hosts, tmp_path):
    logdir = tmp_path / "run"
    line = usage_error([*hosts, "--job", "worker", "--task", "0", "--logdir", str(logdir),
                        "--rollout-lenght", "5"])
    assert "unrecognized arguments: --rollout-lenght" in line
    assert not logdir.exists()


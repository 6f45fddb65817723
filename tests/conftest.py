"""Shared test helpers: the repo root, and running real tasks as processes we own.

Tasks started one at a time (not by the launcher) run in a private network, as the launcher's
tasks do: a network namespace with only loopback, held open by a small process of ours and
joined with nsenter. On the host network a task refuses to start without --allow-remote.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import portpicker
import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def stop_process_tree(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM a process we started and its children (by pid), SIGKILL what remains."""
    try:
        parent = psutil.Process(process.pid)
        family = [parent] + parent.children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for proc in family:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting to be reaped does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def checkpoint_step(logdir: Path) -> int:
    """Global step of the newest checkpoint the chief wrote (0 if none yet)."""
    try:
        text = (logdir / "checkpoint").read_text()
    except FileNotFoundError:
        return 0
    return int(re.search(r'model_checkpoint_path: ".*-(\d+)"', text).group(1))


def nsenter_command(pid: int, argv: Sequence[str]) -> list[str]:
    """`argv` run in the network namespace of process `pid` (ours), by nsenter, which execs it:
    the Popen's pid is the command's own. Its user namespace too when it has one of its own
    (an unprivileged holder), keeping our uid and gid."""
    command = ["nsenter", f"--target={pid}", "--net"]
    if os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user"):
        command += ["--user", "--preserve-credentials"]
    return [*command, *argv]


# Waits on stdin: the holder lives until we stop it (by its pid) or our end of the pipe closes.
HOLDER = ("import sys; from a3c_graph import netns; netns.enter_private_network(); "
          "print('ready', flush=True); sys.stdin.read()")
LISTENER = ("import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); sys.stdin.read()")


class PrivateNetwork:
    """A network namespace with only lo (a3c_graph.netns), held open by a process we own."""

    def __init__(self) -> None:
        if shutil.which("nsenter") is None:
            pytest.skip("nsenter (util-linux) is needed to start tasks in a private network")
        self.holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=child_env(), cwd=REPO, text=True)
        if self.holder.stdout.readline().strip() != "ready":
            error = self.holder.communicate(timeout=30)[1].strip().splitlines()
            pytest.skip(f"no private network here: {error[-1] if error else 'holder died'}")

    def command(self, argv: Sequence[str]) -> list[str]:
        return nsenter_command(self.holder.pid, argv)

    @contextlib.contextmanager
    def taken_port(self) -> Iterator[int]:
        """A port that a process inside this network listens on while the block runs."""
        listener = subprocess.Popen(self.command([sys.executable, "-c", LISTENER]),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            yield int(listener.stdout.readline())
        finally:
            listener.kill()  # by its pid
            listener.communicate()

    def stop(self) -> None:
        self.holder.kill()  # by its pid; it holds nothing worth a clean exit
        self.holder.communicate()


@pytest.fixture(scope="session")
def private_network() -> Iterator[PrivateNetwork]:
    network = PrivateNetwork()
    yield network
    network.stop()


class LocalCluster:
    """ps and worker tasks started one by one with `python -m a3c_graph.worker`, in a private
    network."""

    def __init__(self, tmp_path: Path, network: PrivateNetwork, workers: int = 2, ps: int = 1):
        # Free on the host, and so in the network too (a new namespace has every port free).
        ports = [portpicker.pick_unused_port() for _ in range(ps + workers)]
        self.ps_hosts = ",".join(f"127.0.0.1:{p}" for p in ports[:ps])
        self.worker_hosts = ",".join(f"127.0.0.1:{p}" for p in ports[ps:])
        self.num_ps, self.num_workers = ps, workers
        self.tmp_path = tmp_path
        self.network = network
        self.processes: list[subprocess.Popen] = []

    def start(self, job: str, task: int, *flags: str) -> subprocess.Popen:
        log = open(self.tmp_path / f"{job}_{task}_{len(self.processes)}.log", "w")
        cmd = [sys.executable, "-m", "a3c_graph.worker", "--job", job, "--task", str(task),
               "--ps-hosts", self.ps_hosts, "--worker-hosts", self.worker_hosts, *flags]
        process = subprocess.Popen(self.network.command(cmd), stdout=log,
                                   stderr=subprocess.STDOUT, env=child_env(), cwd=REPO,
                                   start_new_session=True)
        process.log_path = log.name  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                stop_process_tree(process)


@pytest.fixture
def local_cluster(tmp_path, private_network):
    clusters: list[LocalCluster] = []

    def make(**kwargs) -> LocalCluster:
        cluster = LocalCluster(tmp_path, private_network, **kwargs)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop_all()


_child_runs = itertools.count()


def run_in_cluster(network: PrivateNetwork, tmp_path: Path, function: str, num_ps: int = 1,
                   timeout: float = 240, **kwargs):
    """What `function` ("module:name") returns, called with keyword arguments `kwargs` in a
    child process that hosts a cluster of real TF servers (tests/cluster_child.py) in
    `network`. The child is stopped by its pid on every path: no server outlives the test."""
    workdir = tmp_path / f"cluster_child_{next(_child_runs)}"
    workdir.mkdir()
    (workdir / "in.pickle").write_bytes(pickle.dumps(kwargs))
    argv = [sys.executable, "-m", "tests.cluster_child", function, str(num_ps), str(workdir)]
    process = subprocess.Popen(network.command(argv), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=child_env(), cwd=REPO, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{function} in a cluster child did not finish in {timeout} s")
    finally:
        if process.poll() is None:
            stop_process_tree(process)
    assert process.returncode == 0, f"{function} failed in its cluster child:\n{output[-4000:]}"
    return pickle.loads((workdir / "out.pickle").read_bytes())


@pytest.fixture
def in_cluster(private_network, tmp_path):
    """run_in_cluster(function, num_ps=1, **kwargs) in this test's private network."""
    return lambda function, **kwargs: run_in_cluster(private_network, tmp_path, function,
                                                     **kwargs)

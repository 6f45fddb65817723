"""Shared test helpers: the repo root, and running real tasks as processes we own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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


class LocalCluster:
    """ps and worker tasks started one by one with `python -m a3c_graph.worker`."""

    def __init__(self, tmp_path: Path, workers: int = 2, ps: int = 1):
        ports = [portpicker.pick_unused_port() for _ in range(ps + workers)]
        self.ps_hosts = ",".join(f"127.0.0.1:{p}" for p in ports[:ps])
        self.worker_hosts = ",".join(f"127.0.0.1:{p}" for p in ports[ps:])
        self.num_ps, self.num_workers = ps, workers
        self.tmp_path = tmp_path
        self.processes: list[subprocess.Popen] = []

    def start(self, job: str, task: int, *flags: str) -> subprocess.Popen:
        log = open(self.tmp_path / f"{job}_{task}_{len(self.processes)}.log", "w")
        cmd = [sys.executable, "-m", "a3c_graph.worker", "--job", job, "--task", str(task),
               "--ps-hosts", self.ps_hosts, "--worker-hosts", self.worker_hosts, *flags]
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=child_env(),
                                   cwd=REPO, start_new_session=True)
        process.log_path = log.name  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                stop_process_tree(process)


@pytest.fixture
def local_cluster(tmp_path):
    clusters: list[LocalCluster] = []

    def make(**kwargs) -> LocalCluster:
        cluster = LocalCluster(tmp_path, **kwargs)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop_all()

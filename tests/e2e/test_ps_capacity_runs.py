"""benchmarks.ps_capacity run for real, as root: it builds the simulated hosts (network
namespaces, veth links shaped with tc), and the tests check what a user reads afterwards, the
table and its files, and that nothing is left: no namespace, no link, no process, after a
normal end and after SIGINT midway. They need root and iproute2, and are skipped without them.
No test asserts a speed.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, stop_process_tree

from benchmarks.ps_capacity import measure as pc
from benchmarks.ps_capacity import netlab
from benchmarks.ps_capacity.report import TABLE_HEADER

COLUMNS = TABLE_HEADER.count("|") - 1


def needs_root_and_iproute2():
    if not sys.platform.startswith("linux"):
        pytest.skip(f"network namespaces are Linux only (this is {sys.platform})")
    if pc.os.geteuid() != 0:
        pytest.skip(f"needs root to make network namespaces (running as uid {pc.os.geteuid()})")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs iproute2's `ip` and `tc`")


def our_namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines()
            if line.startswith(netlab.PREFIX + "-")}


def command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


SMALL = ["--nets", "cartpole", "--pushers", "1", "--seconds", "1", "--settle", "0.5"]


class Watched:
    """The harness run as a user runs it, and every process it started, seen while it ran."""

    def __init__(self, tmp_path: Path, flags: list[str]):
        self.out = tmp_path / "out"
        self.namespaces_before = our_namespaces()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.ps_capacity", *flags, "--out", str(self.out)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**pc.os.environ, "PYTHONPATH": str(REPO)})
        self.seen: dict[int, psutil.Process] = {}
        self.suffixes: set[str] = set()

    def watch(self) -> None:
        try:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
        for name in our_namespaces() - self.namespaces_before:
            self.suffixes.add(name.split("-")[1])

    def until(self, done, timeout: float) -> bool:
        """Watch until done() or the harness ends or `timeout`; whether done() came true."""
        deadline = time.monotonic() + timeout
        while not done() and self.process.poll() is None and time.monotonic() < deadline:
            self.watch()
            time.sleep(0.2)
        return bool(done())

    def finish(self, timeout: float) -> tuple[str, str]:
        self.until(lambda: False, timeout)
        self.stop()
        return self.process.communicate(timeout=30)

    def stop(self) -> None:
        """On every path: a harness still running is interrupted as a user would (it then
        stops its tasks and deletes its namespaces), and what is left of its process tree
        is stopped by pid."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                stop_process_tree(self.process)

    def assert_nothing_left(self) -> None:
        alive = [p for p in self.seen.values() if p.is_running()
                 and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, [command(p) for p in alive]
        assert not (our_namespaces() - self.namespaces_before)
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert self.suffixes and not any(s in links for s in self.suffixes), links
        assert self.out.joinpath("results.json").exists()
        cleanup = json.loads(self.out.joinpath("results.json").read_text())["cleanup"]
        assert not cleanup["processes"] and not cleanup["network_errors"], cleanup


@pytest.fixture
def watched(tmp_path):
    """Watched(tmp_path, flags) runs, each stopped after the test however it ends."""
    runs: list[Watched] = []

    def start(flags: list[str]) -> Watched:
        runs.append(Watched(tmp_path, flags))
        return runs[-1]

    yield start
    for run in runs:
        run.stop()


@pytest.mark.e2e
@pytest.mark.slow  # four configurations (about 25 s); the SIGINT run below covers a real run
def test_a_short_run_writes_the_table_and_leaves_nothing_behind(watched):
    needs_root_and_iproute2()
    run = watched([*SMALL, "--ps", "1,2", "--rtt-ms", "0,1", "--gbit", "10"])
    out, err = run.finish(timeout=240)
    assert run.process.returncode == 0, err
    rows = [line for line in (run.out / "results.md").read_text().splitlines()
            if line.startswith("| cartpole")]
    assert len(rows) == 4 and all(line.count("|") - 1 == COLUMNS for line in rows), rows
    assert [re.split(r"\s*\|\s*", line)[2:5] for line in rows] == [
        ["1", "0", "10"], ["1", "1", "10"], ["2", "0", "10"], ["2", "1", "10"]]
    data = json.loads((run.out / "results.json").read_text())
    assert all(row["updates"] > 0 and row["bytes_to_ps_per_update"] > row["tensor_bytes"]
               for row in data["rows"]), data["rows"]
    assert [load["ps"] for load in data["ps_loads"]["cartpole"]] == [1, 2]
    assert (run.out / "ps_capacity.png").exists()
    run.assert_nothing_left()


@pytest.mark.e2e
def test_sigint_midway_stops_every_process_and_deletes_every_namespace(watched):
    needs_root_and_iproute2()
    run = watched([*SMALL, "--ps", "2", "--rtt-ms", "0,1,10", "--seconds", "30"])
    # Midway: the hosts are up and the tasks started (a ps task and a pusher, at least).
    pusher = "benchmarks.ps_capacity.pusher"
    started = run.until(lambda: run.suffixes and any(pusher in command(p)
                                                     for p in run.seen.values()), timeout=120)
    assert started, "no pusher started within 120 s"
    assert run.process.poll() is None, run.process.communicate()
    time.sleep(1.0)
    run.watch()
    run.process.send_signal(signal.SIGINT)
    out, err = run.finish(timeout=90)
    assert run.process.returncode == 130, err
    assert "interrupted by SIGINT" in err
    run.assert_nothing_left()

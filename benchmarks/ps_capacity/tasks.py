"""The processes of a benchmarks.ps_capacity run on the lab's hosts: the ps tasks, the
pushers and the latency relay, started, read, measured and stopped (Harness), and the
signals that wait while a process or a namespace is being made (signals_held).

Every process is started in a session of its own and stopped by its pid, its children
too (Started.stop), whatever ends the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from a3c_graph.system.cli import UsageError
from benchmarks.common import end_leftovers, process_tree
from benchmarks.ps_capacity.netlab import Lab
from benchmarks.ps_capacity.pusher import read_counter
from benchmarks.ps_capacity.report import (
    Link,
    Snapshot,
    cpu_seconds,
    machine_busy_seconds,
    make_row,
)

REPO = Path(__file__).resolve().parents[2]
PORT = 2300  # every task's port (relay: PORT + host index, all on the switch's address)
START_TIMEOUT_SECS = 300.0  # up to every pusher's "ready", TF's start-up on a busy machine
# After stdin closes (a pusher) or SIGTERM (a ps task), how long a task gets to leave.
STOP_GRACE_SECS = 5.0


class BenchmarkError(Exception):
    """A task failed or did not answer: one line (and the log to read), exit status 1."""


class Interrupted(Exception):
    """SIGINT or SIGTERM came: the run stops, cleans up and exits with the signal's status."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Lines:
    """The lines a process writes to a pipe, read by a thread: JSON objects to `objects`,
    anything else to the log file."""

    def __init__(self, stream, log) -> None:
        self.objects: queue.Queue = queue.Queue()
        self.log = log
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            try:
                value = json.loads(line)
            except ValueError:
                value = None
            if isinstance(value, dict):
                self.objects.put(value)
            else:
                self.log.write(line)
                self.log.flush()

    def next(self, deadline: float, process: subprocess.Popen, what: str) -> dict:
        while True:
            try:
                return self.objects.get(timeout=0.2)
            except queue.Empty:
                pass
            if process.poll() is not None:
                raise BenchmarkError(f"{what} exited with status {process.returncode}; see "
                                     f"{self.log.name}")
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{what} did not answer in time; see {self.log.name}")


def child_env() -> dict:
    """This environment less its proxy settings, which gRPC would follow to a proxy no host
    of the lab can reach. (The tasks run with the repo as their working directory, which
    `python -m` puts first on sys.path.)"""
    return {key: value for key, value in os.environ.items()
            if key.lower() not in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy")}


@dataclass
class Started:
    """Every process this run started, to stop by pid whatever happens."""

    processes: list[subprocess.Popen] = field(default_factory=list)
    logs: list = field(default_factory=list)

    def start(self, argv: list[str], log_path: Path, pipes: bool = False) -> subprocess.Popen:
        log = open(log_path, "a")  # O_APPEND: the process's stderr and Lines share it
        self.logs.append(log)
        pipe = subprocess.PIPE if pipes else subprocess.DEVNULL
        with signals_held():  # a process that started is a process we know of
            process = subprocess.Popen(argv, stdin=pipe,
                                       stdout=subprocess.PIPE if pipes else log, stderr=log,
                                       env=child_env(), cwd=REPO, text=True,
                                       start_new_session=True)
            self.processes.append(process)
        process.log = log  # type: ignore[attr-defined]
        return process

    def stop(self, processes: Sequence[subprocess.Popen] | None = None) -> list[str]:
        """Stop these processes (default: all), by pid, their children too: stdin closed
        (a pusher's cue to leave), SIGTERM to those without one (the ps tasks); whatever is
        left after STOP_GRACE_SECS is ended by end_leftovers (SIGTERM, then SIGKILL).
        Returns "name(pid)" of the processes that needed more than their cue."""
        chosen = list(self.processes if processes is None else processes)
        family = []
        for process in chosen:
            family += process_tree(process.pid)
            if process.stdin is not None:
                try:
                    process.stdin.close()
                except OSError:
                    pass
            elif process.poll() is None:
                process.terminate()
        signalled = end_leftovers(family, STOP_GRACE_SECS)
        for process in chosen:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                signalled.append(f"pid {process.pid} (not reaped)")
            self.processes.remove(process)
        return signalled

    def left_behind(self) -> list[int]:
        return [p.pid for p in self.processes if p.poll() is None]


@dataclass
class Cell:
    """One network and ps count: its tasks, running on the lab's hosts."""

    net: str
    ps: int
    pushers: list[subprocess.Popen]
    counters: list[Path]
    ps_tasks: list[subprocess.Popen]
    ready: dict


class Harness:
    """The lab's hosts and what runs on them: the relay, and one Cell at a time."""

    def __init__(self, args: argparse.Namespace, out: Path):
        self.args, self.out = args, out
        self.lab = Lab([f"ps{i}" for i in range(max(args.ps))]
                       + [f"w{j}" for j in range(args.pushers)])
        self.started = Started()
        self.delay = "relay"
        self.relay: subprocess.Popen | None = None
        self.relay_lines: Lines | None = None

    # -- the network

    def choose_delay(self) -> None:
        """netem or the relay (started here), as --delay and the kernel allow."""
        netem = self.lab.has_netem()
        if self.args.delay == "netem" and not netem:
            raise UsageError("--delay netem: this kernel has no netem (tc says \"Specified "
                             "qdisc kind is unknown\"); use --delay relay or auto")
        self.delay = "netem" if netem and self.args.delay != "relay" else "relay"
        if self.delay == "relay":
            routes = [f"{self.lab.switch_address}:{PORT + i}={host.address}:{PORT + i}"
                      for i, host in enumerate(self.lab.hosts.values())]
            self.relay = self.started.start(
                self.lab.exec_command("switch", [sys.executable, "-m",
                                                 "benchmarks.ps_capacity.latency_relay", *routes]),
                self.out / "logs" / "relay.log", pipes=True)
            if self.relay.stdout.readline().strip() != "ready":
                raise BenchmarkError(f"the latency relay did not start; see "
                                     f"{self.relay.log.name}")
            self.relay_lines = Lines(self.relay.stdout, self.relay.log)

    def address(self, name: str) -> str:
        """Where the other tasks reach host `name`'s task: through the relay, or direct."""
        if self.delay == "relay":
            index = list(self.lab.hosts).index(name)
            return f"{self.lab.switch_address}:{PORT + index}"
        return f"{self.lab.hosts[name].address}:{PORT}"

    def set_link(self, link: Link) -> dict | None:
        """Shape every link for `link`; with the relay, returns its last period's report."""
        self.lab.shape(link.gbit, link.rtt_ms if self.delay == "netem" else None)
        if self.delay == "relay":
            return self.relay_period(link.rtt_ms / 2e3)
        return None

    def relay_period(self, one_way_secs: float) -> dict:
        self.relay.stdin.write(f"delay {one_way_secs!r}\n")
        self.relay.stdin.flush()
        return self.relay_lines.next(time.monotonic() + 10, self.relay, "the latency relay")

    # -- the tasks

    def start_cell(self, net: str, ps: int) -> Cell:
        tag = f"{net}-ps{ps}"
        cluster = {"ps": [self.address(f"ps{i}") for i in range(ps)],
                   "worker": [self.address(f"w{j}") for j in range(self.args.pushers)]}
        cluster_file = self.out / "logs" / f"cluster-{tag}.json"
        cluster_file.write_text(json.dumps(cluster, indent=1) + "\n")
        ps_tasks = [self.started.start(self.lab.exec_command(f"ps{i}", [
            sys.executable, "-m", "a3c_graph.worker", "--job", "ps", "--task", str(i),
            "--cluster", str(cluster_file), "--allow-remote"]),
            self.out / "logs" / f"{tag}-ps{i}.log") for i in range(ps)]
        counters = [self.out / "logs" / f"{tag}-pusher{j}.count"
                    for j in range(self.args.pushers)]
        pushers = [self.started.start(self.lab.exec_command(f"w{j}", [
            sys.executable, "-m", "benchmarks.ps_capacity.pusher", "--cluster", str(cluster_file),
            "--task", str(j), "--net", net, "--counter", str(counters[j])]),
            self.out / "logs" / f"{tag}-pusher{j}.log", pipes=True)
            for j in range(self.args.pushers)]
        lines = [Lines(p.stdout, p.log) for p in pushers]
        cell = Cell(net, ps, pushers, counters, ps_tasks, ready={})
        deadline = time.monotonic() + START_TIMEOUT_SECS
        for j, (pusher, reader) in enumerate(zip(pushers, lines)):
            ready = reader.next(deadline, pusher, f"pusher {j} of {tag}")
            cell.ready = cell.ready or ready
        for i, task in enumerate(ps_tasks):
            if task.poll() is not None:
                raise BenchmarkError(f"ps task {i} of {tag} exited with status "
                                     f"{task.returncode}; see {task.log.name}")
        return cell

    def snapshot(self, cell: Cell) -> Snapshot:
        began = time.time()
        updates = [read_counter(path) for path in cell.counters]
        ps_cpu = [cpu_seconds(p.pid) for p in cell.ps_tasks]
        return Snapshot(
            time=(began + time.time()) / 2, updates=updates,
            ps_links={f"ps{i}": self.lab.counters(f"ps{i}") for i in range(cell.ps)},
            cpu={"ps": sum(ps_cpu),
                 "pushers": sum(cpu_seconds(p.pid) for p in cell.pushers),
                 "relay": cpu_seconds(self.relay.pid) if self.relay else 0.0},
            ps_cpu=ps_cpu, machine_busy=machine_busy_seconds())

    def measure(self, cell: Cell, link: Link) -> dict:
        self.set_link(link)
        time.sleep(self.args.settle)
        before = self.snapshot(cell)
        time.sleep(self.args.seconds)
        after = self.snapshot(cell)
        for j, pusher in enumerate(cell.pushers):
            if pusher.poll() is not None:
                raise BenchmarkError(f"pusher {j} of {cell.net}-ps{cell.ps} exited with status "
                                     f"{pusher.returncode}; see {pusher.log.name}")
        relay = self.relay_period(link.rtt_ms / 2e3) if self.relay else None
        return make_row(cell.net, cell.ps, link, before, after, cell.ready, self.delay, relay)

    def stop_cell(self, cell: Cell) -> list[str]:
        return self.started.stop([*cell.pushers, *cell.ps_tasks])

    def close(self) -> dict:
        """Stop everything, delete the lab; what could not be cleaned up."""
        leftovers = self.started.stop()
        for log in self.started.logs:
            log.close()
        errors = self.lab.destroy()
        return {"signalled": leftovers, "processes": self.started.left_behind(),
                "network_errors": errors}


class _Held:
    """signals_held's state: how deep, and a signal that came meanwhile."""

    depth = 0
    pending: int | None = None


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM (handled by on_signal) wait until the block is done, so what it
    creates gets recorded. Not a signal mask: the processes started inside would inherit it."""
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        if not _Held.depth and _Held.pending is not None:
            signum, _Held.pending = _Held.pending, None
            raise Interrupted(signum)


def on_signal(signum: int, _frame: object) -> None:
    """SIGINT's and SIGTERM's handler: Interrupted, or after the block signals_held holds."""
    if _Held.depth:
        _Held.pending = signum
        return
    raise Interrupted(signum)

"""How many ps tasks a cluster needs: what ps tasks absorb, measured on simulated hosts.

    sudo python -m benchmarks.ps_capacity [--nets cartpole,pong] [--ps 1,2,4]
        [--rtt-ms 0,1,10] [--gbit 10,1] [--grid sweep|full] [--pushers 4] [--seconds 8]
        [--settle 2] [--delay auto|netem|relay] [--out DIR]

For each network (the CartPole MLP, the Pong CNN) and each number of ps tasks P, it starts
P ps tasks (`python -m a3c_graph.worker --job ps`, the user's own command) and W pushers
(benchmarks/ps_capacity/pusher.py: the learner's real update, the gradients out and the updated
globals back, packed by distributed.transfer; no env, no forward or backward pass), each task
on a host of its own, and measures the cluster under each link condition. Per row:

  updates/s        all pushers' updates in the window, per second (each pusher keeps its
                   count in a file the harness reads with the other counters)
  step ms          a pusher's time per update (it does nothing else), averaged
  KB/update        into and out of the ps hosts, summed over their links: the kernel's
                   counters of each ps host's veth (/sys/class/net/DEV/statistics, read with
                   `ip -s`), so TCP/IP and HTTP/2 framing and ACKs are in; traffic between
                   two ps tasks counts on both links
  RPCs/update      from the partition graphs TF runs an update as (ps_pusher.count_rpcs):
                   one RunGraph per ps task, and one RecvTensor per tensor or control edge
                   that crosses tasks, by where its data goes: to a ps, from a ps, between
                   ps tasks. Counted, not sampled: it is the same on every machine.
  ps CPU ms/update the ps processes' CPU time in the window (psutil, /proc/PID/stat), all ps
                   tasks together, per update; results.json also has the busiest task's

What carries over to other machines is per update: CPU of a ps task and bytes on its link.
updates/s do not. On one machine every task, the pushers and the relay share its cores (2
here): whenever "cores busy" is near the machine's count, updates/s are what the machine
could do, not what the ps could absorb. So the rule of thumb is built on the busiest ps
task's CPU and link bytes per update (ps_loads, ps_tasks_needed): P ps tasks absorb
min(h / cpu, h * G / (8 * bytes)) updates/s with each ps core and link at most h = 1/2 busy
(queueing: a step waits longer the busier the ps). With W workers doing U updates/s, use
the fewest P measured for which W * U is at most that.

The hosts are network namespaces on a switch (netlab.py), every link shaped to
G Gbit/s each way with tbf. The round trip: netem where the kernel has it, else a userspace
relay in the switch (latency_relay.py) that holds every chunk RTT/2 in each
direction: --delay auto (the default) asks the kernel once and picks netem if it can; the
choice is in the results. Netem delays packets, so TCP sees the round trip too. The relay
delays what gRPC sends, HTTP/2's flow control included, but TCP sees a near peer on each
side (no congestion window or bandwidth-delay effects), it adds about 0.2 ms of its own to
a round trip and takes CPU from the same two cores (reported per update). Neither models
loss, jitter, a real NIC's interrupts, or a switch under other traffic. With the relay the
0 ms rows go through it too, so every row of a run has the same path.

The grid (--grid sweep, the default) is a latency sweep at the largest --gbit and a
bandwidth sweep at the smallest --rtt-ms: (0, 10), (1, 10), (10, 10) and (0, 1) for the
defaults; --grid full is every pair. Processes start once per (network, P) and every link
condition is measured on the same processes (tc changes the links, the relay its delay),
after --settle seconds, for --seconds.

Needs root (network namespaces, tc) on Linux with iproute2. Bad flags, or not root: one line
on stderr, exit status 2. Writes <out>/results.json, results.md and ps_capacity.png
(default out: benchmarks/results/ps-capacity-<YYYYmmdd-HHMMSS>), each task's log under
<out>/logs. On every exit, SIGINT and SIGTERM included, every process it started is stopped
by its pid and every namespace deleted (their links go with them); results.json's "cleanup"
lists anything that could not be.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from a3c_graph.cli import (
    EXIT_CRASH,
    EXIT_USAGE,
    SIGNAL_EXIT,
    OneLineParser,
    UsageError,
    fail,
)
from benchmarks.ps_capacity.netlab import Lab, NetworkError
from benchmarks.ps_capacity.pusher import NET_ENVS, read_counter
from benchmarks.variants import runtime

PROG = "benchmarks.ps_capacity"
REPO = Path(__file__).resolve().parents[2]
PORT = 2300  # every task's port (relay: PORT + host index, all on the switch's address)
START_TIMEOUT_SECS = 300.0  # up to every pusher's "ready", TF's start-up on a busy machine
HEADROOM = 0.5  # the share of a ps core, and of a link, the rule of thumb plans to use
DELAYS = ("auto", "netem", "relay")


class BenchmarkError(Exception):
    """A task failed or did not answer: one line (and the log to read), exit status 1."""


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Link:
    rtt_ms: float
    gbit: float


# --------------------------------------------------------------------------- command line

def _numbers(kind: Callable[[str], Any], flag: str, text: str, low: float,
             low_ok: bool = True) -> list:
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated numbers, got {text!r}") from None
    bad = [v for v in values if not math.isfinite(v) or v < low or (v == low and not low_ok)]
    if not values or bad:
        bound = f"at least {low:g}" if low_ok else f"above {low:g}"
        raise UsageError(f"{flag} takes comma-separated numbers {bound}, got {text!r}")
    return sorted(set(values))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                           allow_abbrev=False)
    parser.add_argument("--nets", default="cartpole,pong",
                        help=f"Networks, comma-separated: {', '.join(NET_ENVS)} "
                             "(default: both).")
    parser.add_argument("--ps", default="1,2,4", help="Numbers of ps tasks (default: 1,2,4).")
    parser.add_argument("--rtt-ms", default="0,1,10",
                        help="Round trips of the links, ms (default: 0,1,10).")
    parser.add_argument("--gbit", default="10,1",
                        help="Bandwidths of the links, Gbit/s each way (default: 10,1).")
    parser.add_argument("--grid", choices=("sweep", "full"), default="sweep",
                        help="sweep: every RTT at the largest bandwidth, every bandwidth at "
                             "the smallest RTT; full: every pair (default: sweep).")
    parser.add_argument("--pushers", type=int, default=4,
                        help="Pushers (worker tasks), each on a host of its own (default: 4).")
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="Seconds measured per link condition (default: 8).")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="Seconds after a link changes before measuring (default: 2).")
    parser.add_argument("--delay", choices=DELAYS, default="auto",
                        help="How the round trip is made: netem, a userspace relay, or auto: "
                             "netem where the kernel has it (default: auto).")
    parser.add_argument("--out", default=None,
                        help="Results directory (default: "
                             "benchmarks/results/ps-capacity-<YYYYmmdd-HHMMSS>).")
    try:
        args = parser.parse_args(argv)
        _check_args(parser, args)
    except UsageError as error:  # bad input: one line, exit status 2
        sys.exit(fail(PROG, error))
    return args


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    try:
        nets = [n.strip() for n in args.nets.split(",") if n.strip()]
        unknown = [n for n in nets if n not in NET_ENVS]
        if not nets or unknown:
            raise UsageError(f"--nets takes {', '.join(NET_ENVS)}, got {args.nets!r}")
        args.nets = list(dict.fromkeys(nets))
        args.ps = _numbers(int, "--ps", args.ps, 1)
        if args.ps[-1] > 16:
            raise UsageError(f"--ps goes up to 16 ps tasks, got {args.ps[-1]}")
        args.rtt_ms = _numbers(float, "--rtt-ms", args.rtt_ms, 0)
        args.gbit = _numbers(float, "--gbit", args.gbit, 0, low_ok=False)
        if not 1 <= args.pushers <= 32:
            raise UsageError(f"--pushers takes 1 to 32, got {args.pushers}")
        for flag, value in (("--seconds", args.seconds), ("--settle", args.settle)):
            if not (math.isfinite(value) and value > 0):
                raise UsageError(f"{flag} takes a positive number of seconds, got {value}")
    except UsageError as error:
        parser.error(str(error))  # with the parser's "(see ... --help)"


def link_conditions(rtts: Sequence[float], gbits: Sequence[float], grid: str) -> list[Link]:
    """The links to measure, in order: sweep: every RTT at the largest bandwidth, then every
    other bandwidth at the smallest RTT; full: every (RTT, bandwidth) pair."""
    if grid == "full":
        return [Link(r, g) for g in sorted(gbits, reverse=True) for r in sorted(rtts)]
    top, low = max(gbits), min(rtts)
    return ([Link(r, top) for r in sorted(rtts)]
            + [Link(low, g) for g in sorted(gbits, reverse=True) if g != top])


def estimate_seconds(args: argparse.Namespace, links: int) -> float:
    """A rough duration of the run on an idle two-core machine: start-up per (network, P)
    grows with the processes that import TF at once."""
    total = 10.0
    for _ in args.nets:
        for ps in args.ps:
            total += 6.0 + 2.5 * (ps + args.pushers)
            total += links * (args.settle + args.seconds + 0.5)
    return total


def check_machine() -> None:
    """UsageError unless this can build its hosts: Linux, root, ip and tc."""
    if not sys.platform.startswith("linux"):
        raise UsageError(f"needs Linux network namespaces (this is {sys.platform})")
    if os.geteuid() != 0:
        raise UsageError("needs root: it makes network namespaces and shapes their links "
                         f"with tc (running as uid {os.geteuid()}); run it with sudo")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2")):
        if shutil.which(tool) is None:
            raise UsageError(f"needs the `{tool}` command ({package}), which is not installed")


# --------------------------------------------------------------------------- measuring

@dataclass
class Snapshot:
    """What the window's two ends are compared by."""

    time: float
    updates: list[int]  # per pusher, made so far
    ps_links: dict[str, tuple[int, int]]  # ps host -> (bytes received, bytes sent)
    cpu: dict[str, float]  # "ps", "pushers", "relay" -> CPU seconds of those processes
    ps_cpu: list[float]  # per ps task
    machine_busy: float  # CPU seconds all cores spent busy, since boot


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (0 once it is gone)."""
    import psutil

    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def machine_busy_seconds() -> float:
    import psutil

    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def make_row(net: str, ps: int, link: Link, before: Snapshot, after: Snapshot, ready: dict,
             delay: str, relay: dict | None) -> dict:
    """One row of the table: what changed between the window's two snapshots."""
    seconds = after.time - before.time
    made = [b - a for a, b in zip(before.updates, after.updates)]
    updates = sum(made)
    to_ps = sum(after.ps_links[h][0] - before.ps_links[h][0] for h in before.ps_links)
    from_ps = sum(after.ps_links[h][1] - before.ps_links[h][1] for h in before.ps_links)
    busiest_link = max(after.ps_links[h][i] - before.ps_links[h][i]
                       for h in before.ps_links for i in (0, 1))

    def per_update(value: float, scale: float = 1.0) -> float | None:
        return value * scale / updates if updates else None

    ps_cpu = [b - a for a, b in zip(before.ps_cpu, after.ps_cpu)]
    rpcs = ready["rpcs"]
    # A pusher does nothing but updates, one after another: its window over its count.
    steps = [1e3 * seconds / n for n in made if n]
    return {
        "net": net, "parameters": ready["parameters"], "ps": ps, "rtt_ms": link.rtt_ms,
        "gbit": link.gbit, "pushers": len(made), "delay": delay, "seconds": round(seconds, 3),
        "updates": updates, "updates_per_s": updates / seconds,
        "step_ms": statistics.fmean(steps) if steps else None,
        "bytes_to_ps_per_update": per_update(to_ps),
        "bytes_from_ps_per_update": per_update(from_ps),
        "tensor_bytes": ready["tensor_bytes"],
        "rpcs_per_update": sum(rpcs.values()), "rpcs": rpcs,
        "ps_cpu_ms_per_update": per_update(sum(ps_cpu), 1e3),
        "busiest_ps_core": max(ps_cpu) / seconds,
        "busiest_ps_cpu_ms_per_update": per_update(max(ps_cpu), 1e3),
        "busiest_link_bytes_per_update": per_update(busiest_link),
        "pusher_cpu_ms_per_update": per_update(after.cpu["pushers"] - before.cpu["pushers"],
                                               1e3),
        "relay_cpu_ms_per_update": per_update(after.cpu["relay"] - before.cpu["relay"], 1e3),
        "cores_busy": (after.machine_busy - before.machine_busy) / seconds,
        "busiest_link_use": busiest_link * 8 / seconds / (link.gbit * 1e9),
        "relay": relay,
    }


# --------------------------------------------------------------------------- rule of thumb

@dataclass(frozen=True)
class PsLoad:
    """What one update costs the busiest of P ps tasks: the figures that carry over to
    other machines (CPU seconds of its process, bytes on its link in the busier direction)."""

    ps: int
    cpu_seconds: float
    link_bytes: float

    def updates_per_s(self, gbit: float, headroom: float = HEADROOM) -> float:
        """The updates/s P ps tasks absorb at `headroom` of a core each and of links of
        `gbit` Gbit/s."""
        return min(headroom / self.cpu_seconds, headroom * gbit * 1e9 / (8 * self.link_bytes))


def ps_loads(rows: Sequence[dict], net: str) -> list[PsLoad]:
    """The PsLoad of each ps count measured for `net`, from its rows at the smallest RTT and
    the largest bandwidth (where the link is least in the way), fewest ps tasks first."""
    mine = [r for r in rows if r["net"] == net and r["updates"]]
    if not mine:
        return []
    rtt = min(r["rtt_ms"] for r in mine)
    gbit = max(r["gbit"] for r in mine if r["rtt_ms"] == rtt)
    return [PsLoad(r["ps"], r["busiest_ps_cpu_ms_per_update"] / 1e3,
                   r["busiest_link_bytes_per_update"])
            for r in sorted(mine, key=lambda r: r["ps"])
            if r["rtt_ms"] == rtt and r["gbit"] == gbit]


def ps_tasks_needed(workers: int, updates_per_s: float, gbit: float,
                    loads: Sequence[PsLoad], headroom: float = HEADROOM) -> int | None:
    """The fewest ps tasks, of those measured (`loads`), that absorb `workers` x
    `updates_per_s` updates/s on links of `gbit` Gbit/s with each ps task's core and link
    at most `headroom` busy; None when none of them does. Every update visits every ps
    task, so more ps tasks split the bytes and the optimizer's work but not the cost of
    the RPCs: the measured loads, not a model, say what P buys."""
    rate = workers * updates_per_s
    for load in sorted(loads, key=lambda load: load.ps):
        if rate <= load.updates_per_s(gbit, headroom):
            return load.ps
    return None


# --------------------------------------------------------------------------- processes

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
        (a pusher's cue to leave), SIGTERM to those without one (the ps tasks), SIGKILL to
        whatever is left after a few seconds. Returns "name(pid)" of the processes that
        needed more than that."""
        chosen = list(self.processes if processes is None else processes)
        family = []
        for process in chosen:
            family += runtime.process_tree(process.pid)
            if process.stdin is not None:
                try:
                    process.stdin.close()
                except OSError:
                    pass
            elif process.poll() is None:
                process.terminate()
        signalled = runtime.end_processes(family, timeout=5.0)
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
    """SIGINT and SIGTERM (handled by _on_signal) wait until the block is done, so what it
    creates gets recorded. Not a signal mask: the processes started inside would inherit it."""
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        if not _Held.depth and _Held.pending is not None:
            signum, _Held.pending = _Held.pending, None
            raise Interrupted(signum)


# --------------------------------------------------------------------------- results

def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


TABLE_HEADER = ("| net | ps | RTT ms | Gbit/s | updates/s | step ms | KB to ps /update "
                "| KB from ps /update | RPCs /update (RunGraph + to + from + ps-ps) "
                "| ps CPU ms /update | busiest ps, cores | cores busy |")


def table_row(r: dict) -> str:
    rpcs = r["rpcs"]
    return (f"| {r['net']} | {r['ps']} | {r['rtt_ms']:g} | {r['gbit']:g} "
            f"| {_fmt(r['updates_per_s'])} | {_fmt(r['step_ms'], 1)} "
            f"| {_fmt((r['bytes_to_ps_per_update'] or 0) / 1e3, 1)} "
            f"| {_fmt((r['bytes_from_ps_per_update'] or 0) / 1e3, 1)} "
            f"| {r['rpcs_per_update']} ({rpcs['run_graph']} + {rpcs['to_ps']} + "
            f"{rpcs['from_ps']} + {rpcs['ps_to_ps']}) "
            f"| {_fmt(r['ps_cpu_ms_per_update'], 2)} | {_fmt(r['busiest_ps_core'], 2)} "
            f"| {_fmt(r['cores_busy'], 2)} |")


def rule_text(rows: Sequence[dict], nets: Sequence[str]) -> list[str]:
    lines = []
    for net in nets:
        loads = ps_loads(rows, net)
        for load in loads:
            lines.append(
                f"- {net}, {load.ps} ps: the busiest ps task spends "
                f"{1e3 * load.cpu_seconds:.2f} CPU ms and its link carries "
                f"{load.link_bytes / 1e3:.1f} KB per update; at half a core and half a link "
                f"each, {load.ps} ps task(s) absorb {load.updates_per_s(1):,.0f} updates/s "
                f"on 1 Gbit/s links, {load.updates_per_s(10):,.0f} on 10 Gbit/s.")
    return lines


def write_results(out: Path, settings: dict, machine: dict, rows: Sequence[dict],
                  cleanup: dict | None, error: str | None) -> str:
    data = {"settings": settings, "machine": machine, "rows": list(rows), "cleanup": cleanup,
            "error": error,
            "ps_loads": {net: [asdict(load) for load in ps_loads(rows, net)]
                         for net in settings["nets"]}}
    runtime.write_atomic(out / "results.json", json.dumps(data, indent=2) + "\n")
    lines = [f"# ps capacity ({settings['started']})", "",
             f"{settings['pushers']} pushers; latency by {settings['delay']}; "
             f"{settings['seconds']:g} s per row after {settings['settle']:g} s to settle; "
             f"{machine['cpu_count']} CPUs, load {machine['load_average_at_start']} at start.",
             "", TABLE_HEADER, "|---|" + "---:|" * 11]
    lines += [table_row(r) for r in rows]
    held = [r["relay"] for r in rows if r.get("relay") and r["relay"]["chunks"]]
    if held:
        lines += ["", "The relay wrote chunks later than due by "
                  f"{statistics.fmean(h['late_ms_mean'] for h in held):.2f} ms on average "
                  f"(at worst {max(h['late_ms_max'] for h in held):.1f} ms); it took "
                  f"{statistics.fmean(r['relay_cpu_ms_per_update'] or 0 for r in rows):.2f} "
                  "CPU ms per update on average."]
    lines += ["", "What P ps tasks absorb (from the rows at the smallest RTT and largest "
              "bandwidth): with W workers doing U updates/s, use the fewest P for which W x U "
              "is at most the figure for your links.", "", *rule_text(rows, settings["nets"])]
    if error:
        lines += ["", f"Stopped early: {error}"]
    markdown = "\n".join(lines) + "\n"
    runtime.write_atomic(out / "results.md", markdown)
    return markdown


def plot_results(out: Path, rows: Sequence[dict], nets: Sequence[str]) -> None:
    """Per network: updates/s and ps CPU ms per update against the number of ps tasks, one
    line per link condition."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    nets = [n for n in nets if any(r["net"] == n for r in rows)]
    if not nets:
        return
    figure, axes = plt.subplots(2, len(nets), figsize=(5.5 * len(nets), 7), squeeze=False)
    for column, net in enumerate(nets):
        mine = [r for r in rows if r["net"] == net]
        for link in dict.fromkeys((r["rtt_ms"], r["gbit"]) for r in mine):
            points = sorted((r["ps"], r) for r in mine if (r["rtt_ms"], r["gbit"]) == link)
            label = f"{link[0]:g} ms, {link[1]:g} Gbit/s"
            axes[0][column].plot([p for p, _ in points],
                                 [r["updates_per_s"] for _, r in points], "o-", label=label)
            axes[1][column].plot([p for p, _ in points],
                                 [r["ps_cpu_ms_per_update"] or math.nan for _, r in points],
                                 "o-", label=label)
        axes[0][column].set_title(f"{net} ({mine[0]['parameters']:,} parameters)")
        axes[0][column].set_ylabel("updates/s (all pushers)")
        axes[1][column].set_ylabel("ps CPU ms per update (all ps tasks)")
        for ax in axes[:, column]:
            ax.set_xlabel("ps tasks")
            ax.set_xticks(sorted({r["ps"] for r in mine}))
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
        axes[0][column].legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(out / "ps_capacity.png", dpi=110)
    plt.close(figure)


# --------------------------------------------------------------------------- main

def _on_signal(signum: int, _frame: object) -> None:
    if _Held.depth:
        _Held.pending = signum
        return
    raise Interrupted(signum)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        check_machine()
    except UsageError as error:
        return fail(PROG, error)
    runtime.enter_private_network(PROG, allow_remote=False)
    from benchmarks.harness.compare import machine_info

    links = link_conditions(args.rtt_ms, args.gbit, args.grid)
    out = Path(args.out or REPO / "benchmarks" / "results"
               / time.strftime("ps-capacity-%Y%m%d-%H%M%S"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    settings = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "nets": args.nets,
                "ps": args.ps, "links": [asdict(link) for link in links],
                "pushers": args.pushers, "seconds": args.seconds, "settle": args.settle,
                "delay": args.delay}
    machine = machine_info()
    print(f"{PROG}: {len(args.nets) * len(args.ps)} (network, ps) cells x {len(links)} links; "
          f"about {estimate_seconds(args, len(links)) / 60:.0f} min on an idle machine",
          flush=True)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_signal)
    harness = Harness(args, out)
    rows: list[dict] = []
    error: str | None = None
    code = 0
    try:
        with signals_held():  # a namespace that exists is one the lab knows of
            harness.lab.build()
        harness.choose_delay()
        settings["delay"] = harness.delay
        for net in args.nets:
            for ps in args.ps:
                print(f"{net}, {ps} ps: starting {ps} ps task(s) and {args.pushers} pushers",
                      flush=True)
                cell = harness.start_cell(net, ps)
                for link in links:
                    row = harness.measure(cell, link)
                    rows.append(row)
                    print(table_row(row), flush=True)
                    write_results(out, settings, machine, rows, None, None)
                harness.stop_cell(cell)
    except Interrupted as stop:
        error = f"interrupted by {stop}"
        code = SIGNAL_EXIT[stop.signum]
    except UsageError as failure:
        error, code = str(failure), EXIT_USAGE
    except (BenchmarkError, NetworkError) as failure:
        error, code = str(failure), EXIT_CRASH
    except OSError as failure:  # e.g. a pipe to a task that died
        error, code = f"{type(failure).__name__}: {failure}", EXIT_CRASH
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # cleanup runs to its end
            signal.signal(signum, signal.SIG_IGN)
        cleanup = harness.close()
    if cleanup["processes"] or cleanup["network_errors"]:
        code = code or EXIT_CRASH
        print(f"{PROG}: error: could not clean up: {cleanup}", file=sys.stderr)
    markdown = write_results(out, settings, machine, rows, cleanup, error)
    if rows:
        plot_results(out, rows, args.nets)
        print(markdown)
    if error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
    print(f"results in {out}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

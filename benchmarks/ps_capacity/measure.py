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
  RPCs/update      from the partition graphs TF runs an update as (pusher.count_rpcs):
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
import math
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from a3c_graph.system.cli import (
    EXIT_CRASH,
    EXIT_USAGE,
    SIGNAL_EXIT,
    OneLineParser,
    UsageError,
    fail,
)
from benchmarks import common
from benchmarks.harness.machine import machine_info
from benchmarks.ps_capacity.netlab import NetworkError
from benchmarks.ps_capacity.pusher import NET_ENVS
from benchmarks.ps_capacity.report import Link, plot_results, table_row, write_results
from benchmarks.ps_capacity.tasks import (
    REPO,
    BenchmarkError,
    Harness,
    Interrupted,
    on_signal,
    signals_held,
)

PROG = "benchmarks.ps_capacity"
DELAYS = ("auto", "netem", "relay")


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


# --------------------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        check_machine()
    except UsageError as error:
        return fail(PROG, error)
    common.enter_private_network(PROG, allow_remote=False)
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
        signal.signal(signum, on_signal)
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

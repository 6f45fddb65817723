"""What every benchmark command does on a shared machine: run in a private network, and leave
no process behind.

Every command here (the harness, the suites, the TF2 variants, the probes, ps_capacity)
imports this module, so it sits at the top of the package and imports nothing of it; the
TF2 variants' own command line and run statistics are in benchmarks.variants.tf2_run. It
imports no TensorFlow: the harness must stay light while it samples memory, and a variant's
main process must not import TF before it chooses its device. Stopping processes is
a3c_graph.system.processes.stop_in_order, the launcher's own; end_leftovers only adds the
grace a process gets to end by itself, and the names a benchmark reports.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from a3c_graph.system import netns
from a3c_graph.system.cli import fail
from a3c_graph.system.processes import descendants, is_gone, stop_in_order, wait_until

# After SIGTERM, and again after SIGKILL, how long a leftover gets to be gone.
LEFTOVER_SIGNAL_SECS = 3.0


# --------------------------------------------------------------------------- network

def add_allow_remote_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-remote", action="store_true",
                        help="Run on the host network instead of a private network (a network "
                             "namespace with only loopback). Ray's servers, like TF's, listen "
                             "on every interface and authenticate no one: use only on a "
                             "trusted network.")


def enter_private_network(prog: str, allow_remote: bool) -> None:
    """Move this benchmark, and so every process it starts, into a private network: a
    network namespace with only loopback, as the launcher's tasks (a3c_graph.system.netns).

    On the host network Ray 2.60's gcs_server, raylet, actors and driver listen on every
    interface (ss shows *:PORT), and ray.init turns a loopback node address
    (_node_ip_address) into the machine's own (services.resolve_ip_for_localhost). So the
    namespace, where every interface is loopback, is what keeps a Ray cluster, which
    authenticates no one, private; the variants, the harness and the launcher's tasks all
    run in one.

    Call it right after parsing the flags, before anything is written or started: it may
    execute this program again (same pid and command line). With allow_remote, a warning
    instead. When the kernel refuses, one line on stderr and exit status 2.
    """
    if allow_remote:
        print(f"{prog}: warning: running on the host network (--allow-remote), where Ray's "
              "and TF's servers listen on every interface and authenticate no one: it must "
              "only be reachable on a trusted network", file=sys.stderr, flush=True)
        return
    try:
        netns.enter_or_reexecute(sys.orig_argv[1:])
    except netns.NamespaceError as error:
        sys.exit(fail(prog, f"cannot run in a private network: {error}; --allow-remote runs "
                            "on the host network instead (trusted networks only)"))
    print(f"{prog}: running in a private network (a network namespace with only loopback: "
          "no other machine can reach its processes)", flush=True)


# --------------------------------------------------------------------------- processes

def process_tree(root_pid: int) -> list:
    """psutil.Process of root_pid and all its descendants (empty once root_pid is gone)."""
    import psutil

    try:
        root = psutil.Process(root_pid)
    except psutil.Error:
        return []
    return [root, *descendants(root)]


def end_leftovers(procs: Iterable, timeout: float) -> list[str]:
    """Give these psutil.Processes `timeout` seconds to end by themselves, then stop what
    is left (stop_in_order: SIGTERM, LEFTOVER_SIGNAL_SECS, SIGKILL, their children too).
    Returns "name(pid)" of each process that had to be signalled, sorted."""
    import psutil

    procs = list(procs)
    wait_until(lambda: all(is_gone(p) for p in procs), timeout)
    alive, signalled = [], set()
    for proc in procs:
        if is_gone(proc):
            continue
        try:
            signalled.add(f"{proc.name()}({proc.pid})")  # while it is alive to tell
        except psutil.Error:
            continue  # ended meanwhile
        alive.append(proc)
    if alive:
        killed = stop_in_order([alive], LEFTOVER_SIGNAL_SECS)
        wait_until(lambda: all(is_gone(p) for p in killed), LEFTOVER_SIGNAL_SECS)
    return sorted(signalled)

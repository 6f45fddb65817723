"""A private network for the tasks of a local cluster: a network namespace with only loopback.

TF 2.21's gRPC server listens on 0.0.0.0:PORT and [::]:PORT whatever host the ClusterSpec
names (libtensorflow hard-codes the wildcard address), and that server is unauthenticated gRPC
that runs any graph it is sent. So a cluster "on 127.0.0.1" is in fact reachable from every
network the machine is on. TF cannot be told to bind loopback only; what we can choose is the
network its process lives in. In a network namespace whose only interface is `lo`, "every
interface" is loopback: no other machine, and no process outside the namespace, can reach the
port. That namespace is what makes "the cluster is on loopback" true.

Stdlib only. Python 3.11 has no os.unshare (3.12 does), so unshare(2) is called through ctypes.

A program enters with enter_or_reexecute(), which covers the case where only a fresh,
single-threaded interpreter can enter: `python -m a3c_graph.system.netns COMMAND...` enters and
execs COMMAND (the program again), keeping the pid. The launcher and every benchmark entry
point go through it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import sys
from collections.abc import Sequence
from typing import NoReturn

# <sched.h> and <linux/sockios.h>, <net/if.h>.
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
# Set by main() for the program it execs when the kernel refused the private network: the
# reason, which that program's enter_or_reexecute() raises, so it says so in its own words.
REFUSED_ENV = "A3C_GRAPH_PRIVATE_NETWORK_REFUSED"
# struct ifreq: the interface name, then a 24-byte union whose first member is ifr_flags.
_IFREQ = struct.Struct("16sH22x")


class NamespaceError(Exception):
    """The kernel would not give this process a private network; the message is one sentence."""


class NeedsSingleThread(NamespaceError):
    """Only a user namespace could own the network namespace here, and the kernel makes one
    only for a single-threaded process: start the program again and enter before any thread
    starts (numpy's BLAS, for one, starts threads when it is imported)."""


def enter_private_network() -> None:
    """Move this process into a new network namespace whose only interface, lo, is up.

    With CAP_SYS_ADMIN (root) that is a network namespace alone. Without it, a user namespace
    is made along with it, in which this process keeps its own uid and gid (files it writes
    stay the user's) and holds, until it execs, the capabilities that bringing lo up needs.
    Children inherit the namespace. The pid namespace is untouched, so pids, signals and
    /proc mean the same inside and outside. In a process that already has threads (only
    possible the privileged way) the kernel moves the calling thread alone: start the
    children from that thread.

    Raises NeedsSingleThread when only the user-namespace way is open and this process has
    threads, NamespaceError when the kernel refuses.
    """
    failed = _unshare(CLONE_NEWNET)
    if failed == errno.EPERM:  # not privileged: a user namespace of our own can own one
        threads = len(os.listdir("/proc/self/task"))
        if threads > 1:
            raise NeedsSingleThread(
                f"a private network needs a user namespace here, which the kernel makes only "
                f"for a single-threaded process, and this one runs {threads} threads")
        uid, gid = os.geteuid(), os.getegid()
        failed = _unshare(CLONE_NEWUSER | CLONE_NEWNET)
        if not failed:
            _map_own_ids(uid, gid)
    if failed:
        raise NamespaceError(f"the kernel refused to make a private network namespace "
                             f"(unshare: {_why(failed)})")
    try:
        _set_flags("lo", IFF_UP)
    except OSError as error:  # e.g. an LSM that allows the namespace but no capability in it
        raise NamespaceError(f"the kernel made a private network namespace but refused to "
                             f"bring its loopback interface up ({error.strerror})") from None


def enter_or_reexecute(argv: Sequence[str]) -> None:
    """Put this process, and so every process it starts later, in a private network, unless
    it is in one already (is_isolated()).

    When only the user-namespace way is open and this process has threads (NeedsSingleThread),
    it execs `python -m a3c_graph.system.netns python ARGV...` instead: a fresh interpreter enters
    while single-threaded, then execs this program again from the start (same pid both
    times), which comes back here in the private network. ARGV must run this very program:
    its own arguments (sys.orig_argv[1:]), plus whatever it must decide the same way twice.

    Raises NamespaceError when the kernel refuses, here or in the fresh interpreter.
    """
    refused = os.environ.pop(REFUSED_ENV, None)
    if refused is not None:
        raise NamespaceError(refused)
    if is_isolated():
        return
    try:
        enter_private_network()
    except NeedsSingleThread:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "a3c_graph.system.netns", sys.executable,
                                  *argv])


def main(command: Sequence[str]) -> NoReturn:
    """`python -m a3c_graph.system.netns COMMAND...`: exec COMMAND in a private network. When the
    kernel refuses, COMMAND runs all the same with the reason in REFUSED_ENV, for its
    enter_or_reexecute() to raise."""
    if not command:
        sys.exit("usage: python -m a3c_graph.system.netns COMMAND [ARG...]")
    try:
        enter_private_network()
    except NamespaceError as error:
        os.environ[REFUSED_ENV] = str(error)
    os.execv(command[0], list(command))


def is_isolated() -> bool:
    """True when every interface that is up is loopback, as in enter_private_network()'s
    namespace: then a port this process listens on, on any address, is reachable from no
    other machine.

    Asked of the kernel for this process's own namespace (if_nameindex and SIOCGIFFLAGS on
    a socket; /sys/class/net would show the namespace sysfs was mounted in).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                flags = _get_flags(sock, name)
            except OSError:
                continue  # gone since it was listed
            if flags & IFF_UP and not flags & IFF_LOOPBACK:
                return False
    return True


def _unshare(flags: int) -> int:
    """0, or the errno of libc's unshare(flags)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(ctypes.c_int(flags)) == 0:
        return 0
    return ctypes.get_errno()


def _map_own_ids(uid: int, gid: int) -> None:
    """Map our uid and gid to themselves in the new user namespace (the one mapping an
    unprivileged process may write; setgroups must be denied before gid_map)."""
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
                handle.write(text + "\n")
    except OSError as error:
        raise NamespaceError(f"the kernel made a user namespace but refused to map uid {uid} "
                             f"and gid {gid} in it ({error.strerror})") from None


def _why(code: int) -> str:
    reasons = {
        errno.EPERM: "not permitted; unprivileged user namespaces are disabled or blocked "
                     "here, e.g. by sysctl, AppArmor or a container's seccomp profile",
        errno.ENOSPC: "the limit of namespaces is reached, see sysctl "
                      "user.max_user_namespaces and user.max_net_namespaces",
        errno.EINVAL: "this kernel has no network or user namespaces",
    }
    return reasons.get(code, os.strerror(code))


def _get_flags(sock: socket.socket, name: str) -> int:
    request = _IFREQ.pack(name.encode(), 0)
    return _IFREQ.unpack(fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]


def _set_flags(name: str, flags: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        current = _get_flags(sock, name)
        fcntl.ioctl(sock, SIOCSIFFLAGS, _IFREQ.pack(name.encode(), current | flags))


if __name__ == "__main__":
    main(sys.argv[1:])

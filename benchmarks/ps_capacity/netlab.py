"""Simulated hosts on one machine: network namespaces on a switch, their links shaped with tc.

Needs root (CAP_NET_ADMIN) and iproute2's `ip` and `tc`. Each host is a network namespace
with one veth link to a bridge in a "switch" namespace (ps_capacity's hosts, and those of
tests/cluster/test_multihost.py and scripts/slurm/local_cluster.py); every command names its
namespace (`ip -n NS`, `tc -n NS`), so the namespace this process runs in, the host's
interfaces and its routes are never touched. None of the namespaces has a
link to anything but the switch, so the subnet cannot clash with the machine's own and is
fixed. Names carry a random suffix (interfaces too, so a leftover is recognisable wherever it
is): parallel runs never collide.

A link's two directions are shaped at its far ends: the host's side of the veth shapes
what the host sends, the switch's side what it receives. Bandwidth is tbf. Latency is netem
where the kernel has it (a quarter of the round trip on each of the four egresses a
request and its response cross); where it does not, the caller adds latency another way
(latency_relay.py) and the links get tbf alone. has_netem() asks the kernel once,
on a link of this lab.

destroy() deletes the namespaces, and with them every veth and the bridge. A namespace some
process still runs in outlives its name: stop the processes first.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from dataclasses import dataclass, field

PREFIX = "a3cps"
SUBNET = "10.231.0"  # /24; .1 is the switch's own address (on the bridge)
# tbf: tokens for at least 1 ms at the rate (and never less than a 64 KB GSO packet plus
# headers), and a queue of 20 ms at the rate beyond that, as a switch port's buffer.
TBF_BURST_SECS = 1e-3
TBF_MIN_BURST = 128 * 1024
TBF_LATENCY_MS = 20


class NetworkError(Exception):
    """An `ip` or `tc` command failed: its command line and stderr, one line."""


def run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise NetworkError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")
    return result.stdout


def tbf_args(gbit: float) -> list[str]:
    """tc arguments of a tbf qdisc of `gbit` Gbit/s."""
    rate_bytes = gbit * 1e9 / 8
    burst = max(TBF_MIN_BURST, int(rate_bytes * TBF_BURST_SECS))
    return ["tbf", "rate", f"{gbit:g}gbit", "burst", str(burst), "latency", f"{TBF_LATENCY_MS}ms"]


def qdisc_commands(namespace: str, device: str, gbit: float, one_way_ms: float | None
                   ) -> list[list[str]]:
    """The tc commands that shape `device`'s egress: tbf at `gbit`, under a netem delay of
    `one_way_ms` unless that is None. The caller first deletes any root qdisc."""
    tc = ["tc", "-n", namespace, "qdisc", "add", "dev", device]
    if one_way_ms is None:
        return [[*tc, "root", "handle", "1:", *tbf_args(gbit)]]
    return [[*tc, "root", "handle", "1:", "netem", "delay", f"{one_way_ms:g}ms",
             "limit", "100000"],
            [*tc, "parent", "1:1", "handle", "10:", *tbf_args(gbit)]]


@dataclass
class Host:
    name: str
    namespace: str
    device: str  # its end of the veth, in its namespace
    port: str  # the other end, on the switch's bridge
    address: str


@dataclass
class Lab:
    """Hosts named `names`, each in its own namespace, on one switch."""

    names: list[str]
    suffix: str = field(default_factory=lambda: secrets.token_hex(3))
    prefix: str = PREFIX  # of its namespaces' names: who made them, for a leftover
    hosts: dict[str, Host] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)  # every one this lab created

    @property
    def switch(self) -> str:
        return f"{self.prefix}-{self.suffix}-switch"

    @property
    def bridge(self) -> str:
        return f"b-{self.suffix}"

    @property
    def switch_address(self) -> str:
        return f"{SUBNET}.1"

    def namespace_of(self, name: str) -> str:
        """The namespace of host `name` (known from the names alone: a lab rebuilt from its
        names, suffix and prefix reaches the hosts of the one that built them)."""
        return f"{self.prefix}-{self.suffix}-{name}"

    def _add_namespace(self, name: str) -> None:
        run("ip", "netns", "add", name)
        self.namespaces.append(name)
        run("ip", "-n", name, "link", "set", "lo", "up")

    def build(self) -> None:
        self._add_namespace(self.switch)
        run("ip", "-n", self.switch, "link", "add", self.bridge, "type", "bridge")
        run("ip", "-n", self.switch, "addr", "add", f"{self.switch_address}/24", "dev",
            self.bridge)
        run("ip", "-n", self.switch, "link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            host = Host(name=name, namespace=self.namespace_of(name),
                        device=f"e-{self.suffix}", port=f"p-{self.suffix}-{i}",
                        address=f"{SUBNET}.{i + 2}")
            self._add_namespace(host.namespace)
            # Made in the switch, then one end moved: the caller's namespace sees neither.
            run("ip", "-n", self.switch, "link", "add", host.port, "type", "veth", "peer",
                "name", host.device)
            run("ip", "-n", self.switch, "link", "set", host.device, "netns", host.namespace)
            run("ip", "-n", self.switch, "link", "set", host.port, "master", self.bridge)
            run("ip", "-n", self.switch, "link", "set", host.port, "up")
            run("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev",
                host.device)
            run("ip", "-n", host.namespace, "link", "set", host.device, "up")
            self.hosts[name] = host

    def has_netem(self) -> bool:
        """Whether this kernel has netem: tried once on the bridge, then removed."""
        try:
            run("tc", "-n", self.switch, "qdisc", "add", "dev", self.bridge, "root", "netem",
                "delay", "1ms")
        except NetworkError as error:
            if "unknown" in str(error).lower():  # "Specified qdisc kind is unknown."
                return False
            raise
        run("tc", "-n", self.switch, "qdisc", "del", "dev", self.bridge, "root")
        return True

    def shape(self, gbit: float, rtt_ms: float | None) -> None:
        """Every link: `gbit` each way, and with netem a round trip of `rtt_ms` (None: no
        netem; latency is added elsewhere)."""
        one_way = None if rtt_ms is None else rtt_ms / 4
        for host in self.hosts.values():
            for namespace, device in ((host.namespace, host.device), (self.switch, host.port)):
                subprocess.run(["tc", "-n", namespace, "qdisc", "del", "dev", device, "root"],
                               capture_output=True, timeout=30)  # none yet: fine
                for command in qdisc_commands(namespace, device, gbit, one_way):
                    run(*command)

    def set_link(self, name: str, up: bool) -> None:
        """`ip link set <its veth> up|down` inside host `name`, as its admin would: down, the
        host reaches no one and no one reaches it."""
        host = self.hosts[name]
        run("ip", "-n", host.namespace, "link", "set", host.device, "up" if up else "down")

    def counters(self, name: str) -> tuple[int, int]:
        """(bytes received, bytes sent) by host `name` on its link, from the kernel's
        interface counters (the ones /sys/class/net/DEV/statistics shows in its namespace)."""
        host = self.hosts[name]
        data = json.loads(run("ip", "-n", host.namespace, "-s", "-j", "link", "show", "dev",
                              host.device))
        stats = data[0]["stats64"]
        return int(stats["rx"]["bytes"]), int(stats["tx"]["bytes"])

    def exec_command(self, name: str, argv: list[str]) -> list[str]:
        """`argv` run in host `name` (ip netns exec execs it: the pid is argv's own)."""
        namespace = self.switch if name == "switch" else self.namespace_of(name)
        return ["ip", "netns", "exec", namespace, *argv]

    def left_behind(self) -> list[str]:
        """This lab's namespaces that still exist."""
        listed = {line.split()[0] for line in run("ip", "netns", "list").splitlines()
                  if line.strip()}
        return sorted(listed & set(self.namespaces))

    def destroy(self) -> list[str]:
        """Delete every namespace this lab made (their veths and the bridge go with them);
        returns the errors, one line each."""
        errors = []
        for name in reversed(self.namespaces):
            try:
                run("ip", "netns", "del", name)
            except NetworkError as error:
                errors.append(str(error))
        try:
            left = self.left_behind()
        except NetworkError as error:
            return [*errors, str(error)]
        if left:
            errors.append(f"namespaces left behind: {', '.join(left)}")
        return errors

"""Link latency without netem: a TCP relay that holds every chunk it forwards for a fixed
time, in each direction (toxiproxy's "latency" toxic, in the spirit of it).

    python -m benchmarks.ps_capacity.latency_relay LISTEN_HOST:PORT=TARGET_HOST:PORT [...]

benchmarks.ps_capacity emulates a link's round trip with the kernel's netem where the kernel
has it; some kernels are built without it (CONFIG_NET_SCH_NETEM unset: `tc qdisc add ...
netem` says "Specified qdisc kind is unknown"), and no other qdisc there delays packets
(tbf and htb shape rates). There the harness runs this relay in the switch namespace and
gives each task the relay's address for its peers: every connection between two tasks is
two TCP connections, task -> relay -> task, and the relay writes each chunk it reads
`delay` seconds after it read it. A request and its response cross it once each, so a
one-way delay of RTT/2 adds RTT to every request/response exchange, as a link of that
round trip would.

What it models: the time gRPC's messages (and HTTP/2's flow-control updates, which are
end to end) take to arrive, and so the round trips a step waits for. What it does not:
TCP's own view of the round trip (each side's TCP talks to the relay, a few microseconds
away, so congestion windows, ACK clocking and the bandwidth-delay product of a long link
play no part: the relay's queue absorbs them), packet loss, jitter, and the CPU the relay
itself spends, which a real link does not take from the machine. The relay's sleeps wake
late by tens of microseconds (more on a busy machine): it reports how late, per period.

Threads, not asyncio: an asyncio loop waits in epoll with millisecond resolution, which
would turn a 0.5 ms hold into about 1 ms.

stdin takes lines "delay SECONDS" (the one-way hold for chunks read from now on); each is
answered on stdout with one JSON line of the period it ends: chunks and bytes forwarded,
how late the writes were (mean and max ms), connections opened. "ready" on stdout once
every listener is listening. The relay runs until stdin closes or it is signalled.
"""

from __future__ import annotations

import json
import queue
import socket
import sys
import threading
import time
from collections.abc import Sequence

CHUNK = 256 * 1024
# Chunks one direction of one connection may hold: the relay's share of a link's buffer.
# Reading stops when it is full, which pushes back on the sender as a full link would.
QUEUE_CHUNKS = 256


class Relay:
    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.chunks = self.bytes = self.connections = 0
        self.late_sum = self.late_max = 0.0

    def period(self, new_delay: float) -> dict:
        """The statistics of the period that ends now; chunks read from now on wait
        `new_delay` seconds."""
        with self.lock:
            report = {"delay_ms": 1e3 * self.delay, "chunks": self.chunks, "bytes": self.bytes,
                      "connections": self.connections,
                      "late_ms_mean": 1e3 * self.late_sum / self.chunks if self.chunks else 0.0,
                      "late_ms_max": 1e3 * self.late_max}
            self.delay = new_delay
            self._reset()
        return report

    def listen(self, listen: tuple[str, int], target: tuple[str, int]) -> socket.socket:
        server = socket.create_server(listen, reuse_port=False)
        threading.Thread(target=self._accept, args=(server, target), daemon=True).start()
        return server

    def _accept(self, server: socket.socket, target: tuple[str, int]) -> None:
        while True:
            client, _ = server.accept()
            threading.Thread(target=self._connect, args=(client, target), daemon=True).start()

    def _connect(self, client: socket.socket, target: tuple[str, int]) -> None:
        try:
            upstream = socket.create_connection(target, timeout=10)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as gRPC's own
        with self.lock:
            self.connections += 1
        for source, destination in ((client, upstream), (upstream, client)):
            held: queue.Queue = queue.Queue(QUEUE_CHUNKS)
            threading.Thread(target=self._read, args=(source, held), daemon=True).start()
            threading.Thread(target=self._write, args=(held, destination, source),
                             daemon=True).start()

    def _read(self, source: socket.socket, held: queue.Queue) -> None:
        while True:
            try:
                data = source.recv(CHUNK)
            except OSError:
                data = b""
            held.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def _write(self, held: queue.Queue, destination: socket.socket,
               source: socket.socket) -> None:
        while True:
            due, data = held.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            late = max(0.0, time.monotonic() - due)
            if not data:  # the other side closed: pass it on
                _shutdown(destination, socket.SHUT_WR)
                return
            try:
                destination.sendall(data)
            except OSError:
                _shutdown(source, socket.SHUT_RDWR)
                return
            with self.lock:
                self.chunks += 1
                self.bytes += len(data)
                self.late_sum += late
                self.late_max = max(self.late_max, late)


def _shutdown(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


def parse_route(text: str) -> tuple[tuple[str, int], tuple[str, int]]:
    """"10.0.0.1:2300=10.0.0.2:2300" -> (("10.0.0.1", 2300), ("10.0.0.2", 2300))."""
    listen, _, target = text.partition("=")
    if not target:
        raise ValueError(f"{text!r} is not LISTEN_HOST:PORT=TARGET_HOST:PORT")

    def address(part: str) -> tuple[str, int]:
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{part!r} in {text!r} is not HOST:PORT")
        return host, int(port)

    return address(listen), address(target)


def main(argv: Sequence[str]) -> int:
    try:
        routes = [parse_route(arg) for arg in argv]
    except ValueError as error:
        print(f"benchmarks.ps_capacity.latency_relay: error: {error}", file=sys.stderr)
        return 2
    if not routes:
        print("usage: python -m benchmarks.ps_capacity.latency_relay "
              "LISTEN_HOST:PORT=TARGET_HOST:PORT ...", file=sys.stderr)
        return 2
    relay = Relay()
    for listen, target in routes:
        relay.listen(listen, target)
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "delay":
            print(json.dumps(relay.period(float(words[1]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""benchmarks.ps_capacity: the pure parts (grid, flags, rows, the rule of thumb, what one
update sends) and the latency relay on loopback. Its short real runs as root are
tests/e2e/test_ps_capacity_runs.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from conftest import colored_pixels

from benchmarks.ps_capacity import latency_relay, netlab
from benchmarks.ps_capacity import measure as pc
from benchmarks.ps_capacity.pusher import COUNTER, count_rpcs, read_counter
from benchmarks.ps_capacity.report import (
    TABLE_HEADER,
    Link,
    PsLoad,
    Snapshot,
    make_row,
    plot_results,
    ps_loads,
    ps_tasks_needed,
    table_row,
    write_results,
)

COLUMNS = TABLE_HEADER.count("|") - 1


# --------------------------------------------------------------------------- the grid, flags

def test_the_sweep_varies_one_thing_at_a_time_and_full_is_the_product():
    L = Link
    assert pc.link_conditions([0, 1, 10], [10, 1], "sweep") == [
        L(0, 10), L(1, 10), L(10, 10), L(0, 1)]
    full = pc.link_conditions([0, 10], [1, 10], "full")
    assert full == [L(0, 10), L(10, 10), L(0, 1), L(10, 1)]


@pytest.mark.parametrize("flags, message", [
    (["--nets", "mujoco"], "--nets takes cartpole, pong"),
    (["--ps", "0,2"], "--ps takes comma-separated numbers at least 1"),
    (["--ps", "two"], "--ps takes comma-separated numbers"),
    (["--ps", "32"], "--ps goes up to 16"),
    (["--rtt-ms", "-1"], "--rtt-ms takes comma-separated numbers at least 0"),
    (["--gbit", "0"], "--gbit takes comma-separated numbers above 0"),
    (["--seconds", "0"], "--seconds takes a positive number"),
    (["--pushers", "0"], "--pushers takes 1 to 32"),
    (["--delay", "tc"], "argument --delay: invalid choice"),
])
def test_bad_flags_end_in_one_line_and_status_2(flags, message, capsys):
    with pytest.raises(SystemExit) as stop:
        pc.parse_args(flags)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_flags_are_parsed_sorted_and_without_repeats():
    args = pc.parse_args(["--nets", "pong,cartpole,pong", "--ps", "4,1,2,1",
                          "--rtt-ms", "10,0", "--gbit", "1,10"])
    assert (args.nets, args.ps, args.rtt_ms, args.gbit) == (
        ["pong", "cartpole"], [1, 2, 4], [0.0, 10.0], [1.0, 10.0])


def test_without_root_it_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(pc.os, "geteuid", lambda: 1000)
    assert pc.main(["--nets", "cartpole"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs root" in err and "sudo" in err, err


# --------------------------------------------------------------------------- rows

def snapshot(time_, updates, links, ps_cpu, pushers=0.0, relay=0.0, busy=0.0):
    return Snapshot(time=time_, updates=updates, ps_links=links,
                    cpu={"ps": sum(ps_cpu), "pushers": pushers, "relay": relay},
                    ps_cpu=ps_cpu, machine_busy=busy)


READY = {"parameters": 9155, "tensor_bytes": 36620,
         "rpcs": {"to_ps": 2, "from_ps": 2, "ps_to_ps": 22, "run_graph": 2}}


def test_a_row_is_per_update_over_the_window_and_every_ps_link():
    before = snapshot(100.0, [50, 10], {"ps0": (1_000, 5_000), "ps1": (0, 0)}, [1.0, 2.0],
                      pushers=10.0, busy=50.0)
    after = snapshot(104.0, [350, 210], {"ps0": (201_000, 105_000), "ps1": (200_000, 100_000)},
                     [1.2, 2.6], pushers=11.0, busy=58.0)
    row = make_row("cartpole", 2, Link(1, 10), before, after, READY, "relay", None)
    assert row["updates"] == 500 and row["updates_per_s"] == 125 and row["pushers"] == 2
    assert row["bytes_to_ps_per_update"] == 800 and row["bytes_from_ps_per_update"] == 400
    assert row["ps_cpu_ms_per_update"] == pytest.approx(1.6)
    assert row["busiest_ps_core"] == pytest.approx(0.15)
    assert row["pusher_cpu_ms_per_update"] == pytest.approx(2.0)
    assert row["cores_busy"] == pytest.approx(2.0)
    assert row["busiest_link_use"] == pytest.approx(200_000 * 8 / 4 / 10e9)
    # Each pusher's time per update: 4 s over 300 and over 200 updates.
    assert row["step_ms"] == pytest.approx((4000 / 300 + 4000 / 200) / 2)
    assert row["rpcs_per_update"] == 28
    line = table_row(row)
    assert line.count("|") - 1 == COLUMNS
    assert "| 28 (2 + 2 + 2 + 22) |" in line


def test_a_window_without_updates_has_no_per_update_figures():
    same = snapshot(0.0, [7], {"ps0": (0, 0)}, [0.0])
    later = snapshot(2.0, [7], {"ps0": (0, 0)}, [0.0])
    row = make_row("pong", 1, Link(10, 1), same, later, READY, "netem", None)
    assert row["updates_per_s"] == 0 and row["ps_cpu_ms_per_update"] is None
    assert row["step_ms"] is None and table_row(row).count("|") - 1 == COLUMNS


def test_results_md_has_the_table_and_what_each_ps_count_absorbs(tmp_path):
    rows = [fake_row(ps, cpu_ms=1.0 / ps + 0.1) for ps in (1, 2, 4)]
    settings = {"started": "now", "nets": ["pong"], "pushers": 4, "delay": "relay",
                "seconds": 8, "settle": 2}
    machine = {"cpu_count": 2, "load_average_at_start": [0.1, 0.1, 0.1]}
    text = write_results(tmp_path, settings, machine, rows, None, None)
    table = [line for line in text.splitlines() if line.startswith("| pong")]
    assert len(table) == 3 and all(line.count("|") - 1 == COLUMNS for line in table)
    # 1.1 ms and 400 KB per update: 0.5 / 1.1 ms = 455/s; 1 Gbit/s: 0.5e9 / 3.2e6 = 156/s.
    assert ("- pong, 1 ps: the busiest ps task spends 1.10 CPU ms and its link carries "
            "400.0 KB per update; at half a core and half a link each, 1 ps task(s) absorb "
            "156 updates/s on 1 Gbit/s links, 455 on 10 Gbit/s.") in text
    data = json.loads((tmp_path / "results.json").read_text())
    assert [load["ps"] for load in data["ps_loads"]["pong"]] == [1, 2, 4]
    plot_results(tmp_path, rows, ["pong"])
    assert colored_pixels(tmp_path / "ps_capacity.png") > 100  # the ps counts' curves are drawn


# --------------------------------------------------------------------------- rule of thumb

def fake_row(ps, cpu_ms, link_kb=None, rtt=0.0, gbit=10.0, net="pong"):
    link = (link_kb if link_kb is not None else 400.0 / ps) * 1e3
    return {"net": net, "ps": ps, "rtt_ms": rtt, "gbit": gbit, "updates": 1000,
            "updates_per_s": 500.0, "parameters": 100_000, "step_ms": 3.0,
            "ps_cpu_ms_per_update": cpu_ms * ps, "busiest_ps_cpu_ms_per_update": cpu_ms,
            "bytes_to_ps_per_update": link * ps, "bytes_from_ps_per_update": link * ps,
            "busiest_link_bytes_per_update": link, "rpcs_per_update": 3 * ps,
            "rpcs": {"run_graph": ps, "to_ps": ps, "from_ps": ps, "ps_to_ps": 0},
            "busiest_ps_core": 0.5, "cores_busy": 2.0}


def test_the_loads_come_from_the_fastest_link_only():
    rows = [fake_row(ps, cpu_ms=1.0 / ps) for ps in (4, 1, 2)]
    rows += [fake_row(ps, cpu_ms=50.0, rtt=10.0) for ps in (1, 2, 4)]
    rows += [fake_row(ps, cpu_ms=50.0, gbit=1.0) for ps in (1, 2, 4)]
    assert ps_loads(rows, "pong") == [PsLoad(1, 1e-3, 400e3), PsLoad(2, 5e-4, 200e3),
                                      PsLoad(4, 2.5e-4, 100e3)]
    assert ps_loads(rows, "cartpole") == []


LOADS = [PsLoad(1, 1e-3, 400e3), PsLoad(2, 6e-4, 200e3), PsLoad(4, 4e-4, 100e3)]


def test_enough_ps_tasks_for_the_cpu():
    # At half a core: 500/s for 1 ps, 833/s for 2, 1250/s for 4 (10 Gbit/s links: no limit).
    assert ps_tasks_needed(40, 10.0, 10.0, LOADS) == 1
    assert ps_tasks_needed(60, 10.0, 10.0, LOADS) == 2
    assert ps_tasks_needed(100, 10.0, 10.0, LOADS) == 4


def test_enough_ps_tasks_for_the_links():
    # At half of 1 Gbit/s: 156/s with 400 KB per update on one link, 312/s with 200 KB.
    assert ps_tasks_needed(20, 10.0, 1.0, LOADS) == 2
    assert ps_tasks_needed(15, 10.0, 1.0, LOADS) == 1


def test_none_when_no_measured_ps_count_is_enough():
    assert ps_tasks_needed(200, 10.0, 10.0, LOADS) is None
    # More ps tasks that cost more each (ps-to-ps RPCs): still only what was measured counts.
    worse = [PsLoad(1, 1e-3, 400e3), PsLoad(2, 5e-3, 200e3)]
    assert ps_tasks_needed(40, 10.0, 10.0, worse) == 1
    assert ps_tasks_needed(60, 10.0, 10.0, worse) is None


# --------------------------------------------------------------------------- what an update sends

def partition(task, nodes):
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    for op, send, recv in nodes:
        node = graph.node.add(op=op, name=f"n{len(graph.node)}", device=f"/job:{task}/cpu:0")
        if send:
            node.attr["send_device"].s = f"/job:{send}/device:CPU:0".encode()
            node.attr["recv_device"].s = f"/job:{recv}/device:CPU:0".encode()
    return graph


def test_rpcs_are_counted_by_the_direction_of_their_data():
    worker = partition("worker/replica:0/task:0", [
        ("_Recv", "ps/replica:0/task:0", "worker/replica:0/task:0"),
        ("_Recv", "worker/replica:0/task:0", "worker/replica:0/task:0"),  # same task: no RPC
        ("MatMul", None, None)])
    ps0 = partition("ps/replica:0/task:0", [
        ("_Recv", "worker/replica:0/task:0", "ps/replica:0/task:0"),
        ("_HostRecv", "ps/replica:0/task:1", "ps/replica:0/task:0")])
    ps1 = partition("ps/replica:0/task:1", [("NoOp", None, None)])
    assert count_rpcs([worker, ps0, ps1], "worker:0") == {
        "to_ps": 1, "from_ps": 1, "ps_to_ps": 1, "run_graph": 2}


def test_a_pushers_count_is_read_from_its_file(tmp_path):
    path = tmp_path / "count"
    path.write_bytes(b"")
    assert read_counter(path) == 0  # made, nothing written yet
    fd = pc.os.open(path, pc.os.O_WRONLY)
    for n in (1, 2, 70_000):
        pc.os.pwrite(fd, COUNTER.pack(n), 0)
        assert read_counter(path) == n
    pc.os.close(fd)


# --------------------------------------------------------------------------- the links

def test_links_get_tbf_alone_or_under_netem():
    assert netlab.tbf_args(10) == ["tbf", "rate", "10gbit", "burst", "1250000", "latency", "20ms"]
    assert netlab.tbf_args(0.1)[4] == str(netlab.TBF_MIN_BURST)
    (alone,) = netlab.qdisc_commands("ns", "e0", 1, None)
    assert alone[:8] == ["tc", "-n", "ns", "qdisc", "add", "dev", "e0", "root"]
    assert "tbf" in alone
    root, child = netlab.qdisc_commands("ns", "e0", 1, 2.5)
    assert root[7:] == ["root", "handle", "1:", "netem", "delay", "2.5ms", "limit", "100000"]
    assert child[7:11] == ["parent", "1:1", "handle", "10:"] and child[11] == "tbf"


def test_relay_routes_are_parsed_or_refused():
    assert latency_relay.parse_route("10.0.0.1:2300=10.0.0.2:2301") == (
        ("10.0.0.1", 2300), ("10.0.0.2", 2301))
    for bad in ("10.0.0.1:2300", "10.0.0.1=10.0.0.2:1", ":1=a:2"):
        with pytest.raises(ValueError):
            latency_relay.parse_route(bad)


def test_the_relay_forwards_both_ways_and_holds_each_chunk():
    """Loopback only: an echo server behind the relay."""
    echo = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = echo.accept()
        while data := conn.recv(65536):
            conn.sendall(data)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    relay = latency_relay.Relay(delay=0.0)
    listener = relay.listen(("127.0.0.1", 0), echo.getsockname())
    relay.period(0.02)  # 20 ms each way from now on
    client = socket.create_connection(listener.getsockname())
    message = bytes(range(256)) * 4000  # 1 MB, many chunks
    began = time.monotonic()
    client.sendall(message)
    got = b""
    while len(got) < len(message):
        got += client.recv(1 << 20)
    elapsed = time.monotonic() - began
    client.close()
    assert got == message
    assert elapsed >= 0.04  # through the relay twice: never sooner than 2 x 20 ms
    # A chunk is counted once sent on: the last one may be counted just after it arrived.
    deadline = time.monotonic() + 5
    while relay.bytes < 2 * len(message) and time.monotonic() < deadline:
        time.sleep(0.01)
    report = relay.period(0.0)
    assert report["delay_ms"] == 20 and report["connections"] == 1
    assert report["bytes"] == 2 * len(message)

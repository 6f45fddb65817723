"""benchmarks.ps_capacity's results: a row of the table from two snapshots of the counters,
the rule of thumb built on the rows (PsLoad, ps_tasks_needed), and results.json,
results.md and ps_capacity.png."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from a3c_graph.rundir.progress import write_atomic

HEADROOM = 0.5  # the share of a ps core, and of a link, the rule of thumb plans to use


@dataclass(frozen=True)
class Link:
    """One link condition: every link's round trip and its bandwidth each way."""

    rtt_ms: float
    gbit: float


# --------------------------------------------------------------------------- a row

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
    write_atomic(out / "results.json", json.dumps(data, indent=2) + "\n")
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
    write_atomic(out / "results.md", markdown)
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

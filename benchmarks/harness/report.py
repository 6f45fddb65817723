"""The harness's results: per-variant medians and their intervals, the graph variant's
ratios, the acting ceilings and the scaling table, written as results.json, results.md and
PNG plots (benchmarks.run writes them after every run)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a3c_graph.rundir.progress import write_atomic
from benchmarks.harness.one_run import EMULATOR

MEDIAN_KEYS = ("steps_per_sec", "frames_per_sec", "time_to_solve_s", "env_steps_to_solve",
               "time_to_solve_or_budget_s", "startup_s", "peak_memory_mb",
               "final_mean_return_100")
# Of the distribution-free interval of a median (median_interval).
CONFIDENCE = 0.95


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values that are not None, to 0.01; None when there are none."""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def summarize(records: Sequence[dict], variants: Sequence[str]) -> dict[str, dict]:
    """Per variant over its main runs: runs, solved count and the medians of MEDIAN_KEYS
    (time and steps to solve over the solved runs only)."""
    summary = {}
    for variant in variants:
        runs = [r for r in records if r["variant"] == variant and r["phase"] == "main"]
        summary[variant] = {"runs": len(runs), "solved": sum(r["solved"] for r in runs),
                            **{key: median([r[key] for r in runs]) for key in MEDIAN_KEYS},
                            "time_to_solve_or_budget_interval": median_interval(
                                [r["time_to_solve_or_budget_s"] for r in runs])}
    return summary


def median_interval(values: Sequence[float | None],
                    confidence: float = CONFIDENCE) -> list[float] | None:
    """A distribution-free interval of the median of `values` (None ignored): the order
    statistics x(k) and x(n + 1 - k) with the largest k whose coverage, by the binomial
    distribution of how many values fall below the median, is at least `confidence`.
    For 10 values at 95 %: x(2) to x(9) (97.9 %). None when n is too small (n < 6 at 95 %).
    """
    x = sorted(v for v in values if v is not None)
    n, best = len(x), None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n >= confidence:
            best = k
    return None if best is None else [x[best - 1], x[n - best]]


def ceiling_summary(records: Sequence[dict]) -> dict[str, dict[str, Any]] | None:
    """Per variant with ceiling runs: its acting ceiling (median steps/s of its ceiling
    runs) and the share of it its training runs reach; with runs of the env alone
    (EMULATOR), also its training and acting as shares of the env's rate, and the env's
    own row. None without ceiling runs."""
    ceiling_runs = [r for r in records if r["phase"] == "ceiling"]
    emulator = median([r["steps_per_sec"] for r in ceiling_runs if _row(r) == EMULATOR])
    summary = {}
    for variant in dict.fromkeys(_row(r) for r in ceiling_runs):
        runs = [r for r in ceiling_runs if _row(r) == variant]
        if variant.startswith(f"{EMULATOR} at "):  # the env alone at another env count
            rate = median([r["steps_per_sec"] for r in runs])
            summary[variant] = {"runs": len(runs), "steps_per_sec": rate,
                                "of_emulator": share(rate, emulator)}
            continue
        ceiling = median([r["steps_per_sec"] for r in runs])
        if variant == EMULATOR:
            summary[variant] = {"runs": len(runs), "steps_per_sec": ceiling}
            continue
        training = median([r["steps_per_sec"] for r in records
                            if r["phase"] == "main" and r["variant"] == variant])
        summary[variant] = {"runs": len(runs), "steps_per_sec": ceiling,
                            "training_steps_per_sec": training,
                            "training_share": share(training, ceiling),
                            "training_of_emulator": share(training, emulator),
                            "acting_of_emulator": share(ceiling, emulator)}
    return summary or None


def _row(record: dict) -> str:
    """A ceiling run's row: its variant, or for the env alone at an env count of its own
    (benchmarks.run --emulator-envs) "emulator at N envs"."""
    envs = record.get("envs_per_worker")
    return record["variant"] if envs is None else f"{record['variant']} at {envs} envs"


def share(part: float | None, whole: float | None) -> float | None:
    """part / whole to 0.001, None unless both are known and whole is not zero."""
    return None if not (part and whole) else round(part / whole, 3)


def cpu_summary(records: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """Per variant, the medians of its runs' CPU microseconds per agent step
    (one_run's cpu_us_per_step) by role: "training" over its main runs, "acting" over
    its ceiling runs (the env alone has only those), and training minus acting, what
    learning adds to each step."""
    summary: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["phase"] in ("main", "ceiling") and r.get("cpu_us_per_step"):
            summary.setdefault(_row(r), {})
    for variant, row in summary.items():
        for phase, name in (("main", "training"), ("ceiling", "acting")):
            runs = [r["cpu_us_per_step"] for r in records if _row(r) == variant
                    and r["phase"] == phase and r.get("cpu_us_per_step")]
            roles = sorted({role for run in runs for role in run})
            row[name] = {role: median([run.get(role) for run in runs])
                         for role in roles} if runs else None
        both = row["training"] and row["acting"]
        row["learning"] = round(row["training"]["total"] - row["acting"]["total"], 1) \
            if both else None
    return summary


def ratios(summary: dict[str, dict]) -> dict[str, dict[str, float | None]]:
    """The graph variant against each other variant: its steps/s over theirs, and its time
    to solve over theirs (medians)."""
    graph = summary.get("graph")
    if graph is None:
        return {}

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if not (a and b) else round(a / b, 2)

    return {variant: {"steps_per_sec": ratio(graph["steps_per_sec"], s["steps_per_sec"]),
                      "time_to_solve": ratio(graph["time_to_solve_s"], s["time_to_solve_s"]),
                      "time_to_solve_or_budget": ratio(graph["time_to_solve_or_budget_s"],
                                                       s["time_to_solve_or_budget_s"])}
            for variant, s in summary.items() if variant != "graph"}


def scaling_table(records: Sequence[dict]) -> dict[str, dict[int, float | None]]:
    """steps/s per variant and worker count, from the scaling runs."""
    table: dict[str, dict[int, float | None]] = {}
    for r in records:
        if r["phase"] == "scaling":
            table.setdefault(r["variant"], {})[r["workers"]] = r["steps_per_sec"]
    return table


def fmt(value: Any, unit: str = "", digits: int = 0) -> str:
    """A figure as the tables show it: thousands separated, "-" for None."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def markdown_table(summary: dict[str, dict]) -> str:
    lines = ["| variant | runs | solved | agent steps/s | frames/s | time to solve "
             "| every seed, unsolved = budget | env steps to solve | start-up "
             "| peak memory (PSS) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for variant, s in summary.items():
        interval = s["time_to_solve_or_budget_interval"]
        every_seed = fmt(s["time_to_solve_or_budget_s"], " s", 1) + (
            f" [{interval[0]:.1f}, {interval[1]:.1f}]" if interval else "")
        lines.append(
            f"| {variant} | {s['runs']} | {s['solved']}/{s['runs']} "
            f"| {fmt(s['steps_per_sec'])} | {fmt(s['frames_per_sec'])} "
            f"| {fmt(s['time_to_solve_s'], ' s', 1)} | {every_seed} "
            f"| {fmt(s['env_steps_to_solve'])} | {fmt(s['startup_s'], ' s', 1)} "
            f"| {fmt(s['peak_memory_mb'], ' MB')} |")
    return "\n".join(lines)


def seeds_markdown(records: Sequence[dict], variants: Sequence[str]) -> str:
    """Time to solve per seed and variant (main runs); an unsolved run shows ">" its
    start-up plus budget."""
    main = [r for r in records if r["phase"] == "main"]
    lines = ["| seed | " + " | ".join(variants) + " |", "|---:|" + "---:|" * len(variants)]
    for seed in sorted({r["seed"] for r in main}):
        cells = []
        for variant in variants:
            r = next((r for r in main if r["seed"] == seed and r["variant"] == variant), None)
            value = None if r is None else r["time_to_solve_or_budget_s"]
            cells.append(fmt(value, " s", 1) if r is None or r["solved"] or value is None
                         else f"> {value:.1f} s")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scaling_markdown(table: dict[str, dict[int, float | None]]) -> str:
    counts = sorted({n for row in table.values() for n in row})
    lines = ["| variant | " + " | ".join(f"{n} worker(s)" for n in counts) + " |",
             "|---|" + "---:|" * len(counts)]
    for variant, row in table.items():
        lines.append(f"| {variant} | " + " | ".join(fmt(row.get(n)) for n in counts) + " |")
    return "\n".join(lines)


def write_results(out: Path, settings: dict, machine: dict, records: Sequence[dict],
                  variants: Sequence[str]) -> str:
    """results.json and results.md (rewritten after every run); returns the markdown."""
    summary = summarize(records, variants)
    scaling = scaling_table(records)
    ceiling = ceiling_summary(records)
    cpu = cpu_summary(records)
    versus = ratios(summary)
    data = {"settings": settings, "machine": machine, "medians": summary,
            "graph_versus": versus, "ceiling": ceiling, "cpu_us_per_step": cpu,
            "scaling": {v: {str(n): s for n, s in row.items()} for v, row in scaling.items()},
            "records": list(records)}
    write_atomic(out / "results.json", json.dumps(data, indent=2) + "\n")
    text = [f"# A3C three ways: {settings['env']}, {settings['workers']} worker(s), "
            f"{settings['seeds']} seed(s), budget {settings['max_seconds']:g} s", "",
            markdown_table(summary), "",
            "Medians over the seeds; time and env steps to solve over the solved runs only, "
            "\"every seed\" over all of them with an unsolved run counted as its start-up "
            "plus budget, and in brackets a distribution-free 95 % interval of that median "
            "(from 6 seeds on). "
            "One clock for every variant: start-up runs from launch to the run's first "
            "applied update, each worker's budget counts from its own first applied update, "
            "and training ends at the final report, before teardown. Agent steps/s and "
            "frames/s (agent steps/s x the env's frame skip: 4 emulator frames per agent step "
            "for ALE ids, 1 elsewhere) are of training only; time to solve includes "
            "start-up. Peak memory is the PSS of each variant's whole process tree (a page "
            "shared by several processes counts once).", ""]
    text += ["Time to solve per seed (launch to the first solved report; > start-up + "
             "budget where the run did not solve):", "", seeds_markdown(records, variants),
             ""]
    if versus:
        text += ["| graph vs | steps/s (x) | time to solve (x) | every seed (x) |",
                 "|---|---:|---:|---:|"]
        text += [f"| {variant} | {fmt(r['steps_per_sec'], '', 2)} "
                 f"| {fmt(r['time_to_solve'], '', 2)} "
                 f"| {fmt(r['time_to_solve_or_budget'], '', 2)} |"
                 for variant, r in versus.items()]
        text += [""]
    if ceiling:
        text += ceiling_markdown(ceiling, settings)
    if cpu:
        text += cpu_markdown(cpu)
    if scaling:
        text += [f"## steps/s vs workers ({settings['scaling_seconds']:g} s budget or until "
                 "solved)", "", scaling_markdown(scaling), ""]
    text += [f"Machine: {machine['cpu_count']} cores, {machine['memory_gb']} GB, load "
             f"{machine['load_average_at_start']} at start; Python {machine['python']}, "
             f"TF {machine['versions']['tensorflow']}, Ray {machine['versions']['ray']}.", ""]
    markdown = "\n".join(text)
    write_atomic(out / "results.md", markdown)
    return markdown


def ceiling_markdown(ceiling: dict[str, dict[str, Any]], settings: dict) -> list[str]:
    """The acting ceilings' table, with each variant's shares of the env alone's rate."""
    def percent(value: float | None) -> str:
        return fmt(None if value is None else 100 * value, " %")

    emulator = ceiling.get(EMULATOR)
    lines = [f"Acting ceilings (--learn false, {settings['workers']} worker(s), runs of "
             f"{settings['ceiling_seconds']:g} s), the share of its own ceiling each "
             "variant's training reaches"
             + (f", and both as shares of the env alone ({EMULATOR}: "
                f"{settings['workers']} process(es) stepping a worker's envs with random "
                "actions, nothing else)" if emulator else "") + ":", "",
             "| variant | ceiling runs | acting ceiling, steps/s | training, steps/s "
             "| share | training / env alone | acting / env alone |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for variant, c in ceiling.items():
        if variant.startswith(EMULATOR):
            continue
        lines.append(f"| {variant} | {c['runs']} | {fmt(c['steps_per_sec'])} "
                     f"| {fmt(c['training_steps_per_sec'])} | {percent(c['training_share'])} "
                     f"| {percent(c['training_of_emulator'])} "
                     f"| {percent(c['acting_of_emulator'])} |")
    if emulator:
        envs = settings.get("envs_per_worker")
        lines.append(f"| {EMULATOR} (env alone{f', {envs} envs' if envs else ''}) "
                     f"| {emulator['runs']} | {fmt(emulator['steps_per_sec'])} | - | - "
                     "| 100 % | 100 % |")
    for variant, c in ceiling.items():
        if variant.startswith(f"{EMULATOR} at "):
            lines.append(f"| {variant} (env alone) | {c['runs']} | {fmt(c['steps_per_sec'])} "
                         f"| - | - | {percent(c['of_emulator'])} | {percent(c['of_emulator'])} |")
    return lines + [""]


def cpu_markdown(cpu: dict[str, dict[str, Any]]) -> list[str]:
    """CPU microseconds per agent step: training, of it the ps, acting only, and what
    learning adds."""
    def role(row: dict | None, name: str) -> str:
        return fmt(None if row is None else row.get(name), " us", 0)

    lines = ["CPU time per agent step (user + system of every process of the run over the "
             "same window as its steps/s, medians): with C cores kept busy, C x 10^6 / this "
             "is the steps/s a run can reach.",
             "", "| variant | training | of which the ps | acting only "
             "| learning (training - acting) |", "|---|---:|---:|---:|---:|"]
    for variant, row in cpu.items():
        lines.append(f"| {variant} | {role(row['training'], 'total')} "
                     f"| {role(row['training'], 'ps')} | {role(row['acting'], 'total')} "
                     f"| {fmt(row['learning'], ' us')} |")
    return lines + [""]


def plot_results(out: Path, records: Sequence[dict], variants: Sequence[str],
                 target_return: float | None) -> list[Path]:
    """returns.png, steps_per_sec.png and (with scaling runs) scaling.png."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    written = []
    main = [r for r in records if r["phase"] == "main"]
    ceiling = ceiling_summary(records)
    # One time axis for all panels: how much sooner one variant solves is the point.
    fig, axes = plt.subplots(1, len(variants), figsize=(5 * len(variants), 4), squeeze=False,
                             sharex=True, sharey=True)
    for ax, variant in zip(axes[0], variants):
        for r in (r for r in main if r["variant"] == variant):
            points = [(t, m) for t, _, m in r["return_curve"] if m is not None]
            if points:
                ax.plot(*zip(*points), label=f"seed {r['seed']}")
        if target_return is not None:
            ax.axhline(target_return, color="gray", linestyle="--", linewidth=1)
        ax.set_title(variant)
        ax.set_xlabel("seconds since launch")
        if ax.lines:
            ax.legend(loc="lower right", fontsize="small")
    # From launch: start-up shows as the blank before each line.
    longest = max((t for r in main for t, _, _ in r["return_curve"]), default=1.0)
    axes[0][0].set_xlim(0, longest * 1.02)
    axes[0][0].set_ylabel("mean return (last 100 episodes)")
    written.append(save_figure(fig, out / "returns.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, variant in enumerate(variants):
        rates = [r["steps_per_sec"] for r in main if r["variant"] == variant
                 and r["steps_per_sec"] is not None]
        ax.bar(i, statistics.median(rates) if rates else 0.0, color=f"C{i}", alpha=0.6)
        ax.scatter([i] * len(rates), rates, color="black", s=12, zorder=3)
    label = "acting ceiling (--learn false)"
    for i, variant in enumerate(variants):
        level = ((ceiling or {}).get(variant) or {}).get("steps_per_sec")
        if level:
            ax.hlines(level, i - 0.4, i + 0.4, color="gray", linestyle="--", linewidth=1,
                      label=label)
            label = None  # one legend entry for them all
    emulator = ((ceiling or {}).get(EMULATOR) or {}).get("steps_per_sec")
    if emulator:
        ax.axhline(emulator, color="black", linestyle=":", linewidth=1,
                   label=f"the env alone ({EMULATOR})")
    if ceiling:
        ax.legend(loc="lower right", fontsize="small")
    ax.set_xticks(range(len(variants)), variants)
    ax.set_ylabel("env steps/s after start-up (bar: median, dots: seeds)")
    written.append(save_figure(fig, out / "steps_per_sec.png"))

    scaling = scaling_table(records)
    if scaling:
        fig, ax = plt.subplots(figsize=(6, 4))
        for variant, row in scaling.items():
            points = sorted((n, s) for n, s in row.items() if s is not None)
            if points:
                ax.plot(*zip(*points), marker="o", label=variant)
        ax.set_xlabel("workers")
        ax.set_xticks(sorted({n for row in scaling.values() for n in row}))
        ax.set_ylabel("env steps/s after start-up")
        ax.set_ylim(bottom=0)  # from zero: a ratio between points reads as it is
        ax.legend(loc="lower right")
        written.append(save_figure(fig, out / "scaling.png"))
    return written


def save_figure(fig, path: Path) -> Path:
    """Lay `fig` out, write it to `path` (100 dpi), close it; returns `path`."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


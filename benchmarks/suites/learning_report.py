"""The learning suite's results (benchmarks.learning): the summary per task, results.json
and results.md, and the plot of each task's curves (every seed and their median, against
frames and against minutes)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from a3c_graph.rundir.progress import write_atomic
from benchmarks.harness.report import median, save_figure
from benchmarks.suites.learning_tasks import Curve, Task


def worker_counts(records: Sequence[dict]) -> list[int]:
    """The worker counts the records ran with, smallest first (records without one: none)."""
    return sorted({r["workers"] for r in records if r.get("workers") is not None})


def row_name(task_name: str, workers: int | None) -> str:
    """A summary row's name: the task's, and with several worker counts the count's too."""
    return task_name if workers is None else f"{task_name} w{workers}"


def _rows(records: Sequence[dict], tasks: Sequence[Task]):
    """(row name, task, workers, its runs) per task, and per worker count when the records
    hold several."""
    counts = worker_counts(records)
    for task in tasks:
        for workers in (counts if len(counts) > 1 else [None]):
            runs = [r for r in records if r.get("task") == task.name
                    and (workers is None or r.get("workers") == workers)]
            if runs:
                yield row_name(task.name, workers), task, workers, runs


def summarize(records: Sequence[dict], tasks: Sequence[Task]) -> dict[str, dict]:
    summary = {}
    for name, task, _, runs in _rows(records, tasks):
        reached = [r for r in runs if r["reached"]]
        row = {
            "env": runs[0]["env"], "target": task.target, "seeds": len(runs),
            "workers": runs[0].get("workers"),
            "envs_per_worker": runs[0].get("envs_per_worker"),
            "reached": len(reached),
            "median_frames_to_target": median([r["frames_to_target"] for r in reached]),
            "median_minutes_to_target": median([r["seconds_to_target"] / 60 for r in reached]),
            "median_final_return": median([r["final_mean_return_100"] for r in runs]),
            "median_frames": median([last_frame(r) for r in runs]),
            "median_wall_minutes": median([r["wall_s"] / 60 for r in runs]),
        }
        if task.floor is not None:
            row.update({"floor": task.floor, "held": sum(bool(r["held"]) for r in runs)})
        if task.evaluation_games:
            for mode in ("greedy", "sampled"):
                row[f"median_{mode}_evaluation"] = median(
                    [evaluated(r, mode) for r in runs])
        summary[name] = row
    return summary


def last_frame(record: dict) -> int | None:
    """The frame count of the run's last curve point (None if it has none)."""
    frames = record["curve"]["frames"]
    return frames[-1] if frames else None


def evaluation_of(record: dict, mode: str) -> dict:
    """The run's final checkpoint played `mode` ("greedy", "sampled"): the evaluation's
    summary, {"error": ...}, or {} if it was not played."""
    return (record.get("evaluation") or {}).get(mode) or {}


def evaluated(record: dict, mode: str) -> float | None:
    """The mean return of the run's final checkpoint played `mode` (None if not played)."""
    return evaluation_of(record, mode).get("mean_return")


def _evaluation_cell(record: dict) -> str:
    played = record.get("evaluation")
    if not played:
        return "-"
    cells = []
    for mode in ("greedy", "sampled"):
        result = played.get(mode, {})
        cells.append(f"error: {result['error']}" if "error" in result else
                     f"{result['mean_return']:.1f} ({result['min_return']:g} to "
                     f"{result['max_return']:g})")
    return " / ".join(cells)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value >= 1e5:
        return f"{value / 1e6:.2f}M"
    if isinstance(value, int) and value >= 1e5:
        return f"{value / 1e6:.2f}M"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def markdown(settings: dict, machine: dict, summary: Mapping[str, dict],
             records: Sequence[dict]) -> str:
    workers = settings["workers"]
    workers = ", ".join(map(str, workers)) if isinstance(workers, list) else workers
    several = len(worker_counts(records)) > 1
    lines = [f"# Learning suite: {workers} worker(s), {settings['seeds']} seed(s)",
             "", "| task | env | target | seeds reaching it | median frames to target "
             "| median minutes to target | median final mean return(100) | final checkpoint: "
             "median greedy / sampled |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for name, row in summary.items():
        played = ("-" if "median_greedy_evaluation" not in row else
                  f"{_fmt(row['median_greedy_evaluation'])} / "
                  f"{_fmt(row['median_sampled_evaluation'])}")
        lines.append(f"| {name} | {row['env']} | {row['target']:g} | {row['reached']}/"
                     f"{row['seeds']} | {_fmt(row['median_frames_to_target'])} | "
                     f"{_fmt(row['median_minutes_to_target'])} | "
                     f"{_fmt(row['median_final_return'])} | {played} |")
    lines += ["", "Minutes are wall time from launch (start-up included); frames are agent "
              "steps x the env's frame skip (4 for ALE, 1 elsewhere). The final mean is the "
              "last reading of the run (the budget, or the stop at the target).", ""]
    stability = [r for r in records if r.get("floor") is not None]
    if stability:
        lines += ["## Stability: after first reaching the target, never below the floor", "",
                  "| task | seed | reached at (s) | lowest mean after | seconds below target "
                  "after | lowest entropy | held |", "|---|---:|---:|---:|---:|---:|---|"]
        for r in stability:
            lines.append(f"| {r['task']} | {r['seed']} | {_fmt(r['seconds_to_target'])} | "
                         f"{_fmt(r['lowest_mean_after_target'])} | "
                         f"{_fmt(r['seconds_below_target_after'])} | "
                         f"{_fmt(r['lowest_entropy'], 4)} | "
                         f"{'yes' if r['held'] else 'NO'} (floor {r['floor']:g}) |")
        lines.append("")
    lines += ["## Runs", "", "| task | seed | reached | frames to target | minutes to target "
              "| final mean | frames | agent steps/s | wall min | final checkpoint: "
              "greedy / sampled |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        minutes = None if r["seconds_to_target"] is None else r["seconds_to_target"] / 60
        task = row_name(r["task"], r.get("workers") if several else None)
        lines.append(f"| {task} | {r['seed']} | {'yes' if r['reached'] else 'no'} | "
                     f"{_fmt(r['frames_to_target'])} | {_fmt(minutes)} | "
                     f"{_fmt(r['final_mean_return_100'])} | {_fmt(last_frame(r))} | "
                     f"{_fmt(r['steps_per_sec'], 0)} | {_fmt(r['wall_s'] / 60)} | "
                     f"{_evaluation_cell(r)} |")
    games = {played["episodes"] for r in records for played in (r.get("evaluation") or {}).values()
             if "episodes" in played}
    if games:
        lines += ["", f"The final checkpoint: its mean return over {', '.join(map(str, games))} "
                  "games of `a3c_graph.evaluate` with greedy actions / with sampled actions "
                  "(--sample), lowest to highest game in brackets."]
    if settings.get("cluster_envs"):
        lines += ["", f"Envs per worker: {settings['cluster_envs']} // workers (at least 1), "
                  "so the cluster steps about as many envs at every worker count."]
    flags = " ".join(settings["a3c_flags"]) or "(none: every task's defaults)"
    lines += ["", f"A3C flags given to every task: {flags}.",
              f"Machine: {machine['cpu_count']} cores, {machine['memory_gb']} GB, load "
              f"{machine['load_average_at_start']} at start"
              + "".join(f", {load} at a resume" for load in
                        machine.get("load_average_at_resumes", []))
              + f"; Python {machine['python']}, "
              f"TF {machine['versions']['tensorflow']}.", *_other_machines(machine),
              *_commits(machine), ""]
    return "\n".join(lines)


def _other_machines(machine: dict) -> list[str]:
    """A line for each resume made on a machine unlike the start's: what differed."""
    return [f"Resume {other['resume']} ran on another machine: "
            + "; ".join(f"{key} {value}" for key, value in other.items() if key != "resume")
            + "." for other in machine.get("machine_at_resumes", [])]


def _commits(machine: dict) -> list[str]:
    """The code's commit at the start and at each resume, as a line (none if not recorded)."""
    if not machine.get("commit"):
        return []
    resumes = machine.get("commit_at_resumes", [])
    return [f"Code: commit {machine['commit']} at start"
            + "".join(f", {commit or 'unknown'} at a resume" for commit in resumes) + "."]


def write_results(out: Path, settings: dict, machine: dict, records: Sequence[dict],
                  tasks: Sequence[Task]) -> str:
    """results.json and results.md (rewritten after every run); returns the markdown."""
    summary = summarize(records, tasks)
    data = {"settings": settings, "machine": machine, "summary": summary,
            "records": [_stored(record) for record in records]}
    write_atomic(out / "results.json", json.dumps(data, indent=2) + "\n")
    text = markdown(settings, machine, summary, records)
    write_atomic(out / "results.md", text)
    return text


def _stored(record: dict) -> dict:
    """A record as results.json keeps it: its curve thinned (Curve.thinned); every figure
    of the record was judged on the whole curve before."""
    if not record.get("curve"):
        return record
    return {**record, "curve": dataclasses.asdict(Curve(**record["curve"]).thinned())}


def median_curve(curves: Sequence[Sequence[tuple[float, float]]], points: int = 100
                 ) -> list[tuple[float, float]]:
    """The median over runs of step-wise curves [(x, y), ...] on a common grid of x, up to
    the shortest run's end (past it the median would be of fewer runs)."""
    curves = [c for c in curves if c]
    if not curves:
        return []
    end = min(c[-1][0] for c in curves)
    start = max(c[0][0] for c in curves)
    if end <= start:
        return []
    grid = [start + (end - start) * i / (points - 1) for i in range(points)]

    def at(curve, x):
        value = curve[0][1]
        for cx, cy in curve:
            if cx > x:
                break
            value = cy
        return value

    return [(x, statistics.median(at(c, x) for c in curves)) for x in grid]


def plot_task(out: Path, task: Task, records: Sequence[dict]) -> Path | None:
    """<task>.png: mean return against frames and against wall minutes, every seed and the
    median, the target dashed (and the stability floor dotted)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    runs = [r for r in records if r.get("task") == task.name and r["curve"]["frames"]]
    if not runs:
        return None
    counts = worker_counts(runs)
    groups = ([(f"{w} workers", [r for r in runs if r.get("workers") == w]) for w in counts]
              if len(counts) > 1 else [("", runs)])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, scale, label in ((axes[0], "frames", 1e6, "frames (millions)"),
                                  (axes[1], "seconds", 60.0, "wall minutes since launch")):
        for i, (group, members) in enumerate(groups):
            # One worker count: a colour per seed, the median black; several: a colour per
            # count, its seeds thin and its median thick.
            color = f"C{i}" if group else None
            curves = []
            for r in members:
                xs = [x / scale for x in r["curve"][key]]
                curves.append(list(zip(xs, r["curve"]["mean_return"])))
                ax.plot(xs, r["curve"]["mean_return"], linewidth=1, alpha=0.5, color=color,
                        label=None if group else f"seed {r['seed']}")
            middle = median_curve(curves)
            if middle and (group or len(members) > 1):
                ax.plot(*zip(*middle), color=color or "black", linewidth=2,
                        label=f"{group}, median" if group else "median")
        ax.axhline(task.target, color="gray", linestyle="--", linewidth=1, label="target")
        if task.floor is not None:
            ax.axhline(task.floor, color="red", linestyle=":", linewidth=1, label="floor")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean return (last 100 episodes)")
    axes[1].legend(loc="lower right", fontsize="small")
    fig.suptitle(f"{task.name}: {runs[0]['env']}, {len(runs)} seed(s)")
    return save_figure(fig, out / f"{task.name}.png")


def plot_against_workers(out: Path, tasks: Sequence[Task], records: Sequence[dict]
                         ) -> Path | None:
    """workers.png: against the worker count, one line per task, each task's median frames
    to its target (the seeds that reached it; left) and its median final mean return(100)
    (right), as the A3C paper sets data efficiency against its actor-learner threads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = worker_counts(records)
    if len(counts) < 2:
        return None
    summary = summarize(records, tasks)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for task in tasks:
        rows = [(w, summary.get(row_name(task.name, w), {})) for w in counts]
        for ax, key in ((left, "median_frames_to_target"), (right, "median_final_return")):
            points = [(w, row[key]) for w, row in rows if row.get(key) is not None]
            if points:
                ax.plot(*zip(*points), marker="o", label=task.name)
    left.set_ylabel("median frames to target")
    right.set_ylabel("median final mean return(100)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(w) for w in counts])
        ax.set_xlabel("workers")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
    fig.suptitle("Data efficiency against workers")
    return save_figure(fig, out / "workers.png")

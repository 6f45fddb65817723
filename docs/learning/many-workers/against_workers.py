"""Data efficiency against workers, as the A3C paper sets it against its threads: the
README's table and against-workers.png, from committed records only.

    python docs/learning/many-workers/against_workers.py [SWEEP_DIR[,SWEEP_DIR...]
        PONG_RECORD...]

SWEEP_DIR: a learning suite's output (results.json) of the cartpole and breakout tasks over
worker counts (`python -m benchmarks.learning --tasks cartpole,breakout --workers 1,2,4,8,16
--seeds 3`); of several, comma-separated, a later one's run of a task, worker count and seed
takes the place of an earlier one's (runs made again on a later agent). PONG_RECORD: a
learning suite's output of Pong runs (results.json; its records carry their worker count) or
one run's record dir from scripts/launch_cluster.sh (summary.json, whose tasks give the
worker count): frames to a mean return(100) of 18.
Without arguments, the committed records the README's table comes from (SWEEPS, PONG_RECORDS
below; a test checks the README against them). Writes against-workers.md and
against-workers.png beside this script; prints the table.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
PONG_TARGET = 18.0

# task: (what is measured, how a seed's figure reads, in what unit, the plot's axis, whether
# lower is better)
MEASURES = {
    "cartpole": ("CartPole-v1: env steps to a mean return(100) of 475", "{:,.0f}k", 1e3,
                 "thousand env steps (lower is better)", True),
    "breakout": ("MinAtar Breakout: mean return(100) at 5M frames", "{:.1f}", 1.0,
                 "mean return(100) (higher is better)", False),
    "pong": ("Pong (A3C protocol): frames to a mean return(100) of 18", "{:.1f}M", 1e6,
             "million frames (lower is better)", True),
}
BREAKOUT_FRAMES = 5_000_000
PONG_TASKS = ("pong", "pong-deterministic")

# The README's table: the sweep over worker counts, then its rows with pooled rollouts made
# again on the final agent (sweep/README.md) and 16 workers' Breakout seeds after the first,
# one suite each; 2 and 16 workers' Pong seeds on the atari preset (the entropy bonus
# annealed, 16 workers' rollouts pooled on the ps).
SWEEPS = [HERE / "sweep", HERE / "sweep-final-cartpole",
          *[HERE / "sweep-16-workers-breakout" / f"seed-{seed}" for seed in (1, 2)],
          *[HERE / "sweep-final-breakout" / f"w{workers}-seed{seed}"
            for workers, seeds in ((4, (0, 1, 2)), (8, (0, 1, 2))) for seed in seeds]]
PONG_RECORDS = [HERE / f"pong-{workers}-workers-entropy-annealed" / f"seed-{seed}"
                for workers in (2, 16) for seed in range(3)]


def sweep_records(sweeps: list[Path]) -> list[dict]:
    """The sweeps' finished runs, a later sweep's run of a task, worker count and seed in
    place of an earlier one's; a run cut off (e.g. by the end of a session) is no figure,
    and leaves none of an earlier sweep's in its place."""
    runs = {}
    for sweep in sweeps:
        for record in json.loads((sweep / "results.json").read_text())["records"]:
            runs[record["task"], record["workers"], record["seed"]] = record
    return [runs[key] for key in sorted(runs) if runs[key]["exit_code"] == 0]


def sweep_figures(sweeps: list[Path]) -> dict[str, dict[int, list[float | None]]]:
    """Per task and worker count each seed's figure: CartPole's env steps to its target
    (None if not reached), Breakout's last mean return(100) at the end of its budget."""
    figures: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for record in sweep_records(sweeps):
        if record["task"] == "cartpole":
            figures["cartpole"][record["workers"]].append(
                record["env_steps_to_target"] if record["reached"] else None)
        elif record["task"] == "breakout" and record["final_env_steps"] >= BREAKOUT_FRAMES:
            figures["breakout"][record["workers"]].append(record["final_mean_return_100"])
    return figures


def pong_figures(paths: list[Path]) -> dict[int, list[float | None]]:
    """Per worker count each Pong run's frames to 18 (None if it never got there)."""
    figures: dict[int, list] = defaultdict(list)
    for path in paths:
        if (path / "results.json").exists():
            for record in json.loads((path / "results.json").read_text())["records"]:
                if (record["task"] in PONG_TASKS and record["target"] == PONG_TARGET
                        and record["exit_code"] == 0):
                    figures[record["workers"]].append(record["frames_to_target"])
            continue
        summary = json.loads((path / "summary.json").read_text())
        if summary["target_return"] != PONG_TARGET:
            raise ValueError(f"{path}: a run to {summary['target_return']}, not to 18")
        workers = sum(name.startswith("worker_") for name in summary["task_exit_codes"])
        if summary["solved"]:
            figures[workers].append(summary["frames"])
        elif summary["exit_code"] == 0:  # its budget spent short of 18
            figures[workers].append(None)
        # else cut off short of 18 (interrupted, failed): not a figure
    return figures


def _median(values: list[float | None], lower_is_better: bool) -> float | None:
    """The median of the seeds, a seed short of the target counting as the worst; None if
    the median falls on one."""
    worst = math.inf if lower_is_better else -math.inf
    ordered = sorted(values, key=lambda v: worst if v is None else v)
    middle = ordered[(len(ordered) - 1) // 2:len(ordered) // 2 + 1]
    return None if None in middle else statistics.mean(middle)


def table(figures: dict[str, dict[int, list]]) -> str:
    """The README's table: a row per task and worker count, each seed's figure and the
    median."""
    lines = ["| task | workers | seeds | each seed | median |", "|---|---:|---:|---|---:|"]
    for task, (what, form, unit, _, lower) in MEASURES.items():
        for workers in sorted(figures.get(task, {})):
            values = figures[task][workers]
            reads = [form.format(v / unit) if v is not None else "not reached" for v in values]
            median = _median(values, lower)
            lines.append(f"| {what} | {workers} | {len(values)} | {', '.join(reads)} | "
                         f"{form.format(median / unit) if median is not None else '-'} |")
    return "\n".join(lines) + "\n"


def plot(figures: dict[str, dict[int, list]], out: Path) -> None:
    """One panel per task, its seeds as dots and its median as the line, against workers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MEASURES), figsize=(14, 4))
    counts = sorted({w for by_workers in figures.values() for w in by_workers})
    for ax, (task, (what, _, unit, axis, lower)) in zip(axes, MEASURES.items()):
        by_workers = figures.get(task, {})
        for workers, values in sorted(by_workers.items()):
            reached = [v / unit for v in values if v is not None]
            ax.plot([workers] * len(reached), reached, "o", color="0.6", markersize=4)
        medians = [(w, _median(v, lower)) for w, v in sorted(by_workers.items())]
        medians = [(w, m / unit) for w, m in medians if m is not None]
        if medians:
            ax.plot(*zip(*medians), "-o", label=f"{task}: median")
            ax.legend(fontsize="small")
        ax.set_title(what.replace(": ", ":\n", 1), fontsize="medium")
        ax.set_ylabel(axis)
        ax.set_ylim(bottom=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(w) for w in counts])
        ax.set_xlabel("workers")
        ax.grid(alpha=0.3)
    fig.suptitle("Data efficiency against workers (dots: seeds)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def figures_of(sweeps: list[Path], pong: list[Path]) -> dict[str, dict[int, list]]:
    return {**sweep_figures(sweeps), "pong": pong_figures(pong)}


def main(argv: list[str]) -> int:
    sweeps, pong = SWEEPS, PONG_RECORDS
    if argv:
        sweeps, pong = [Path(p) for p in argv[0].split(",")], [Path(p) for p in argv[1:]]
    try:
        figures = figures_of(sweeps, pong)
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"against_workers.py: cannot read the records: {error}", file=sys.stderr)
        return 2
    text = table(figures)
    (HERE / "against-workers.md").write_text(text)
    plot(figures, HERE / "against-workers.png")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The many-workers diagnosis: what worker 0 of each diagnostic run logged to TensorBoard
(entropy, gradient norm before clipping, value loss, policy lag, Adam's step), per update.

    python docs/learning/many-workers/diagnosis.py csv RUN_LOGDIR NAME    # NAME.csv from its tb/
    python docs/learning/many-workers/diagnosis.py curve RUN_LOGDIR NAME  # NAME.csv, progress
    python docs/learning/many-workers/diagnosis.py plot                   # diagnosis.png
    python docs/learning/many-workers/diagnosis.py per-frame              # per-frame.png
    python docs/learning/many-workers/diagnosis.py plateau [RESULTS_JSON...]  # plateau.png

The runs' log dirs are not kept; their worker 0 series are, as the CSVs beside this file
(runs.md says what each ran).
"""
import csv
import sys
from pathlib import Path

HERE = Path(__file__).parent
TAGS = ("loss/entropy", "loss/grad_norm", "loss/value_loss", "policy_lag/lag_apply",
        "policy_lag/lag_gradient", "optimizer/step_rms_in_lr",
        "episode/cluster_mean_return_100")
# The runs drawn, by CSV name, with their legend (runs.md has the commands).
PANELS = {
    "d1-15w-before": "15 workers, before (gradient on the refreshed copy)",
    "d2-15w-acting-weights": "15 workers, gradient on the acting weights",
    "d8-15w-lag-tolerance-4": "15 workers, + rate x 4 / lag (the fix)",
    "d4-2w-acting-weights": "2 workers, gradient on the acting weights",
}


def to_csv(run: Path, name: str) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tb" / "worker_0"), size_guidance={"scalars": 0})
    events.Reload()
    present = [tag for tag in TAGS if tag in events.Tags()["scalars"]]
    series = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in present}
    steps = sorted(set().union(*series.values()))
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["global_step", *present])
        for step in steps:
            writer.writerow([step, *(f"{series[tag][step]:.6g}" if step in series[tag] else ""
                                     for tag in present)])


def to_curve(run: Path, name: str) -> None:
    """Worker 0's progress records of a run (the cluster's counters, its mean return(100),
    its own entropy and lag) as NAME.csv."""
    sys.path.insert(0, str(HERE.parents[2]))
    from a3c_graph.rundir.progress import read_history

    columns = ("time", "global_step", "env_steps", "frames", "mean_return_100", "entropy",
               "lag_apply")
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in read_history(run):
            if row.get("task") != 0:
                continue
            row = {**row, "frames": (row.get("env_steps") or 0) * 4}  # Atari: frame skip 4
            writer.writerow(["" if row.get(key) is None else row[key] for key in columns])


# Mean return(100) against frames: the 2-worker seeds and the 16-worker runs (runs.md).
TWO_WORKERS = HERE.parent / "pong-deterministic" / "2026-11-26-8x20" / "results.json"
PER_FRAME = {
    "pong-16-workers-1-env/curve": "16 workers x 1 env, tolerance 4 (before the sqrt rule)",
    "pong-16-workers-1-env-tolerance-8/curve": "16 workers x 1 env, --lag-tolerance 8",
    "pong-16-workers-1-env-sqrt-rule/curve": "16 workers x 1 env, tolerance 4 x sqrt, seed 0",
    "pong-16-workers-1-env-sqrt-rule-seed1/curve": "16 workers x 1 env, tolerance 4 x sqrt, seed 1",
}


def plot_per_frame() -> None:
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    for i, record in enumerate(json.loads(TWO_WORKERS.read_text())["records"]):
        curve = record["curve"]
        ax.plot([f / 1e6 for f in curve["frames"]], curve["mean_return"], color="gray",
                linewidth=0.8, label="2 workers x 8 envs, seeds 0-2" if i == 0 else None)
    for name, label in PER_FRAME.items():
        if not (HERE / f"{name}.csv").exists():
            continue
        with open(HERE / f"{name}.csv") as f:
            rows = [row for row in csv.DictReader(f) if row["mean_return_100"]]
        ax.plot([int(row["frames"]) / 1e6 for row in rows],
                [float(row["mean_return_100"]) for row in rows], linewidth=1.2, label=label)
    ax.axhline(18, color="black", linewidth=0.6, linestyle="--")
    ax.axvline(37, color="black", linewidth=0.6, linestyle=":")
    ax.set_xlabel("frames (millions; 4 per agent step)")
    ax.set_ylabel("mean return of the last 100 games")
    ax.set_title("Pong, A3C protocol: learning per frame, 2 workers vs 16")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(HERE / "per-frame.png", dpi=90)


def read(name: str) -> dict:
    with open(HERE / f"{name}.csv") as f:
        rows = list(csv.DictReader(f))
    return {key: [(int(row["global_step"]), float(row[key])) for row in rows if row[key]]
            for key in rows[0] if key != "global_step"}


def plot() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [("loss/entropy", "entropy (nats)", False), ("loss/grad_norm", "gradient norm", True),
             ("loss/value_loss", "value loss", True), ("policy_lag/lag_apply", "lag_apply", False)]
    fig, axes = plt.subplots(len(shown), 1, figsize=(9, 10), sharex=True)
    for name, label in PANELS.items():
        data = read(name)
        for ax, (tag, ylabel, log) in zip(axes, shown):
            if tag in data:
                xs, ys = zip(*data[tag])
                ax.plot(xs, ys, linewidth=0.9, label=label)
            ax.set_ylabel(ylabel)
            if log:
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower left")
    axes[-1].set_xlabel("update (global step; 160 agent steps = 640 frames each)")
    axes[-1].set_xlim(0, 3500)
    fig.suptitle("Pong, A3C protocol, atari preset: worker 0's learner, 15 workers vs 2")
    fig.tight_layout()
    fig.savefig(HERE / "diagnosis.png", dpi=90)


# Two workers' Pong seeds read for the plateau below 18: before the fix, after it, and with
# the entropy bonus annealed (learning suite records: their curves carry the entropy).
PLATEAU = [TWO_WORKERS, HERE / "pong-2-workers-seeds-1-2" / "results.json",
           *sorted((HERE / "pong-2-workers-entropy-annealed").glob("seed-*/results.json"))]
PLATEAU_LABELS = {"2026-11-26-8x20": "before the fix (2026-11-26)",
                  "pong-2-workers-seeds-1-2": "after the fix (2026-11-30)",
                  "pong-2-workers-entropy-annealed": "entropy annealed (2026-11-30)"}
BAND = 4_000_000  # frames
BUDGET = 40_000_000  # frames: the atari preset's 10M agent steps


def plateau(paths: list[Path]) -> None:
    """Per seed, the medians of the mean return(100) and of the entropy over each 4M frames
    (printed as a markdown table), and plateau.png: both against frames."""
    import json
    import statistics

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    starts = range(0, BUDGET, BAND)
    print("| run, seed | " + " | ".join(f"{b // 10**6}-{(b + BAND) // 10**6}M" for b in starts)
          + " | final checkpoint: greedy / sampled |")
    print("|---|" + "---|" * (len(starts) + 1))
    for path in paths:
        for record in json.loads(path.read_text())["records"]:
            curve = record["curve"]
            points = [(f, r, e) for f, r, e in zip(curve["frames"], curve["mean_return"],
                                                    curve["entropy"])
                      if r is not None and e is not None]
            cells = []
            for start in starts:
                band = [(r, e) for f, r, e in points if start <= f < start + BAND]
                cells.append(f"{statistics.median(r for r, _ in band):.1f}, "
                             f"{statistics.median(e for _, e in band):.2f}" if band else "-")
            evaluation = record.get("evaluation") or {}
            scores = " / ".join(f"{evaluation[k]['mean_return']:.1f}" if k in evaluation
                                else "-" for k in ("greedy", "sampled"))
            record_dir = path.parent.parent if path.parent.name.startswith("seed-") else path.parent
            run = PLATEAU_LABELS.get(record_dir.name, record_dir.name)
            label = f"{run}, seed {record['seed']}"
            print(f"| {label} | " + " | ".join(cells) + f" | {scores} |")
            frames = [f / 1e6 for f, _, _ in points]
            line, = top.plot(frames, [r for _, r, _ in points], lw=0.8, label=label)
            bottom.plot(frames, [e for _, _, e in points], lw=0.8, color=line.get_color())
    top.axhline(18, color="0.4", ls="--", lw=0.8)
    top.set_ylim(0, 21)
    top.set_ylabel("mean return(100)")
    top.legend(fontsize=7, loc="lower right")
    bottom.set_ylabel("policy entropy (nats; ln 6 = 1.79)")
    bottom.set_ylim(1.35, 1.8)  # early dips to near 0 (before 8M frames) cut off
    bottom.set_xlabel("frames (millions)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.suptitle("Pong, 2 workers: the plateau below 18, the entropy that rises on it, "
                 "and the bonus annealed", fontsize=10)
    fig.tight_layout()
    fig.savefig(HERE / "plateau.png", dpi=90)


if __name__ == "__main__":
    if sys.argv[1] == "csv":
        to_csv(Path(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "curve":
        to_curve(Path(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "per-frame":
        plot_per_frame()
    elif sys.argv[1] == "plateau":
        plateau([Path(p) for p in sys.argv[2:]] or [p for p in PLATEAU if p.exists()])
    else:
        plot()

"""The many-workers diagnosis: what worker 0 of each diagnostic run logged to TensorBoard
(entropy, gradient norm before clipping, value loss, policy lag, Adam's step), per update.

    python docs/learning/many-workers/diagnosis.py csv RUN_LOGDIR NAME  # NAME.csv from its tb/
    python docs/learning/many-workers/diagnosis.py plot                 # diagnosis.png

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


if __name__ == "__main__":
    if sys.argv[1] == "csv":
        to_csv(Path(sys.argv[2]), sys.argv[3])
    else:
        plot()

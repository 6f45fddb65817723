"""Draws what the learner logged to TensorBoard in a run (worker 0): the policy's entropy, the
gradient's global norm before clipping and the value loss, against the update number.

    python docs/learning/losses.py RUN_LOGDIR OUT_FOLDER    # writes losses.csv and losses.png
"""
import csv
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TAGS = ("loss/entropy", "loss/grad_norm", "loss/value_loss", "episode/return")
run, out = Path(sys.argv[1]), Path(sys.argv[2])
events = EventAccumulator(str(run / "tb" / "worker_0"), size_guidance={"scalars": 0})
events.Reload()
series = {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in TAGS}
steps = sorted(series[TAGS[0]])
with open(out / "losses.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["global_step", *TAGS])
    for step in steps:
        writer.writerow([step, *(series[tag].get(step, "") for tag in TAGS)])
fig, axes = plt.subplots(4, 1, figsize=(9, 8), sharex=True)
for ax, tag in zip(axes, TAGS):
    ax.plot(steps, [series[tag].get(s) for s in steps], linewidth=0.8)
    ax.set_ylabel(tag.split("/")[1])
    ax.grid(alpha=0.3)
axes[1].set_yscale("log")
axes[2].set_yscale("log")
config = json.loads((run / "config.json").read_text())
batch = config["envs_per_worker"] * config["rollout_length"]
axes[-1].set_xlabel(f"update (global step; {batch} agent steps = {4 * batch} frames each)")
fig.suptitle(f"{run.name}: the learner's view (worker 0)")
fig.tight_layout()
fig.savefig(out / "losses.png", dpi=90)

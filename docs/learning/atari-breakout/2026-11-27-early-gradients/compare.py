"""The learner's first 4,000 updates at rl-zoo A2C's update shape (80 agent steps, 320
frames each): SB3's A2C (sb3-a2c.csv, one row per update, from
../2026-11-27-sb3-a2c-control/sb3_gradnorm.py) beside a3c_graph's runs (losses.csv, from
TensorBoard: each row the mean over the updates since the last write). Both are compared as
means over windows of updates; SB3's value loss is halved to a3c_graph's 0.5 x MSE.

    python compare.py    # prints the markdown table of the README
"""
import csv
from pathlib import Path

HERE = Path(__file__).parent
RUNS = {"a3c_graph at SB3's settings": HERE / "ours-sb3like" / "losses.csv",
        "16x5-rmsprop": HERE.parent / "2026-11-27-16x5-rmsprop" / "losses.csv",
        "16x5-relu-valid": HERE.parent / "2026-11-27-16x5-relu-valid" / "losses.csv"}
WINDOWS = ((0, 100), (100, 500), (500, 1500), (1500, 3000), (3000, 4000))


def mean(rows, key, lo, hi, step, scale=1.0):
    values = [float(r[key]) * scale for r in rows
              if r.get(key) not in (None, "") and lo <= float(r[step]) < hi]
    return f"{sum(values) / len(values):.4f}" if values else ""


sb3 = list(csv.DictReader(open(HERE / "sb3-a2c.csv")))
runs = {name: list(csv.DictReader(open(path))) for name, path in RUNS.items()}
print("| updates | " + " | ".join(["SB3's A2C", *runs]) + " |")
print("|---|" + "---:|" * (1 + len(runs)))
for what, sb3_key, key, scale in (("gradient norm", "grad_norm", "loss/grad_norm", 1.0),
                                  ("entropy", "entropy", "loss/entropy", 1.0),
                                  ("value loss", "value_loss", "loss/value_loss", 0.5)):
    for lo, hi in WINDOWS:
        cells = [mean(sb3, sb3_key, lo, hi, "update", scale)]
        cells += [mean(rows, key, lo, hi, "global_step") for rows in runs.values()]
        print(f"| {what}, {lo}-{hi} | " + " | ".join(cells) + " |")

"""Draws an Atari record's against-zoo.png: the mean score of the last 100 games against
frames, the record's run beside rl-baselines3-zoo's own A2C run of the game (read from its
monitor files by zoo_run.py) and any other records given, each with its label.

    python docs/learning/against_zoo.py RECORD [OTHER_RECORD LABEL]...
"""

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
ZOO_RUNS = {  # per learning-suite task: its rl-zoo-run.json (zoo_run.py)
    "atari-breakout": HERE / "atari-breakout" / "rl-zoo-run.json",
    "atari-qbert": HERE / "atari-qbert" / "rl-zoo-run.json",
    "atari-beamrider": HERE / "atari-beamrider" / "rl-zoo-run.json",
    "atari-spaceinvaders": HERE / "atari-spaceinvaders" / "rl-zoo-run.json",
}


def _record(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())["records"][0]


def _curve(record: dict) -> tuple[list, list]:
    curve = record["curve"]
    points = [(f, r) for f, r in zip(curve["frames"], curve["mean_return"]) if r is not None]
    return [f / 1e6 for f, _ in points], [r for _, r in points]


def main(folder: Path, record: dict, curve: tuple[list, list],
         others: list[tuple[tuple[list, list], str]]) -> None:
    seed, target = record["seed"], record["target"]
    zoo = json.loads(ZOO_RUNS[record["task"]].read_text())["frames_mean_return_100"]
    zoo_curve = ([f / 1e6 for f, _ in zoo], [r for _, r in zoo])
    # Up to the record's own last frame (to the next 5M): a shorter run is drawn at its scale.
    until = min(40, 5 * math.ceil(max(curve[0]) / 5 - 0.01))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(*zoo_curve, color="grey",
            label=f"rl-baselines3-zoo's own A2C run (final agent: {target:,.0f} sampled)")
    for i, (other, label) in enumerate(others, start=1):
        ax.plot(*other, color=f"C{i}", label=label)
    ax.plot(*curve, color="C0", label=f"this run: seed {seed}")
    ax.axhline(target, color="black", linewidth=0.6, linestyle=":")
    game = record["env"].removeprefix("ALE/").removesuffix("-v5")
    ax.set(xlabel="frames (millions)", ylabel="mean score of the last 100 whole games",
           title=f"{game}, seed {seed}: the classic protocol against the anchor's run",
           xlim=(0, until))
    if until < 40:  # the target far above the curves would flatten them
        shown = [r for frames, returns in [curve, zoo_curve, *(other for other, _ in others)]
                 for f, r in zip(frames, returns) if f <= until]
        ax.set_ylim(min(0, min(shown)), 1.05 * max(shown))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(folder / "against-zoo.png", dpi=100)


if __name__ == "__main__":
    if len(sys.argv) < 2 or len(sys.argv) % 2:
        sys.stderr.write("usage: against_zoo.py RECORD [OTHER_RECORD LABEL]...\n")
        sys.exit(2)
    records, curves = [], []  # each given record read, and its curve taken, once
    for given in [sys.argv[1], *sys.argv[2::2]]:
        try:
            records.append(_record(Path(given)))
            curves.append(_curve(records[-1]))
        except (OSError, ValueError, LookupError, TypeError):
            sys.stderr.write(f"against_zoo.py: {given} has no learning suite's results.json "
                             "with a run's curve (not a record)\n")
            sys.exit(2)
    if records[0].get("task") not in ZOO_RUNS:
        sys.stderr.write(f"against_zoo.py: no rl-zoo run of {sys.argv[1]}'s game; known: "
                         + ", ".join(ZOO_RUNS) + "\n")
        sys.exit(2)
    main(Path(sys.argv[1]), records[0], curves[0], list(zip(curves[1:], sys.argv[3::2])))

"""Draws against-zoo.png: the mean score of the last 100 Breakout games against frames, this
run (seed 1) beside seed 0 on the same protocol and rl-baselines3-zoo's own A2C run (its
monitor files).

    python docs/learning/atari-breakout/2026-11-28-a2c-protocol-seed1/plot.py
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
ZOO = HERE.parent / "2026-11-27-sb3-a2c-control" / "rl-zoo-run.json"


def _ours(folder: Path) -> tuple[list, list]:
    curve = json.loads((folder / "results.json").read_text())["records"][0]["curve"]
    points = [(f, r) for f, r in zip(curve["frames"], curve["mean_return"]) if r is not None]
    return [f / 1e6 for f, _ in points], [r for _, r in points]


def main() -> None:
    zoo = json.loads(ZOO.read_text())["frames_mean_return_100"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot([f / 1e6 for f, _ in zoo], [r for _, r in zoo], color="grey",
            label="rl-baselines3-zoo's own A2C run (final agent: 280 sampled)")
    ax.plot(*_ours(HERE.parent / "2026-11-28-a2c-protocol-seed0"), color="tab:orange",
            label="seed 0, the same protocol")
    ax.plot(*_ours(HERE), color="tab:blue", label="this run: seed 1")
    ax.axhline(280, color="black", linewidth=0.6, linestyle=":")
    ax.set(xlabel="frames (millions)", ylabel="mean score of the last 100 whole games",
           title="Breakout, seed 1: the classic protocol against the anchor's run", xlim=(0, 40))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(HERE / "against-zoo.png", dpi=100)


if __name__ == "__main__":
    main()

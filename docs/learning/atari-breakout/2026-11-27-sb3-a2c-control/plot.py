"""Draws control.png: the mean score of the last 100 Breakout games against frames, to 10M
frames, for stable-baselines3's A2C here (progress.jsonl), this agent at the same settings
and on the classic protocol (their results.json), and openai/baselines' plotted A2C mean.

    python docs/learning/atari-breakout/2026-11-27-sb3-a2c-control/plot.py
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
LIMIT = 10.2e6
# openai/baselines benchmarks_atari10M, A2C on Breakout, mean of 6 runs, read off its plot.
BASELINES = ([4e6, 5e6, 10e6], [3.0, 4.5, 33.0])


def _ours(run: str) -> tuple[list, list]:
    record = json.loads((HERE.parent / run / "results.json").read_text())["records"][0]
    curve = record["curve"]
    points = [(f, r) for f, r in zip(curve["frames"], curve["mean_return"])
              if f <= LIMIT and r is not None]
    return [f for f, _ in points], [r for _, r in points]


def main() -> None:
    rows = [json.loads(line) for line in (HERE / "progress.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["mean_return_100"] is not None and r["frames"] <= LIMIT]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot([r["frames"] / 1e6 for r in rows], [r["mean_return_100"] for r in rows],
            label="stable-baselines3 A2C, rl-zoo's settings (this machine)")
    for run, label in (("2026-11-27-a2c-exact", "a3c_graph, rl-zoo A2C's settings"),
                       ("2026-11-27-seed0", "a3c_graph, classic protocol (seed 0)")):
        frames, scores = _ours(run)
        ax.plot([f / 1e6 for f in frames], scores, label=label)
    ax.plot([f / 1e6 for f in BASELINES[0]], BASELINES[1], "ko--",
            label="openai/baselines A2C, mean of 6 runs (read off its plot)")
    ax.set_xlabel("frames (millions)")
    ax.set_ylabel("mean score, last 100 whole games")
    ax.set_title("Breakout to 10M frames: the anchor's own code here against this agent")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "control.png", dpi=100)


if __name__ == "__main__":
    main()

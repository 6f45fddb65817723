"""Draws control.png: the mean score of the last 100 Breakout games against frames. Left, to
10M frames: stable-baselines3's A2C here (progress.jsonl), this agent at the same settings
and on the classic protocol (their results.json), rl-baselines3-zoo's own A2C run (its
monitor files, rl-zoo-run.json) and openai/baselines' plotted A2C mean. Right, to 40M
frames: the zoo's run against the classic protocol's seed 0 and the two diagnostics after it
(a constant learning rate; rl-zoo's optimizer and update shape on the classic network).

    python docs/learning/atari-breakout/2026-11-27-sb3-a2c-control/plot.py
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
# openai/baselines benchmarks_atari10M, A2C on Breakout, mean of 6 runs, read off its plot.
BASELINES = ([4e6, 5e6, 10e6, 20e6, 40e6], [3.0, 4.5, 33.0, 112.0, 275.0])


def _ours(run: str) -> tuple[list, list]:
    curve = json.loads((HERE.parent / run / "results.json").read_text())["records"][0]["curve"]
    points = [(f, r) for f, r in zip(curve["frames"], curve["mean_return"]) if r is not None]
    return [f for f, _ in points], [r for _, r in points]


def _sb3() -> tuple[list, list]:
    rows = [json.loads(line) for line in (HERE / "progress.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["mean_return_100"] is not None]
    return [r["frames"] for r in rows], [r["mean_return_100"] for r in rows]


def _zoo() -> tuple[list, list]:
    points = json.loads((HERE.parent / "rl-zoo-run.json").read_text())["frames_mean_return_100"]
    return [f for f, _ in points], [r for _, r in points]


def main() -> None:
    curves = [
        ("rl-baselines3-zoo's own A2C run (its monitor files, 4 of 16 envs)", _zoo(), "C3"),
        ("stable-baselines3 A2C, rl-zoo's settings, this machine", _sb3(), "C0"),
        ("a3c_graph, rl-zoo A2C's settings", _ours("2026-11-27-a2c-exact"), "C1"),
        ("a3c_graph, classic protocol (seed 0)", _ours("2026-11-27-seed0"), "C2"),
        ("a3c_graph, classic, learning rate constant", _ours("2026-11-27-const-lr"), "C4"),
        ("a3c_graph, classic network, 2 x 16 x 5, RMSProp 7e-4",
         _ours("2026-11-27-16x5-rmsprop"), "C5"),
        ("the same, ReLU and valid padding", _ours("2026-11-27-16x5-relu-valid"), "C6"),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, limit in zip(axes, (10.2e6, 40.5e6)):
        for label, (frames, scores), color in curves:
            shown = [(f / 1e6, s) for f, s in zip(frames, scores) if f <= limit]
            ax.plot(*zip(*shown), color=color, label=label)
        marks = [(f / 1e6, s) for f, s in zip(*BASELINES) if f <= limit]
        ax.plot(*zip(*marks), "ko--",
                label="openai/baselines A2C, mean of 6 runs (read off its plot)")
        ax.set_xlabel("frames (millions)")
        ax.set_ylabel("mean score, last 100 whole games")
        ax.grid(alpha=0.3)
    axes[0].set_title("to 10M frames")
    axes[1].set_title("to 40M frames")
    axes[0].legend(fontsize=7)
    fig.suptitle("Breakout: the anchors' own runs against this agent")
    fig.tight_layout()
    fig.savefig(HERE / "control.png", dpi=100)


if __name__ == "__main__":
    main()

"""Whether a run is level with a committed record's curve where the run ended: the run's last
100 whole games (read from its final checkpoint, where the cluster keeps every worker's
recent returns with the time each game ended) against the record's mean return(100) at the
same frame count, level when they differ by at most one standard error of those 100 games.

    python docs/learning/last_games.py LOGDIR RECORD OUT

LOGDIR is the run's log dir (its checkpoint), RECORD a committed record's folder (its
results.json), OUT the new record's folder: the run's last 100 returns and the verdict are
written to OUT/last-100-games.json, and printed.
"""

import json
import statistics
import sys
from pathlib import Path

import numpy as np

from a3c_graph.core.stop_rule import RECENT_EPISODES as GAMES  # the mean return(100)


def last_games(checkpoint: Path) -> tuple[int, list[float], float]:
    """(the checkpoint's env steps, its GAMES newest returns by end time, oldest first, and
    the time the oldest of them ended); `checkpoint` a log dir (its newest) or a prefix."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(checkpoint))
    returns = reader.get_tensor("episode_stats/recent_returns").ravel()
    ended = reader.get_tensor("episode_stats/recent_end_times").ravel()
    newest = [i for i in np.argsort(ended) if ended[i] >= 0][-GAMES:]
    return (int(reader.get_tensor("episode_stats/env_steps")),
            [float(returns[i]) for i in newest], float(ended[newest[0]]))


def curve_at(record: dict, frames: float) -> float:
    """The record's mean return(100) at `frames`, linear between its two nearest points."""
    curve = record["curve"]
    points = [(f, r) for f, r in zip(curve["frames"], curve["mean_return"]) if r is not None]
    return float(np.interp(frames, [f for f, _ in points], [r for _, r in points]))


def main(logdir: Path, record_dir: Path, out: Path) -> dict:
    env_steps, returns, _ = last_games(logdir)
    if len(returns) < GAMES:
        raise SystemExit(f"last_games.py: {logdir} holds {len(returns)} finished games, "
                         f"fewer than {GAMES}")
    record = json.loads((record_dir / "results.json").read_text())["records"][0]
    frames = env_steps * record["frame_skip"]
    mean = statistics.fmean(returns)
    standard_error = statistics.stdev(returns) / len(returns) ** 0.5
    anchor = curve_at(record, frames)
    summary = {
        "logdir": str(logdir), "record": str(record_dir), "frames": frames,
        "mean_return_100": round(mean, 2), "standard_error": round(standard_error, 2),
        "record_mean_return_100": round(anchor, 2),
        "difference": round(mean - anchor, 2),
        "level": abs(mean - anchor) <= standard_error, "returns": returns,
    }
    (out / "last-100-games.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{frames / 1e6:.2f}M frames: last {GAMES} games {mean:.2f} ± {standard_error:.2f} "
          f"(standard error); {record_dir.name} at the same frames {anchor:.2f}; difference "
          f"{mean - anchor:+.2f}: {'level' if summary['level'] else 'not level'}")
    return summary


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*(Path(arg) for arg in sys.argv[1:]))

"""Why an Atari run's final checkpoint plays below (or above) its training curve: the same
policy played the evaluation's way and training's way, and the policies the curve's last 100
games were played by, each evaluated alone.

    python docs/learning/evaluation_gap.py LOGDIR RECORD OUT [--games 100] [--window 2]

LOGDIR is the run's log dir (its kept checkpoints, progress files and TensorBoard events),
RECORD its record (results.json: the curve the workers' games drew),
OUT where evaluation-gap.json and evaluation-gap.png go. What is played, sampled actions
throughout (the curve's and the evaluation's measure):

- training's stream: the final checkpoint on the workers' own env batches (their seeds, every
  env going on through its resets, games counted as they end: playing.play_stream), GAMES
  games, against GAMES played the evaluation's way (fresh envs seeded as a3c_graph.evaluate
  seeds them, one game each: playing.play_games). Level: the evaluation's env construction,
  resets and no-ops are not the gap.
- the window: every kept checkpoint from WINDOW times the span of the curve's last 100 games
  before the end, GAMES games each the evaluation's way. Their mean against the curve's last
  100 games: level, the final checkpoint is one draw of a policy that moves from update to
  update; below, frozen policies play below the learning one the curve measures.
- each worker's own last 100 games along the run (TensorBoard's episode/return).

Every set of games keeps its returns and the score most of its games ended at: a frozen
policy can lose the same way game after game, where the curve's games were each played by
hundreds of successive policies.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import statistics
from collections import Counter
from pathlib import Path

import numpy as np
from last_games import GAMES, last_games  # beside this file

SEED = 12345  # the evaluation's (a3c_graph.evaluate's default)


def mean_and_error(returns) -> dict:
    """The games' mean, the standard error of that mean, how many, the score most of them
    ended at and how many did (a frozen policy caught in one trap shows there), and the
    games' returns."""
    score, count = Counter(returns).most_common(1)[0]
    return {"mean": statistics.fmean(returns), "games": len(returns),
            "standard_error": statistics.stdev(returns) / len(returns) ** 0.5,
            "most_common": {"score": score, "games": count}, "returns": list(returns)}


def difference(a: dict, b: dict) -> dict:
    """a - b in standard errors of the difference; level when within 2."""
    error = (a["standard_error"] ** 2 + b["standard_error"] ** 2) ** 0.5
    gap = a["mean"] - b["mean"]
    return {"difference": gap, "standard_errors": gap / error if error else 0.0,
            "level": abs(gap) <= 2 * error}


def progress_clock(logdir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, env steps, global step) of every progress write of every worker, by time."""
    from a3c_graph.rundir.progress import read_history

    rows = [(r["time"], r["env_steps"], r["global_step"]) for r in read_history(logdir)
            if None not in (r.get("time"), r.get("env_steps"), r.get("global_step"))]
    return tuple(np.asarray(column, float) for column in zip(*rows))


def kept_checkpoints(logdir: Path) -> list[tuple[str, int]]:
    """(prefix, global step) of every checkpoint in `logdir`, oldest first."""
    found = []
    for index in glob.glob(str(logdir / "model.ckpt-*.index")):
        prefix = index.removesuffix(".index")
        found.append((prefix, int(re.search(r"-(\d+)$", prefix).group(1))))
    return sorted(found, key=lambda pair: pair[1])


def worker_curves(logdir: Path, clock) -> dict[str, dict]:
    """Each worker's own mean of its last 100 games against frames (TensorBoard)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, env_steps, global_steps = clock
    curves = {}
    for folder in sorted((logdir / "tb").glob("worker_*")):
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        events.Reload()
        if "episode/return" not in events.Tags()["scalars"]:
            continue
        points = events.Scalars("episode/return")
        steps = np.interp([p.step for p in points], global_steps, env_steps)
        curves[folder.name] = {"env_steps": steps.tolist(),
                               "mean_return": [p.value for p in points]}
    return curves


def play(config, checkpoint: str, games: int, stream_seeds=None) -> list[float]:
    """`games` sampled games of `checkpoint`: the evaluation's way, or training's stream on
    the env batches seeded `stream_seeds`."""
    from a3c_graph.trained.playing import play_games, play_stream

    quiet = lambda line: None  # noqa: E731 (the summary is printed, not each game)
    if stream_seeds is None:
        return play_games(config, checkpoint, games, SEED, True, say=quiet)[0]
    return play_stream(config, checkpoint, games, True, stream_seeds, say=quiet)[0]


def measure(logdir: Path, record: dict, games: int, window: float) -> dict:
    """Every figure of the module docstring, as evaluation-gap.json holds them."""
    from a3c_graph.core.envs import actor_seed
    from a3c_graph.rundir.run_config import read_run_config

    config = read_run_config(str(logdir))
    clock = progress_clock(logdir)
    kept = kept_checkpoints(logdir)
    final = kept[-1][0]
    _, curve_games, oldest = last_games(final)
    steps_of = lambda global_step: float(np.interp(global_step, clock[2], clock[1]))  # noqa: E731
    start = float(np.interp(oldest, clock[0], clock[1]))
    end = steps_of(kept[-1][1])
    workers = len(list((logdir / "progress").glob("worker_*.jsonl")))
    seeds = [actor_seed(config.seed, task, actor)
             for task in range(workers) for actor in range(config.actor_threads)]
    stream = mean_and_error(play(config, final, games, seeds))
    print(f"the final checkpoint on training's envs: {stream['mean']:.1f}", flush=True)
    window_checkpoints = []
    for prefix, global_step in kept:
        if steps_of(global_step) >= end - window * (end - start):
            name, played = Path(prefix).name, mean_and_error(play(config, prefix, games))
            print(f"{name}, the evaluation's way: {played['mean']:.1f}", flush=True)
            window_checkpoints.append({"checkpoint": name,
                                       "env_steps": steps_of(global_step), **played})
    curve = mean_and_error(curve_games)
    pooled = {"mean": statistics.fmean(c["mean"] for c in window_checkpoints),
              "standard_error": (sum(c["standard_error"] ** 2 for c in window_checkpoints)
                                 ** 0.5 / len(window_checkpoints))}
    return {
        "logdir": str(logdir), "frame_skip": record["frame_skip"], "games": games,
        "curve_last_games": {**curve, "from_env_steps": start, "to_env_steps": end},
        "evaluation": window_checkpoints[-1],
        "stream": {**stream, "seeds": seeds},
        "stream_against_evaluation": difference(stream, window_checkpoints[-1]),
        "window": window_checkpoints,
        "window_against_curve": difference(pooled, curve) | {"window_mean": pooled["mean"]},
        "workers": worker_curves(logdir, clock),
    }


def plot(result: dict, record: dict, out: Path) -> Path:
    """evaluation-gap.png: the run's last stretch, its curve and each worker's, the window's
    checkpoints and the final one's two ways of play, each with a 95 % bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.harness.report import save_figure

    skip = result["frame_skip"] / 1e6
    curve = result["curve_last_games"]
    left = curve["to_env_steps"] - 4 * (curve["to_env_steps"] - curve["from_env_steps"])
    fig, ax = plt.subplots(figsize=(9, 5))
    frames, returns = record["curve"]["frames"], record["curve"]["mean_return"]
    shown = [(f / 1e6, r) for f, r in zip(frames, returns)
             if r is not None and f >= left * result["frame_skip"]]
    ax.plot(*zip(*shown), color="black", label="the curve: the cluster's last 100 games")
    for name, worker in result["workers"].items():
        points = [(s * skip, r) for s, r in zip(worker["env_steps"], worker["mean_return"])
                  if s >= left]
        ax.plot(*zip(*points), linewidth=0.8, alpha=0.7, label=f"{name}'s own last 100 games")
    bar = lambda estimate: 1.96 * estimate["standard_error"]  # noqa: E731
    ax.errorbar([c["env_steps"] * skip for c in result["window"]],
                [c["mean"] for c in result["window"]], yerr=[bar(c) for c in result["window"]],
                fmt="o", color="C3", capsize=3,
                label=f"kept checkpoints, {result['games']} games each (the evaluation's way)")
    at, span = curve["to_env_steps"] * skip, (curve["to_env_steps"] - left) * skip
    for offset, key, style, label in ((0.03, "evaluation", "s", "the final one, the "
                                       "evaluation's way"),
                                      (0.06, "stream", "^", "the final one on training's envs")):
        estimate = result[key]
        ax.errorbar([at + offset * span], [estimate["mean"]], yerr=[bar(estimate)], fmt=style,
                    capsize=3, label=f"{label} ({estimate['games']} games)")
    ax.set(xlabel="frames (millions)", ylabel="mean score (sampled actions)",
           title=f"{record['env']} seed {record['seed']}: the final stretch, played again")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    return save_figure(fig, out / "evaluation-gap.png")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", type=Path)
    parser.add_argument("record", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--games", type=int, default=GAMES)
    parser.add_argument("--window", type=float, default=2.0)
    args = parser.parse_args(argv)
    record = json.loads((args.record / "results.json").read_text())["records"][0]
    result = measure(args.logdir, record, args.games, args.window)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "evaluation-gap.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, record, args.out)
    curve, stream = result["curve_last_games"], result["stream_against_evaluation"]
    window = result["window_against_curve"]
    print(f"curve's last {GAMES} games {curve['mean']:.1f} ± {curve['standard_error']:.1f}; "
          f"final checkpoint: evaluation {result['evaluation']['mean']:.1f}, training's "
          f"stream {result['stream']['mean']:.1f} ({stream['standard_errors']:+.1f} SE: "
          f"{'level' if stream['level'] else 'not level'}); window of "
          f"{len(result['window'])} checkpoints {window['window_mean']:.1f} "
          f"({window['standard_errors']:+.1f} SE against the curve)")
    return result


if __name__ == "__main__":
    main()

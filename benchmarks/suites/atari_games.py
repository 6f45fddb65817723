"""The A3C paper's Atari games beside their anchors: one table and one figure from the learning
suite's results of the atari-* tasks (benchmarks.learning --tasks atari-breakout, ...).

    python -m benchmarks.atari_games OUT RESULTS_DIR [RESULTS_DIR ...]
    python -m benchmarks.atari_games --record-figures RECORD_DIR [RECORD_DIR ...]

Each RESULTS_DIR is a learning suite's --out (a game per suite, or several); every record of
an atari-* task in them is read, whichever folder holds it. Writes <OUT>/atari.md (per game:
seeds, frames, minutes, the training curve's last 100 games, the final checkpoints'
evaluations sampled (the mean over seeds, its 95 % interval and the verdict against A2C's
score: atari_statistics.py) and greedy, and the anchors at 40M frames; then every run (its
evaluation's mean, standard error and bootstrap interval), and every run's
curve read each 5M frames with when it reached A2C's score; with every game evaluated on as
many seeds, also the human-normalised IQM and mean over games x seeds beside rl-zoo's),
<OUT>/atari.json (the same, for scripts), <OUT>/readme-table.md (the README's table, from the
same figures), <OUT>/atari.png (each game's curves against
frames, the anchors as lines) and then <OUT>/atari-profile.png (the performance profiles).
Paths to each run's own results are relative to OUT.

--record-figures prints each run record's figures block (its curve every 5M frames beside
rl-zoo's own run, read from rl-zoo-run.json in the game's folder, and where it falls behind
that run from 20M frames on, read every 0.25M frames; and its evaluations), the block its
README holds.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from a3c_graph.rundir.progress import write_atomic
from a3c_graph.system.cli import UsageError, fail
from benchmarks.harness.report import median, save_figure
from benchmarks.suites.atari_statistics import (
    aggregates,
    evaluation_estimate,
    game_estimate,
    performance_profiles,
    score_matrix,
)
from benchmarks.suites.learning_report import _fmt, evaluated, evaluation_of, last_frame

PROG = "benchmarks.atari_games"


@dataclass(frozen=True)
class Anchors:
    """Published scores at 40M frames (10M agent steps) of one game."""

    game: str
    a2c: float        # rl-baselines3-zoo benchmark.md, A2C, sampled actions
    ppo: float        # the same table, PPO
    a3c_paper: float  # Mnih et al. 2016, the 16-thread curves read at 40M frames (approx.)


# rl-baselines3-zoo (NoFrameskip-v4 with its AtariWrapper, one run each, the final agent
# evaluated with sampled actions); the A3C paper's figures read by eye at 40M frames.
ANCHORS = {anchor.game: anchor for anchor in (
    Anchors("atari-breakout", 280.0, 398.0, 150.0),
    Anchors("atari-beamrider", 2890.0, 3397.0, 3000.0),
    Anchors("atari-qbert", 3882.0, 15627.0, 1000.0),
    Anchors("atari-spaceinvaders", 627.0, 960.0, 600.0),
)}


def read_records(folders: Sequence[Path], out: Path) -> list[dict]:
    """The atari-* records of the suites' results.json in `folders`, in the order of ANCHORS,
    each with its folder (relative to `out`) as "results"."""
    records = []
    for folder in folders:
        path = folder / "results.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            found = [r for r in data["records"] if r.get("task") in ANCHORS]
        except (OSError, ValueError, KeyError, TypeError):
            raise UsageError(f"{path} is missing or is not a learning suite's results.json"
                             ) from None
        for record in found:
            record["results"] = os.path.relpath(folder, out)
        records += found
    if not records:
        raise UsageError("no run of an atari-* task in " + ", ".join(map(str, folders)))
    order = list(ANCHORS)
    return sorted(records, key=lambda r: (order.index(r["task"]), r["seed"]))


def _games(record: dict, mode: str) -> list[float] | None:
    """The returns of the run's evaluation games in `mode` (None if it has fewer than 2)."""
    returns = evaluation_of(record, mode).get("returns")
    return returns if returns and len(returns) >= 2 else None


def summarize(records: Sequence[dict]) -> dict[str, dict]:
    """Per game: the medians over its seeds; the sampled evaluations' mean over seeds with its
    95 % interval (atari_statistics.game_estimate) and the verdict against A2C's score read
    off it; and the anchors."""
    games = {}
    for game, anchor in ANCHORS.items():
        runs = [r for r in records if r["task"] == game]
        if not runs:
            continue
        sampled = [evaluated(r, "sampled") for r in runs]
        played = [_games(r, "sampled") for r in runs]
        estimate = (game_estimate(played) if all(played) else None)
        games[game] = {
            "env": runs[0]["env"], "seeds": len(runs),
            "median_frames": median([last_frame(r) for r in runs]),
            "median_minutes": median([r["wall_s"] / 60 for r in runs]),
            "median_last_100": median([r["final_mean_return_100"] for r in runs]),
            "median_sampled": median(sampled),
            "median_greedy": median([evaluated(r, "greedy") for r in runs]),
            "sampled": estimate.as_dict() if estimate else None,
            "against_a2c": estimate.verdict(anchor.a2c) if estimate else None,
            "a2c": anchor.a2c, "ppo": anchor.ppo, "a3c_paper": anchor.a3c_paper,
        }
    return games


def _interval(estimate: dict | None) -> str:
    """"mean [low, high]" of an estimate's dict, or "-"."""
    if not estimate:
        return "-"
    return f"{estimate['mean']:,.1f} [{estimate['low']:,.1f}, {estimate['high']:,.1f}]"


def _spread(record: dict) -> str:
    """The run's sampled evaluation: games, mean ± standard error [95 % bootstrap interval]
    (lowest to highest game)."""
    played = evaluation_of(record, "sampled")
    if "mean_return" not in played:
        return "-"
    returns = _games(record, "sampled")
    if returns is None:  # an older record without its games' returns
        return f"{played.get('episodes', '?')} games, {played['mean_return']:,.1f}"
    estimate = evaluation_estimate(returns)
    return (f"{len(returns)} games, {estimate.mean:,.1f} ± {estimate.standard_error:,.1f} "
            f"[{estimate.low:,.1f}, {estimate.high:,.1f}] ({min(returns):,.0f} to "
            f"{max(returns):,.0f})")


MARKS = tuple(range(5, 45, 5))  # millions of frames at which each run's curve is read
# Millions of frames at which a record reads its curve against rl-zoo's run: every 0.25M
# frames of the budget's second half.
AGAINST_ZOO = tuple(m / 4 for m in range(80, 161))


def curve_at(record: dict, millions: float) -> float | None:
    """The run's mean score of the last 100 games at `millions` frames: the curve's last point
    at or before it (None before the curve's first point or past its end)."""
    frames, scores = record["curve"]["frames"], record["curve"]["mean_return"]
    if not frames or frames[-1] < millions * 1e6 * 0.99:  # a run cut short is not extrapolated
        return None
    before = [score for frame, score in zip(frames, scores) if frame <= millions * 1e6]
    return before[-1] if before else None


def training_rate(record: dict) -> float | None:
    """The run's agent steps/s over its training: its curve's steps over its seconds, on the
    run's clock, which joins the pieces of a run resumed in its log dir (a record written
    before the suite took a resumed run's speed over all its pieces holds its last piece's)."""
    curve = record["curve"]
    steps, seconds = curve.get("env_steps") or [], curve["seconds"]
    if len(steps) < 2 or seconds[-1] <= seconds[0]:
        return None
    return (steps[-1] - steps[0]) / (seconds[-1] - seconds[0])


def _reached_a2c_score(record: dict) -> tuple[float, float] | None:
    """(frames, seconds) of training when the curve first reached the game's A2C score."""
    curve, score = record["curve"], ANCHORS[record["task"]].a2c
    for frames, seconds, mean in zip(curve["frames"], curve["seconds"], curve["mean_return"]):
        if mean is not None and mean >= score:
            return frames, seconds
    return None


def _to_a2c_score(record: dict) -> str:
    """Frames and minutes of training when the curve first reached the game's A2C score."""
    reached = _reached_a2c_score(record)
    if reached is None:
        return "not reached"
    return f"{reached[0] / 1e6:.1f}M frames, {reached[1] / 60:.0f} min"


def markdown(games: dict[str, dict], records: Sequence[dict],
             aggregated: Sequence[str] = ()) -> str:
    lines = ["# The A3C paper's Atari games on two cores, at 40M frames", "",
             "| game | seeds | frames | minutes | training: last 100 games | sampled: mean "
             "[95 % interval] | against rl-zoo A2C | greedy | rl-zoo A2C | rl-zoo PPO | "
             "A3C paper |", "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|"]
    for row in games.values():
        lines.append(f"| {row['env']} | {row['seeds']} | {_fmt(row['median_frames'])} | "
                     f"{_fmt(row['median_minutes'], 0)} | {_fmt(row['median_last_100'])} | "
                     f"{_interval(row['sampled'])} | {row['against_a2c'] or '-'} | "
                     f"{_fmt(row['median_greedy'])} | {row['a2c']:,.0f} | "
                     f"{row['ppo']:,.0f} | ~{row['a3c_paper']:,.0f} |")
    lines += ["", "Frames, minutes, the training column and greedy: medians over a game's "
              "seeds. Scores are whole games (every life), raw (rewards are clipped for "
              "learning only). The training column is the mean of the last 100 games the "
              "workers played. The evaluation is each seed's final checkpoint in "
              "`a3c_graph.evaluate` (whole games, up to 30 no-ops at the start, each cut at "
              "108,000 frames) with sampled actions, as rl-zoo scores Atari: the mean over "
              "seeds of their evaluations' means, and a 95 % interval by a two-level "
              "bootstrap (seeds, then each seed's games); against A2C: above, level or below "
              "by that interval. Greedy (the most likely action) is not the anchors' measure. "
              "rl-zoo: rl-baselines3-zoo's benchmark.md at 40M frames; the A3C paper: its "
              "16-thread curves read at 40M frames.", "", *aggregated,
              "## Runs", "", "| game | seed | frames | minutes | agent steps/s | last 100 "
              "games | best 100 | sampled: games, mean ± standard error [95 % bootstrap "
              "interval] (lowest to highest) | greedy | exit | results |",
              "|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|"]
    for r in records:
        lines.append(f"| {r['env']} | {r['seed']} | {_fmt(last_frame(r))} | "
                     f"{_fmt(r['wall_s'] / 60, 0)} | {_fmt(training_rate(r), 0)} | "
                     f"{_fmt(r['final_mean_return_100'])} | "
                     f"{_fmt(r['best_mean_return_100'])} | {_spread(r)} | "
                     f"{_fmt(evaluated(r, 'greedy'))} | "
                     f"{r['exit_code']} ({r.get('stop_reason')}) | "
                     f"[{r['results']}]({r['results']}/results.md) |")
    lines += ["", "Minutes: wall time, start-ups included. Agent steps/s: over the run's "
              "training, from its curve's first point to its last (the pieces of a run "
              "resumed in its log dir joined, the pauses between them left out).",
              "", "## Curves", "", "The mean score of the last 100 games the workers played, "
              "at each 5M frames of training, and when it first reached the game's A2C score.",
              "", "| game | seed | " + " | ".join(f"{m}M" for m in MARKS) +
              " | reached A2C's score at |", "|---|---:|" + "---:|" * len(MARKS) + "---|"]
    for r in records:
        lines.append(f"| {r['env']} | {r['seed']} | " +
                     " | ".join(_fmt(curve_at(r, m)) for m in MARKS) +
                     f" | {_to_a2c_score(r)} |")
    return "\n".join(lines) + "\n"


ZOO_RUN = "rl-zoo-run.json"  # in each game's folder, beside its records (zoo_run.py)


def zoo_curve(record_folder: Path) -> dict | None:
    """rl-zoo's own A2C run of the record's game, as docs/learning/zoo_run.py reads it from
    its monitor files: {"frames": [...], "mean_return": [...]} (None if the game's folder
    has none)."""
    path = record_folder.parent / ZOO_RUN
    if not path.exists():
        return None
    points = json.loads(path.read_text())["frames_mean_return_100"]
    return {"frames": [f for f, _ in points], "mean_return": [r for _, r in points]}


def record_figures(record: dict, zoo: dict | None) -> str:
    """The figures block of one run's record README, rendered from its results.json: the
    training curve (the mean score of the last 100 games) at each 5M frames beside rl-zoo's
    own run, when it reached A2C's score and its best 100 games, and the final checkpoint's
    evaluations (tests/unit/benchmarks/test_atari_games.py checks each record holds it)."""
    anchor = ANCHORS[record["task"]]
    lines = ["| frames | " + " | ".join(f"{m}M" for m in MARKS) + " |",
             "|---|" + "---:|" * len(MARKS),
             f"| this run (seed {record['seed']}) | " +
             " | ".join(_fmt(curve_at(record, m)) for m in MARKS) + " |"]
    if zoo is not None:
        lines.append("| rl-zoo's own A2C run ([its monitor files](../rl-zoo-run.json)) | " +
                     " | ".join(_fmt(curve_at({"curve": zoo}, m)) for m in MARKS) + " |")
    greedy = evaluation_of(record, "greedy")
    greedy_games = f" over {greedy['episodes']} games" if "episodes" in greedy else ""
    at = _reached_a2c_score(record)
    reached = (f"reached A2C's {anchor.a2c:,.0f} at {at[0] / 1e6:.1f}M frames "
               f"({at[1] / 60:.0f} minutes)" if at else f"did not reach A2C's {anchor.a2c:,.0f}")
    lines += ["", f"The mean score of the last 100 whole games the workers played; it "
              f"{reached}, its best 100 games "
              f"{_fmt(record['best_mean_return_100'])}, its last "
              f"{_fmt(record['final_mean_return_100'])} at {_fmt(last_frame(record))} frames. "
              f"The final checkpoint, sampled actions: {_spread(record)}; greedy: "
              f"{_fmt(evaluated(record, 'greedy'))}{greedy_games}. rl-zoo's A2C "
              f"{anchor.a2c:,.0f}, PPO {anchor.ppo:,.0f} (sampled)."]
    if zoo is not None:
        lines += ["", _against_zoo_run(record, zoo)]
    return "\n".join(lines) + "\n"


def _behind_zoo_run(record: dict, zoo: dict) -> list[tuple[float, float, float]]:
    """The stretches of AGAINST_ZOO where the curve is below rl-zoo's run: (first, last
    millions of frames, the widest gap) each."""
    stretches: list[tuple[float, float, float]] = []
    for at, before in zip(AGAINST_ZOO, [None, *AGAINST_ZOO]):
        ours, theirs = curve_at(record, at), curve_at({"curve": zoo}, at)
        if ours is None or theirs is None or ours >= theirs:
            continue
        if stretches and stretches[-1][1] == before:
            first, _, gap = stretches.pop()
            stretches.append((first, at, max(gap, theirs - ours)))
        else:
            stretches.append((at, at, theirs - ours))
    return stretches


def _gap(points: float) -> str:
    return f"{points:,.1f}" if points >= 0.1 else "less than 0.1"


def _against_zoo_run(record: dict, zoo: dict) -> str:
    """The curve against rl-zoo's run at AGAINST_ZOO, in one sentence."""
    if curve_at(record, AGAINST_ZOO[-1]) is None:
        return (f"The curve ends short of {AGAINST_ZOO[-1]:g}M frames: not read against "
                "rl-zoo's run.")
    read = f"Read every 0.25M frames from {AGAINST_ZOO[0]:g}M on, the curve"
    stretches = _behind_zoo_run(record, zoo)
    if not stretches:
        return f"{read} is level with or ahead of rl-zoo's run at every reading."
    behind = sum(any(first <= at <= last for first, last, _ in stretches) for at in AGAINST_ZOO)
    spans = "; ".join(
        f"at {first:g}M (by {_gap(gap)})" if first == last else
        f"from {first:g}M to {last:g}M (by up to {_gap(gap)})" for first, last, gap in stretches)
    return (f"{read} is behind rl-zoo's run at {behind} of {len(AGAINST_ZOO)} readings: "
            f"{spans}; level with or ahead of it at the others.")


NAMES = {"atari-breakout": "Breakout", "atari-beamrider": "BeamRider",
         "atari-qbert": "Q*bert", "atari-spaceinvaders": "Space Invaders"}

README_NOTES = (
    "Sampled: each seed's final checkpoint over whole games with sampled actions, as rl-zoo "
    "scores Atari; the mean over seeds and a 95 % interval by a two-level bootstrap (seeds, "
    "then each seed's games). Against rl-zoo's A2C: above or below when the interval is, "
    "else level. Greedy (the most likely action) and the training curve's last 100 games "
    "are medians over seeds, not the anchors' measure. What differs from the anchors: this "
    "agent learns with two asynchronous workers of 16 envs x 5 steps, each applying its own "
    "gradients to the shared network on the ps, where rl-zoo's A2C has one learner of 16 "
    "envs x 5 steps (both 40M frames in all); rl-zoo's figures are one run each of "
    "NoFrameskip-v4 envs, this table's ALE v5 envs on the classic protocol.")


def readme_table(games: dict[str, dict]) -> str:
    """The README's Atari table, from atari.json's games: per game the seeds, the sampled
    evaluations' mean over seeds with its interval and the verdict against rl-zoo's A2C, and
    the anchors (tests/unit/benchmarks/test_atari_games.py checks the README holds it)."""
    lines = ["| game | seeds | sampled: mean [95 % interval] | against rl-zoo A2C | greedy | "
             "training: last 100 games | rl-zoo A2C / PPO | A3C paper |",
             "|---|---:|---|---|---:|---:|---:|---:|"]
    for task, row in games.items():
        lines.append(f"| {NAMES.get(task, row['env'])} | {row['seeds']} | "
                     f"{_interval(row.get('sampled'))} | {row.get('against_a2c') or '-'} | "
                     f"{_fmt(row['median_greedy'])} | {_fmt(row['median_last_100'])} | "
                     f"{row['a2c']:,.0f} / {row['ppo']:,.0f} | ~{row['a3c_paper']:,.0f} |")
    return "\n".join(lines) + "\n\n" + README_NOTES + "\n"


AGENT = "a3c_graph"
REFERENCES = {"rl-zoo A2C": "a2c", "rl-zoo PPO": "ppo"}  # one run each, the anchors' figures


def score_matrices(records: Sequence[dict]) -> dict[str, np.ndarray] | None:
    """Human-normalised scores [runs, games] of this agent (each seed's sampled evaluation
    mean) and of the reference agents (their published score, one run): None unless every
    game has as many seeds evaluated (the stratified bootstrap's rows)."""
    scores = {game: [evaluated(r, "sampled") for r in records if r["task"] == game]
              for game in ANCHORS}
    counts = {len(values) for values in scores.values()}
    if len(counts) != 1 or 0 in counts or any(None in v for v in scores.values()):
        return None
    games = list(ANCHORS)
    matrices = {AGENT: score_matrix(scores, games)}
    for name, field in REFERENCES.items():
        matrices[name] = score_matrix({g: [getattr(ANCHORS[g], field)] for g in games}, games)
    return matrices


def aggregate_lines(matrices: dict[str, np.ndarray] | None) -> list[str]:
    """atari.md's section of the aggregates over games x seeds (rliable)."""
    lines = ["## Over the four games", ""]
    if matrices is None:
        return lines + ["Not computed: the aggregates need every game evaluated on as many "
                        "seeds.", ""]
    results = aggregates(matrices)
    lines += ["| agent | runs per game | IQM of human-normalised scores [95 % interval] | "
              "mean [95 % interval] |", "|---|---:|---|---|"]
    for name, result in results.items():
        cells = [f"{point:.3f} [{low:.3f}, {high:.3f}]" for point, low, high in
                 (result.iqm, result.mean)]
        lines.append(f"| {name} | {matrices[name].shape[0]} | {cells[0]} | {cells[1]} |")
    return lines + ["", "Scores normalised as (score - random) / (human - random) (Mnih et al. "
                    "2015's random and human play); the interquartile mean (IQM) and the mean "
                    "over runs x games, with stratified bootstrap intervals (Agarwal et al. "
                    "2021, the `rliable` library). rl-zoo's figures are one run each: "
                    "reference lines, without an interval of their own. atari-profile.png: "
                    "the performance profiles.", ""]


def plot_profiles(out: Path, matrices: dict[str, np.ndarray]) -> Path:
    """atari-profile.png: the fraction of runs x games above each human-normalised score,
    with its 95 % band, per agent (rliable's performance profiles)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    top = max(float(matrix.max()) for matrix in matrices.values())
    taus = np.linspace(0.0, max(1.0, top * 1.05), 101)
    profiles, bands = performance_profiles(matrices, taus)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=bands, ax=ax)
    ax.legend(loc="upper right", fontsize="small")  # rliable labels each line by its agent
    ax.set_title("Atari, 4 games at 40M frames: performance profiles")
    return save_figure(fig, out / "atari-profile.png")


def plot(out: Path, records: Sequence[dict]) -> Path:
    """atari.png: one panel per game, every seed's curve against frames beside rl-zoo's own
    A2C run of the game (zoo_curve, from the first record's folder that has it), the
    anchors as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (game, anchor) in zip(axes.flat, ANCHORS.items()):
        runs = [r for r in records if r["task"] == game and r["curve"]["frames"]]
        for r in runs:
            ax.plot([f / 1e6 for f in r["curve"]["frames"]], r["curve"]["mean_return"],
                    linewidth=1.2, label=f"a3c_graph seed {r['seed']}")
        zoo = next(filter(None, (zoo_curve(out / r["results"]) for r in runs)), None)
        if zoo is not None:
            ax.plot([f / 1e6 for f in zoo["frames"]], zoo["mean_return"], color="black",
                    linewidth=1.2, alpha=0.6, label="rl-zoo's own A2C run")
        for value, style, label in ((anchor.a2c, "--", "rl-zoo A2C"),
                                    (anchor.ppo, ":", "rl-zoo PPO"),
                                    (anchor.a3c_paper, "-.", "A3C paper")):
            ax.axhline(value, color="gray", linestyle=style, linewidth=1, label=label)
        ax.set_title(runs[0]["env"] if runs else game)
        if not runs:
            ax.text(20, anchor.ppo / 2, "no run yet", ha="center", color="gray")
        ax.set_xlim(0, 40)
        ax.set_ylim(bottom=0)  # the four games' scores are never negative
        ax.set_xlabel("frames (millions)")
        ax.set_ylabel("mean score, last 100 games")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize="x-small")
    return save_figure(fig, out / "atari.png")


def print_record_figures(folders: Sequence[Path]) -> int:
    """--record-figures RECORD...: each record's figures block (record_figures), to paste
    into its README."""
    try:
        if not folders:
            raise UsageError("usage: python -m benchmarks.atari_games --record-figures "
                             "RECORD_DIR [RECORD_DIR ...]")
        blocks = [(folder, record) for folder in folders
                  for record in read_records([folder], folder)]
    except UsageError as error:
        return fail(PROG, error)
    for folder, record in blocks:
        print(f"{folder}:\n\n{record_figures(record, zoo_curve(folder))}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--record-figures"]:
        return print_record_figures([Path(a) for a in argv[1:]])
    try:
        if len(argv) < 2 or any(a.startswith("-") for a in argv):
            raise UsageError("usage: python -m benchmarks.atari_games OUT RESULTS_DIR "
                             "[RESULTS_DIR ...]")
        out = Path(argv[0])
        records = read_records([Path(a) for a in argv[1:]], out)
    except UsageError as error:
        return fail(PROG, error)
    out.mkdir(parents=True, exist_ok=True)
    games = summarize(records)
    matrices = score_matrices(records)
    text = markdown(games, records, aggregate_lines(matrices))
    write_atomic(out / "atari.json", json.dumps({"games": games, "records": [
        {**{key: r.get(key) for key in ("task", "env", "seed", "results", "wall_s",
                                        "final_mean_return_100", "best_mean_return_100",
                                        "evaluation", "exit_code", "stop_reason", "command")},
         "steps_per_sec": training_rate(r)} for r in records]}, indent=2) + "\n")
    write_atomic(out / "atari.md", text)
    write_atomic(out / "readme-table.md", readme_table(games))
    plot(out, records)
    if matrices is not None:
        plot_profiles(out, matrices)
    print(text, end="")
    print(f"table and figure in {out}", flush=True)
    return 0

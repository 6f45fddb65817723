"""Reads rl-baselines3-zoo's own A2C run of an Atari game from its monitor files (one per
env, in DLR-RM/rl-trained-agents, a2c/<Game>NoFrameskip-v4_1/<i>.monitor.csv) into the
curve the records draw beside theirs: the mean score of the last 100 whole games every 0.25M
frames, to 40M.

    python docs/learning/zoo_run.py OUT.json SOURCE MONITOR_CSV...

Each monitor row is one whole game (SB3's Monitor sits under its AtariWrapper: the raw score
of every life and the game's raw frame count). The zoo's 16 envs step in lockstep, so an
env's cumulative frames, scaled so that each env ends at 40M, place its games on the run's
frame axis (the raw frame counts sum to a little more than 40M / 16 an env: they include the
no-op and reset frames SB3's step counter does not count); the given envs' games are merged
in frame order.
"""

import csv
import json
import sys
from pathlib import Path

BUDGET, EVERY, WINDOW = 40_000_000, 250_000, 100


def games(path: Path) -> list[tuple[float, float]]:
    """(frame on the run's axis, score) of each game of one env's monitor file."""
    lines = path.read_text(encoding="ascii").splitlines()
    if not lines or not lines[0].startswith("#"):
        raise ValueError(f"{path} is not a Monitor file (no '#' header)")
    try:
        played = [(int(row["l"]), float(row["r"])) for row in csv.DictReader(lines[1:])]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: a row without a whole game's r and l") from None
    total = sum(length for length, _ in played)
    if total <= 0:
        raise ValueError(f"{path}: no game in it")
    ends, elapsed = [], 0
    for length, score in played:
        elapsed += length
        ends.append((elapsed / total * BUDGET, score))
    return ends


def curve(ends: list[tuple[float, float]]) -> list[list[float]]:
    ends = sorted(ends)
    points = []
    for frame in range(EVERY, BUDGET + 1, EVERY):
        done = [score for end, score in ends if end <= frame]
        if len(done) >= WINDOW:
            points.append([frame, round(sum(done[-WINDOW:]) / WINDOW, 2)])
    return points


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write("usage: zoo_run.py OUT.json SOURCE MONITOR_CSV...\n")
        return 2
    out, source, files = Path(argv[0]), argv[1], [Path(a) for a in argv[2:]]
    if out in files or len(set(files)) < len(files):
        sys.stderr.write("zoo_run.py: each monitor file once, and OUT none of them\n")
        return 2
    try:
        ends = [end for path in files for end in games(path)]
    except (OSError, ValueError) as error:
        sys.stderr.write(f"zoo_run.py: {error}\n")
        return 2
    points = curve(ends)
    if not points:
        sys.stderr.write(f"zoo_run.py: {len(ends)} games, fewer than the {WINDOW} a mean takes\n")
        return 2
    if not out.parent.is_dir():
        sys.stderr.write(f"zoo_run.py: {out.parent} is not a folder\n")
        return 2
    out.write_text(json.dumps({
        "source": source,
        "method": f"{len(files)} envs' monitor files; each env's cumulative game lengths "
                  "scaled so it ends at 40M frames; the games merged in frame order; mean "
                  "score of the last 100 whole games every 0.25M frames (docs/learning/"
                  "zoo_run.py)",
        "frames_mean_return_100": points}) + "\n")
    print(f"{out}: {len(ends)} games")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

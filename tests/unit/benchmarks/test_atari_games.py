"""benchmarks.atari_games: the Atari games' table beside their anchors and its figure, from
the learning suite's results, and its bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import colored_pixels

REPO = Path(__file__).resolve().parents[3]


def _record(task, env, seed, sampled, last_100=100.0):
    # 30 games, half at sampled - 20 and half at sampled + 20: a mean of `sampled` with a
    # standard error of 20 x sqrt(30 / 29) / sqrt(30) = 3.7
    returns = [sampled - 20.0, sampled + 20.0] * 15
    played = {"mean_return": sampled, "min_return": sampled - 20, "max_return": sampled + 20,
              "std_return": 20.0, "episodes": 30, "returns": returns}
    return {"task": task, "env": env, "seed": seed, "wall_s": 5400.0,
            # steps_per_sec: the last piece's in a record made before resumed runs got
            # their speed over all their pieces; the table takes the curve's.
            "steps_per_sec": 1000.0, "exit_code": 0, "stop_reason": "max_steps",
            "final_mean_return_100": last_100, "best_mean_return_100": last_100 + 5,
            # 9M agent steps in 3,600 s of training: 2,500 agent steps/s.
            "curve": {"frames": [4_000_000, 40_000_000], "seconds": [1800.0, 5400.0],
                      "env_steps": [1_000_000, 10_000_000], "mean_return": [2.0, last_100]},
            "evaluation": {"greedy": {**played, "mean_return": sampled / 2},
                           "sampled": played}}


def _suite(folder: Path, records) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"records": records}))
    return folder


def test_each_game_is_set_beside_its_anchors_with_the_seeds_at_a2c_s_score(tmp_path):
    breakout = _suite(tmp_path / "breakout", [
        _record("atari-breakout", "ALE/Breakout-v5", seed, score)
        for seed, score in enumerate((300.0, 250.0, 290.0))])
    others = _suite(tmp_path / "others", [
        _record("atari-qbert", "ALE/Qbert-v5", 0, 4000.0),
        _record("atari-beamrider", "ALE/BeamRider-v5", 0, 3000.0, last_100=2900.0),
        _record("breakout", "MinAtar/Breakout-v1", 0, 20.0)])  # not an Atari game: left out
    # Space Invaders crosses A2C's 627 at 12M frames and 30 minutes, and its run ends at 20M.
    invaders = _record("atari-spaceinvaders", "ALE/SpaceInvaders-v5", 0, 700.0, last_100=650.0)
    invaders["curve"] = {"frames": [4_000_000, 12_000_000, 20_000_000],
                         "seconds": [600.0, 1800.0, 3000.0], "mean_return": [200.0, 640.0, 650.0]}
    others = _suite(tmp_path / "invaders", [invaders]), others
    out = tmp_path / "table"
    result = subprocess.run([sys.executable, "-m", "benchmarks.atari_games", str(out),
                             str(breakout), *map(str, others)], capture_output=True, text=True,
                            cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    table = (out / "atari.md").read_text()
    # Breakout: three seeds at 300, 250 and 290 sampled, a mean of 280 whose interval, over
    # the seeds first, spans most of 250-300: level with A2C's 280. Greedy: the median.
    breakout_row = re.search(r"\| ALE/Breakout-v5 \| 3 \| 40.00M \| 90 \| 100.0 \| "
                             r"280.0 \[([\d.]+), ([\d.]+)\] \| level \| 145.0 \| 280 \| "
                             r"398 \| ~150 \|", table)
    assert breakout_row, table
    assert 250.0 <= float(breakout_row[1]) < 270.0 and 290.0 < float(breakout_row[2]) <= 300.0
    # Q*bert: one seed of 30 games at 4,000 ± 3.7: above A2C's 3,882.
    assert re.search(r"\| ALE/Qbert-v5 \| 1 \| 40.00M \| 90 \| 100.0 \| 4,000.0 "
                     r"\[3,99\d.\d, 4,00\d.\d\] \| above \| 2,000.0 \| 3,882 \|", table), table
    assert "MinAtar" not in table
    # The curve read at its last reading up to each mark, none past the run's end.
    assert ("| ALE/SpaceInvaders-v5 | 0 | 200.0 | 200.0 | 640.0 | 650.0 | - | - | - | - | "
            "12.0M frames, 30 min |") in table
    assert "| ALE/BeamRider-v5 | 0 | 2.0 |" in table and "| 40.0M frames, 90 min |" in table
    # Each run's evaluation: its games, mean ± standard error [bootstrap interval].
    assert re.search(r"\| ALE/Breakout-v5 \| 1 \| 40.00M \| 90 \| 2,500 \| 100.0 \| 105.0 \| "
                     r"30 games, 250.0 ± 3.7 \[24\d.\d, 25\d.\d\] \(230 to 270\) \| 125.0 \| "
                     r"0 \(max_steps\) \| \[../breakout\]\(../breakout/results.md\) \|",
                     table), table
    # Each run's curve read every 5M frames, and when it first reached A2C's score.
    assert ("| ALE/Qbert-v5 | 0 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 100.0 | not reached |"
            ) in table
    games = json.loads((out / "atari.json").read_text())["games"]
    assert games["atari-breakout"]["sampled"]["mean"] == 280.0
    assert games["atari-breakout"]["against_a2c"] == "level"
    assert colored_pixels(out / "atari.png") > 100  # the curves are drawn


def test_folders_without_atari_runs_are_one_line_exit_2(tmp_path):
    minatar = _suite(tmp_path / "minatar", [_record("breakout", "MinAtar/Breakout-v1", 0, 1.0)])
    for argv, message in (([str(tmp_path / "out"), str(minatar)], "no run of an atari-* task"),
                          ([str(tmp_path / "out"), str(tmp_path / "nope")], "is missing"),
                          ([str(tmp_path / "out")], "usage:"),
                          (["--record-figures", str(minatar)], "no run of an atari-* task"),
                          (["--record-figures"], "usage:")):
        result = subprocess.run([sys.executable, "-m", "benchmarks.atari_games", *argv],
                                capture_output=True, text=True, cwd=REPO, timeout=120)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and message in lines[0], result.stderr
        assert not (tmp_path / "out").exists()


def test_four_games_evaluated_alike_are_aggregated_beside_rl_zoo_with_their_profiles(tmp_path):
    # One seed a game, each exactly at rl-zoo A2C's score but Q*bert at PPO's 15,627: the
    # agent's human-normalised scores are A2C's with Q*bert's raised to PPO's.
    a2c = {"atari-breakout": 280.0, "atari-beamrider": 2890.0, "atari-qbert": 3882.0,
           "atari-spaceinvaders": 627.0}
    envs = {"atari-breakout": "Breakout", "atari-beamrider": "BeamRider",
            "atari-qbert": "Qbert", "atari-spaceinvaders": "SpaceInvaders"}
    played = {**a2c, "atari-qbert": 15627.0}
    suite = _suite(tmp_path / "games", [_record(task, f"ALE/{envs[task]}-v5", 0, score)
                                        for task, score in played.items()])
    out = tmp_path / "table"
    result = subprocess.run([sys.executable, "-m", "benchmarks.atari_games", str(out),
                             str(suite)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    table = (out / "atari.md").read_text()
    human = {"atari-breakout": (1.7, 30.5), "atari-beamrider": (363.9, 16926.5),
             "atari-qbert": (163.9, 13455.0), "atari-spaceinvaders": (148.0, 1668.7)}

    def normalised(scores):
        return sorted((scores[g] - human[g][0]) / (human[g][1] - human[g][0]) for g in scores)

    ours, zoo = normalised(played), normalised(a2c)
    # IQM of 4 scores: the mean of the middle two; the mean: of all four.
    row = re.search(r"\| a3c_graph \| 1 \| ([\d.]+) \[[\d.]+, [\d.]+\] \| ([\d.]+) \[", table)
    assert row, table
    assert float(row[1]) == pytest.approx((ours[1] + ours[2]) / 2, abs=1e-3)
    assert float(row[2]) == pytest.approx(sum(ours) / 4, abs=1e-3)
    zoo_row = re.search(r"\| rl-zoo A2C \| 1 \| ([\d.]+) \[([\d.]+), ([\d.]+)\] \|", table)
    assert float(zoo_row[1]) == pytest.approx((zoo[1] + zoo[2]) / 2, abs=1e-3)
    assert "| rl-zoo PPO | 1 |" in table
    assert colored_pixels(out / "atari-profile.png") > 100


def test_games_evaluated_on_unequal_seeds_are_not_aggregated(tmp_path):
    suite = _suite(tmp_path / "games", [
        _record("atari-breakout", "ALE/Breakout-v5", seed, 300.0) for seed in range(2)])
    out = tmp_path / "table"
    result = subprocess.run([sys.executable, "-m", "benchmarks.atari_games", str(out),
                             str(suite)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Not computed: the aggregates need every game evaluated" in (
        out / "atari.md").read_text()
    assert not (out / "atari-profile.png").exists()


def test_the_readme_s_atari_table_is_the_one_rendered_from_the_committed_records():
    from benchmarks.harness.report import median
    from benchmarks.suites.atari_games import readme_table
    from benchmarks.suites.learning_report import evaluated

    out = REPO / "docs" / "learning" / "atari"
    committed = json.loads((out / "atari.json").read_text())
    # The README holds the table as benchmarks.atari_games rendered it from atari.json ...
    assert readme_table(committed["games"]) in (REPO / "README.md").read_text()
    # ... and atari.json's figures are those of the records it names, as committed.
    runs = {}
    for entry in committed["records"]:
        records = json.loads((out / entry["results"] / "results.json").read_text())["records"]
        record = next(r for r in records if (r["task"], r["seed"]) == (entry["task"],
                                                                       entry["seed"]))
        runs.setdefault(record["task"], []).append(record)
    assert set(runs) == set(committed["games"])
    for task, game in committed["games"].items():
        records = runs[task]
        assert game["seeds"] == len(records)
        assert game["median_last_100"] == median([r["final_mean_return_100"] for r in records])
        assert game["median_greedy"] == median([evaluated(r, "greedy") for r in records])
        means = [evaluated(r, "sampled") for r in records]
        assert game["sampled"]["mean"] == pytest.approx(sum(means) / len(means))
        assert game["sampled"]["low"] <= game["sampled"]["mean"] <= game["sampled"]["high"]


def test_a_record_s_figures_read_its_curve_beside_the_zoo_s_and_its_evaluations(tmp_path):
    from benchmarks.suites.atari_games import record_figures

    record = _record("atari-beamrider", "ALE/BeamRider-v5", 0, 2500.0, last_100=3000.0)
    record["curve"] = {"frames": [5_000_000, 34_000_000, 40_000_000],
                       "seconds": [600.0, 7200.0, 9000.0], "mean_return": [400.0, 2900.0, 3000.0]}
    zoo = {"frames": [4_000_000, 20_000_000, 40_000_000], "mean_return": [420.0, 984.0, 2347.0]}
    text = record_figures(record, zoo)
    # The curve's last reading at or before each 5M frames, this run's and the zoo's.
    assert ("| this run (seed 0) | 400.0 | 400.0 | 400.0 | 400.0 | 400.0 | 400.0 | 2,900.0 | "
            "3,000.0 |") in text
    assert "| 420.0 | 420.0 | 420.0 | 984.0 | 984.0 | 984.0 | 984.0 | 2,347.0 |" in text
    assert "reached A2C's 2,890 at 34.0M frames (120 minutes)" in text
    assert "sampled actions: 30 games, 2,500.0 ± 3.7 [" in text
    assert "greedy: 1,250.0 over 30 games" in text
    # Read every 0.25M frames from 20M on: behind while the curve held 400 against 984.
    assert ("the curve is behind rl-zoo's run at 56 of 81 readings: from 20M to 33.75M (by "
            "up to 584.0); level with or ahead of it at the others.") in text
    record["curve"]["mean_return"][0] = 984.0
    assert "level with or ahead of rl-zoo's run at every reading" in record_figures(record, zoo)
    record["curve"]["mean_return"][0] = 983.0
    assert "from 20M to 33.75M (by up to 1.0)" in record_figures(record, zoo)
    cut_short = {**record, "curve": {key: values[:2] for key, values in record["curve"].items()}}
    assert "ends short of 40M frames" in record_figures(cut_short, zoo)
    # A run that never reached the score, and a game without the zoo's run: no zoo row.
    record["curve"]["mean_return"] = [400.0, 2000.0, 2100.0]
    text = record_figures(record, None)
    assert "did not reach A2C's 2,890" in text and "rl-zoo's own" not in text


def test_each_record_of_the_atari_table_holds_the_figures_rendered_from_its_results():
    from benchmarks.suites.atari_games import read_records, record_figures, zoo_curve

    out = REPO / "docs" / "learning" / "atari"
    for entry in json.loads((out / "atari.json").read_text())["records"]:
        folder = (out / entry["results"]).resolve()
        record = next(r for r in read_records([folder], folder)
                      if (r["task"], r["seed"]) == (entry["task"], entry["seed"]))
        assert record_figures(record, zoo_curve(folder)) in (folder / "README.md").read_text(), (
            f"{folder}: render its figures with python -m benchmarks.atari_games "
            f"--record-figures {folder.relative_to(REPO)}")

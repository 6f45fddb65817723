"""A run cut off resumes from its log dir: the launcher restores the chief's checkpoint, the
history (the learning curve's file) goes on with the frame count carrying on, and the run's
own clock sums the training time of its pieces; the learning suite goes on where it stopped
(benchmarks.learning --resume)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import checkpoint_step

import a3c_graph
from a3c_graph.rundir.progress import read_history, read_launches, run_clock
from benchmarks.suites import learning, resume
from tests.support.launch_helpers import run_script

CARTPOLE = ["--env", "CartPole-v1", "--target-return", "inf", "--checkpoint-secs", "1",
            "--progress-secs", "0.5"]


@pytest.mark.e2e
def test_a_run_stopped_midway_resumes_in_its_log_dir_and_its_curve_goes_on(tmp_path,
                                                                          run_cleanup):
    logdir = tmp_path / "run"
    run_cleanup(logdir)
    # Its budget is far beyond where it is stopped.
    started = run_script("--background", "--logdir", str(logdir), *CARTPOLE,
                         "--max-steps", "400000")
    assert started.returncode == 0, started.stderr
    deadline = time.time() + 120
    while time.time() < deadline and not (checkpoint_step(logdir) > 0
                                          and len(read_history(logdir)) > 10):
        time.sleep(0.5)
    assert checkpoint_step(logdir) > 0, "no checkpoint within 120 s"
    assert run_script("stop", "--logdir", str(logdir), timeout=60).returncode == 0
    first = read_history(logdir)
    steps_before = max(row["env_steps"] for row in first)

    # The second piece, with a budget of its own, goes 30k steps beyond the checkpoint.
    budget = steps_before + 30_000
    resumed = run_script("--logdir", str(logdir), *CARTPOLE, "--max-steps", str(budget),
                         timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["stop_reason"] == "max_steps" and summary["env_steps"] >= budget
    history = read_history(logdir)
    assert history[:len(first)] == first  # the curve's file goes on, nothing dropped
    launches = read_launches(logdir)
    assert len(launches) == 2
    second = [row for row in history if row["time"] >= launches[1] and row["training_started"]]
    # Restored from the checkpoint: the frame count carries on from where it was saved.
    assert second and 0 < second[0]["env_steps"] <= steps_before + 50_000
    clock = run_clock(history, launches)
    assert clock == sorted(clock)  # one clock over both pieces
    # The pause between the pieces and the second start-up are not the run's time.
    assert clock[-1] < history[-1]["time"] - launches[0]


def test_the_suite_resumes_with_the_flags_it_started_with(tmp_path):
    resume.save_command(tmp_path, ["--tasks", "cartpole", "--seeds", "2", "--seed", "4"])
    args, tasks, configs, given = learning.parse_args(["--resume", "--out", str(tmp_path)])
    assert [t.name for t in tasks] == ["cartpole"] and args.seeds == 2 and given["seed"] == 4
    with pytest.raises(learning.UsageError, match="--resume takes --out OUT and no other"):
        learning.parse_args(["--resume", "--out", str(tmp_path), "--seeds", "3"])
    with pytest.raises(learning.UsageError, match="--resume takes --out OUT and no other"):
        learning.parse_args(["--resume", "--max-seconds", "60"])  # no --out


def test_a_resume_may_give_the_runs_still_to_go_a_new_budget(tmp_path):
    """A suite whose hour ends short of its frames: --resume --max-seconds raises the
    budget in place of the saved one, and suite.json keeps it for the next resume."""
    resume.save_command(tmp_path, ["--tasks", "cartpole", "--max-seconds", "3600",
                                   "--seeds", "1"])
    args, tasks, configs, given = learning.parse_args(
        ["--resume", "--out", str(tmp_path), "--max-seconds=6000", "--max-steps", "900000"])
    assert (configs["cartpole"].max_seconds, configs["cartpole"].max_steps) == (6000, 900_000)
    assert args.seeds == 1
    assert resume.with_budget(resume.saved_command(tmp_path), ["--max-seconds=6000"]) == [
        "--tasks", "cartpole", "--seeds", "1", "--max-seconds=6000"]
    with pytest.raises(learning.UsageError, match="suite.json is missing"):
        learning.parse_args(["--resume", "--out", str(tmp_path / "elsewhere")])


def test_only_runs_that_ended_on_their_own_count_as_finished(tmp_path):
    records = [{"name": "a", "stop_reason": "max_steps", "exit_code": 0},
               {"name": "b", "stop_reason": "signal", "exit_code": 143},
               {"name": "c", "stop_reason": "harness_interrupted", "exit_code": None},
               {"name": "d", "stop_reason": "crash", "exit_code": 1}]
    (tmp_path / "results.json").write_text(json.dumps({"records": records}))
    assert sorted(resume.finished_records(tmp_path)) == ["a", "d"]


def _two_pieces(logdir: Path) -> None:
    """A history of two pieces: launched at 100 (first update at 110, 500 steps in 50 s),
    and again at 1000 (first update at 1020 at 600 steps, 600 more in 30 s)."""
    (logdir / "progress").mkdir()
    rows = [(105.0, None, 0), (110.0, 110.0, 0), (160.0, 110.0, 500),
            (1010.0, None, 500), (1020.0, 1020.0, 600), (1050.0, 1020.0, 1200)]
    (logdir / "progress" / "worker_0.jsonl").write_text("".join(
        json.dumps({"task": 0, "time": t, "training_started": started, "env_steps": steps})
        + "\n" for t, started, steps in rows))
    (logdir / "launches.jsonl").write_text('{"launched": 100.0}\n{"launched": 1000.0}\n')


def test_a_resumed_run_has_trained_the_sum_of_its_pieces(tmp_path):
    _two_pieces(tmp_path)
    assert resume.trained_seconds(tmp_path) == 50.0 + 30.0
    # Its wall time, the table's "wall min": each piece from its launch (start-up included)
    # to its last write, the pause between pieces left out.
    assert resume.wall_seconds(tmp_path) == 60.0 + 50.0
    # Its speed: each piece's steps after its first update, over its time after it.
    assert resume.steps_per_sec(tmp_path) == (500 + 600) / (50.0 + 30.0)


def test_a_resumed_runs_record_gives_its_speed_over_all_its_pieces(tmp_path):
    """The harness measures the piece it launched (here 20 steps/s); the suite's record of
    the run is over both pieces, as its wall time is."""
    _two_pieces(tmp_path)
    last_piece = {"logdir": str(tmp_path), "log": str(tmp_path / "run.log"), "command": "",
                  "wall_s": 50.0, "steps_per_sec": 20.0, "frames_per_sec": 80.0}
    fields = learning._learning_fields(last_piece, learning.TASKS["cartpole"],
                                       learning.A3CConfig(env="CartPole-v1"), 1000.0, 4,
                                       tmp_path, earlier_wall=60.0)
    assert (fields["steps_per_sec"], fields["frames_per_sec"]) == (13.8, 55.0)
    assert fields["wall_s"] == 110.0


OLD = Path(__file__).resolve().parents[1] / "support" / "data" / "checkpoints-64e573f"


@pytest.mark.e2e
def test_a_checkpoint_written_before_the_modules_moved_resumes_training(tmp_path, run_cleanup):
    logdir = tmp_path / "run"
    shutil.copytree(OLD / "cartpole", logdir)
    run_cleanup(logdir)
    resumed = run_script("--logdir", str(logdir), "--env", "CartPole-v1", "--workers", "1",
                         "--target-return", "inf", "--max-steps", "4000", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((logdir / "summary.json").read_text())
    # The old run stopped at global step 12 and 3,072 env steps; the new one went on from it.
    assert summary["global_step"] > 12 and summary["env_steps"] >= 4000
    first = [row for row in read_history(logdir) if row["training_started"]][0]
    assert first["env_steps"] >= 3072


def test_a_gaussian_policy_saved_before_the_modules_moved_plays(tmp_path):
    logdir = tmp_path / "run"
    shutil.copytree(OLD / "pendulum", logdir)
    played = a3c_graph.evaluate(logdir, episodes=1)
    assert played.models[0].checkpoint.endswith("model.ckpt-600")
    assert len(played.returns) == 1 and -2000 < played.returns[0] < 0  # Pendulum's range

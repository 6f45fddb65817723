"""Games through the real launcher, as a user trains them: a 2-worker Pong run of a few
rollouts, evaluated and recorded; Breakout on the classic protocol to its budget; a MinAtar
Breakout run, evaluated; and (slow) Pong on the A3C protocol to a mean return of 18. Each
needs its extra (atari, or minatar) and is skipped without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import (
    REPO,
    assert_one_update_per_rollout,
    evaluate_run,
    needs_minatar,
    train_to_end,
)

PONG = "ALE/Pong-v5"
ATARI_BREAKOUT = "ALE/Breakout-v5"
MINATAR_BREAKOUT = "MinAtar/Breakout-v1"


def needs_atari() -> None:
    pytest.importorskip("ale_py", reason="the atari extra is not installed: "
                                          "pip install -e '.[atari]'")


@pytest.mark.e2e
def test_two_worker_pong_run_through_the_launcher_then_evaluated_and_recorded(tmp_path):
    needs_atari()
    # A few dozen rollouts: each worker's rollout is 20 steps of 8 envs (the atari preset).
    # Enough for a few seconds of training (about 450 steps/s here), so the run outlasts the
    # launcher's first progress line at 0:05 however quickly it starts.
    summary, stdout, logdir = train_to_end(tmp_path, "--env", PONG, "--workers", "2",
                                           "--max-steps", "2400", "--max-seconds", "90")
    assert summary["env"] == PONG and summary["workers"] == 2
    assert summary["stop_reason"] == "max_steps" and summary["env_steps"] >= 2400, summary
    assert summary["target_return"] == 18.0
    assert_one_update_per_rollout(summary, 20, 8)  # the atari preset's rollout
    # Steps/s counts the run's steps over its training time, which is at most the wall time
    # less the start-up (the wall time also holds the teardown).
    training_at_most = summary["wall_seconds"] - summary["startup_seconds"]
    assert summary["env_steps_per_sec"] >= 0.95 * summary["env_steps"] / training_at_most, summary
    assert any(line.startswith("[") and "steps/s" in line for line in stdout.splitlines())

    evaluate_run(logdir, 1, "--gif", "2")
    videos = list((logdir / "videos").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000, videos
    # --gif: the first 2 s of that video (15 agent steps a second), 160 pixels wide.
    from PIL import Image

    with Image.open(videos[0].with_suffix(".gif")) as gif:
        assert gif.width == 160 and 20 <= gif.n_frames <= 31, (gif.size, gif.n_frames)


@pytest.mark.slow
@pytest.mark.timeout(11_400)
def test_pong_on_the_a3c_protocol_reaches_18_and_its_final_checkpoint_wins(tmp_path):
    """The headline run (README, Pong) as the learning suite runs each seed: the launcher's
    command on the A3C anchors' protocol (no sticky actions), its budget the atari preset's
    10M agent steps (40M frames: the learning rate's anneal) so that the machine's speed does
    not decide the verdict (--max-seconds 10800 only backs it up; about 48 minutes on an idle
    2-core machine). Its mean return(100) reaches 18 within the budget, and the final
    checkpoint wins each of 10 games played with sampled actions (as in training), by 17
    points on average (on 2026-11-26 three seeds at the budget's end played 18.8, 19.2 and
    18.1 sampled, every game won).

    Sampled, not greedy: a greedy policy on this deterministic protocol plays one of a few
    fixed games depending on the evaluation's no-op start and may repeat a losing rally in
    each (the same day, seed 1 at 45 minutes: 17.5 greedy, four games of 13; docs/learning.md)."""
    needs_atari()
    out = tmp_path / "learning"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.learning", "--tasks", "pong-deterministic",
         "--seeds", "1", "--max-seconds", "10800", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO,
        env={**{k: v for k, v in os.environ.items() if k != "TF_CONFIG"},
             "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "results.json").read_text())["records"][0]
    assert record["stop_reason"] == "max_steps", record["stop_reason"]
    assert record["reached"], record["best_mean_return_100"]
    assert record["frames_to_target"] == 4 * record["env_steps_to_target"]
    played = record["evaluation"]["sampled"]
    assert played["episodes"] == 10, played
    assert played["min_return"] > 0 and played["mean_return"] >= 17.0, played


@pytest.mark.e2e
def test_two_worker_breakout_run_through_the_launcher_then_evaluated(tmp_path):
    needs_minatar()
    summary, stdout, logdir = train_to_end(tmp_path, "--env", MINATAR_BREAKOUT, "--workers", "2",
                                           "--max-steps", "8000", "--max-seconds", "120")
    assert "target return none (runs to its budget)" in stdout
    assert summary["env"] == MINATAR_BREAKOUT and summary["target_return"] is None
    assert summary["stop_reason"] == "max_steps" and summary["env_steps"] >= 8000, summary
    assert summary["solved"] is False
    assert_one_update_per_rollout(summary, 20, 8)  # the minatar preset's rollout

    evaluate_run(logdir, 2)


@pytest.mark.e2e
def test_breakout_on_the_classic_protocol_trains_to_its_budget_through_the_launcher(tmp_path):
    """The launcher's command plus the protocol: no target asked for, none refused."""
    needs_atari()
    summary, stdout, logdir = train_to_end(
        tmp_path, "--env", ATARI_BREAKOUT, "--protocol", "classic", "--workers", "1",
        "--envs-per-worker", "2", "--rollout-length", "8", "--max-steps", "800",
        "--progress-secs", "1", "--conv-filters", "4,4,4", "--hidden-sizes", "8")
    assert "target return none (runs to its budget)" in stdout
    assert summary["stop_reason"] == "max_steps" and summary["env_steps"] >= 800
    config = json.loads((logdir / "config.json").read_text())
    assert config["protocol"] == "classic" and config["repeat_action_probability"] == 0.0
    assert config["screen_size"] == 84 and config["conv_stride"] == [4, 2, 1]

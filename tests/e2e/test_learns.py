"""The whole learner end to end through the real launcher, on problems small enough to learn
in a test: a two-armed bandit (a sign error anywhere between the loss and the ps's update
fails it), an image bandit (only the image path can find the paying arm) and CartPole with
the LSTM policy."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    REPO,
    assert_one_update_per_rollout,
    evaluate_run,
    needs_minatar,
    train_to_end,
)

from a3c_graph.rundir.progress import read_history
from tests.support import ground_truth
from tests.support.bandit_env import PAYING_ARM

# The launcher on a two-armed bandit: a few thousand one-step episodes, so that a sign error
# anywhere between the loss and the ps's update (the loss, the gradients, their transfer, Adam
# on the globals, the refresh of the local copy) fails the suite, not just a benchmark.
BANDIT_STEPS = 4096  # 128 updates of 4 steps x 8 envs; the budget is what stops the run
BANDIT_FLAGS = ["--env", "tests.support.bandit_env:Bandit-v0", "--workers", "1",
                "--max-steps", str(BANDIT_STEPS), "--rollout-length", "4", "--envs-per-worker", "8",
                # Larger steps than the default 1e-3, which in one trial had arm 1 at only
                # p = 0.93 after 64 updates: too close to the verdict's threshold.
                "--learning-rate", "3e-3",
                # Adam scaled to the gradient's size: with the cartpole preset's epsilon of 0.1
                # a bandit's small gradients take damped steps (mean return 0.66 at the budget).
                "--adam-epsilon", "1e-5", "--normalize-advantages", "true",
                "--target-return", "inf",  # no early stop: the last 100 episodes of the budget
                "--max-seconds", "240"]  # a safety net only; the step budget ends the run


@pytest.mark.e2e
def test_the_launcher_learns_to_pull_the_paying_arm_of_a_two_armed_bandit(tmp_path):
    # The env's module is this repository's tests/ package: importable as a user's own would be.
    summary, _, logdir = train_to_end(tmp_path, *BANDIT_FLAGS, PYTHONPATH=str(REPO))
    assert summary["stop_reason"] == "max_steps", summary
    # A random policy gets 0.5 (+-0.05 over 100 episodes), the wrong arm 0.
    assert summary["mean_return_100"] >= 0.9, summary

    # The policy the chief saved last pulls the paying arm.
    reader = tf.train.load_checkpoint(str(logdir))
    weights = {name.split("/", 1)[1]: reader.get_tensor(name)
               for name in reader.get_variable_to_shape_map()
               if name.startswith("global/") and "Adam" not in name}
    logits, _ = ground_truth.mlp_forward(weights, np.ones((1, 1)))
    probabilities = ground_truth.softmax(logits[0])
    assert probabilities[PAYING_ARM] > 0.95, probabilities


# Many workers: MinAtar Breakout with 16 workers (the minatar preset, spread to 1 env of 20
# steps each: Adam's full-size steps) at twice the preset's rate, 2e-3. Each update lands
# about 30 global updates (10-90 %: 20-60) after the weights that acted it on an idle machine,
# 60 beside another run. With every update at the full rate, every worker pushing the same
# stale direction, the policy collapses toward one action; with the rate scaled by the
# tolerated lag / lag it wavers and comes back to nearly uniform
# (docs/learning/many-workers/runs.md, "The collapse test").
# Each rollout its own update (--rollouts-per-update 1: not pooled into the preset's update
# size, which would cut the lag in updates eightfold), the staleness the lag rule is for.
MANY_WORKERS_FLAGS = ["--env", "MinAtar/Breakout-v1", "--workers", "16",
                      "--rollouts-per-update", "1",
                      "--learning-rate", "2e-3", "--max-steps", "60000", "--max-seconds", "600"]

# The share of the entropies the workers wrote (each a mean over that worker's updates since
# its last write, of ln 3 = 1.10) below 0.3 nats: the policy all but settled on one action.
# Alone, 2026-11-29 and 2026-12-06: with the rule 0.00-0.11 in 16 runs and 0.41 in one; at the
# full rate 0.33-0.87 in 10 runs of 10.
NEAR_ONE_ACTION = 0.3
NEAR_ONE_ACTION_SHARE = 0.2


def stale_run_entropies(logdir) -> np.ndarray:
    """Check the run in `logdir` was as stale as 16 workers make it, and return the entropy
    readings its workers wrote."""
    rows = read_history(logdir)  # every progress write of every worker
    lags = [row["lag_apply"] for row in rows if row.get("lag_apply") is not None]
    assert lags and float(np.median(lags)) >= 16, lags  # most updates 16 or more late
    return np.array([row["entropy"] for row in rows if row.get("entropy") is not None])


# alone: 17 TF processes on 2 cores beside the rest of the suite made two timing-bound tests
# elsewhere fail under pytest-xdist (docs/testing.md). One run of the rule failed the bound
# in 17, so a run over it is followed by a second that decides: the rule then fails about
# once in 300, while every full-rate run measured failed it.
@pytest.mark.alone
@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_sixteen_workers_keep_a_stochastic_policy_where_stale_full_size_steps_collapse(tmp_path):
    needs_minatar()
    shares, readings = [], []
    for attempt in ("first", "second"):
        (tmp_path / attempt).mkdir()
        summary, _, logdir = train_to_end(tmp_path / attempt, *MANY_WORKERS_FLAGS, timeout=800)
        assert summary["stop_reason"] == "max_steps", summary
        entropies = stale_run_entropies(logdir)
        shares.append(float(np.mean(entropies < NEAR_ONE_ACTION)) if entropies.size else 1.0)
        if shares[-1] <= NEAR_ONE_ACTION_SHARE:
            return
        readings.append(np.round(np.sort(entropies), 2))  # the log dirs go with tmp_path
    pytest.fail(f"the policy sat near one action in two runs: {shares} of the entropies below "
                f"{NEAR_ONE_ACTION} nats (at most {NEAR_ONE_ACTION_SHARE} allowed); sorted "
                f"readings: {readings}")


@pytest.mark.e2e
def test_lstm_policy_trains_cartpole_through_the_real_launcher(tmp_path):
    summary, _, logdir = train_to_end(tmp_path, "--policy", "lstm", "--workers", "2",
                                      "--max-steps", "600", "--rollout-length", "16",
                                      "--envs-per-worker", "4", timeout=240)
    assert summary["stop_reason"] == "max_steps" and summary["env_steps"] >= 600, summary
    assert_one_update_per_rollout(summary, 16, 4)
    config = json.loads((logdir / "config.json").read_text())
    assert config["policy"] == "lstm"
    # Each update's gradients reached the LSTM through the replay of the rollout: Adam's moments
    # of its kernel are not zero.
    reader = tf.train.load_checkpoint(str(logdir))
    assert np.abs(reader.get_tensor("global/lstm/kernel/Adam")).max() > 0
    # The checkpoint holds the LSTM, and evaluation rebuilds it from config.json.
    evaluate_run(logdir, 2, timeout=120)


# The launcher on an image bandit (tests/support/image_env.py): which arm pays shows only in
# the image, so the run reaches its target only through the image path (uint8 pixels,
# channels first, into the cnn torso) and an update that pairs each image with its own action.
IMAGE_BANDIT_FLAGS = [
    "--env", "tests.support.image_env:ImageBandit-v0", "--workers", "1", "--rollout-length", "4",
    "--envs-per-worker", "8", "--conv-filters", "8", "--conv-stride", "1", "--hidden-sizes", "32",
    "--learning-rate", "3e-3", "--adam-epsilon", "1e-5", "--normalize-advantages", "true",
    # A random policy earns 0.5 (+-0.05 over 100 episodes); the run stops at the target.
    "--target-return", "0.9", "--max-steps", "40000", "--max-seconds", "150"]


@pytest.mark.e2e
def test_the_launcher_learns_which_arm_pays_from_uint8_images(tmp_path):
    from tests.support import image_env

    # The env's module is this repository's tests/ package: importable as a user's own would be.
    summary, _, logdir = train_to_end(tmp_path, *IMAGE_BANDIT_FLAGS, PYTHONPATH=str(REPO))
    assert summary["stop_reason"] == "solved" and summary["mean_return_100"] >= 0.9, summary

    # The saved network, run by the NumPy forward pass (pixels scaled to [0, 1], channels
    # moved last), picks the paying arm of images it never saw.
    reader = tf.train.load_checkpoint(str(logdir))
    weights = {name.split("/", 1)[1]: reader.get_tensor(name)
               for name in reader.get_variable_to_shape_map()
               if name.startswith("global/") and "Adam" not in name}
    rng = np.random.default_rng(12345)
    images, sides = zip(*(image_env.draw(rng) for _ in range(200)))
    logits, _ = ground_truth.cnn_forward(weights, np.stack(images), stride=1)
    accuracy = float(np.mean(np.argmax(logits, axis=1) == np.array(sides)))
    assert accuracy >= 0.9, accuracy

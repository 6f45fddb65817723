"""MinAtar through the minatar package: registration, the transposed observations, the
minatar preset and its small CNN (a Breakout run through the launcher:
tests/e2e/test_games.py).

Needs minatar (make installs it: pip install --no-deps minatar==1.0.15); without it every
test here is skipped.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("minatar", reason="minatar is not installed: "
                                      "pip install --no-deps minatar==1.0.15")

from a3c_graph.core.config import config_to_argv, resolve_config, resolve_policy  # noqa: E402
from a3c_graph.core.envs import EnvBatch, env_info, make_env  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
BREAKOUT = "MinAtar/Breakout-v1"


@pytest.mark.parametrize("env_id, channels, actions", [
    ("MinAtar/Breakout-v1", 4, 3), ("MinAtar/Asterix-v1", 4, 5), ("MinAtar/Freeway-v1", 7, 3),
    ("MinAtar/Seaquest-v1", 10, 6), ("MinAtar/SpaceInvaders-v1", 6, 4),
])
def test_every_game_is_registered_with_channels_first_bool_observations(env_id, channels,
                                                                         actions):
    info = env_info(env_id)
    assert info.obs_shape == (channels, 10, 10)
    assert info.obs_dtype == np.bool_
    assert info.actions.n == actions  # the -v1 ids' minimal action sets
    assert info.frame_skip == 1


def test_observations_are_minatars_state_with_the_channels_moved_first():
    env = make_env(BREAKOUT)
    try:
        obs, _ = env.reset(seed=3)
        raw = env.unwrapped.game.state()  # [10, 10, C], channels last
        assert obs.shape == (4, 10, 10) and obs.dtype == np.bool_
        np.testing.assert_array_equal(obs, np.moveaxis(raw, -1, 0))
        assert obs.sum() > 0  # the paddle, the ball and the bricks are on the board
    finally:
        env.close()


def test_rgb_frames_show_the_board_without_seaborn_for_recording():
    env = make_env(BREAKOUT, render_mode="rgb_array")
    try:
        obs, _ = env.reset(seed=0)
        frame = env.render()
        assert frame.shape == (160, 160, 3) and frame.dtype == np.uint8
        # Every occupied cell is coloured, every empty one black.
        occupied = obs.any(axis=0).repeat(16, axis=0).repeat(16, axis=1)
        assert (frame.max(axis=2) > 0).tolist() == occupied.tolist()
        obs, *_ = env.step(1)
        assert env.render().shape == (160, 160, 3)
    finally:
        env.close()


BRICK = 3  # Breakout's channels: paddle, ball, trail, brick


def test_env_batch_steps_bool_boards_and_counts_bricks_as_reward():
    batch = EnvBatch(BREAKOUT, 4, seed=0)
    rng = np.random.default_rng(0)
    try:
        rewards, returns, done = 0.0, 0.0, 0
        for _ in range(400):
            bricks_before = batch.observe()[:, BRICK].sum(axis=(1, 2))
            step = batch.step(rng.integers(0, 3, 4))
            assert step.next_obs.shape == (4, 4, 10, 10) and step.next_obs.dtype == np.bool_
            # Each reward is the bricks the step knocked out of the board it acted on.
            bricks_after = step.final_obs[:, BRICK].sum(axis=(1, 2))
            np.testing.assert_array_equal(step.reward, bricks_before - bricks_after)
            rewards += float(step.reward.sum())
            returns += float(step.episode_return.sum())
            done += int(np.logical_or(step.terminated, step.truncated).sum())
        assert done > 0  # random play loses the ball
        assert rewards > 0  # ...and knocks out some bricks first
        # The episodes' returns are their rewards: at most those of the episodes still going.
        assert 0 < returns <= rewards
    finally:
        batch.close()


def test_minatar_ids_pick_the_minatar_preset_and_its_small_cnn():
    config = resolve_config({"env": BREAKOUT})
    assert config.conv_filters == (16,) and config.conv_stride == (1,)
    assert config.hidden_sizes == (128,)
    assert config.max_steps == 5_000_000
    assert config.target_return == math.inf  # no target: the score at the budget counts
    assert resolve_policy(config.policy, env_info(BREAKOUT).obs_shape) == ("cnn", False)
    # The launcher forwards only what differs from the preset, so tasks resolve the same.
    assert config_to_argv(config) == ["--env=MinAtar/Breakout-v1"]


def test_the_minatar_cnn_has_one_3x3_convolution_of_16_filters_then_128_units():
    import tensorflow as tf

    from a3c_graph.core.model import build_network

    config = resolve_config({"env": BREAKOUT})
    with tf.Graph().as_default():
        network = build_network((4, 10, 10), 3, config, "net")
        shapes = [tuple(v.shape.as_list()) for v in network.variables]
    # stride 1, SAME padding: 10 x 10 x 16 features into the 128-unit layer
    assert shapes == [(3, 3, 4, 16), (16,), (1600, 128), (128,), (128, 3), (3,), (128, 1), (1,)]



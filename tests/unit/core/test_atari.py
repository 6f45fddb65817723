"""Atari through ale-py: Gymnasium's preprocessing, ale-py's vector env giving the same
frames, the env batch, the preset (Pong runs through the launcher: tests/e2e/test_games.py).

Needs the atari extra (pip install -e '.[atari]'); without ale-py every test here is skipped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ale_py", reason="the atari extra is not installed: "
                                      "pip install -e '.[atari]'")

from a3c_graph.core.config import resolve_config  # noqa: E402
from a3c_graph.core.envs import (  # noqa: E402
    EnvBatch,
    env_info,
    env_options,
    make_atari_vector_env,
    make_env,
)

REPO = Path(__file__).resolve().parents[3]
PONG = "ALE/Pong-v5"


def test_pong_observations_are_four_stacked_42x42_grayscale_frames():
    info = env_info(PONG)
    assert info.obs_shape == (4, 42, 42)
    assert info.obs_dtype == np.uint8
    assert info.actions.n == 6  # Pong's minimal action set
    assert info.frame_skip == 4


def test_preprocessing_is_gymnasiums_with_ale_v5_defaults():
    env = make_env(PONG)
    try:
        assert type(env).__name__ == "FrameStackObservation"
        preprocessing = env.env
        assert type(preprocessing).__name__ == "AtariPreprocessing"
        assert preprocessing.frame_skip == 4 and preprocessing.noop_max == 30
        ale_env = env.unwrapped
        assert ale_env._frameskip == 1  # the frame skip is AtariPreprocessing's
        assert ale_env.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 42, 42) and obs.dtype == np.uint8
        obs, *_ = env.step(0)
        assert obs.shape == (4, 42, 42) and obs.max() > 0
    finally:
        env.close()


def test_flags_turn_off_sticky_actions_and_turn_on_the_full_action_space():
    config = resolve_config({"env": PONG, "repeat_action_probability": 0.0,
                             "full_action_space": True})
    env = make_env(PONG, **env_options(config))
    try:
        assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
        assert env.action_space.n == 18
    finally:
        env.close()
    assert env_info(PONG, **env_options(config)).actions.n == 18


def test_the_shape_of_a_huge_frame_stack_is_told_without_making_one():
    """The launcher asks env_info before its memory estimate can refuse the stack: a stack of
    10^5 frames of 42x42 (176 MB, and as much again for each bound of its space) must not be
    allocated to answer."""
    import tracemalloc

    tracemalloc.start()
    try:
        info = env_info(PONG, **env_options(resolve_config({"env": PONG,
                                                            "frame_stack": 100_000})))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.obs_shape == (100_000, 42, 42)
    assert peak < 20 * 10**6


def test_screen_size_and_frame_stack_flags_shape_the_observations():
    config = resolve_config({"env": PONG, "screen_size": 84, "frame_stack": 2})
    assert env_info(PONG, **env_options(config)).obs_shape == (2, 84, 84)
    env = make_env(PONG, **env_options(config))
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2, 84, 84)
    finally:
        env.close()


def test_the_actors_vector_env_gives_the_single_envs_frames():
    """Training steps ale-py's C++ vector env, evaluation Gymnasium's Python wrappers: a
    policy must see the same pixels in both. Without sticky actions and no-ops both are
    deterministic, so the same actions must give identical stacks, zero padding included."""
    options = {"repeat_action_probability": 0.0, "full_action_space": False,
               "screen_size": 42, "frame_stack": 4, "noop_max": 0}
    single = make_env(PONG, **options)
    vector = make_atari_vector_env(PONG, 1, **options)
    try:
        obs, _ = single.reset(seed=0)
        batch, _ = vector.reset(seed=0)
        np.testing.assert_array_equal(obs, batch[0])
        assert not obs[:3].any() and obs[3].any()  # a new episode: zero frames, then its first
        rng = np.random.default_rng(0)
        changed = 0
        for _ in range(150):
            action = int(rng.integers(single.action_space.n))
            obs, reward, *_ = single.step(action)
            batch, rewards, *_ = vector.step(np.array([action], np.int32))
            np.testing.assert_array_equal(obs, batch[0])
            assert reward == rewards[0]
            changed += int((obs[3] != obs[2]).any())
        assert changed > 100  # the ball and paddles moved: the frames compared were live
    finally:
        single.close()
        vector.close()


def test_an_ended_atari_episode_keeps_its_final_frames_and_restarts_from_zeros():
    batch = EnvBatch(PONG, 2, seed=0)
    try:
        rng = np.random.default_rng(0)
        for _ in range(3000):  # a random Pong game lasts about 800-1000 agent steps
            step = batch.step(rng.integers(0, 6, 2).astype(np.int32))
            done = step.terminated | step.truncated
            if done.any():
                break
        i = int(np.flatnonzero(done)[0])
        assert step.episode_return[i] <= -15 and step.episode_length[i] > 500
        assert step.final_obs[i][:3].any()  # the last frames of the game just lost
        assert not step.next_obs[i][:3].any() and step.next_obs[i][3].any()  # a new game
        others = ~done
        np.testing.assert_array_equal(step.final_obs[others], step.next_obs[others])
    finally:
        batch.close()


def test_env_batch_steps_uint8_frames():
    batch = EnvBatch(PONG, 2, seed=0)
    try:
        assert batch.observe().shape == (2, 4, 42, 42) and batch.observe().dtype == np.uint8
        step = batch.step(np.array([0, 1]))
        assert step.next_obs.shape == step.final_obs.shape == (2, 4, 42, 42)
        assert step.next_obs.dtype == np.uint8
        assert step.reward.shape == step.terminated.shape == step.truncated.shape == (2,)
    finally:
        batch.close()


def test_pong_picks_the_atari_preset_and_the_cnn():
    from a3c_graph.core.config import resolve_policy

    config = resolve_config({"env": PONG})
    assert config.hidden_sizes == (256,) and config.target_return == 18.0
    assert resolve_policy(config.policy, env_info(PONG).obs_shape) == ("cnn", False)
    assert resolve_policy("lstm", env_info(PONG).obs_shape) == ("cnn", True)

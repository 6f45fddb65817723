"""Tests for a3c_graph.core.envs: env ids a run can use, and the batch of envs an actor steps."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from a3c_graph.core.envs import EnvBatch, EnvError, env_info

SHORT_ENV_ID = "A3CTestCartPoleShort-v0"
SHORT_STEPS = 5


@pytest.fixture(scope="module")
def short_cartpole() -> str:
    """CartPole whose episodes are truncated after SHORT_STEPS steps."""
    if SHORT_ENV_ID not in gym.registry:
        gym.register(id=SHORT_ENV_ID,
                     entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
                     max_episode_steps=SHORT_STEPS)
    return SHORT_ENV_ID


def env_error(env_id: str) -> str:
    """The one-line message of the EnvError that `env_id` raises."""
    with pytest.raises(EnvError) as excinfo:
        env_info(env_id)
    message = str(excinfo.value)
    assert message.strip() and "\n" not in message, f"not one line: {message!r}"
    return message


# --------------------------------------------------------------------------- env_info

def test_env_info_of_cartpole():
    info = env_info("CartPole-v1")
    assert info.env_id == "CartPole-v1"
    assert info.obs_shape == (4,)
    assert info.obs_dtype == np.float32
    assert info.actions.n == 2
    assert info.reward_threshold == 475.0
    assert info.max_episode_steps == 500


def test_env_info_of_another_discrete_env():
    info = env_info("Acrobot-v1")
    assert (info.obs_shape, info.actions.n) == ((6,), 3)


def test_misspelled_env_id_gets_gymnasiums_suggestion():
    message = env_error("CartPol-v1")
    assert "'CartPol-v1'" in message
    assert "Did you mean" in message and "CartPole" in message


def test_unknown_version_lists_the_versions():
    message = env_error("CartPole-v9")
    assert "'CartPole-v9'" in message and "v1" in message


def test_unknown_namespace():
    message = env_error("NoSuchNamespace/CartPole-v1")
    assert "'NoSuchNamespace/CartPole-v1'" in message
    assert "Namespace NoSuchNamespace not found" in message


def test_a_box_action_space_gives_its_dimensions_and_bounds():
    info = env_info("Pendulum-v1")
    assert (info.actions.n, info.actions.low, info.actions.high) == (1, (-2.0,), (2.0,))
    assert info.actions.continuous and info.actions.shape == (1,)
    assert info.actions.dtype == "float32"


ACTION_ENVS = "tests.support.action_space_envs"


@pytest.mark.parametrize("env_id, says", [
    ("UnboundedBox-v0", "unbounded Box action space"),
    ("MatrixBox-v0", "Box action space of shape (2, 3)"),
    ("DictActions-v0", "Dict action space"),
    ("TupleActions-v0", "Tuple action space"),
])
def test_an_action_space_no_policy_can_act_in_is_refused_in_one_line(env_id, says):
    message = env_error(f"{ACTION_ENVS}:{env_id}")
    assert env_id in message and says in message


def test_a_box_action_reaches_the_env_clipped_and_the_step_says_so():
    """The Gaussian's samples are unbounded: the env gets them clipped to its Box, and the
    step reports the executed action (the rollout records the chosen one: test_rollout)."""
    envs = EnvBatch(f"{ACTION_ENVS}:TargetBox-v0", num_envs=2, seed=0)
    try:
        chosen = np.array([[3.5, -0.5], [-7.0, 1.25]], np.float32)
        step = envs.step(chosen)
        received = [env.unwrapped.last_action for env in envs._envs.envs]
    finally:
        envs.close()
    np.testing.assert_array_equal(received, [[2.0, -0.5], [-2.0, 1.25]])
    np.testing.assert_array_equal(step.action, received)


# --------------------------------------------------------------------------- EnvBatch

@pytest.fixture
def batch():
    envs = EnvBatch("CartPole-v1", num_envs=3, seed=11)
    yield envs
    envs.close()


def test_observe_gives_one_observation_per_env(batch):
    obs = batch.observe()
    assert obs.shape == (3, 4)
    assert obs.dtype == np.float32
    # Each env has its own seed, so no two start alike.
    assert len({tuple(row) for row in obs}) == 3


def test_episodes_are_counted_and_auto_reset(batch):
    """Always pushing left ends CartPole episodes in ~10 steps; follow each env through several."""
    steps_in_episode = np.zeros(3, np.int64)
    finished = np.zeros(3, np.int64)
    actions = np.zeros(3, np.int64)
    for _ in range(200):
        before = batch.observe().copy()
        t = batch.step(actions)
        steps_in_episode += 1
        done = t.terminated | t.truncated
        assert t.next_obs.shape == t.final_obs.shape == (3, 4)
        assert t.reward.dtype == np.float32 and np.all(t.reward == 1.0)
        assert t.episode_return.dtype == np.float32 and t.episode_length.dtype == np.int32
        np.testing.assert_array_equal(batch.observe(), t.next_obs)
        # CartPole pays 1 per step: a finished episode's return is its number of steps.
        np.testing.assert_array_equal(t.episode_return, np.where(done, steps_in_episode, 0))
        np.testing.assert_array_equal(t.episode_length, np.where(done, steps_in_episode, 0))
        # final_obs is the true last state where done (next_obs is then a fresh reset).
        differs = np.any(t.final_obs != t.next_obs, axis=1)
        np.testing.assert_array_equal(differs, done)
        # A pole that fell is terminated, not truncated: 200 steps never reach the 500 limit.
        assert not t.truncated.any()
        assert np.all(np.abs(t.next_obs[done]) <= 0.05), "reset states start near zero"
        assert not np.array_equal(before, t.next_obs)
        finished += done
        steps_in_episode[done] = 0
        if np.all(finished >= 3):
            break
    assert np.all(finished >= 3), f"episodes finished per env: {finished}"


def test_final_obs_is_where_the_pole_fell(batch):
    """The final observation of a terminated episode is outside CartPole's bounds."""
    actions = np.ones(3, np.int64)
    while True:
        t = batch.step(actions)
        done = t.terminated
        if done.any():
            break
    final = t.final_obs[done]
    out_of_bounds = (np.abs(final[:, 0]) > 2.4) | (np.abs(final[:, 2]) > 12 * 2 * np.pi / 360)
    assert out_of_bounds.all()


def observations(seed: int, num_envs: int = 2, steps: int = 30) -> np.ndarray:
    """[steps + 1, B, 4] observations of a batch; all envs take the same random action."""
    envs = EnvBatch("CartPole-v1", num_envs=num_envs, seed=seed)
    rng = np.random.default_rng(0)
    try:
        seen = [envs.observe().copy()]
        for _ in range(steps):
            envs.step(np.full(num_envs, rng.integers(0, 2)))
            seen.append(envs.observe().copy())
        return np.stack(seen)
    finally:
        envs.close()


def test_same_seed_gives_the_same_observations():
    np.testing.assert_array_equal(observations(5), observations(5))


def test_different_seeds_give_different_observations():
    a, b = observations(5), observations(6)
    assert not np.array_equal(a[0], b[0])
    assert not np.array_equal(a, b)


def test_env_i_is_seeded_with_seed_plus_i():
    np.testing.assert_array_equal(observations(5, num_envs=2)[:, 1],
                                  observations(6, num_envs=1)[:, 0])


def test_time_limit_truncates_instead_of_terminating(short_cartpole):
    assert env_info(short_cartpole).max_episode_steps == SHORT_STEPS
    envs = EnvBatch(short_cartpole, num_envs=2, seed=3)
    try:
        for step in range(1, SHORT_STEPS + 1):
            t = envs.step(np.full(2, step % 2))  # alternate left/right: the pole stays up
            if step < SHORT_STEPS:
                assert not (t.terminated | t.truncated).any(), f"episode ended at step {step}"
                assert np.all(t.episode_length == 0)
        assert t.truncated.all()
        assert not t.terminated.any()
        np.testing.assert_array_equal(t.episode_length, [SHORT_STEPS, SHORT_STEPS])
        np.testing.assert_array_equal(t.episode_return, [SHORT_STEPS, SHORT_STEPS])
        # The state to bootstrap from is the 5th step's, not the reset that replaced it.
        assert np.all(np.any(t.final_obs != t.next_obs, axis=1))
        # A new episode has begun: one more step is step 1 of it.
        t = envs.step(np.zeros(2, np.int64))
        assert not (t.terminated | t.truncated).any()
    finally:
        envs.close()

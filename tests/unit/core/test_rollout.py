"""Rollout alignment: every field of core.rollout's spec in the row of the step it records.

The env here writes its own state into its observations (which env, which episode, which step
of it, the last action), and its reward encodes the action and the step, so every row of a
recorded rollout can be checked against the definitions in rollout.py's docstring:

  obs[t]       s_t, acted on at t
  next_obs[t]  s_{t+1}: obs[t + 1] while the episode goes on; where it ended at t, the
               episode's true final observation, while obs[t + 1] is the first observation
               of the next episode (the env auto-reset in the same step)
  actions[t], rewards[t], terminated[t], truncated[t]: of the step from s_t
  episode_returns[t], episode_lengths[t]: of the episode that ended at t, else 0

Rollouts are [T, B, ...], time-major; consecutive rollouts of one actor are concatenated along
time here, since an episode may span rollouts.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from a3c_graph.core.envs import EnvBatch
from a3c_graph.core.rollout import RolloutRecorder, build_rollout, rollout_fields

tf1 = tf.compat.v1

T, B, ROLLOUTS = 7, 3, 3
NUM_ACTIONS = 3
TIME_LIMIT = 4  # steps; episodes that would last longer are truncated
# Episode lengths the env cycles through: 2 and 3 end in a terminal state, 6 is truncated at 4.
EPISODE_LENGTHS = (2, 6, 3)
SEED = 10
DISCOUNT = 0.5  # the rollouts record their discounted returns (--normalize-rewards)
# The recorded fields' names (they do not depend on the sizes).
ROLLOUT_KEYS = tuple(field.name for field in rollout_fields((), np.float32, 0, 0,
                                                            discounted=True))
# Observation fields.
ENV_SEED, EPISODE, STEP, LAST_ACTION = range(4)


class SelfDescribingEnv(gym.Env):
    """Observations [seed of this env, episode index, step within the episode, last action]
    (-1 before the first action). Reward 1 + action + 10 * step for the step-th step (1, 2,
    ...), never 0. Episode e of the env seeded s terminates after
    EPISODE_LENGTHS[(s + e) % 3] steps, unless the time limit truncates it first."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Discrete(NUM_ACTIONS)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.env_seed, self.episode, self.step_index, self.last_action = 0, -1, 0, -1

    def _obs(self):
        return np.array([self.env_seed, self.episode, self.step_index, self.last_action],
                        np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.env_seed, self.episode = seed, -1
        self.episode += 1
        self.step_index, self.last_action = 0, -1
        return self._obs(), {}

    def step(self, action):
        self.step_index += 1
        self.last_action = int(action)
        reward = 1.0 + self.last_action + 10.0 * self.step_index
        length = EPISODE_LENGTHS[(self.env_seed + self.episode) % len(EPISODE_LENGTHS)]
        return self._obs(), reward, self.step_index == length, False, {}


ENV_ID = "A3CTestSelfDescribing-v0"


@pytest.fixture(scope="module")
def env_id() -> str:
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=SelfDescribingEnv, max_episode_steps=TIME_LIMIT)
    return ENV_ID


def chosen_action(obs):
    """The policy: an action [B] of observations [B, 4] that differs from step to step."""
    return (obs[:, ENV_SEED] + obs[:, EPISODE] + obs[:, STEP]).astype(np.int32) % NUM_ACTIONS


def graph_rollouts(env_id: str) -> dict[str, np.ndarray]:
    """ROLLOUTS consecutive rollouts of the in-graph loop (build_rollout), acting with
    chosen_action on the observation the loop hands the policy."""
    batch = EnvBatch(env_id, B, seed=SEED)
    with tf.Graph().as_default():
        tf1.set_random_seed(0)

        def policy(obs):
            return tf.cast(tf.math.floormod(
                obs[:, ENV_SEED] + obs[:, EPISODE] + obs[:, STEP], NUM_ACTIONS), tf.int32)

        rollout = build_rollout(batch, policy, T, discount=DISCOUNT)
        with tf1.Session() as session:
            rollouts = [session.run(rollout) for _ in range(ROLLOUTS)]
    batch.close()
    return {key: np.concatenate([r[key] for r in rollouts]) for key in ROLLOUT_KEYS}


def recorder_rollouts(env_id: str) -> dict[str, np.ndarray]:
    """The same from a Python loop over RolloutRecorder, as the TF2 variants collect them."""
    batch = EnvBatch(env_id, B, seed=SEED)
    recorder = RolloutRecorder(batch, T, DISCOUNT)
    rollouts = []
    for _ in range(ROLLOUTS):
        for t in range(T):
            recorder.step_and_record(t, chosen_action(batch.observe()))
        rollouts.append(dict(zip(ROLLOUT_KEYS, recorder.collect())))
    batch.close()
    return {key: np.concatenate([r[key] for r in rollouts]) for key in ROLLOUT_KEYS}


@pytest.fixture(scope="module", params=["graph", "recorder"])
def recorded(request, env_id) -> dict[str, np.ndarray]:
    """[ROLLOUTS * T, B, ...] fields of consecutive rollouts from a fresh EnvBatch."""
    collect = graph_rollouts if request.param == "graph" else recorder_rollouts
    return collect(env_id)


def test_the_env_batch_did_what_the_checks_need(recorded):
    done = recorded["terminated"] | recorded["truncated"]
    assert recorded["terminated"].sum() >= 3 and recorded["truncated"].sum() >= 3
    assert len(np.unique(recorded["actions"])) == NUM_ACTIONS
    # Env i of the batch is seeded SEED + i and starts its first episode at t = 0.
    np.testing.assert_array_equal(recorded["obs"][0, :, ENV_SEED], SEED + np.arange(B))
    np.testing.assert_array_equal(recorded["obs"][0, :, [EPISODE, STEP]], 0)
    # Some episode ends on a rollout's last row, so the next rollout starts with a reset.
    assert done[T - 1::T].any()


def test_next_obs_is_the_following_obs_while_the_episode_goes_on(recorded):
    obs, next_obs = recorded["obs"], recorded["next_obs"]
    done = recorded["terminated"] | recorded["truncated"]
    goes_on = ~done[:-1]
    np.testing.assert_array_equal(next_obs[:-1][goes_on], obs[1:][goes_on])
    # (Across the rollouts' boundaries too: the concatenation is one stream per env.)
    np.testing.assert_array_equal(next_obs[:, :, STEP], obs[:, :, STEP] + 1)
    np.testing.assert_array_equal(next_obs[:, :, EPISODE], obs[:, :, EPISODE])


def test_where_an_episode_ended_next_obs_is_its_final_obs_and_obs_a_new_episodes_first(
        recorded):
    obs, next_obs = recorded["obs"], recorded["next_obs"]
    done = recorded["terminated"] | recorded["truncated"]
    final, first = next_obs[:-1][done[:-1]], obs[1:][done[:-1]]
    # The final observation: the episode's last step, not a reset.
    np.testing.assert_array_equal(final[:, STEP], recorded["episode_lengths"][:-1][done[:-1]])
    assert (final[:, STEP] >= 2).all() and (final[:, LAST_ACTION] >= 0).all()
    # The next row acts on the first observation of the env's next episode.
    np.testing.assert_array_equal(first[:, STEP], 0)
    np.testing.assert_array_equal(first[:, LAST_ACTION], -1)
    np.testing.assert_array_equal(first[:, EPISODE], final[:, EPISODE] + 1)
    np.testing.assert_array_equal(first[:, ENV_SEED], final[:, ENV_SEED])


def test_terminated_and_truncated_are_set_on_the_step_that_ended_the_episode(recorded):
    steps = recorded["next_obs"][:, :, STEP]
    seeds, episodes = recorded["obs"][:, :, ENV_SEED], recorded["obs"][:, :, EPISODE]
    lengths = np.take(EPISODE_LENGTHS, (seeds + episodes).astype(int) % len(EPISODE_LENGTHS))
    np.testing.assert_array_equal(recorded["terminated"], steps == lengths)
    np.testing.assert_array_equal(recorded["truncated"],
                                  (steps == TIME_LIMIT) & (lengths > TIME_LIMIT))


def test_actions_and_rewards_sit_in_the_row_of_their_step(recorded):
    actions, obs, next_obs = recorded["actions"], recorded["obs"], recorded["next_obs"]
    # a_t was chosen on s_t...
    np.testing.assert_array_equal(actions, chosen_action(obs.reshape(-1, 4)).reshape(-1, B))
    # ...s_{t+1} records the action taken at t...
    np.testing.assert_array_equal(next_obs[:, :, LAST_ACTION], actions)
    # ...and r_t is the reward for that action at that step.
    np.testing.assert_array_equal(recorded["rewards"],
                                  1.0 + actions + 10.0 * (obs[:, :, STEP] + 1))


def test_episode_returns_and_lengths_are_nonzero_exactly_where_an_episode_ended(recorded):
    done = recorded["terminated"] | recorded["truncated"]
    returns, lengths = recorded["episode_returns"], recorded["episode_lengths"]
    np.testing.assert_array_equal(returns != 0, done)
    np.testing.assert_array_equal(lengths != 0, done)
    # Each is the sum of its episode's rewards and its number of steps (every episode here
    # started inside the recording: the batch was fresh).
    running_return, running_length = np.zeros(B), np.zeros(B, int)
    for t in range(len(done)):
        running_return += recorded["rewards"][t]
        running_length += 1
        np.testing.assert_allclose(returns[t], np.where(done[t], running_return, 0.0))
        np.testing.assert_array_equal(lengths[t], np.where(done[t], running_length, 0))
        running_return[done[t]] = 0.0
        running_length[done[t]] = 0


def test_discounted_returns_sum_each_episodes_rewards_so_far_across_rollouts(recorded):
    """--normalize-rewards' statistic: R_t = DISCOUNT x R_{t-1} + r_t within an episode, from
    its first step, carried from one rollout to the next, and back to 0 after a terminated
    or a truncated step (VecNormalize's discounted return)."""
    done = recorded["terminated"] | recorded["truncated"]
    assert (~done[T - 1]).any()  # an episode goes on from the first rollout into the second
    want, running = np.zeros_like(recorded["rewards"]), np.zeros(B)
    for t in range(len(done)):
        running = DISCOUNT * running + recorded["rewards"][t]
        want[t] = running
        running[done[t]] = 0.0
    np.testing.assert_allclose(recorded["discounted_returns"], want, rtol=1e-6)


def test_a_rollout_without_a_discount_records_no_discounted_returns(env_id):
    batch = EnvBatch(env_id, B, seed=SEED)
    with tf.Graph().as_default():
        rollout = build_rollout(batch, lambda obs: tf.zeros([B], tf.int32), T)
    recorder = RolloutRecorder(batch, T)
    batch.close()
    assert "discounted_returns" not in rollout
    assert "discounted_returns" not in [field.name for field in recorder.fields]


# --------------------------------------------------------------------------- acting

def test_actions_are_sampled_from_the_policy_and_nan_logits_act_uniformly():
    """Categorical.sample, the actors' choice: a policy of [0.2, 0.7, 0.1] is followed in
    proportion (not its most likely action every time), and logits made NaN by NaN
    observations give actions spread over the whole action space (never an id outside it)."""
    from a3c_graph.core.distributions import Categorical

    n = 20000
    logits = np.log(np.array([[0.2, 0.7, 0.1]] * n + [[np.nan] * 3] * n, np.float32))
    with tf.Graph().as_default():
        tf1.set_random_seed(3)
        actions = Categorical().sample(tf.constant(logits))
        with tf1.Session() as session:
            got = session.run(actions)
    assert got.dtype == np.int32
    followed = np.bincount(got[:n], minlength=3) / n
    np.testing.assert_allclose(followed, [0.2, 0.7, 0.1], atol=0.02)  # about 7 sigma
    uniform = np.bincount(got[n:], minlength=3) / n
    assert len(uniform) == 3
    np.testing.assert_allclose(uniform, [1 / 3] * 3, atol=0.02)


def test_a_box_rollout_records_the_sampled_actions_and_the_env_gets_them_clipped():
    """A Gaussian policy's actions beyond the Box: the rollout keeps them as sampled (its
    log-probability is of those), while the env received them clipped to [-2, 2]."""
    batch = EnvBatch("tests.support.action_space_envs:TargetBox-v0", 2, seed=SEED)
    with tf.Graph().as_default():
        tf1.set_random_seed(0)
        rollout = build_rollout(
            batch, lambda obs: 3.0 * tf.random.normal([2, 2]) + tf.constant([4.0, -4.0]), 3)
        with tf1.Session() as session:
            got = session.run(rollout)
    received = np.array([env.unwrapped.last_action for env in batch._envs.envs])
    batch.close()
    actions = got["actions"]
    assert actions.dtype == np.float32 and actions.shape == (3, 2, 2)
    assert np.abs(actions).max() > 2.0  # samples beyond the bounds, kept
    np.testing.assert_allclose(received, np.clip(actions[-1], -2.0, 2.0))
    x = got["obs"][..., 0]
    clipped = np.clip(actions, -2.0, 2.0)
    np.testing.assert_allclose(  # the reward is the clipped action's
        got["rewards"], -((clipped[..., 0] - x) ** 2) - (clipped[..., 1] + x) ** 2, rtol=1e-5)

"""Tests for a3c_graph.core.losses.

Advantages are checked against deliberately slow NumPy ground truths written in the forward
view of the definitions (sum discounted rewards until the episode or the rollout ends, then
bootstrap), so they share no code or recursion with the tf.scan implementation; at lambda = 1
against the n-step returns of the A3C paper. Small cases with the expected numbers written out
by hand pin down termination vs truncation.

Every case builds its own tf.Graph and evaluates it in a tf.compat.v1.Session: the project runs
in graph mode, but disabling eager execution at import would be process-wide.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from a3c_graph.core import losses
from a3c_graph.core.distributions import Categorical
from tests.support.ground_truth import gae as reference_gae


def run_in_graph(build):
    """Build tensors with `build()` in a fresh graph and return their values from a Session."""
    with tf.Graph().as_default():
        fetches = build()
        with tf.compat.v1.Session() as session:
            return session.run(fetches)


# ---------------------------------------------------------------------------------------------
# Slow ground truths, [T, B] arrays, written from the definitions in the losses.py docstring.
# ---------------------------------------------------------------------------------------------

def reference_n_step_returns(rewards, terminated, truncated, next_values, gamma):
    """G_t = r_t + gamma r_{t+1} + ... up to the step k that ends the episode or the rollout,
    plus gamma^(k-t+1) V(s_{k+1}) unless s_{k+1} is terminal."""
    num_steps, batch_size = rewards.shape
    returns = np.zeros((num_steps, batch_size))
    for b in range(batch_size):
        for t in range(num_steps):
            total, discount, k = 0.0, 1.0, t
            while True:
                total += discount * rewards[k, b]
                discount *= gamma
                if terminated[k, b]:
                    break  # terminal state: its value is 0, nothing follows
                if truncated[k, b] or k == num_steps - 1:
                    total += discount * next_values[k, b]  # bootstrap from V(s_{k+1})
                    break
                k += 1
            returns[t, b] = total
    return returns


def random_rollout(rng, num_steps, batch_size, done_prob=0.25):
    """Random rewards/values and independent terminated/truncated masks, with at least one step
    where both flags are set."""
    rewards = rng.normal(size=(num_steps, batch_size))
    values = rng.normal(size=(num_steps, batch_size))
    next_values = rng.normal(size=(num_steps, batch_size))
    terminated = rng.random((num_steps, batch_size)) < done_prob
    truncated = rng.random((num_steps, batch_size)) < done_prob
    t, b = rng.integers(num_steps), rng.integers(batch_size)
    terminated[t, b] = truncated[t, b] = True
    return rewards, values, next_values, terminated, truncated


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------------------------------------
# GAE against the ground truth.
# ---------------------------------------------------------------------------------------------

ROLLOUT_SHAPES_AND_DISCOUNTS = [
    # (T, B, gamma, lam)
    (1, 1, 0.99, 0.95),
    (1, 5, 0.9, 0.0),
    (5, 3, 0.99, 0.95),
    (8, 4, 0.5, 1.0),
    (20, 7, 0.9, 0.5),
    (32, 8, 1.0, 0.9),
    (16, 2, 0.0, 0.7),
]


@pytest.mark.parametrize("num_steps, batch_size, gamma, lam", ROLLOUT_SHAPES_AND_DISCOUNTS)
def test_gae_advantages_match_slow_reference(num_steps, batch_size, gamma, lam):
    rng = np.random.default_rng(num_steps * 100 + batch_size + 1)
    rewards, values, next_values, terminated, truncated = random_rollout(
        rng, num_steps, batch_size)

    got = run_in_graph(lambda: losses.gae_advantages(
        tf.constant(rewards), tf.constant(values), tf.constant(next_values),
        tf.constant(terminated), tf.constant(truncated), gamma, lam))

    want = reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_float32_inputs_with_float_masks_match_reference():
    """The worker feeds float32 tensors and may store done flags as 0.0/1.0 floats."""
    rng = np.random.default_rng(7)
    rewards, values, next_values, terminated, truncated = random_rollout(rng, 12, 4)
    gamma, lam = 0.97, 0.9

    got_advantages = run_in_graph(lambda: losses.gae_advantages(
        tf.constant(rewards, tf.float32), tf.constant(values, tf.float32),
        tf.constant(next_values, tf.float32), tf.constant(terminated, tf.float32),
        tf.constant(truncated, tf.float32), gamma, lam))

    assert got_advantages.dtype == np.float32
    np.testing.assert_allclose(
        got_advantages,
        reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam),
        rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Hand-checkable cases.
# ---------------------------------------------------------------------------------------------

# Three envs (columns), T = 3, reward 1 at every step. At t = 1 env 0 terminates, env 1 is
# truncated by a time limit, env 2 has both flags.
HAND_REWARDS = np.ones((3, 3))
HAND_TERMINATED = np.array([[0, 0, 0], [1, 0, 1], [0, 0, 0]], dtype=bool)
HAND_TRUNCATED = np.array([[0, 0, 0], [0, 1, 1], [0, 0, 0]], dtype=bool)


def test_gae_truncation_bootstraps_and_termination_does_not():
    # V(s) = 1 everywhere except the final observation of the truncated episode (V = 10).
    values = np.ones((3, 3))
    next_values = np.array([[1.0, 1.0, 1.0], [1.0, 10.0, 10.0], [1.0, 1.0, 1.0]])
    gamma, lam = 0.5, 0.5

    got = run_in_graph(lambda: losses.gae_advantages(
        tf.constant(HAND_REWARDS), tf.constant(values), tf.constant(next_values),
        tf.constant(HAND_TERMINATED), tf.constant(HAND_TRUNCATED), gamma, lam))

    # delta = 1 + 0.5 * 1 - 1 = 0.5 on ordinary steps; on the terminal step 1 + 0 - 1 = 0;
    # on the truncated step 1 + 0.5 * 10 - 1 = 5. The recursion weight is gamma * lam = 0.25
    # and is cut at t = 1 in every column.
    want = np.array([
        [0.5 + 0.25 * 0.0, 0.5 + 0.25 * 5.0, 0.5 + 0.25 * 0.0],
        [0.0,              5.0,              0.0],
        [0.5,              0.5,              0.5],
    ])
    np.testing.assert_allclose(got, want)


def test_gae_without_episode_ends_on_constant_rollout():
    """SB3-style: rewards and values are constants, so the advantages follow by hand."""
    rewards = np.ones((3, 1))
    values = np.ones((3, 1))
    next_values = np.ones((3, 1))
    no_flags = np.zeros((3, 1), dtype=bool)

    got = run_in_graph(lambda: losses.gae_advantages(
        tf.constant(rewards), tf.constant(values), tf.constant(next_values),
        tf.constant(no_flags), tf.constant(no_flags), 0.5, 0.5))

    # delta_t = 0.5 for all t; A_2 = 0.5, A_1 = 0.5 + 0.25 * 0.5, A_0 = 0.5 + 0.25 * 0.625.
    np.testing.assert_allclose(got[:, 0], [0.65625, 0.625, 0.5])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_with_lambda_one_plus_values_equals_n_step_returns(seed):
    rng = np.random.default_rng(seed)
    num_steps, batch_size, gamma = 10, 4, 0.9
    rewards, values, next_values, terminated, truncated = random_rollout(
        rng, num_steps, batch_size)
    # Consistent data: while the episode goes on, V(s_{t+1}) is the next step's V(s_t).
    # After an episode end next_values keeps its own value (the final observation's).
    goes_on = ~(terminated | truncated)
    next_values[:-1] = np.where(goes_on[:-1], values[1:], next_values[:-1])

    advantages = run_in_graph(lambda: losses.gae_advantages(
        tf.constant(rewards), tf.constant(values), tf.constant(next_values),
        tf.constant(terminated), tf.constant(truncated), gamma, 1.0))

    returns = reference_n_step_returns(rewards, terminated, truncated, next_values, gamma)
    np.testing.assert_allclose(advantages + values, returns, rtol=1e-10, atol=1e-10)


def test_gae_with_lambda_zero_is_one_step_td_error():
    rng = np.random.default_rng(3)
    rewards, values, next_values, terminated, truncated = random_rollout(rng, 6, 3)
    gamma = 0.9

    got = run_in_graph(lambda: losses.gae_advantages(
        tf.constant(rewards), tf.constant(values), tf.constant(next_values),
        tf.constant(terminated), tf.constant(truncated), gamma, 0.0))

    td_error = rewards + gamma * np.where(terminated, 0.0, next_values) - values
    np.testing.assert_allclose(got, td_error, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# Losses.
# ---------------------------------------------------------------------------------------------

CATEGORICAL = Categorical()


def random_batch(seed, batch_size=9, num_actions=4):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch_size, num_actions)) * 2.0
    actions = rng.integers(num_actions, size=batch_size)
    values = rng.normal(size=batch_size)
    advantages = rng.normal(size=batch_size)
    returns = rng.normal(size=batch_size)
    return logits, actions, values, advantages, returns


def test_log_probs_match_numpy():
    logits, actions, *_ = random_batch(0)
    got = run_in_graph(lambda: CATEGORICAL.log_prob(tf.constant(logits), tf.constant(actions)))
    np.testing.assert_allclose(got, log_softmax(logits)[np.arange(len(actions)), actions],
                               rtol=1e-10)


def test_policy_gradient_loss_matches_numpy():
    logits, actions, _, advantages, _ = random_batch(1)
    got = run_in_graph(lambda: losses.policy_gradient_loss(
        CATEGORICAL.log_prob(tf.constant(logits), tf.constant(actions)),
        tf.constant(advantages)))
    log_pi = log_softmax(logits)[np.arange(len(actions)), actions]
    np.testing.assert_allclose(got, -np.mean(log_pi * advantages), rtol=1e-10)


def test_value_loss_matches_numpy():
    _, _, values, _, returns = random_batch(2)
    got = run_in_graph(lambda: losses.value_loss(tf.constant(values), tf.constant(returns)))
    np.testing.assert_allclose(got, 0.5 * np.mean((returns - values) ** 2), rtol=1e-10)


def test_entropy_matches_numpy():
    logits, *_ = random_batch(3)
    got = run_in_graph(lambda: tf.reduce_mean(CATEGORICAL.entropy(tf.constant(logits))))
    log_p = log_softmax(logits)
    np.testing.assert_allclose(got, np.mean(-np.sum(np.exp(log_p) * log_p, axis=-1)),
                               rtol=1e-10)


@pytest.mark.parametrize("num_actions", [2, 3, 6, 18])
def test_entropy_of_uniform_policy_is_log_num_actions(num_actions):
    # Equal logits of any value give the uniform policy.
    logits = np.full((5, num_actions), 3.7)
    got = run_in_graph(lambda: tf.reduce_mean(CATEGORICAL.entropy(tf.constant(logits))))
    np.testing.assert_allclose(got, math.log(num_actions), rtol=1e-10)


def test_entropy_of_nearly_deterministic_policy_is_near_zero():
    logits = np.array([[50.0, 0.0, 0.0], [0.0, 0.0, 50.0]])
    got = run_in_graph(lambda: tf.reduce_mean(CATEGORICAL.entropy(tf.constant(logits))))
    assert 0.0 <= got < 1e-15


def test_a3c_loss_total_and_parts_match_numpy():
    logits, actions, values, advantages, returns = random_batch(4)
    entropy_coef, value_coef = 0.01, 0.5

    total, parts = run_in_graph(lambda: losses.a3c_loss(
        tf.constant(logits), tf.constant(actions), tf.constant(values),
        tf.constant(advantages), tf.constant(returns), entropy_coef, value_coef))

    log_p = log_softmax(logits)
    policy_loss = -np.mean(log_p[np.arange(len(actions)), actions] * advantages)
    value_loss = 0.5 * np.mean((returns - values) ** 2)
    entropy = np.mean(-np.sum(np.exp(log_p) * log_p, axis=-1))
    assert set(parts) == {"policy_loss", "value_loss", "entropy"}
    np.testing.assert_allclose(parts["policy_loss"], policy_loss, rtol=1e-10)
    np.testing.assert_allclose(parts["value_loss"], value_loss, rtol=1e-10)
    np.testing.assert_allclose(parts["entropy"], entropy, rtol=1e-10)
    np.testing.assert_allclose(
        total, policy_loss + value_coef * value_loss - entropy_coef * entropy, rtol=1e-10)


def test_policy_gradient_flows_into_logits_but_not_advantages():
    logits, actions, _, advantages, _ = random_batch(5)

    def build():
        logits_t, advantages_t = tf.constant(logits), tf.constant(advantages)
        loss = losses.policy_gradient_loss(
            CATEGORICAL.log_prob(logits_t, tf.constant(actions)), advantages_t)
        grad_advantages, = tf.gradients(loss, [advantages_t])
        assert grad_advantages is None
        return tf.gradients(loss, [logits_t])[0]

    grad_logits = run_in_graph(build)
    # d/dlogits of -mean(log softmax(logits)[a] * A) = -(onehot(a) - softmax(logits)) * A / N.
    onehot = np.eye(logits.shape[1])[actions]
    want = -(onehot - np.exp(log_softmax(logits))) * advantages[:, None] / len(actions)
    np.testing.assert_allclose(grad_logits, want, rtol=1e-8, atol=1e-12)


def test_value_loss_gradient_flows_into_values_but_not_returns():
    _, _, values, _, returns = random_batch(6)

    def build():
        values_t, returns_t = tf.constant(values), tf.constant(returns)
        loss = losses.value_loss(values_t, returns_t)
        grad_returns, = tf.gradients(loss, [returns_t])
        assert grad_returns is None
        return tf.gradients(loss, [values_t])[0]

    grad_values = run_in_graph(build)
    np.testing.assert_allclose(grad_values, (values - returns) / len(values), rtol=1e-10)


def test_a3c_loss_treats_advantages_and_returns_as_constants():
    logits, actions, values, advantages, returns = random_batch(7)
    with tf.Graph().as_default():
        logits_t, values_t = tf.constant(logits), tf.constant(values)
        advantages_t, returns_t = tf.constant(advantages), tf.constant(returns)
        total, _ = losses.a3c_loss(logits_t, tf.constant(actions), values_t, advantages_t,
                                   returns_t, 0.01, 0.5)
        grads = tf.gradients(total, [logits_t, values_t, advantages_t, returns_t])
    assert grads[0] is not None and grads[1] is not None
    assert grads[2] is None and grads[3] is None


# ---------------------------------------------------------------------------------------------
# Normalization.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(64,), (16, 8)])
def test_normalize_gives_mean_zero_and_std_one(shape):
    rng = np.random.default_rng(9)
    x = rng.normal(loc=5.0, scale=3.0, size=shape)
    got = run_in_graph(lambda: losses.normalize(tf.constant(x)))
    assert got.shape == shape
    assert abs(got.mean()) < 1e-6
    np.testing.assert_allclose(got.std(), 1.0, rtol=1e-6)
    # An affine map: order and relative spacing are kept.
    np.testing.assert_allclose(got, (x - x.mean()) / x.std(), rtol=1e-6, atol=1e-6)


def test_normalize_of_constant_input_is_finite():
    got = run_in_graph(lambda: losses.normalize(tf.constant(np.full((4, 3), 2.5))))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, 0.0)

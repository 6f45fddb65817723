"""core/distributions.py: how actions are sampled and chosen greedily from a policy's output,
and the Gaussian's log-probability and entropy against the formulas of
tests/support/ground_truth.py (written from the definitions, in float64)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from a3c_graph.core.action_space import ActionSpace
from a3c_graph.core.distributions import (
    SDE_EPSILON,
    DiagGaussian,
    distribution,
    exploration_matrices,
    state_dependent_log_std,
    state_dependent_noise,
)
from tests.support import ground_truth

tf1 = tf.compat.v1


def run(build):
    with tf.Graph().as_default():
        tf1.set_random_seed(5)
        fetches = build()
        with tf1.Session() as session:
            return session.run(fetches)


def gaussian_params(mean, log_std):
    return np.concatenate([mean, log_std], axis=-1).astype(np.float32)


def test_the_gaussians_log_probability_and_entropy_sum_over_the_dimensions():
    rng = np.random.default_rng(0)
    mean, log_std = rng.normal(size=(7, 4)), rng.normal(scale=0.7, size=(7, 4))
    actions = rng.normal(scale=2.0, size=(7, 4)).astype(np.float32)
    gaussian = DiagGaussian(4)
    log_prob, entropy = run(lambda: (
        gaussian.log_prob(tf.constant(gaussian_params(mean, log_std)), tf.constant(actions)),
        gaussian.entropy(tf.constant(gaussian_params(mean, log_std)))))
    want_log_prob, want_entropy = ground_truth.log_prob_and_entropy(
        (mean.astype(np.float32), log_std.astype(np.float32)), actions)
    np.testing.assert_allclose(log_prob, want_log_prob, rtol=1e-5)
    np.testing.assert_allclose(entropy, want_entropy, rtol=1e-5)


def test_gaussian_samples_follow_the_mean_and_std_and_greedy_is_the_mean():
    mean, log_std = np.array([[1.5, -3.0]]), np.log(np.array([[0.5, 2.0]]))
    params = np.repeat(gaussian_params(mean, log_std), 40000, axis=0)
    gaussian = distribution(ActionSpace(2, (-1.0, -1.0), (1.0, 1.0)))
    samples, greedy = run(lambda: (gaussian.sample(tf.constant(params)),
                                   gaussian.mode(tf.constant(params[:1]))))
    assert samples.dtype == np.float32 and samples.shape == (40000, 2)
    # Unclipped: the Box is [-1, 1], the samples are the Gaussian's (about 7 standard errors).
    np.testing.assert_allclose(samples.mean(axis=0), [1.5, -3.0], atol=0.05)
    np.testing.assert_allclose(samples.std(axis=0), [0.5, 2.0], rtol=0.03)
    np.testing.assert_array_equal(greedy, [[1.5, -3.0]])


def test_nan_gaussian_parameters_act_on_a_standard_normal():
    params = np.full((20000, 2), np.nan, np.float32)
    samples = run(lambda: DiagGaussian(1).sample(tf.constant(params)))
    assert np.isfinite(samples).all()
    assert abs(samples.mean()) < 0.05 and abs(samples.std() - 1.0) < 0.05


def test_a_discrete_space_samples_ids_and_greedy_is_the_most_likely():
    logits = np.log(np.array([[0.2, 0.7, 0.1]], np.float32))
    categorical = distribution(3)
    greedy = run(lambda: categorical.mode(tf.constant(logits)))
    assert greedy.dtype == np.int32 and greedy.tolist() == [1]


def test_gsdes_log_std_in_each_state_is_that_of_the_features_times_the_matrix():
    """--sde: the std of features @ theta, theta [F, n] from N(0, exp(log_std)^2), is
    sqrt(sum_f features_f^2 exp(2 log_std_fn)) (plus stable-baselines3's 1e-6 under the
    root), written from the definition in float64; the features take no gradient from it."""
    rng = np.random.default_rng(1)
    features = np.tanh(rng.normal(size=(6, 5))).astype(np.float32)
    log_std = rng.normal(-1.0, 0.5, size=(5, 3)).astype(np.float32)

    def build():
        z = tf.constant(features)
        got = state_dependent_log_std(z, tf.constant(log_std))
        return got, tf.constant(tf.gradients(tf.reduce_sum(got), z)[0] is None)

    got, features_take_no_gradient = run(build)
    f, s = features.astype(np.float64), log_std.astype(np.float64)
    want = np.empty((6, 3))
    for row in range(6):
        for action in range(3):
            variance = sum(f[row, k] ** 2 * np.exp(s[k, action]) ** 2 for k in range(5))
            want[row, action] = 0.5 * np.log(variance + SDE_EPSILON)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert features_take_no_gradient


def test_gsdes_noise_has_that_std_across_envs_and_is_held_within_a_rollout():
    """The noise of 40,000 envs' matrices on one state's features: mean 0 and the std of
    state_dependent_log_std (within 2 %); the same matrices on the same features give the
    same noise (a rollout's steps share them), and on other features other noise."""
    rng = np.random.default_rng(2)
    features = np.tanh(rng.normal(size=(1, 8))).astype(np.float32)
    other = np.tanh(rng.normal(size=(1, 8))).astype(np.float32)
    log_std = rng.normal(-1.5, 0.3, size=(8, 2)).astype(np.float32)
    envs = 40_000

    def build():
        matrices = exploration_matrices(tf.constant(log_std), envs)
        tiled = tf.tile(tf.constant(features), [envs, 1])
        return (state_dependent_noise(tiled, matrices), state_dependent_noise(tiled, matrices),
                state_dependent_noise(tf.tile(tf.constant(other), [envs, 1]), matrices),
                state_dependent_log_std(tf.constant(features), tf.constant(log_std)))

    noise, again, elsewhere, log_std_here = run(build)
    want_std = np.exp(log_std_here[0])
    np.testing.assert_allclose(noise.std(axis=0), want_std, rtol=0.02)
    assert (np.abs(noise.mean(axis=0)) < 4 * want_std / np.sqrt(envs)).all()
    np.testing.assert_array_equal(noise, again)
    assert np.abs(elsewhere - noise).mean() > 0.1 * want_std.mean()

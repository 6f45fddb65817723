"""core/distributions.py: how actions are sampled and chosen greedily from a policy's output,
and the Gaussian's log-probability and entropy against the formulas of
tests/support/ground_truth.py (written from the definitions, in float64)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from a3c_graph.core.action_space import ActionSpace
from a3c_graph.core.distributions import DiagGaussian, distribution
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

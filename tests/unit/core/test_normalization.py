"""core/normalization.py: what one rollout adds to the cluster's observation statistics."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from a3c_graph.core.normalization import rollout_sums

tf1 = tf.compat.v1


def sums_of(observations: np.ndarray) -> list[np.ndarray]:
    with tf.Graph().as_default(), tf1.Session() as session:
        return session.run(rollout_sums(tf.constant(observations)))


def test_a_rollouts_count_sum_and_sum_of_squares_are_over_every_step_and_env():
    observations = np.arange(24, dtype=np.float32).reshape(3, 4, 2)  # [T, B, D]
    count, total, squares = sums_of(observations)
    flat = observations.reshape(-1, 2).astype(np.float64)
    assert count == 12
    np.testing.assert_allclose(total, flat.sum(axis=0))
    np.testing.assert_allclose(squares, (flat ** 2).sum(axis=0))


def test_image_observations_are_counted_per_entry_of_the_flattened_observation():
    # MinAtar's [10, 10, C] frames on the mlp policy: the statistics are the mlp torso's
    # input, one per entry of the flattened frame.
    observations = np.random.default_rng(0).normal(size=(3, 4, 10, 10, 2)).astype(np.float32)
    count, total, squares = sums_of(observations)
    flat = observations.reshape(12, 200).astype(np.float64)
    assert count == 12 and total.shape == (200,)
    np.testing.assert_allclose(total, flat.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(squares, (flat ** 2).sum(axis=0), rtol=1e-6)


def test_a_rollout_with_an_infinite_or_nan_observation_adds_nothing():
    # Added, one such value would make the cluster's mean and std NaN for good.
    for bad in (np.inf, -np.inf, np.nan):
        observations = np.ones((3, 4, 2), np.float32)
        observations[1, 2, 0] = bad
        count, total, squares = sums_of(observations)
        assert count == 0 and not total.any() and not squares.any(), bad

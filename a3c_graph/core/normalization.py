"""Observation normalization and reward scaling.

--normalize-observations: each entry of a vector observation standardized by the running
mean and standard deviation of every observation the cluster has acted on, as
stable-baselines3's VecNormalize does for rl-baselines3-zoo's MuJoCo runs:

  normalized = clip((obs - mean) / sqrt(variance + EPSILON), -CLIP, CLIP)

The statistics are sums, not a mean and variance updated in place: the count, the sum and
the sum of squares of every observation, float64 variables beside the episode statistics
on the first ps task. Each worker adds its rollout's sums with assign_add, so updates from
many workers never overwrite each other, whatever their order; mean and variance are read
from the sums. They are global variables: saved in every checkpoint and restored on resume.

Reward scaling (--normalize-rewards) keeps the same sums, in a scope of its own, of one
number per env step: the discounted return so far of the env's episode, R = gamma R + r,
recorded by the rollout (core/rollout.py's discounted_returns). The learner learns from
clip(r / sqrt(variance of R + EPSILON), -CLIP, CLIP), as VecNormalize scales rewards, with
the standard deviation of the worker's copy as the update is computed; episode returns
and every statistic shown stay raw.

A network never reads them itself (model.py): it is given the mean and standard deviation
as tensors (`MeanStd`), so an actor acts, and the learner learns, on the scale
the actor read at the rollout's start (it travels with the rollout, as the acting weights
do: distributed/worker_graph.py), evaluation and the SavedModel on the checkpoint's frozen
scale.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import tensorflow as tf

tf1 = tf.compat.v1

EPSILON = 1e-8  # VecNormalize's, added to the variance
CLIP = 10.0  # VecNormalize's clip_obs, and its clip_reward
SCOPE = "observation_statistics"
RETURN_SCOPE = "return_statistics"  # --normalize-rewards: the discounted returns' sums


class MeanStd(NamedTuple):
    """A running statistic's mean and standard deviation, float32 [D]: the shift and scale a
    network standardizes its observations with (D = 1 for the discounted return's)."""

    mean: tf.Tensor
    std: tf.Tensor


def standardized(observations, scale: MeanStd | None):
    """Flat float observations [N, D] standardized and clipped (the module docstring), or as
    they are without a scale."""
    if scale is None:
        return observations
    return tf.clip_by_value((observations - scale.mean) / scale.std, -CLIP, CLIP)


# A rollout's fields (beside its own, core/rollout.py) for the scale it was acted with: the
# graph worker's queue and the TF2 variants' rollouts carry the same two.
ROLLOUT_FIELDS = ("acting_scale/mean", "acting_scale/std")


def scale_in(rollout: dict) -> MeanStd | None:
    """The observation scale a rollout was acted with (None: not normalized)."""
    if ROLLOUT_FIELDS[0] not in rollout:
        return None
    return MeanStd(*(rollout[key] for key in ROLLOUT_FIELDS))


def scaled_rewards(rewards, return_std):
    """What the learner learns from with --normalize-rewards: rewards divided by the discounted
    return's standard deviation (a scalar tensor), clipped to +-CLIP."""
    return tf.clip_by_value(rewards / return_std, -CLIP, CLIP)


class RunningStatistics:
    """The cluster's running sums of observations [D] (count, sum, sum of squares), float64
    global variables in the current device scope, named observation_statistics/...; with
    scope=RETURN_SCOPE and D = 1, the discounted returns' (return_statistics/...)."""

    def __init__(self, dim: int, scope: str = SCOPE):
        with tf1.variable_scope(scope):
            def total(name, shape):
                return tf1.get_variable(name, shape, tf.float64, trainable=False,
                                        initializer=tf1.zeros_initializer())
            self.count = total("count", [])
            self.sum = total("sum", [dim])
            self.sum_of_squares = total("sum_of_squares", [dim])

    @property
    def variables(self) -> list:
        return [self.count, self.sum, self.sum_of_squares]

    def add(self, sums):
        """Op that adds a batch's sums (rollout_sums) to the cluster's."""
        return tf.group(*[v.assign_add(s, use_locking=True)
                          for v, s in zip(self.variables, sums)])

    def scale(self) -> MeanStd:
        """The mean and standard deviation of every observation added so far: 0 and 1
        before the first."""
        return scale_of(*(v.read_value() for v in self.variables))


class LocalScale:
    """A worker's copy of a RunningStatistics' MeanStd: two float32 local variables [D]
    (never saved), set from the ps at the local init and after each update; with
    scope=RETURN_SCOPE and D = 1, the discounted returns'."""

    def __init__(self, dim: int, scope: str = SCOPE):
        with tf1.variable_scope("local_" + scope):
            def local(name, init):
                return tf1.get_variable(name, [dim], tf.float32, trainable=False,
                                        initializer=tf1.constant_initializer(init),
                                        collections=[tf1.GraphKeys.LOCAL_VARIABLES])
            self.mean = local("mean", 0.0)
            self.std = local("std", 1.0)

    def read(self) -> MeanStd:
        """The copy as it is now, read once (identities: a later assign leaves these as read)."""
        return MeanStd(tf.identity(self.mean.read_value()),
                                tf.identity(self.std.read_value()))

    def assign(self, scale: MeanStd):
        return tf.group(self.mean.assign(scale.mean), self.std.assign(scale.std))


def checkpointed_scale(config, obs_shape) -> tuple[MeanStd | None, list]:
    """For a graph that plays a checkpoint's policy (evaluation, export): (the frozen scale,
    the statistics' variables the Saver must restore); (None, []) for a run without
    --normalize-observations."""
    if not config.normalize_observations:
        return None, []
    statistics = RunningStatistics(math.prod(obs_shape))
    return statistics.scale(), statistics.variables


def rollout_sums(observations) -> list:
    """The count, sum and sum of squares [D] of a rollout's observations [T, B, *obs_shape]
    (float64), each observation flattened to its D = prod(obs_shape) entries as the mlp
    torso sees it; all zero (nothing counted) if any observation is not finite, since one
    inf or NaN added to the cluster's sums would make its scale NaN for good, checkpoints
    included."""
    x = tf.cast(observations, tf.float64)
    x = tf.reshape(x, [-1, math.prod(x.shape[2:])])
    sums = [tf.cast(tf.shape(x)[0], tf.float64), tf.reduce_sum(x, axis=0),
            tf.reduce_sum(tf.square(x), axis=0)]
    finite = tf.reduce_all(tf.math.is_finite(x))
    return [tf.where(finite, part, tf.zeros_like(part)) for part in sums]


def return_sums(rollout: dict) -> list:
    """rollout_sums of a rollout's discounted returns [T, B] (--normalize-rewards), each a
    one-entry vector."""
    return rollout_sums(rollout["discounted_returns"][..., None])


def scale_of(count, total, sum_of_squares) -> MeanStd:
    """MeanStd from the sums: mean = sum / count, variance = the mean square less
    the squared mean (floored at 0), float32."""
    safe = tf.maximum(count, 1.0)
    mean = total / safe
    variance = tf.maximum(sum_of_squares / safe - tf.square(mean), 0.0)
    seen = count > 0
    mean = tf.where(seen, mean, tf.zeros_like(mean))
    variance = tf.where(seen, variance, tf.ones_like(variance) - EPSILON)
    return MeanStd(tf.cast(mean, tf.float32),
                            tf.cast(tf.sqrt(variance + EPSILON), tf.float32))

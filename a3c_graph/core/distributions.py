"""The distribution a policy samples its actions from, for each kind of ActionSpace.

An ActionSpace (action_space.py) says what the env takes: one of n actions (a Gymnasium
Discrete space), or a vector of n reals within bounds (a Box of one axis). The policy head
of every network (model.py) outputs the distribution's parameters as one tensor, `policy`
[N, P]:

  Discrete  Categorical   P = n: the logits.
  Box       DiagGaussian  P = 2n: the mean, then the log standard deviation of each
            dimension, independent of each other. The log std is one trainable vector
            (policy/log_std, started at --log-std-init), the same in every state, as
            stable-baselines3's and cleanrl's A2C and PPO parametrise it (the anchors of
            docs/learning.md); the A3C paper's per-state softplus variance is not built.
            A sampled action is unbounded: it is clipped to the Box only as it is sent to
            the env (envs.make_env's ClipAction), and the log-probability is of the sampled
            action itself, so the policy gradient stays the gradient of the distribution
            that sampled it.

Each distribution gives, for parameters [N, P]: sample [N] or [N, n], mode (the greedy
action: the most likely one, the mean), log_prob and entropy [N] (a Gaussian's summed over
its dimensions). Nothing here knows about networks, envs or clusters.
"""

from __future__ import annotations

import math

import tensorflow as tf

from a3c_graph.core.action_space import as_action_space

LOG_2PI = math.log(2.0 * math.pi)


class Categorical:
    """Over n discrete actions; the policy's output is the logits [N, n]."""

    def sample(self, logits):
        """Actions [N] int32. Non-finite logits (NaN observations) act uniformly at random
        rather than produce an action outside the space; the learner then skips the update
        they poison."""
        logits = tf.where(tf.math.is_finite(logits), logits, tf.zeros_like(logits))
        return tf.cast(tf.random.categorical(logits, 1)[:, 0], tf.int32)

    def mode(self, logits):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    def log_prob(self, logits, actions):
        """log pi(a|s): logits [N, n], actions [N] -> [N]."""
        return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)

    def entropy(self, logits):
        """[N]."""
        log_p = tf.nn.log_softmax(logits)
        return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)


class DiagGaussian:
    """A Gaussian with a diagonal covariance over n reals; the policy's output is the mean
    and the log standard deviation, concatenated: [N, 2n]."""

    def __init__(self, n: int):
        self.n = n

    def split(self, params):
        """(mean [N, n], log_std [N, n])."""
        return params[:, :self.n], params[:, self.n:]

    def sample(self, params):
        """Actions [N, n] float32: mean + std * eps, eps ~ N(0, 1), not clipped. Non-finite
        parameters act on a standard normal, as the categorical's act uniformly."""
        params = tf.where(tf.math.is_finite(params), params, tf.zeros_like(params))
        mean, log_std = self.split(params)
        return mean + tf.exp(log_std) * tf.random.normal(tf.shape(mean))

    def mode(self, params):
        return self.split(params)[0]

    def log_prob(self, params, actions):
        """log pi(a|s), the dimensions' log densities summed: params [N, 2n], actions [N, n]
        -> [N]."""
        mean, log_std = self.split(params)
        z = (actions - mean) * tf.exp(-log_std)
        return -tf.reduce_sum(0.5 * tf.square(z) + log_std + 0.5 * LOG_2PI, axis=-1)

    def entropy(self, params):
        """The differential entropy, summed over the dimensions: [N]."""
        log_std = self.split(params)[1]
        return tf.reduce_sum(log_std + 0.5 * (1.0 + LOG_2PI), axis=-1)


def distribution(actions) -> Categorical | DiagGaussian:
    """The distribution a policy over `actions` (an ActionSpace or a number of discrete
    actions) samples from."""
    actions = as_action_space(actions)
    return DiagGaussian(actions.n) if actions.continuous else Categorical()

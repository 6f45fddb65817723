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
            With --sde (gSDE, Raffin et al. 2021) the log std is per state instead
            (state_dependent_log_std), and a rollout's noise is the policy's last features
            times a matrix drawn once per env and rollout (exploration_matrices,
            state_dependent_noise): given the state, the action is the same Gaussian, so
            log_prob and entropy are this class's.

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
        logits = finite_or_zero(logits)
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
        params = finite_or_zero(params)
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


def finite_or_zero(x):
    """`x` with its NaN and inf entries 0: what a sampler acts on when the network's output is
    not finite (NaN observations), so that the action stays in the space; the learner then
    skips the update they poison."""
    return tf.where(tf.math.is_finite(x), x, tf.zeros_like(x))


# gSDE's variance floor, added before the square root (stable-baselines3's StateDependentNoise).
SDE_EPSILON = 1e-6


def state_dependent_log_std(features, log_std):
    """gSDE's log standard deviation [N, n] in each state: that of features @ theta for
    theta [F, n] drawn from N(0, exp(log_std)^2), 0.5 log(features^2 @ exp(2 log_std) +
    SDE_EPSILON). The features [N, F] enter as constants (stable-baselines3's
    learn_features=False): the policy tower learns from the mean only."""
    variance = tf.matmul(tf.square(tf.stop_gradient(features)), tf.exp(2.0 * log_std))
    return 0.5 * tf.math.log(variance + SDE_EPSILON)


def exploration_matrices(log_std, num_envs: int):
    """gSDE's noise matrices for one rollout of `num_envs` envs: [B, F, n], each entry from
    N(0, exp(log_std)^2)."""
    shape = tf.concat([[num_envs], tf.shape(log_std)], axis=0)
    return tf.random.normal(shape) * tf.exp(log_std)


def state_dependent_noise(features, matrices):
    """Each env's exploration noise [B, n]: its features [B, F] times its matrix [B, F, n]."""
    return tf.einsum("bf,bfn->bn", tf.stop_gradient(features), matrices)


def distribution(actions) -> Categorical | DiagGaussian:
    """The distribution a policy over `actions` (an ActionSpace or a number of discrete
    actions) samples from."""
    actions = as_action_space(actions)
    return DiagGaussian(actions.n) if actions.continuous else Categorical()

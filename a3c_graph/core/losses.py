"""A3C math as pure functions of tensors: advantages (and so returns) and losses.

Shapes are time-major. T refers to the time dimension (the rollout length) and B to the
batch dimension (the envs stepped together). For every step t of a rollout:

  rewards[t]      r_t, the reward received after taking the action at s_t.
  terminated[t]   the episode ended in a terminal state at t+1: nothing follows, the
                  value after it is 0 (Gymnasium's `terminated`).
  truncated[t]    the episode was cut off at t+1 by a time limit: the state s_{t+1} still
                  has a future, so we bootstrap from V(s_{t+1}) (Gymnasium's `truncated`).
  values[t]       V(s_t).
  next_values[t]  V(s_{t+1}) of the true next observation: for a step that ended an
                  episode this is the value of the *final* observation, not of the first
                  observation of the next episode that the env auto-reset to.

Nothing here knows about clusters, queues or processes.
"""

from __future__ import annotations

import tensorflow as tf

from a3c_graph.core.distributions import Categorical, DiagGaussian


def _check_ranks(**tensors_and_ranks) -> None:
    """Each tensor's static rank is the one given (scalable_agent's vtrace does the same):
    a [T, B] tensor passed flat, or a flat one passed [T, B], fails here at graph
    construction instead of broadcasting into a wrong loss. name=(tensor, rank)."""
    for name, (tensor, rank) in tensors_and_ranks.items():
        shape = tf.TensorShape(getattr(tensor, "shape", None))  # a tensor or a NumPy array
        if shape.rank is not None and shape.rank != rank:
            raise ValueError(f"{name} must have rank {rank}, got shape {shape}")


def _masks(terminated: tf.Tensor, truncated: tf.Tensor, dtype: tf.DType):
    """(not_terminal, not_done): 1.0 where the value after t counts / where the episode goes on."""
    terminated = tf.cast(terminated, tf.bool)
    truncated = tf.cast(truncated, tf.bool)
    not_terminal = 1.0 - tf.cast(terminated, dtype)
    not_done = 1.0 - tf.cast(tf.logical_or(terminated, truncated), dtype)
    return not_terminal, not_done


def gae_advantages(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Generalized advantage estimates A_t, [T, B] (Schulman et al. 2016).

    delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
    A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1},   A_T = 0,
    with done_t = terminated_t or truncated_t. With lam = 1, A_t + V(s_t) is the A3C paper's
    bootstrapped n-step return: r_t + gamma r_{t+1} + ... up to the step k that ends the
    episode or the rollout, plus gamma^(k-t+1) V(s_{k+1}) unless s_{k+1} is terminal.
    """
    _check_ranks(rewards=(rewards, 2), values=(values, 2), next_values=(next_values, 2),
                 terminated=(terminated, 2), truncated=(truncated, 2))
    not_terminal, not_done = _masks(terminated, truncated, rewards.dtype)
    deltas = rewards + gamma * not_terminal * next_values - values

    def backward(next_advantage, step):
        delta, goes_on = step
        return delta + gamma * lam * goes_on * next_advantage

    return tf.scan(backward, (deltas, not_done), initializer=tf.zeros_like(deltas[0]),
                   reverse=True)


def policy_gradient_loss(log_probs, advantages):
    """-mean(log pi(a_t|s_t) * A_t), advantages held constant. Shapes [N], [N]."""
    advantages = tf.stop_gradient(advantages)
    return -tf.reduce_mean(log_probs * advantages)


def value_loss(values, returns):
    """0.5 * mean((G_t - V(s_t))^2); the targets are treated as constants. Shapes [N], [N]."""
    return 0.5 * tf.reduce_mean(tf.square(tf.stop_gradient(returns) - values))


def normalize(x, epsilon=1e-8):
    """x shifted to mean 0 and scaled to standard deviation 1 over all its entries."""
    mean, variance = tf.nn.moments(x, axes=list(range(x.shape.ndims)))
    return (x - mean) / (tf.sqrt(variance) + epsilon)


def a3c_loss(policy, actions, values, advantages, returns, entropy_coef, value_coef,
             distribution=None):
    """Total A3C loss and its parts, for flattened [N, ...] inputs: the policy [N, P] is the
    parameters of `distribution` (distributions.py), actions [N] (discrete) or [N, n] (a
    Box's), the entropy the mean over N of each distribution's (a Gaussian's summed over
    its dimensions). Default distribution: Categorical.

    total = policy_loss + value_coef * value_loss - entropy_coef * entropy
    """
    distribution = distribution or Categorical()
    _check_ranks(policy=(policy, 2), values=(values, 1), advantages=(advantages, 1),
                 returns=(returns, 1),
                 actions=(actions, 2 if isinstance(distribution, DiagGaussian) else 1))
    pg = policy_gradient_loss(distribution.log_prob(policy, actions), advantages)
    vf = value_loss(values, returns)
    ent = tf.reduce_mean(distribution.entropy(policy))
    total = pg + value_coef * vf - entropy_coef * ent
    return total, {"policy_loss": pg, "value_loss": vf, "entropy": ent}

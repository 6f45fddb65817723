"""The learner's math: the A3C loss of one rollout, its clipped gradients, the learning rate.

Shapes follow core/rollout.py: T is the rollout length, B the envs stepped together. A
rollout is a dict of its fields (obs and next_obs [T, B, ...], actions [T, B] or, for a
Box, [T, B, n], rewards, terminated, truncated [T, B], and for a recurrent network
initial_state [B, 2, H]).

Nothing here knows where a network lives: the graph worker (distributed/worker_graph.py)
places these ops on a worker and sends the gradients to the ps, and the TF2 benchmark
variants call learner_loss as it is, so both learn from the same math.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from a3c_graph.core import losses
from a3c_graph.core.config import A3CConfig
from a3c_graph.core.normalization import scaled_rewards


def learner_loss(network, rollout: dict, config: A3CConfig, return_std=None,
                 entropy_coef=None):
    """A3C loss of one rollout on `network`, and the parts worth logging
    (policy_loss, value_loss, entropy). return_std: with --normalize-rewards, the discounted
    return's standard deviation the rewards are scaled by (a scalar tensor). entropy_coef:
    the entropy bonus's weight now (entropy_coef_now), config.entropy_coef if None."""
    T, B = rollout["rewards"].shape.as_list()
    policy, values, next_values = network.learner_outputs(rollout)
    to_tb = lambda x: tf.reshape(x, [T, B])  # noqa: E731
    # Clipping and scaling are for learning only: episode returns were summed from the raw
    # rewards.
    rewards = rollout["rewards"]
    if config.clip_rewards:
        rewards = tf.sign(rewards)
    if config.normalize_rewards:
        rewards = scaled_rewards(rewards, return_std)
    advantages = losses.gae_advantages(
        rewards, tf.stop_gradient(to_tb(values)), tf.stop_gradient(to_tb(next_values)),
        rollout["terminated"], rollout["truncated"], config.gamma, config.gae_lambda)
    returns = advantages + tf.stop_gradient(to_tb(values))
    policy_advantages = losses.normalize(advantages) if config.normalize_advantages else advantages
    actions = rollout["actions"]  # [T, B], or [T, B, n] for a Box
    total, parts = losses.a3c_loss(
        policy, tf.reshape(actions, [T * B, *actions.shape.as_list()[2:]]), values,
        tf.reshape(policy_advantages, [-1]), tf.reshape(returns, [-1]),
        config.entropy_coef if entropy_coef is None else entropy_coef, config.value_coef,
        network.distribution)
    return total, parts


@dataclass
class LearnerUpdate:
    """What the learner makes of one rollout."""

    loss: tf.Tensor
    grad_norm: tf.Tensor  # before clipping
    parts: dict  # policy_loss, value_loss, entropy
    is_finite: tf.Tensor  # bool: the loss and gradients are finite, the update may apply
    gradients: list  # clipped, zero where not is_finite; one per variable


def learner_update(network, rollout: dict, config: A3CConfig, return_std=None,
                   entropy_coef=None) -> LearnerUpdate:
    """The gradients of the A3C loss of `rollout` on `network` as it is now (for a worker,
    the weights that acted the rollout: distributed/worker_graph.py's docstring explains the
    policy lag), clipped at A3CConfig.rollout_clip_norm; return_std and entropy_coef as
    learner_loss's."""
    loss, parts = learner_loss(network, rollout, config, return_std, entropy_coef)
    gradients = tf.gradients(loss, network.variables)
    clipped, grad_norm = tf.clip_by_global_norm(gradients, config.rollout_clip_norm())
    # A NaN/inf loss (NaN observations or rewards, a diverged network) must not reach the
    # globals: such an update is applied with zero gradients and a zero learning rate, so
    # the weights stay as they are (Adam's moments decay as for a zero gradient). The worker
    # counts these and stops if they persist.
    is_finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(grad_norm),
                               name="update_is_finite")
    clipped = [tf.where(is_finite, g, tf.zeros_like(g)) for g in clipped]
    return LearnerUpdate(loss, grad_norm, parts, is_finite, clipped)


def budget_left(env_steps, max_steps: int):
    """1 - env_steps / max_steps, floored at 0: A3CConfig.budget_left in the graph.
    env_steps: an int64 scalar variable of the cluster's env steps -> float32 scalar."""
    done = tf.cast(env_steps.read_value(), tf.float64) / float(max_steps)
    return tf.cast(tf.maximum(1.0 - done, 0.0), tf.float32)


def entropy_coef_now(config: A3CConfig, env_steps_seen):
    """The entropy bonus's weight in this update: A3CConfig.entropy_coef_at in the graph, of
    the cluster's env steps as this worker last read them (as learning_rate_now)."""
    if not config.anneal_entropy:
        return config.entropy_coef
    return config.entropy_coef * budget_left(env_steps_seen, config.max_steps)


def staleness_scale(policy_lag, tolerated_lag: float):
    """min(1, tolerated_lag / policy_lag): A3CConfig.staleness_scale in the graph.
    policy_lag: an int64 scalar, the global updates between the weights that acted a rollout
    and the globals its gradient is applied to -> float32 scalar."""
    if tolerated_lag <= 0:
        return tf.constant(1.0)
    lag = tf.cast(tf.maximum(policy_lag, 1), tf.float32)
    return tf.minimum(1.0, tolerated_lag / lag)


def learning_rate_now(config: A3CConfig, is_finite, env_steps_seen, policy_lag):
    """The learning rate of this update: zero for an update that is not finite, annealed by
    the cluster's env steps as this worker last read them (one update old: nothing a linear
    anneal over millions of steps can tell apart), and scaled down for an update staler than
    A3CConfig.tolerated_lag (staleness_scale)."""
    learning_rate = config.learning_rate * tf.cast(is_finite, tf.float32)
    if config.anneal_learning_rate:
        learning_rate *= budget_left(env_steps_seen, config.max_steps)
    return learning_rate * staleness_scale(policy_lag, config.tolerated_lag())


def build_optimizer(config: A3CConfig, learning_rate, suffix: str = ""):
    """The tf.compat.v1 optimizer --optimizer names, at `learning_rate` (a float or a scalar
    tensor), the one rule the graph's ps tasks and the TF2 variants apply. Adam with
    --adam-epsilon; RMSProp as the A3C paper's and rl-baselines3-zoo's A2C on Atari (decay
    0.99, no momentum, the mean square started at 1 and --rmsprop-epsilon inside its square
    root: TF's RMSProp, which rl-zoo's RMSpropTFLike copies); or rmsprop-pytorch, the
    RMSProp stable-baselines3's A2C applies everywhere else (PyTorchRMSProp). Its slots are
    named "Adam" or "RMSProp" and `suffix` ("_ps1")."""
    if config.optimizer == "rmsprop":
        return tf.compat.v1.train.RMSPropOptimizer(
            learning_rate, decay=0.99, momentum=0.0, epsilon=config.rmsprop_epsilon,
            name="RMSProp" + suffix)
    if config.optimizer == "rmsprop-pytorch":
        return PyTorchRMSProp(learning_rate, epsilon=config.rmsprop_epsilon,
                              name="RMSProp" + suffix)
    return tf.compat.v1.train.AdamOptimizer(learning_rate, beta1=config.adam_beta1,
                                            epsilon=config.adam_epsilon, name="Adam" + suffix)


class PyTorchRMSProp(tf.compat.v1.train.Optimizer):
    """RMSProp in torch.optim.RMSprop's form, which stable-baselines3's A2C applies on every
    task rl-baselines3-zoo does not give RMSpropTFLike (its MuJoCo and classic-control
    runs): the mean square s starts at 0 and epsilon is added outside its square root,

        s <- decay s + (1 - decay) g^2,    w <- w - lr g / (sqrt(s) + epsilon).

    TF's RMSProp starts s at 1 and adds epsilon inside the root, a floor of sqrt(1e-5) =
    3.2e-3 on the denominator: gradients of 1e-4 a weight (rewards scaled to unit returns)
    move a weight by a thirtieth of the learning rate where this moves it by about one.
    One slot a variable, the mean square, named after the optimizer ("<variable>/RMSProp")."""

    def __init__(self, learning_rate, decay: float = 0.99, epsilon: float = 1e-5,
                 name: str = "RMSProp"):
        super().__init__(use_locking=False, name=name)
        self._learning_rate, self._decay, self._epsilon = learning_rate, decay, epsilon

    def _create_slots(self, var_list):
        for variable in var_list:
            self._zeros_slot(variable, "mean_square", self._name)

    def _resource_apply_dense(self, grad, var):
        mean_square = self.get_slot(var, "mean_square")
        updated = mean_square.assign(
            self._decay * mean_square + (1.0 - self._decay) * tf.square(grad))
        learning_rate = tf.cast(self._learning_rate, grad.dtype)
        return var.assign_sub(learning_rate * grad / (tf.sqrt(updated) + self._epsilon))

    _apply_dense = _resource_apply_dense

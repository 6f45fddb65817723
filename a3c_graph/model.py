"""Actor-critic networks built from tf.compat.v1 variables and plain tf ops (no Keras).

A network object owns its variables; calling it on observations builds the forward pass,
so one set of variables serves the in-graph rollout, the learner and evaluation.
N refers to any batch of observations (the rollout's T * B, or B envs stepped together).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf

tf1 = tf.compat.v1


def _local_variable_getter(getter, *args, **kwargs):
    """Variables of a worker's local copy: per-task, never saved, never trained directly."""
    kwargs["collections"] = [tf1.GraphKeys.LOCAL_VARIABLES]
    kwargs["trainable"] = False
    return getter(*args, **kwargs)


class ActorCriticMLP:
    """Separate tanh policy and value towers for vector observations.

    __call__(observations [N, *obs_shape]) -> (logits [N, A], values [N]).

    Orthogonal initialization with a small policy-output gain (0.01) starts the policy
    near uniform, which keeps early exploration broad (Andrychowicz et al. 2021).
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int],
                 scope: str, local: bool = False):
        self.obs_dim = int(math.prod(obs_shape))
        self.num_actions = num_actions
        getter = _local_variable_getter if local else None
        with tf1.variable_scope(scope, custom_getter=getter) as var_scope:
            self.scope_name = var_scope.name
            self.policy_layers = self._tower("policy", hidden_sizes, num_actions, out_gain=0.01)
            self.value_layers = self._tower("value", hidden_sizes, 1, out_gain=1.0)

    def _tower(self, name, hidden_sizes, out_size, out_gain):
        layers = []
        in_size = self.obs_dim
        sizes = list(hidden_sizes) + [out_size]
        with tf1.variable_scope(name):
            for i, size in enumerate(sizes):
                gain = out_gain if i == len(sizes) - 1 else math.sqrt(2)
                weights = tf1.get_variable(f"fc{i}/weights", [in_size, size], tf.float32,
                                           initializer=tf1.orthogonal_initializer(gain))
                biases = tf1.get_variable(f"fc{i}/biases", [size], tf.float32,
                                          initializer=tf1.zeros_initializer())
                layers.append((weights, biases))
                in_size = size
        return layers

    @property
    def variables(self) -> list:
        """All variables in a fixed order, so a local copy pairs up with its global network."""
        return [v for layer in self.policy_layers + self.value_layers for v in layer]

    def __call__(self, observations):
        x = tf.reshape(tf.cast(observations, tf.float32), [-1, self.obs_dim])
        return self._apply(self.policy_layers, x), self._apply(self.value_layers, x)[:, 0]

    @staticmethod
    def _apply(layers, x):
        for i, (weights, biases) in enumerate(layers):
            x = tf.matmul(x, weights) + biases
            if i < len(layers) - 1:
                x = tf.tanh(x)
        return x


def build_network(obs_shape, num_actions, config, scope: str, local: bool = False):
    """The actor-critic for these observations, named `scope`."""
    return ActorCriticMLP(obs_shape, num_actions, config.hidden_sizes, scope, local=local)


def sync_op(target_network, source_network):
    """An op that copies every variable of source_network into target_network."""
    return tf.group(*[t.assign(s) for t, s in zip(target_network.variables,
                                                   source_network.variables)],
                    name="sync_local_from_global")

"""What both TF2 variants share: the graph variant's A3C in eager TF2.

  * ActorCritic / ActorCriticCNN: a3c_graph.model's MLP and CNN networks (same layers,
    sizes, activations, initializers and forward pass), given a variable factory that makes
    tf.Variable instead of get_variable; build_model picks one as the graph worker does.
    The LSTM is graph-only (benchmarks.runtime.check_tf2_network refuses it).
  * make_policy_step / make_gradient_step: tf.functions for one batched policy inference
    and for the clipped gradients of one rollout. The loss is a3c_graph.agent.learner_loss
    itself, so GAE, normalization and the A3C loss are the graph variant's code, and both
    clip with tf.clip_by_global_norm.
  * collect_rollout: the TF2 idiom, a Python loop over a3c_graph.envs.EnvBatch calling the
    policy tf.function once per env step (the graph variant runs that loop in-graph); both
    write the transitions with a3c_graph.rollout.RolloutRecorder.
  * RolloutLearner (a worker's half) and ParameterHolder (the network everyone trains, with
    the shared Adam the graph variant's ps runs).

So the variants differ only in framework and process design. Import this module only in
a process that has chosen its device (benchmarks.runtime.pin_visible_gpus): it imports TF.
Shapes follow a3c_graph.rollout: T is the rollout length, B the envs stepped together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from a3c_graph import model as graph_model
from a3c_graph.agent import learner_loss
from a3c_graph.config import A3CConfig, resolve_policy
from a3c_graph.envs import EnvBatch, EnvInfo, env_info, env_options
from a3c_graph.rollout import ROLLOUT_KEYS, RolloutField, RolloutRecorder, sample_actions

tf1 = tf.compat.v1

# The rollout fields learner_loss reads.
LEARNER_KEYS = ("obs", "actions", "rewards", "terminated", "truncated", "next_obs")


def configure_tensorflow(config: A3CConfig) -> str:
    """Use the graph variant's thread pools; return the device to place everything on.

    Must run before the first TF op. '/GPU:0' only when this process sees a GPU, so a run
    asked for a GPU on a machine without one falls back to the CPU instead of crashing.
    """
    tf.config.threading.set_intra_op_parallelism_threads(config.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(config.inter_op_threads)
    return "/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0"


class _EagerWeights:
    """get_weights / set_weights (numpy, in `variables` order) of an eager network."""

    variables: list

    def get_weights(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.variables]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        if len(weights) != len(self.variables):
            raise ValueError(f"expected {len(self.variables)} arrays, got {len(weights)}")
        for variable, value in zip(self.variables, weights):
            variable.assign(value)


def eager_variable(name: str, shape, initializer) -> tf.Variable:
    """The TF2 variants' variable factory for a3c_graph.model's networks: an eager
    tf.Variable with the graph variant's shape, initializer and name."""
    return tf.Variable(initializer(shape, tf.float32), name=name)


class ActorCritic(_EagerWeights, graph_model.ActorCriticMLP):
    """a3c_graph.model.ActorCriticMLP with eager tf.Variables.

    Only the variable factory differs: the layers, the forward pass (__call__) and the
    variable order (`variables`) are the graph variant's, so weights line up one to one.
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int,
                 hidden_sizes: Sequence[int]):
        super().__init__(obs_shape, num_actions, hidden_sizes, "tf2",
                         variable_factory=eager_variable)


class ActorCriticCNN(_EagerWeights, graph_model.ActorCriticCNN):
    """a3c_graph.model.ActorCriticCNN with eager tf.Variables.

    Only the variable factory differs: the convolutions, layer sizes, variable order and
    forward pass are the graph variant's by construction, and learner_loss takes the CNN
    path (values of s_{t+1} only where needed) for it too.
    """

    def __init__(self, obs_shape: Sequence[int], num_actions: int,
                 hidden_sizes: Sequence[int], **conv):
        super().__init__(obs_shape, num_actions, hidden_sizes, "tf2",
                         variable_factory=eager_variable, **conv)


TF2Network = ActorCritic | ActorCriticCNN


def build_model(info: EnvInfo, config: A3CConfig) -> TF2Network:
    """The network the graph worker builds for this env and --policy (model.build_network),
    with eager variables. ValueError for the LSTM, which only the graph variant has."""
    torso, recurrent = resolve_policy(config.policy, info.obs_shape)
    if recurrent:
        raise ValueError("the TF2 variants implement the mlp and cnn networks; --policy lstm "
                         "is graph-only")
    if torso == "cnn":
        return ActorCriticCNN(info.obs_shape, info.num_actions, config.hidden_sizes,
                              **graph_model.conv_settings(config))
    return ActorCritic(info.obs_shape, info.num_actions, config.hidden_sizes)


def make_policy_step(model: TF2Network, info: EnvInfo, num_envs: int):
    """tf.function: observations [B, *obs_shape] -> sampled actions [B] int32."""
    obs_spec = tf.TensorSpec([num_envs, *info.obs_shape], tf.as_dtype(info.obs_dtype))

    @tf.function(input_signature=[obs_spec])
    def policy_step(observations):
        logits, _ = model(observations)
        return sample_actions(logits)

    return policy_step


def learner_signature(fields: Sequence[RolloutField]) -> dict[str, tf.TensorSpec]:
    """TensorSpecs of the rollout fields the loss reads; static shapes, as learner_loss needs."""
    return {field.name: tf.TensorSpec(field.shape, field.dtype) for field in fields
            if field.name in LEARNER_KEYS}


def make_gradient_step(model: TF2Network, config: A3CConfig, fields: Sequence[RolloutField]):
    """tf.function: rollout -> (gradients clipped to config.grad_clip_norm, loss parts).

    fields: the rollout's (a RolloutRecorder's `fields`), which fix its T and B.

    The gradients are of learner_loss on `model`, in `model.variables` order. A TF2 worker
    sets the weights, collects a rollout and takes its gradients right after, so here they
    are taken on the copy that acted; the graph variant takes them on its local copy, which
    can have been refreshed since (a3c_graph.agent's docstring: the policy lag).
    """
    signature = learner_signature(fields)

    @tf.function(input_signature=[signature])
    def gradient_step(rollout):
        with tf.GradientTape() as tape:
            loss, parts = learner_loss(model, rollout, config)
        gradients = tape.gradient(loss, model.variables)
        clipped, grad_norm = tf.clip_by_global_norm(gradients, config.grad_clip_norm)
        return clipped, {"loss": loss, "grad_norm": grad_norm, **parts}

    return gradient_step


def collect_rollout(recorder: RolloutRecorder, policy_step) -> dict[str, np.ndarray]:
    """T steps of the recorder's B envs, one policy tf.function call per step; arrays
    [T, B, ...], written by a3c_graph.rollout.RolloutRecorder as in the graph variant.

    Keys and meanings are a3c_graph.rollout's: next_obs is the true s_{t+1} (the final
    observation where an episode ended), which truncated episodes bootstrap from.
    """
    for t in range(recorder.T):
        recorder.step(t, policy_step(recorder.envs.observe()).numpy())
    return dict(zip(ROLLOUT_KEYS, recorder.collect()))


@dataclass
class RolloutResult:
    """What a worker sends to the parameter holder after one rollout."""

    gradients: list[np.ndarray]  # clipped, in the model's variables order
    env_steps: int               # T * B
    finished_returns: list[float]  # returns of the episodes that ended, oldest first
    loss_parts: dict[str, float]


class RolloutLearner:
    """A worker's half of A3C: a local copy of the network acts for one rollout and gives
    the clipped gradients of that rollout; the caller syncs the copy (set_weights) first."""

    def __init__(self, config: A3CConfig, task: int, device: str):
        seed = config.seed + 1000 * task  # the graph worker's seeds for task `task`
        tf.random.set_seed(seed)
        self.config = config
        self.device = device
        self.envs = EnvBatch(config.env, config.envs_per_worker, seed=seed,
                             **env_options(config))
        self.recorder = RolloutRecorder(self.envs, config.rollout_length)
        with tf.device(device):
            self.model = build_model(self.envs.info, config)
            self.policy_step = make_policy_step(self.model, self.envs.info, self.envs.num_envs)
            self.gradient_step = make_gradient_step(self.model, config, self.recorder.fields)

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        self.model.set_weights(weights)

    def run_rollout(self) -> RolloutResult:
        with tf.device(self.device):
            rollout = collect_rollout(self.recorder, self.policy_step)
            gradients, parts = self.gradient_step({key: rollout[key] for key in LEARNER_KEYS})
        done = np.logical_or(rollout["terminated"], rollout["truncated"])
        # Time-major boolean mask: episodes come out in the order they ended, as in the graph.
        finished = rollout["episode_returns"][done]
        return RolloutResult(
            gradients=[g.numpy() for g in gradients],
            env_steps=int(rollout["rewards"].size),
            finished_returns=[float(r) for r in finished],
            loss_parts={key: float(value) for key, value in parts.items()},
        )

    def close(self) -> None:
        self.envs.close()


class ParameterHolder:
    """The network every worker trains, and the shared Adam optimizer that updates it.

    The optimizer is tf.compat.v1.train.AdamOptimizer, the one the graph variant's ps runs
    (it works eagerly and inside tf.function), so both apply the very same update rule.
    """

    def __init__(self, config: A3CConfig, device: str, info: EnvInfo | None = None):
        tf.random.set_seed(config.seed)
        self.device = device
        info = info or env_info(config.env, **env_options(config))
        self.config = config
        with tf.device(device):
            self.model = build_model(info, config)
            # A variable, so the traced update reads the annealed rate of each step.
            self.learning_rate = tf.Variable(config.learning_rate, trainable=False)
            self.optimizer = tf1.train.AdamOptimizer(self.learning_rate,
                                                     epsilon=config.adam_epsilon)
        specs = [tf.TensorSpec(v.shape, v.dtype) for v in self.model.variables]
        # Adam's slots are created on the first (only) trace, which tf.function allows.
        self._apply = tf.function(self._apply_gradients, input_signature=[specs])

    def _apply_gradients(self, gradients):
        self.optimizer.apply_gradients(zip(gradients, self.model.variables))

    def apply_gradients(self, gradients: Sequence[np.ndarray], env_steps: int) -> None:
        """Apply one update, at the learning rate of `env_steps` env steps so far (the
        global count before this update's steps, as on the graph variant's ps)."""
        with tf.device(self.device):
            self.learning_rate.assign(self.config.learning_rate_at(env_steps))
            self._apply(list(gradients))

    def get_weights(self) -> list[np.ndarray]:
        return self.model.get_weights()

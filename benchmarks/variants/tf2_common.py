"""What both TF2 variants share: the graph variant's A3C in eager TF2, as TF2 code at its best.

  * ActorCritic / ActorCriticCNN: a3c_graph.core.model's MLP and CNN networks (same layers,
    sizes, activations, initializers and forward pass), given a variable factory that makes
    tf.Variable instead of get_variable; build_model picks one as the graph worker does.
    The LSTM is graph-only (benchmarks.variants.tf2_run.check_tf2_config refuses it).
  * FlatWeights: a network's variables as one flat float32 vector, read, written or
    updated with one tf.function call (not one eager op per variable), so weights and
    gradients cross processes as one numpy array each.
  * make_rollout_function: one T-step rollout in one tf.function call, acting on the local
    copy's weights as read when it starts (carried with the rollout as its acting_weights,
    the graph's rule), `for t in tf.range(T)` with the policy and the env step through
    tf.numpy_function, the
    transitions written by a3c_graph.core.rollout.RolloutRecorder as in the graph variant (what
    TF-Agents' drivers and TensorFlow's actor-critic tutorial do; the Python loop with one
    tf.function call per env step it replaces cost 0.5-0.6 ms a step in TF 2.21,
    benchmarks/PERFORMANCE.md).
  * make_gradient_function: the clipped gradients of one rollout on the weights that acted
    it, flat, with the episodes that ended in it, in one call. The loss is
    core.learner.learner_loss itself,
    so GAE, normalization and the A3C loss are the graph variant's code, and both clip with
    tf.clip_by_global_norm.
  * ParameterHolder: the network everyone trains, with the shared Adam the graph variant's
    ps runs; one call applies a flat gradient and returns the flat weights after it.

The worker (actor threads, queue, learner) is benchmarks.variants.tf2_worker. So the variants differ
only in framework and process design. Import this module only in a process that has chosen
its device (benchmarks.variants.tf2_run.pin_visible_gpus): it imports TF. Shapes follow
a3c_graph.core.rollout: T is the rollout length, B the envs stepped together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from a3c_graph.core import model as graph_model
from a3c_graph.core.config import A3CConfig, resolve_policy
from a3c_graph.core.envs import EnvInfo, env_info, env_options
from a3c_graph.core.learner import build_optimizer, learner_loss
from a3c_graph.core.normalization import ROLLOUT_FIELDS, MeanStd, scale_in, scale_of
from a3c_graph.core.rollout import RolloutField, RolloutRecorder, episode_ended
from benchmarks.variants.tf2_run import RunStats

# The rollout fields learner_loss reads.
LEARNER_KEYS = ("obs", "actions", "rewards", "terminated", "truncated", "next_obs")
# Beside them, the flat weights [N] that acted the rollout (FlatWeights order), and their
# version: the parameter holder's update count when it sent them.
ACTING_WEIGHTS = "acting_weights"
ACTING_VERSION = "acting_version"
# With --normalize-observations, the observation scale the rollout was acted with: the
# graph worker's fields (normalization.ROLLOUT_FIELDS).
ACTING_SCALE = ROLLOUT_FIELDS
# With --normalize-rewards, the discounted return's standard deviation the worker's copy held
# as it computed the update (the graph worker's local return scale).
RETURN_STD = "return_std"
# With --anneal-entropy, the entropy bonus's weight at the cluster's env steps as the worker
# last read them (the graph worker's entropy_coef_now).
ENTROPY_COEF = "entropy_coef"


def configure_tensorflow(config: A3CConfig) -> str:
    """Use the graph variant's thread pools and GPU memory rule; return the device to place
    everything on.

    Must run before the first TF op. '/GPU:0' only when this process sees a GPU (its one
    GPU: benchmarks.variants.tf2_run.pin_visible_gpus), so a run asked for a GPU on a machine
    without one falls back to the CPU instead of crashing. Memory grows as needed, the
    graph variant's allow_growth, so processes that share a GPU do not each take all of it.
    """
    tf.config.threading.set_intra_op_parallelism_threads(config.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(config.inter_op_threads)
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    return "/GPU:0" if gpus else "/CPU:0"


def eager_variable(name: str, shape, initializer) -> tf.Variable:
    """The TF2 variants' variable factory for a3c_graph.core.model's networks: an eager
    tf.Variable with the graph variant's shape, initializer and name."""
    return tf.Variable(initializer(shape, tf.float32), name=name)


class ActorCritic(graph_model.ActorCriticMLP):
    """a3c_graph.core.model.ActorCriticMLP with eager tf.Variables.

    Only the variable factory differs: the layers, the forward pass (__call__) and the
    variable order (`variables`) are the graph variant's, so weights line up one to one.
    """

    def __init__(self, obs_shape: Sequence[int], actions, hidden_sizes: Sequence[int],
                 log_std_init: float = 0.0, sde: bool = False, ortho_init: bool = True):
        super().__init__(obs_shape, actions, hidden_sizes, "tf2",
                         variable_factory=eager_variable, log_std_init=log_std_init, sde=sde,
                         ortho_init=ortho_init)


class ActorCriticCNN(graph_model.ActorCriticCNN):
    """a3c_graph.core.model.ActorCriticCNN with eager tf.Variables.

    Only the variable factory differs: the convolutions, layer sizes, variable order and
    forward pass are the graph variant's by construction, and learner_loss takes the CNN
    path (values of s_{t+1} only where needed) for it too.
    """

    def __init__(self, obs_shape: Sequence[int], actions, hidden_sizes: Sequence[int],
                 log_std_init: float = 0.0, **conv):
        super().__init__(obs_shape, actions, hidden_sizes, "tf2",
                         variable_factory=eager_variable, log_std_init=log_std_init, **conv)


TF2Network = ActorCritic | ActorCriticCNN


def network_on(info: EnvInfo, config: A3CConfig):
    """(tensors (one per variable), observation scale or None) -> the network build_model
    makes, computing with them (a3c_graph.core.model.network_on_weights): the weights that
    act a rollout and that its gradient is computed on."""
    def on_weights(tensors, scale=None):
        return graph_model.network_on_weights(tensors, info.obs_shape, info.actions,
                                              config, "acting_network",
                                              observation_scale=scale)
    return on_weights


class LocalScale:
    """A worker's copy of the holder's observation scale (--normalize-observations): two
    float32 variables [D], set with the weights."""

    def __init__(self, obs_dim: int):
        self.mean = tf.Variable(tf.zeros([obs_dim]), trainable=False)
        self.std = tf.Variable(tf.ones([obs_dim]), trainable=False)

    def read(self) -> MeanStd:
        return MeanStd(tf.identity(self.mean.read_value()),
                                tf.identity(self.std.read_value()))

    def assign(self, scale) -> None:
        self.mean.assign(scale[0])
        self.std.assign(scale[1])


def build_model(info: EnvInfo, config: A3CConfig) -> TF2Network:
    """The network the graph worker builds for this env and --policy (model.build_network),
    with eager variables. ValueError for the LSTM, which only the graph variant has."""
    torso, recurrent = resolve_policy(config.policy, info.obs_shape)
    if recurrent:
        raise ValueError("the TF2 variants implement the mlp and cnn networks; --policy lstm "
                         "is graph-only")
    if torso == "cnn":
        return ActorCriticCNN(info.obs_shape, info.actions, config.hidden_sizes,
                              config.log_std_init, **graph_model.conv_settings(config))
    return ActorCritic(info.obs_shape, info.actions, config.hidden_sizes, config.log_std_init,
                       config.sde, config.ortho_init)


class FlatWeights:
    """The variables of a network as one flat float32 vector [N] (variables order, each
    flattened row-major): read() and assign(flat) are one tf.function call each.

    One eager assign per variable costs an op dispatch each (12 for the CartPole MLP,
    per update); one vector is also one numpy array to pickle or hand to Ray.
    """

    def __init__(self, variables: Sequence[tf.Variable]):
        self.variables = list(variables)
        self.shapes = [v.shape for v in self.variables]
        self.sizes = [int(np.prod(shape)) for shape in self.shapes]
        self.spec = tf.TensorSpec([sum(self.sizes)], tf.float32)
        self.read = tf.function(self.flatten_variables, input_signature=[])
        self.assign = tf.function(self._assign, input_signature=[self.spec])

    @property
    def size(self) -> int:
        return sum(self.sizes)

    def flatten(self, tensors: Sequence[tf.Tensor]) -> tf.Tensor:
        """One tensor per variable -> the flat vector [N] (inside a tf.function)."""
        return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)

    def split(self, flat: tf.Tensor) -> list[tf.Tensor]:
        """The flat vector [N] -> one tensor per variable, in its shape."""
        return [tf.reshape(part, shape)
                for part, shape in zip(tf.split(flat, self.sizes), self.shapes)]

    def flatten_variables(self) -> tf.Tensor:
        return self.flatten([v.read_value() for v in self.variables])

    def _assign(self, flat):
        for variable, value in zip(self.variables, self.split(flat)):
            variable.assign(value)


def make_rollout_function(weights: FlatWeights, on_weights, recorder: RolloutRecorder,
                          version: tf.Variable | None = None, scale: LocalScale | None = None):
    """tf.function: () -> one T-step rollout of the recorder's B envs, in one call.

    Inside, the local copy's weights are read once (`weights`, a FlatWeights of it) and the
    whole rollout acts on them (`on_weights`: network_on), so a refresh of the copy by the
    learner meanwhile does not reach it. Then `for t in tf.range(T)` (a tf.while_loop once
    traced): the policy's sample on the current observations (model.rollout_sampler,
    built before the loop as the graph's actors build it), then the env step through
    tf.numpy_function, which records row t of every field (RolloutRecorder.step_and_record,
    the graph variant's own). The loop carries only the observations; one more numpy_function hands
    the filled buffers over after it, and depends on the last observation, so on every env
    step. Returns a dict of the recorder's fields, tensors [T, B, ...]
    (a3c_graph.core.rollout's keys and meanings), ACTING_WEIGHTS [N] and ACTING_VERSION
    (`version`, an int64 variable set with the weights; 0 without one), and the
    ACTING_SCALE read from `scale` (--normalize-observations) with the weights.
    """
    envs, fields, T = recorder.envs, recorder.fields, recorder.T
    obs_dtype = tf.as_dtype(np.dtype(envs.info.obs_dtype))
    obs_shape = [envs.num_envs, *envs.info.obs_shape]

    def env_step(t, actions):
        return recorder.step_and_record(t, actions).next_obs

    def collect(_last_obs):
        return recorder.collect()

    @tf.function(input_signature=[])
    def rollout():
        acting_weights = weights.flatten_variables()
        acting_version = (tf.identity(version.read_value()) if version is not None
                          else tf.constant(0, tf.int64))
        scale_now = None if scale is None else scale.read()
        acting = on_weights(weights.split(acting_weights), scale_now)
        obs = tf.ensure_shape(tf.numpy_function(envs.observe, [], obs_dtype, stateful=True),
                              obs_shape)
        sample = graph_model.rollout_sampler(acting, envs.num_envs)  # gSDE: once a rollout
        for t in tf.range(T):
            actions = sample(obs)
            obs = tf.ensure_shape(
                tf.numpy_function(env_step, [t, actions], obs_dtype, stateful=True), obs_shape)
        buffers = tf.numpy_function(collect, [obs], [f.dtype for f in fields], stateful=True)
        scaled = {} if scale_now is None else dict(zip(ACTING_SCALE, scale_now))
        return {ACTING_WEIGHTS: acting_weights, ACTING_VERSION: acting_version, **scaled,
                **{f.name: tf.ensure_shape(buffer, f.shape)
                   for f, buffer in zip(fields, buffers)}}

    return rollout


def learner_signature(fields: Sequence[RolloutField]) -> dict[str, tf.TensorSpec]:
    """TensorSpecs of the rollout fields the learner reads (those of the loss and the
    finished episodes); static shapes, as learner_loss needs."""
    keys = (*LEARNER_KEYS, "episode_returns", "episode_lengths")
    return {field.name: tf.TensorSpec(field.shape, field.dtype) for field in fields
            if field.name in keys}


def make_gradient_function(weights: FlatWeights, on_weights, config: A3CConfig,
                           fields: Sequence[RolloutField], obs_dim: int = 0):
    """tf.function: rollout -> (flat gradients [N] clipped to config.rollout_clip_norm(), the
    returns [K] of the episodes that ended in it (time-major, so in the order they ended,
    as in the graph), loss parts).

    fields: the rollout's (a RolloutRecorder's `fields`), which fix its T and B. The
    gradients are of learner_loss on the weights that acted the rollout (its
    ACTING_WEIGHTS, through `on_weights`: network_on), in FlatWeights order, as the graph
    worker computes them (worker_graph.py's docstring: the policy lag); with
    --normalize-observations, on the observations standardized by its ACTING_SCALE (obs_dim:
    their size); with --normalize-rewards, on the rewards scaled by its RETURN_STD; with
    --anneal-entropy, with the entropy bonus weighted by its ENTROPY_COEF.
    """
    signature = {**learner_signature(fields), ACTING_WEIGHTS: weights.spec}
    if config.normalize_observations:
        signature.update({key: tf.TensorSpec([obs_dim], tf.float32) for key in ACTING_SCALE})
    if config.normalize_rewards:
        signature[RETURN_STD] = tf.TensorSpec([], tf.float32)
    if config.anneal_entropy:
        signature[ENTROPY_COEF] = tf.TensorSpec([], tf.float32)

    @tf.function(input_signature=[signature])
    def gradients_of(rollout):
        acting_weights = weights.split(rollout[ACTING_WEIGHTS])
        with tf.GradientTape() as tape:
            tape.watch(acting_weights)
            loss, parts = learner_loss(on_weights(acting_weights, scale_in(rollout)),
                                       rollout, config, rollout.get(RETURN_STD),
                                       rollout.get(ENTROPY_COEF))
        gradients = tape.gradient(loss, acting_weights)
        clipped, grad_norm = tf.clip_by_global_norm(gradients, config.rollout_clip_norm())
        finished = tf.boolean_mask(rollout["episode_returns"],
                                   episode_ended(rollout["episode_lengths"]))
        return weights.flatten(clipped), finished, {"loss": loss, "grad_norm": grad_norm,
                                                    **parts}

    return gradients_of


@dataclass
class RolloutResult:
    """worker -> parameter holder: what the worker learned from one rollout."""

    task: int
    gradients: np.ndarray  # flat float32 [N], clipped (FlatWeights order); [0] acting only
    acting_version: int  # the holder's update count when it sent the weights that acted
    env_steps: int  # T * B
    finished_returns: list[float]  # returns of the episodes that ended, oldest first
    entropy: float | None  # the policy's mean entropy on the rollout; None acting only
    # The worker's own first applied update (its progress file's training_started), None
    # until it has one: its --max-seconds count from there, as a graph worker's do.
    started: float | None = None
    # --normalize-observations: the count, sum and sum of squares [D] of its observations;
    # --normalize-rewards: of its discounted returns ([1]).
    observation_sums: list | None = None
    return_sums: list | None = None


@dataclass
class Reply:
    """parameter holder -> worker: the flat weights after its update and the run's
    counters, or the reason the worker stops (weights None then)."""

    weights: np.ndarray | None
    stats: dict[str, Any]
    stop_reason: str | None
    # --normalize-observations: the observation scale (mean, std [D]) after the update.
    scale: tuple | None = None
    # --normalize-rewards: the discounted return's standard deviation after the update.
    return_std: float | None = None


class ParameterHolder:
    """The network every worker trains, the shared optimizer that updates it, and the
    run's counters (benchmarks.variants.tf2_run.RunStats) that say when each worker stops.

    The optimizer is the tf.compat.v1 one the graph variant's ps runs (core/learner's
    build_optimizer: it works eagerly and inside tf.function), so both apply the very same
    update rule.
    One tf.function call applies a flat gradient and returns the flat weights after the
    update: one message each way per update, as the graph's transfer.moved.
    """

    def __init__(self, config: A3CConfig, device: str, info: EnvInfo | None = None):
        tf.random.set_seed(config.seed)
        self.device = device
        info = info or env_info(config.env, **env_options(config))
        self.config = config
        self.stats = RunStats(config)
        with tf.device(device):
            self.model = build_model(info, config)
            self.weights = FlatWeights(self.model.variables)
            # A variable, so the traced update reads the annealed rate of each step.
            self.learning_rate = tf.Variable(config.learning_rate, trainable=False)
            self.optimizer = build_optimizer(config, self.learning_rate)
            # The optimizer's slots are created on the first (only) trace, which tf.function allows.
            self._apply = tf.function(self._apply_and_read, input_signature=[
                self.weights.spec, tf.TensorSpec([], tf.float32)])
            self._apply.get_concrete_function()  # traced in start-up
        # --normalize-observations: the sums of every observation the workers acted on, the
        # graph's RunningStatistics (normalization.py), added to as each result arrives.
        self.observation_sums = (_no_sums(int(np.prod(info.obs_shape)))
                                 if config.normalize_observations else None)
        # --normalize-rewards: the discounted returns' sums, the graph's return statistics.
        self.return_sums = _no_sums(1) if config.normalize_rewards else None
        # --rollouts-per-update k: the sum of the gradients pooled since the last update and
        # how many, the graph's GradientPool (distributed/ps_update.py).
        self.pool, self.pooled = np.zeros(self.weights.size, np.float32), 0

    def scale(self) -> tuple | None:
        """The observation scale (mean, std) of the sums so far (the graph's scale_of)."""
        return None if self.observation_sums is None else _scale(self.observation_sums)

    def return_std(self) -> float | None:
        """The discounted return's standard deviation of the sums so far."""
        return None if self.return_sums is None else float(_scale(self.return_sums)[1][0])

    def _apply_and_read(self, flat_gradients, learning_rate):
        self.learning_rate.assign(learning_rate)
        self.optimizer.apply_gradients(zip(self.weights.split(flat_gradients),
                                           self.model.variables))
        return self.weights.flatten_variables()

    def initial(self) -> Reply:
        """The initial weights every worker starts from."""
        with tf.device(self.device):
            return Reply(self.weights.read().numpy(), self.stats.snapshot(), None, self.scale(),
                         self.return_std())

    def update(self, result: RolloutResult) -> Reply:
        """Apply one worker's update, at the learning rate of the env steps so far (the
        global count before this update's steps, as on the graph variant's ps), unless the
        run has decided to stop; the weights after it, or why this worker stops."""
        weights, applied = None, True
        if self.stats.stop_reason is None:  # not after the decision to stop
            if result.gradients.size:  # acting only (--learn false): counted, not applied
                # The graph worker's rate: annealed, and scaled down by the policy lag.
                policy_lag = self.stats.global_step - result.acting_version
                learning_rate = np.float32(self.config.learning_rate_at(self.stats.env_steps)
                                           * self.config.staleness_scale(policy_lag))
                weights, applied = self._pool_and_apply(result.gradients, learning_rate)
            if self.observation_sums is not None and result.observation_sums is not None:
                self.observation_sums = _added(self.observation_sums, result.observation_sums)
            if self.return_sums is not None and result.return_sums is not None:
                self.return_sums = _added(self.return_sums, result.return_sums)
            self.stats.record(result.task, result.env_steps, result.finished_returns,
                              result.started, applied)
        reason = self.stats.worker_stop_reason(result.task)
        return Reply(None if reason else weights, self.stats.snapshot(), reason, self.scale(),
                     self.return_std())

    def _pool_and_apply(self, gradients: np.ndarray, learning_rate) -> tuple[np.ndarray, bool]:
        """(the weights after this rollout, whether an update was applied): with
        --rollouts-per-update k, the gradients pooled and their mean applied by the rollout
        that fills the pool, as on the graph's ps (GradientPool; a rollout at a rate of 0
        does not count)."""
        k = self.config.rollouts_per_update
        with tf.device(self.device):
            if k == 1:
                return self._apply(gradients, learning_rate).numpy(), True
            if learning_rate > 0:
                self.pool += gradients
                self.pooled += 1
                if self.pooled % k == 0:
                    mean, self.pool = self.pool / k, np.zeros_like(self.pool)
                    return self._apply(mean, learning_rate).numpy(), True
            return self.weights.read().numpy(), False

    def request_stop(self, reason: str) -> None:
        """Stop the run from outside (a signal, the deadline): every worker is told so with
        the reply to its next update."""
        if self.stats.stop_reason is None:
            self.stats.stop_reason = reason


def _no_sums(dim: int) -> list:
    """The count, sum and sum of squares [dim] of nothing yet (normalization.py's sums)."""
    return [0.0, np.zeros(dim), np.zeros(dim)]


def _added(sums: list, more: list) -> list:
    return [total + part for total, part in zip(sums, more)]


def _scale(sums: list) -> tuple:
    """(mean, std) of running sums, as numpy arrays (the graph's scale_of)."""
    return tuple(x.numpy() for x in scale_of(*(tf.constant(s, tf.float64) for s in sums)))

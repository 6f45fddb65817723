"""Actor-critic networks built from tf.compat.v1 variables and plain tf ops (no Keras).

A network object owns its variables; calling it on observations builds the forward pass,
so one set of variables serves the in-graph rollout, the learner and evaluation.
N refers to any batch of observations (the rollout's T * B, or B envs stepped together).
Each network outputs the policy [N, P] and the values [N]: the policy is the parameters of
the distribution over its ActionSpace (distributions.py: a Discrete space's logits, a
Box's Gaussian means and log std), and `network.distribution` samples from it. Given an
observation scale (normalization.py: --normalize-observations), an mlp torso standardizes
the flat observations first; the scale is a pair of tensors, not the network's variables.

Three networks, picked by build_network from --policy and the observation shape:
  ActorCriticMLP   vector observations: separate tanh policy and value towers
  ActorCriticCNN   images: convolutions with ELU or ReLU (--conv-filters, --conv-kernel,
                   --conv-stride, --conv-padding, --activation: four 3x3 of 32 filters at
                   stride 2 for Atari at 42x42, the Nature DQN network's 32 8x8/4, 64 4x4/2
                   and 64 3x3/1 at 84x84 on the classic protocol, one 3x3 of 16 at stride 1
                   for MinAtar),
                   then the --hidden-sizes layers, shared by the policy and value heads
  ActorCriticLSTM  the mlp or cnn torso, then an LSTM; its state is carried by the caller
                   (recurrent = True: step(obs, state) and unroll(...) instead of __call__)
Each has learner_outputs(rollout): the learner's forward pass over a whole rollout, done
the way that is cheapest for that network.
Image observations are [C, H, W] (Atari: uint8 [4, 42, 42], the stacked frames first;
MinAtar: bool [C, 10, 10]); they are cast to float (uint8 scaled by 1/255) and moved to
channels-last inside the graph.

Every variable's name, shape and place in the order comes from network_spec.py, which the
launcher's estimate and the checkpoint check read too; here they get their initializers.

Nothing here knows where a network lives: copying the globals on the ps into a worker's
local copy crosses tasks, and that is worker_graph.py's (through transfer.py), so the math imports
no cluster code.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import tensorflow as tf

from a3c_graph.core import network_spec
from a3c_graph.core.action_space import as_action_space
from a3c_graph.core.config import resolve_policy
from a3c_graph.core.distributions import (
    distribution,
    exploration_matrices,
    finite_or_zero,
    state_dependent_log_std,
    state_dependent_noise,
)
from a3c_graph.core.normalization import MeanStd, standardized

tf1 = tf.compat.v1


def graph_variable(name: str, shape, initializer):
    """The networks' default variable factory: a float32 tf.compat.v1.get_variable, named by
    the enclosing variable scope (so a worker's local copy gets its custom getter).

    A variable factory is any callable (name, shape, initializer) -> variable; the TF2
    benchmark variants pass one that makes eager tf.Variables, and so reuse these classes
    whole: the same layers, sizes, initializers, variable order and forward pass.
    """
    return tf1.get_variable(name, shape, tf.float32, initializer=initializer)


def _local_variable_getter(getter, *args, **kwargs):
    """Variables of a worker's local copy: per-task, never saved, never trained directly."""
    kwargs["collections"] = [tf1.GraphKeys.LOCAL_VARIABLES]
    kwargs["trainable"] = False
    return getter(*args, **kwargs)


class ActorCriticMLP:
    """Separate tanh policy and value towers for vector observations.

    __call__(observations [N, *obs_shape]) -> (policy [N, P], values [N]).

    Orthogonal initialization with a small policy-output gain (0.01) starts the policy
    near uniform (a Gaussian's mean near 0), which keeps early exploration broad
    (Andrychowicz et al. 2021). With `sde` (a Box only: --sde), the log std is a matrix
    over the policy tower's last features and the exploration is gSDE's (distributions.py).
    """

    recurrent = False

    def __init__(self, obs_shape: Sequence[int], actions, hidden_sizes: Sequence[int],
                 scope: str, local: bool = False, variable_factory=graph_variable,
                 log_std_init: float = 0.0, observation_scale: MeanStd | None = None,
                 sde: bool = False, ortho_init: bool = True):
        self.obs_dim = int(math.prod(obs_shape))
        self.observation_scale = observation_scale
        self.actions = as_action_space(actions)
        self.distribution = distribution(self.actions)
        self.sde = sde
        vars_ = _Variables(network_spec.mlp_variables(obs_shape, self.actions, hidden_sizes,
                                                      sde), variable_factory, ortho_init)
        getter = _local_variable_getter if local else None
        with tf1.variable_scope(scope, custom_getter=getter) as var_scope:
            self.scope_name = var_scope.name
            self.policy_layers = self._tower(vars_, "policy", len(hidden_sizes), 0.01)
            self.log_std = _log_std(vars_, self.actions, log_std_init)
            self.value_layers = self._tower(vars_, "value", len(hidden_sizes), 1.0)
        vars_.all_created()

    @staticmethod
    def _tower(vars_, name, num_hidden, out_gain):
        layers = _dense_stack(vars_, f"{name}/", num_hidden)
        layers.append(vars_.dense(f"{name}/fc{num_hidden}", gain=out_gain))
        return layers

    @property
    def variables(self) -> list:
        """All variables in a fixed order, so a local copy pairs up with its global network."""
        log_std = [] if self.log_std is None else [self.log_std]
        return [v for layer in self.policy_layers for v in layer] + log_std + [
            v for layer in self.value_layers for v in layer]

    def __call__(self, observations):
        x = self._input(observations)
        return self._policy(x)[0], self._apply(self.value_layers, x)[:, 0]

    def sde_sampler(self, num_envs: int):
        """rollout_sampler's with gSDE: the envs' exploration matrices drawn here, once,
        and every step explores along them."""
        matrices = exploration_matrices(self.log_std, num_envs)

        def sample(observations):
            policy, features = self.policy_and_features(observations)
            # Not finite (NaN observations): the action 0, which stays in the space.
            return finite_or_zero(self.distribution.mode(policy)
                                  + state_dependent_noise(features, matrices))
        return sample

    def policy_and_features(self, observations):
        """(the policy [N, P], the policy tower's last features [N, F], which gSDE's noise
        is made of)."""
        return self._policy(self._input(observations))

    def _input(self, observations):
        x = tf.reshape(tf.cast(observations, tf.float32), [-1, self.obs_dim])
        return standardized(x, self.observation_scale)

    def _policy(self, x):
        """(the policy [N, P], the policy tower's last features [N, F])."""
        features = self._apply(self.policy_layers[:-1], x, activate_last=True)
        weights, biases = self.policy_layers[-1]
        head = tf.matmul(features, weights) + biases
        if self.sde:
            return tf.concat([head, state_dependent_log_std(features, self.log_std)],
                             axis=1), features
        return _policy_output(head, self.log_std), features

    def learner_outputs(self, rollout: dict):
        """The learner's forward pass over a rollout's obs and next_obs [T, B, *obs_shape]:
        the policy [T * B, P] and values [T * B] of s_t, and values [T * B] of the true s_{t+1}.

        One pass over s_t and s_{t+1} together: for a small MLP, cheaper than picking out
        the s_{t+1} that are not s_t's of the rollout (values_of_next_obs).
        """
        T, B = rollout["obs"].shape.as_list()[:2]
        obs_shape = rollout["obs"].shape.as_list()[2:]
        both = tf.concat([tf.reshape(rollout[key], [T * B, *obs_shape])
                          for key in ("obs", "next_obs")], axis=0)
        both.set_shape([2 * T * B, *obs_shape])
        policy, values = self(both)
        return policy[:T * B], values[:T * B], values[T * B:]

    @staticmethod
    def _apply(layers, x, activate_last: bool = False):
        for i, (weights, biases) in enumerate(layers):
            x = tf.matmul(x, weights) + biases
            if activate_last or i < len(layers) - 1:
                x = tf.tanh(x)
        return x


# The cnn torso's convolutions when none are given: four of 32 filters at stride 2 (Atari).
CONV_FILTERS = (32, 32, 32, 32)
CONV_KERNEL = 3
CONV_STRIDE = 2
ACTIVATIONS = {"elu": tf.nn.elu, "relu": tf.nn.relu}
LSTM_FORGET_BIAS = 1.0  # starts the LSTM remembering (Jozefowicz et al. 2015)


class _Variables:
    """Creates a network's variables with its variable factory, in the order of its spec
    (network_spec.py: [(name, shape)]) and with the spec's shapes, and remembers them.
    Orthogonal weights (gain sqrt(2) unless given) and zero biases. A variable the spec
    does not list next is a bug in one of the two: RuntimeError at once."""

    def __init__(self, spec: network_spec.Variables, factory=graph_variable,
                 ortho_init: bool = True):
        self.spec = list(spec)
        self.factory = factory
        self.ortho_init = ortho_init
        self.created: list = []
        self.prefix = ""  # of the variable scopes entered inside the network's own

    @contextlib.contextmanager
    def scope(self, name: str):
        outer, self.prefix = self.prefix, f"{self.prefix}{name}/"
        try:
            with tf1.variable_scope(name):
                yield
        finally:
            self.prefix = outer

    def get(self, name, gain=None, zeros=False, constant=None, fan_in=None):
        """The next variable; `fan_in` (a bias's layer's inputs) for ortho_init False."""
        index = len(self.created)
        listed, shape = self.spec[index] if index < len(self.spec) else ("nothing", ())
        if self.prefix + name != listed:
            raise RuntimeError(f"the network creates {self.prefix + name!r} where "
                               f"network_spec.py lists {listed!r}")
        if constant is not None:
            initializer = tf1.constant_initializer(constant)
        elif not self.ortho_init:  # PyTorch's nn.Linear: kaiming_uniform(a=sqrt(5))
            bound = 1.0 / math.sqrt(fan_in or shape[0])
            initializer = tf1.random_uniform_initializer(-bound, bound)
        elif zeros:
            initializer = tf1.zeros_initializer()
        else:
            initializer = tf1.orthogonal_initializer(math.sqrt(2) if gain is None else gain)
        var = self.factory(name, list(shape), initializer)
        self.created.append(var)
        return var

    def dense(self, name, gain=None):
        weights = self.get(f"{name}/weights", gain)
        return weights, self.get(f"{name}/biases", zeros=True, fan_in=weights.shape[0])

    def all_created(self) -> list:
        """The variables, once every one the spec lists is created (else RuntimeError)."""
        if len(self.created) != len(self.spec):
            raise RuntimeError(f"the network created {len(self.created)} of the "
                               f"{len(self.spec)} variables network_spec.py lists")
        return self.created


def _dense_stack(vars_: _Variables, prefix: str, count: int) -> list:
    """Dense layers {prefix}fc0, fc1, ..., `count` of them: [(weights, biases)]."""
    return [vars_.dense(f"{prefix}fc{i}") for i in range(count)]


def _log_std(vars_: _Variables, actions, log_std_init: float):
    """A Gaussian policy's policy/log_std [n], started at `log_std_init`; None for
    discrete actions (distributions.py)."""
    if not actions.continuous:
        return None
    return vars_.get("policy/log_std", constant=log_std_init)


def _policy_output(head, log_std):
    """The policy [N, P] from the policy head's output [N, n]: the logits as they are, or
    the Gaussian means with the log std beside each row."""
    if log_std is None:
        return head
    return tf.concat([head, tf.zeros_like(head) + log_std], axis=1)


def _image_input(observations, obs_shape):
    """Observations [N, C, H, W] or [N, H, W] -> float [N, H, W, C] (uint8 scaled to [0, 1]).

    Cast before the transpose: oneDNN transposes float32, and a uint8 transpose falls back to
    Eigen with an error line on stderr ("oneDNN supports DT_UINT8 only on ...")."""
    x = tf.cast(observations, tf.float32)
    if observations.dtype == tf.uint8:
        x = x * (1.0 / 255.0)
    if len(obs_shape) == 2:
        return x[..., None]
    return tf.transpose(x, [0, 2, 3, 1])


class _CNNTorso:
    """Convolutions (network_spec.ConvLayer: filters, kernel size, stride, padding), then
    dense layers, each followed by `activation` (ELU or ReLU): [N, F]."""

    def __init__(self, vars_: _Variables, obs_shape, num_hidden: int,
                 conv: Sequence[network_spec.ConvLayer], activation: str = "elu"):
        self.obs_shape = tuple(obs_shape)
        self.activation = ACTIVATIONS[activation]
        self.convs = [(vars_.get(f"conv{i}/kernel"), vars_.get(f"conv{i}/biases", zeros=True),
                       layer.stride, layer.padding.upper()) for i, layer in enumerate(conv)]
        self.flat_size = math.prod(network_spec.conv_output_shapes(obs_shape, conv)[-1])
        self.layers = _dense_stack(vars_, "", num_hidden)

    def __call__(self, observations):
        x = _image_input(observations, self.obs_shape)
        for kernel, biases, stride, padding in self.convs:
            x = self.activation(tf.nn.conv2d(x, kernel, stride, padding) + biases)
        x = tf.reshape(x, [-1, self.flat_size])
        for weights, biases in self.layers:
            x = self.activation(tf.matmul(x, weights) + biases)
        return x


class _MLPTorso:
    """tanh dense layers on flattened (and, given a scale, standardized) observations:
    [N, F]."""

    def __init__(self, vars_: _Variables, obs_shape, num_hidden: int,
                 observation_scale: MeanStd | None = None):
        self.obs_dim = int(math.prod(obs_shape))
        self.observation_scale = observation_scale
        self.layers = _dense_stack(vars_, "", num_hidden)

    def __call__(self, observations):
        x = tf.reshape(tf.cast(observations, tf.float32), [-1, self.obs_dim])
        x = standardized(x, self.observation_scale)
        for weights, biases in self.layers:
            x = tf.tanh(tf.matmul(x, weights) + biases)
        return x


def _torso(kind: str, vars_: _Variables, obs_shape, hidden_sizes, conv, activation="elu",
           observation_scale: MeanStd | None = None):
    with vars_.scope("torso"):
        if kind == "cnn":
            return _CNNTorso(vars_, obs_shape, len(hidden_sizes), conv, activation)
        return _MLPTorso(vars_, obs_shape, len(hidden_sizes), observation_scale)


class _Heads:
    """The policy [N, P] and values [N] from features [N, F]."""

    def __init__(self, vars_: _Variables, actions, log_std_init: float):
        # A small policy gain starts the policy near uniform (Andrychowicz et al. 2021).
        self.policy = vars_.dense("policy", gain=0.01)
        self.log_std = _log_std(vars_, actions, log_std_init)
        self.value = vars_.dense("value", gain=1.0)

    def __call__(self, features):
        head = tf.matmul(features, self.policy[0]) + self.policy[1]
        values = (tf.matmul(features, self.value[0]) + self.value[1])[:, 0]
        return _policy_output(head, self.log_std), values


class ActorCriticCNN:
    """Convolutional torso shared by a policy and a value head, for image observations.

    __call__(observations [N, C, H, W] or [N, H, W]) -> (policy [N, P], values [N]).
    """

    recurrent = False
    sde = False

    def __init__(self, obs_shape: Sequence[int], actions, hidden_sizes: Sequence[int],
                 scope: str, local: bool = False, variable_factory=graph_variable,
                 conv_filters: Sequence[int] = CONV_FILTERS,
                 conv_kernel: Sequence[int] | int = CONV_KERNEL,
                 conv_stride: Sequence[int] | int = CONV_STRIDE, conv_padding: str = "same",
                 activation: str = "elu", log_std_init: float = 0.0):
        self.actions = as_action_space(actions)
        self.distribution = distribution(self.actions)
        conv = network_spec.conv_layers(conv_filters, conv_kernel, conv_stride, conv_padding)
        vars_ = _Variables(network_spec.cnn_variables(obs_shape, self.actions, hidden_sizes,
                                                      conv),
                           variable_factory)
        getter = _local_variable_getter if local else None
        with tf1.variable_scope(scope, custom_getter=getter) as var_scope:
            self.scope_name = var_scope.name
            self.torso = _torso("cnn", vars_, obs_shape, hidden_sizes, conv, activation)
            self.heads = _Heads(vars_, self.actions, log_std_init)
        self.variables = vars_.all_created()

    def __call__(self, observations):
        return self.heads(self.torso(observations))

    def learner_outputs(self, rollout: dict):
        """The learner's forward pass over a rollout's obs and next_obs [T, B, C, H, W]:
        the policy [T * B, P] and values [T * B] of s_t, and values [T * B] of the true s_{t+1},
        for which only the last step and the ends of episodes need a pass of their own
        (values_of_next_obs)."""
        obs = rollout["obs"]
        T, B = obs.shape.as_list()[:2]
        policy, values = self(tf.reshape(obs, [T * B, *obs.shape.as_list()[2:]]))
        done = tf.logical_or(rollout["terminated"], rollout["truncated"])
        next_values = values_of_next_obs(
            tf.reshape(values, [T, B]), done,
            lambda indices: self(tf.gather_nd(rollout["next_obs"], indices))[1])
        return policy, values, tf.reshape(next_values, [T * B])


def lstm_cell(inputs, state, kernel, biases):
    """One LSTM step: inputs [N, F], state [N, 2, H] (c, h) -> the next state [N, 2, H].

    kernel [F + H, 4H] and biases [4H] hold the input, forget, cell and output gates.
    """
    c, h = state[:, 0], state[:, 1]
    gates = tf.matmul(tf.concat([inputs, h], axis=1), kernel) + biases
    i, f, g, o = tf.split(gates, 4, axis=1)
    c = tf.sigmoid(f + LSTM_FORGET_BIAS) * c + tf.sigmoid(i) * tf.tanh(g)
    h = tf.sigmoid(o) * tf.tanh(c)
    return tf.stack([c, h], axis=1)


def values_of_next_obs(values, done, value_of):
    """Values [T, B] of the true s_{t+1} of a rollout, reusing the values [T, B] of its s_t.

    Where no episode ended at t, s_{t+1} is the rollout's own observation at t + 1, whose
    value is values[t + 1] already. Only the last step and the steps where an episode ended
    (s_{t+1} is then its final observation) need a forward pass: value_of(indices) gets the
    int64 indices [K, 2] of those (t, b) and returns their values [K]. For a CNN this halves
    the learner's work compared with one pass over all of s_t and s_{t+1}.
    """
    T, B = done.shape.as_list()
    needed = tf.logical_or(done, tf.equal(tf.range(T), T - 1)[:, None])
    indices = tf.where(needed)
    shifted = tf.concat([values[1:], tf.zeros([1, B], values.dtype)], axis=0)
    return tf.tensor_scatter_nd_update(shifted, indices, value_of(indices))


def reset_state(state, done):
    """state [N, 2, H] with the rows of envs whose episode ended (done [N] bool) zeroed."""
    return tf.where(done[:, None, None], tf.zeros_like(state), state)


class ActorCriticLSTM:
    """The mlp or cnn torso, an LSTM of `lstm_size` units, then the policy and value heads.

    The caller carries the state [N, 2, H] (c and h) from step to step and zeroes it where
    an episode ended (reset_state), before acting on the next episode's first observation:
      step(observations [N, ...], state [N, 2, H]) -> (policy [N, P], values [N], state')
      unroll(...) replays a whole [T, B] rollout for the learner (see there).
    """

    recurrent = True
    sde = False

    def __init__(self, obs_shape: Sequence[int], actions, hidden_sizes: Sequence[int],
                 lstm_size: int, torso: str, scope: str, local: bool = False,
                 variable_factory=graph_variable, conv_filters: Sequence[int] = CONV_FILTERS,
                 conv_kernel: Sequence[int] | int = CONV_KERNEL,
                 conv_stride: Sequence[int] | int = CONV_STRIDE, conv_padding: str = "same",
                 activation: str = "elu", log_std_init: float = 0.0,
                 observation_scale: MeanStd | None = None):
        self.actions = as_action_space(actions)
        self.distribution = distribution(self.actions)
        self.lstm_size = lstm_size
        self.state_shape = (2, lstm_size)
        conv = network_spec.conv_layers(conv_filters, conv_kernel, conv_stride, conv_padding)
        vars_ = _Variables(network_spec.lstm_variables(obs_shape, self.actions, hidden_sizes,
                                                       lstm_size, torso, conv),
                           variable_factory)
        getter = _local_variable_getter if local else None
        with tf1.variable_scope(scope, custom_getter=getter) as var_scope:
            self.scope_name = var_scope.name
            self.torso = _torso(torso, vars_, obs_shape, hidden_sizes, conv, activation,
                                observation_scale)
            self.lstm_kernel = vars_.get("lstm/kernel", 1.0)
            self.lstm_biases = vars_.get("lstm/biases", zeros=True)
            self.heads = _Heads(vars_, self.actions, log_std_init)
        self.variables = vars_.all_created()

    def _cell(self, features, state):
        return lstm_cell(features, state, self.lstm_kernel, self.lstm_biases)

    def step(self, observations, state):
        next_state = self._cell(self.torso(observations), state)
        policy, values = self.heads(next_state[:, 1])
        return policy, values, next_state

    def learner_outputs(self, rollout: dict):
        """The learner's forward pass over a rollout (see unroll): replayed from the state it
        started with (rollout["initial_state"]), with the same resets as while acting."""
        done = tf.logical_or(rollout["terminated"], rollout["truncated"])
        return self.unroll(rollout["obs"], rollout["next_obs"], rollout["initial_state"], done)

    def unroll(self, obs, next_obs, initial_state, done):
        """The learner's replay of a rollout, from the state it started with.

        obs, next_obs [T, B, ...]: s_t and the true s_{t+1} of a rollout (so next_obs[t] is
        obs[t + 1] where no episode ended: see values_of_next_obs); initial_state [B, 2, H]: the
        state the rollout acted on at t = 0; done [T, B]: the episode ended at step t, so
        the state is zeroed before step t + 1, exactly as while acting.
        Returns the policy [T * B, P] and values [T * B] of s_t, and values [T * B] of s_{t+1}
        (for an ended episode: its final observation, from the state before the reset).
        """
        T, B = done.shape.as_list()
        # One torso pass over all s_t; only the LSTM runs step by step.
        features = self.torso(tf.reshape(obs, [T * B, *obs.shape.as_list()[2:]]))
        step_features = tf.reshape(features, [T, B, -1])

        def step(carry, inputs):
            state, _ = carry
            x_t, done_t = inputs
            after = self._cell(x_t, state)
            return reset_state(after, done_t), after

        # after_step[t]: the state right after step t, before any reset.
        _, after_step = tf.scan(step, (step_features, done),
                                initializer=(initial_state, initial_state))
        policy, values = self.heads(tf.reshape(after_step[:, :, 1], [T * B, self.lstm_size]))

        def value_of(indices):  # s_{t+1} acted on from the state after step t
            state = self._cell(self.torso(tf.gather_nd(next_obs, indices)),
                               tf.gather_nd(after_step, indices))
            return self.heads(state[:, 1])[1]

        next_values = values_of_next_obs(tf.reshape(values, [T, B]), done, value_of)
        return policy, values, tf.reshape(next_values, [T * B])


def build_network(obs_shape, actions, config, scope: str, local: bool = False,
                  variable_factory=graph_variable,
                  observation_scale: MeanStd | None = None):
    """The actor-critic for these observations, `actions` (an ActionSpace, or a number of
    discrete actions) and config.policy, named `scope`; given an observation_scale (with
    --normalize-observations), its mlp torso standardizes the observations."""
    torso, recurrent = resolve_policy(config.policy, obs_shape)
    conv = conv_settings(config) if torso == "cnn" else {}
    scaled = {} if torso == "cnn" else {"observation_scale": observation_scale}
    options = {"local": local, "variable_factory": variable_factory,
               "log_std_init": config.log_std_init, **conv, **scaled}
    if recurrent:
        return ActorCriticLSTM(obs_shape, actions, config.hidden_sizes, config.lstm_size,
                               torso, scope, **options)
    if torso == "cnn":
        return ActorCriticCNN(obs_shape, actions, config.hidden_sizes, scope, **options)
    return ActorCriticMLP(obs_shape, actions, config.hidden_sizes, scope, sde=config.sde,
                          ortho_init=config.ortho_init, **options)


def rollout_sampler(network, num_envs: int):
    """observations [B, *obs_shape] -> actions sampled from a non-recurrent `network` for one
    rollout of `num_envs` envs. Build it once per rollout: with gSDE (--sde) it holds the
    envs' exploration matrices for the rollout's steps."""
    if network.sde:
        return network.sde_sampler(num_envs)
    return lambda observations: network.distribution.sample(network(observations)[0])


def network_on_weights(weights: Sequence, obs_shape, actions, config, scope: str,
                       observation_scale: MeanStd | None = None):
    """The network of build_network whose forward pass uses the tensors `weights` (one per
    variable, in network.variables' order) instead of variables: a snapshot of a network's
    weights, the one its `variables` are, so tf.gradients can be taken with respect to it."""
    remaining = list(weights)

    def next_weight(name, shape, initializer):
        del initializer  # nothing is created
        weight = remaining.pop(0)
        if weight.shape.as_list() != list(shape):
            raise RuntimeError(f"weight {name!r} has shape {weight.shape}, the network needs "
                               f"{list(shape)}")
        return weight

    network = build_network(obs_shape, actions, config, scope, variable_factory=next_weight,
                            observation_scale=observation_scale)
    if remaining:
        raise RuntimeError(f"{len(remaining)} weights left over: not this network's")
    return network


def conv_settings(config) -> dict:
    """The cnn torso's keyword arguments an A3CConfig sets."""
    return {"conv_filters": tuple(config.conv_filters), "conv_kernel": config.conv_kernel,
            "conv_stride": config.conv_stride, "conv_padding": config.conv_padding,
            "activation": config.activation}


def assign_op(network, values, name: str):
    """An op that assigns `values` (one per variable, in network.variables' order) to the
    variables of `network`."""
    return tf.group(*[v.assign(value) for v, value in zip(network.variables, values)],
                    name=name)


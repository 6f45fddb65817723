"""Which variables a network has, without TensorFlow: each one's name and shape, in order.

Three places need to know them: model.py creates them, the launcher's resource estimate
counts them before any task starts (launcher/resources.py), and the checkpoint check tells
which flag a log dir's network differs in (run_config.network_differences). They all read
this one spec, so a change to a layer is made once: model.py takes every shape from here
and refuses to create a variable the spec does not list, in the order it lists them.

Names are relative to the network's variable scope ("policy/fc0/weights" is
"global/policy/fc0/weights" in the globals). Observations are [C, H, W] or [H, W] images,
or vectors of any shape (flattened); see model.py for the layers themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from a3c_graph.core.action_space import ActionSpace, as_action_space
from a3c_graph.core.config import resolve_policy

Variables = list[tuple[str, tuple[int, ...]]]


def network_kind(policy: str, obs_shape: Sequence[int]) -> str:
    """"mlp", "cnn" or "lstm": the network --policy builds for observations of `obs_shape`
    (ValueError for --policy cnn on vectors)."""
    torso, recurrent = resolve_policy(policy, obs_shape)
    return "lstm" if recurrent else torso


def torso_kind(policy: str, obs_shape: Sequence[int]) -> str:
    """"mlp" or "cnn": the torso of that network (the mlp network's two towers count as an
    mlp torso)."""
    return resolve_policy(policy, obs_shape)[0]


def network_settings(config, obs_shape: Sequence[int]) -> dict[str, object]:
    """The flags of `config` (an A3CConfig) the variables follow from, beside the env's
    observation shape and number of actions: {"policy": the network's kind, "hidden_sizes",
    then "conv_filters", "conv_kernel", "conv_stride" and "conv_padding" for a cnn torso and
    "lstm_size" for the lstm}. Every other flag (--activation too) leaves the variables as
    they are."""
    kind = network_kind(config.policy, obs_shape)
    settings: dict[str, object] = {"policy": kind, "hidden_sizes": tuple(config.hidden_sizes)}
    if torso_kind(config.policy, obs_shape) == "cnn":
        settings.update(conv_filters=tuple(config.conv_filters),
                        conv_kernel=tuple(config.conv_kernel),
                        conv_stride=tuple(config.conv_stride),
                        conv_padding=config.conv_padding)
    if kind == "lstm":
        settings["lstm_size"] = config.lstm_size
    return settings


def network_variables(config, obs_shape: Sequence[int], actions) -> Variables:
    """(name, shape) of every variable of model.build_network(obs_shape, actions, config),
    in the order of its `variables`; `actions` an ActionSpace or a number of discrete
    actions."""
    kind = network_kind(config.policy, obs_shape)
    if config.normalize_observations and torso_kind(config.policy, obs_shape) == "cnn":
        raise ValueError(f"--normalize-observations is for vector observations; these are "
                         f"images of shape {list(obs_shape)} (give --normalize-observations "
                         f"false)")
    if config.sde and not as_action_space(actions).continuous:
        raise ValueError("--sde is for Box actions on the mlp policy, not discrete actions")
    for given, flag in ((config.sde, "--sde is for Box actions on"),
                        (not config.ortho_init, "--ortho-init false is for")):
        if given and kind != "mlp":
            raise ValueError(f"{flag} the mlp policy, not --policy {config.policy} ({kind})")
    if kind == "mlp":
        return mlp_variables(obs_shape, actions, config.hidden_sizes, config.sde)
    conv = {"conv": config_conv_layers(config)}
    if kind == "cnn":
        return cnn_variables(obs_shape, actions, config.hidden_sizes, **conv)
    return lstm_variables(obs_shape, actions, config.hidden_sizes, config.lstm_size,
                          torso_kind(config.policy, obs_shape), **conv)


def parameter_count(config, obs_shape: Sequence[int], actions) -> int:
    """The trainable parameters of model.build_network(obs_shape, actions, config)."""
    return sum(math.prod(shape) for _, shape in network_variables(config, obs_shape, actions))


# --------------------------------------------------------------------------- each network

def activation_count(config, obs_shape: Sequence[int], actions) -> int:
    """The floats one observation leaves in the learner's forward pass for its backward pass:
    the output of every layer of the network these variables make, and an image as floats
    (the launcher's memory estimate counts them)."""
    kind = network_kind(config.policy, obs_shape)
    policy_size = as_action_space(actions).policy_size
    if kind == "mlp":  # two towers, each with its output
        return 2 * sum(config.hidden_sizes) + policy_size + 1
    count = 0
    if torso_kind(config.policy, obs_shape) == "cnn":  # the image and each convolution's output
        count = sum(math.prod(shape)
                    for shape in conv_output_shapes(obs_shape, config_conv_layers(config)))
    count += sum(config.hidden_sizes)
    if kind == "lstm":
        count += 6 * config.lstm_size  # four gates, the cell and the output
    return count + policy_size + 1


def mlp_variables(obs_shape: Sequence[int], actions, hidden_sizes: Sequence[int],
                  sde: bool = False) -> Variables:
    """ActorCriticMLP: a policy and a value tower on the flattened observation, each dense
    layers fc0, fc1, ... of `hidden_sizes` and an output layer (n logits or Gaussian means,
    1 value); for a Box, the Gaussian's log std after the policy tower (with `sde`, a matrix
    over the policy tower's last features)."""
    actions = as_action_space(actions)
    obs_dim = math.prod(obs_shape)
    policy, _ = dense_stack("policy/", obs_dim, (*hidden_sizes, actions.n))
    value, _ = dense_stack("value/", obs_dim, (*hidden_sizes, 1))
    features = hidden_sizes[-1] if hidden_sizes else obs_dim
    return policy + log_std(actions, features if sde else None) + value


def cnn_variables(obs_shape: Sequence[int], actions, hidden_sizes: Sequence[int],
                  conv: Sequence[ConvLayer]) -> Variables:
    """ActorCriticCNN: the cnn torso of convolutions `conv`, then the policy and value heads."""
    torso, features = cnn_torso(obs_shape, hidden_sizes, conv)
    return torso + heads(features, actions)


def lstm_variables(obs_shape: Sequence[int], actions, hidden_sizes: Sequence[int],
                   lstm_size: int, torso: str, conv: Sequence[ConvLayer] = ()) -> Variables:
    """ActorCriticLSTM: the `torso` ("mlp" or "cnn"), an LSTM of `lstm_size` units (kernel
    [F + H, 4H], biases [4H]), then the policy and value heads."""
    if torso == "cnn":
        variables, features = cnn_torso(obs_shape, hidden_sizes, conv)
    else:
        variables, features = dense_stack("torso/", math.prod(obs_shape), hidden_sizes)
    variables += [("lstm/kernel", (features + lstm_size, 4 * lstm_size)),
                  ("lstm/biases", (4 * lstm_size,))]
    return variables + heads(lstm_size, actions)


# --------------------------------------------------------------------------- parts

def dense_stack(prefix: str, in_size: int, sizes: Sequence[int]) -> tuple[Variables, int]:
    """Dense layers {prefix}fc0, fc1, ... of `sizes` after an input of `in_size`:
    (their weights [in, out] and biases [out], the last layer's size)."""
    variables: Variables = []
    for i, size in enumerate(sizes):
        variables += [(f"{prefix}fc{i}/weights", (in_size, size)),
                      (f"{prefix}fc{i}/biases", (size,))]
        in_size = size
    return variables, in_size


class ConvLayer(NamedTuple):
    """One convolution of the cnn torso: `filters` square kernels of `kernel` pixels, moved
    by `stride`, with "same" or "valid" `padding`."""

    filters: int
    kernel: int
    stride: int
    padding: str = "same"


def conv_layers(conv_filters: Sequence[int], conv_kernel: Sequence[int] | int,
                conv_stride: Sequence[int] | int, padding: str = "same") -> list[ConvLayer]:
    """The convolutions --conv-filters, --conv-kernel, --conv-stride and --conv-padding
    describe: a kernel size or stride given once holds for every layer."""
    def per_layer(value):
        values = (value,) if isinstance(value, int) else tuple(value)
        return values * len(conv_filters) if len(values) == 1 else values
    return [ConvLayer(*layer, padding) for layer in zip(conv_filters, per_layer(conv_kernel),
                                                        per_layer(conv_stride))]


def config_conv_layers(config) -> list[ConvLayer]:
    """The convolutions of `config` (an A3CConfig)."""
    return conv_layers(config.conv_filters, config.conv_kernel, config.conv_stride,
                       config.conv_padding)


def conv_output_shapes(obs_shape: Sequence[int],
                       conv: Sequence[ConvLayer]) -> list[tuple[int, int, int]]:
    """(height, width, channels) of the input and of each convolution's output (same
    padding: a side shrinks to ceil(side / stride); valid: to (side - kernel) // stride + 1);
    a [H, W] image has one channel. ValueError if a valid convolution has no output left."""
    channels = 1 if len(obs_shape) == 2 else obs_shape[0]
    height, width = obs_shape[-2:]
    shapes = [(height, width, channels)]
    for i, layer in enumerate(conv):
        if layer.padding == "valid":
            if min(height, width) < layer.kernel:
                raise ValueError(
                    f"--conv-padding valid: convolution {i} ({layer.kernel}x{layer.kernel}) "
                    f"gets {height}x{width} pixels, fewer than its kernel; give a larger "
                    f"--screen-size or fewer, smaller convolutions")
            height = (height - layer.kernel) // layer.stride + 1
            width = (width - layer.kernel) // layer.stride + 1
        else:
            height, width = -(-height // layer.stride), -(-width // layer.stride)
        shapes.append((height, width, layer.filters))
    return shapes


def cnn_torso(obs_shape: Sequence[int], hidden_sizes: Sequence[int],
              conv: Sequence[ConvLayer]) -> tuple[Variables, int]:
    """The cnn torso's torso/conv0, conv1, ... (kernel [k, k, in, out], biases [out]) and
    its dense layers torso/fc0, ... on the flattened last convolution: (variables, features)."""
    shapes = conv_output_shapes(obs_shape, conv)
    variables: Variables = []
    for i, layer in enumerate(conv):
        variables += [(f"torso/conv{i}/kernel",
                       (layer.kernel, layer.kernel, shapes[i][2], layer.filters)),
                      (f"torso/conv{i}/biases", (layer.filters,))]
    dense, features = dense_stack("torso/", math.prod(shapes[-1]), hidden_sizes)
    return variables + dense, features


def heads(features: int, actions) -> Variables:
    """The policy head (n logits, or n Gaussian means and their log std) and the value head
    (one value) on `features`."""
    actions = as_action_space(actions)
    return [("policy/weights", (features, actions.n)), ("policy/biases", (actions.n,)),
            *log_std(actions), ("value/weights", (features, 1)), ("value/biases", (1,))]


def log_std(actions: ActionSpace, sde_features: int | None = None) -> Variables:
    """A Gaussian policy's log standard deviations, one per dimension, the same in every
    state (distributions.py), or with gSDE one per feature and dimension
    [sde_features, n]; nothing for discrete actions."""
    if not actions.continuous:
        return []
    return [("policy/log_std", (actions.n,) if sde_features is None
             else (sde_features, actions.n))]

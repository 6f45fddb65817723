"""Which variables a network has, without TensorFlow: each one's name and shape, in order.

Three places need to know them: model.py creates them, the launcher's resource estimate
counts them before any task starts (launcher/resources.py), and the checkpoint check tells
which flag a log dir's network differs in (checkpoints.network_differences). They all read
this one spec, so a change to a layer is made once: model.py takes every shape from here
and refuses to create a variable the spec does not list, in the order it lists them.

Names are relative to the network's variable scope ("policy/fc0/weights" is
"global/policy/fc0/weights" in the globals). Observations are [C, H, W] or [H, W] images,
or vectors of any shape (flattened); see model.py for the layers themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from a3c_graph.core.config import resolve_policy

CONV_KERNEL = 3  # the cnn torso's convolutions are 3x3
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
    then "conv_filters" and "conv_stride" for a cnn torso and "lstm_size" for the lstm}.
    Every other flag leaves the variables as they are."""
    kind = network_kind(config.policy, obs_shape)
    settings: dict[str, object] = {"policy": kind, "hidden_sizes": tuple(config.hidden_sizes)}
    if torso_kind(config.policy, obs_shape) == "cnn":
        settings.update(conv_filters=tuple(config.conv_filters), conv_stride=config.conv_stride)
    if kind == "lstm":
        settings["lstm_size"] = config.lstm_size
    return settings


def network_variables(config, obs_shape: Sequence[int], num_actions: int) -> Variables:
    """(name, shape) of every variable of model.build_network(obs_shape, num_actions, config),
    in the order of its `variables`."""
    kind = network_kind(config.policy, obs_shape)
    if kind == "mlp":
        return mlp_variables(obs_shape, num_actions, config.hidden_sizes)
    conv = {"conv_filters": config.conv_filters, "conv_stride": config.conv_stride}
    if kind == "cnn":
        return cnn_variables(obs_shape, num_actions, config.hidden_sizes, **conv)
    return lstm_variables(obs_shape, num_actions, config.hidden_sizes, config.lstm_size,
                          torso_kind(config.policy, obs_shape), **conv)


def parameter_count(config, obs_shape: Sequence[int], num_actions: int) -> int:
    """The trainable parameters of model.build_network(obs_shape, num_actions, config)."""
    return sum(math.prod(shape) for _, shape in network_variables(config, obs_shape,
                                                                  num_actions))


# --------------------------------------------------------------------------- each network

def mlp_variables(obs_shape: Sequence[int], num_actions: int,
                  hidden_sizes: Sequence[int]) -> Variables:
    """ActorCriticMLP: a policy and a value tower on the flattened observation, each dense
    layers fc0, fc1, ... of `hidden_sizes` and an output layer (num_actions logits, 1 value)."""
    obs_dim = math.prod(obs_shape)
    policy, _ = dense_stack("policy/", obs_dim, (*hidden_sizes, num_actions))
    value, _ = dense_stack("value/", obs_dim, (*hidden_sizes, 1))
    return policy + value


def cnn_variables(obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int],
                  conv_filters: Sequence[int], conv_stride: int) -> Variables:
    """ActorCriticCNN: the cnn torso, then the policy and value heads."""
    torso, features = cnn_torso(obs_shape, hidden_sizes, conv_filters, conv_stride)
    return torso + heads(features, num_actions)


def lstm_variables(obs_shape: Sequence[int], num_actions: int, hidden_sizes: Sequence[int],
                   lstm_size: int, torso: str, conv_filters: Sequence[int] = (),
                   conv_stride: int = 1) -> Variables:
    """ActorCriticLSTM: the `torso` ("mlp" or "cnn"), an LSTM of `lstm_size` units (kernel
    [F + H, 4H], biases [4H]), then the policy and value heads."""
    if torso == "cnn":
        variables, features = cnn_torso(obs_shape, hidden_sizes, conv_filters, conv_stride)
    else:
        variables, features = dense_stack("torso/", math.prod(obs_shape), hidden_sizes)
    variables += [("lstm/kernel", (features + lstm_size, 4 * lstm_size)),
                  ("lstm/biases", (4 * lstm_size,))]
    return variables + heads(lstm_size, num_actions)


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


def conv_output_shapes(obs_shape: Sequence[int], conv_filters: Sequence[int],
                       conv_stride: int) -> list[tuple[int, int, int]]:
    """(height, width, channels) of the input and of each convolution's output (SAME
    padding: each side shrinks to ceil(side / stride)); a [H, W] image has one channel."""
    channels = 1 if len(obs_shape) == 2 else obs_shape[0]
    height, width = obs_shape[-2:]
    shapes = [(height, width, channels)]
    for filters in conv_filters:
        height, width = -(-height // conv_stride), -(-width // conv_stride)
        shapes.append((height, width, filters))
    return shapes


def cnn_torso(obs_shape: Sequence[int], hidden_sizes: Sequence[int],
              conv_filters: Sequence[int], conv_stride: int) -> tuple[Variables, int]:
    """The cnn torso's torso/conv0, conv1, ... (kernel [3, 3, in, out], biases [out]) and
    its dense layers torso/fc0, ... on the flattened last convolution: (variables, features)."""
    shapes = conv_output_shapes(obs_shape, conv_filters, conv_stride)
    variables: Variables = []
    for i, filters in enumerate(conv_filters):
        variables += [(f"torso/conv{i}/kernel", (CONV_KERNEL, CONV_KERNEL, shapes[i][2], filters)),
                      (f"torso/conv{i}/biases", (filters,))]
    dense, features = dense_stack("torso/", math.prod(shapes[-1]), hidden_sizes)
    return variables + dense, features


def heads(features: int, num_actions: int) -> Variables:
    """The policy head (num_actions logits) and the value head (one value) on `features`."""
    return [("policy/weights", (features, num_actions)), ("policy/biases", (num_actions,)),
            ("value/weights", (features, 1)), ("value/biases", (1,))]

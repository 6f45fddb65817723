"""a3c_graph.core.network_spec: the variables a network has, as the launcher's estimate and the
checkpoint check read them without TensorFlow, are those of the network model.py builds.

Observations of odd shapes ([C, H, W] all different, an [H, W] image, a stride that does not
divide the sides), so a channel, height or width taken for another shows; each network's
forward pass runs on them, so a shape the spec got wrong cannot pass unnoticed.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from a3c_graph.core.action_space import ActionSpace, as_action_space
from a3c_graph.core.config import resolve_config
from a3c_graph.core.model import build_network
from a3c_graph.core.network_spec import network_variables, parameter_count
from tests.support.hand_made import name_in_scope, zero_state

tf1 = tf.compat.v1
IMAGE = (3, 7, 5)  # C, H, W
BOX = ActionSpace(3, (-1.0, -2.0, -1.0), (1.0, 2.0, 1.0))
NETWORKS = {  # (config flags, observation shape, actions)
    "mlp": ({"hidden_sizes": (6, 5)}, (4,), 2),
    "mlp of an image": ({"policy": "mlp", "hidden_sizes": (6,)}, IMAGE, 3),
    "cnn": ({"conv_filters": (4, 6), "conv_stride": (2,), "hidden_sizes": (5,)}, IMAGE, 3),
    "cnn of one channel": ({"conv_filters": (2,), "conv_stride": (3,), "hidden_sizes": (3,)},
                           (7, 5), 4),
    "cnn, valid padding, relu": ({"conv_filters": (4, 6), "conv_stride": (2,),
                                  "conv_padding": "valid", "activation": "relu",
                                  "hidden_sizes": (5,)}, (3, 11, 9), 3),
    "lstm, mlp torso": ({"policy": "lstm", "lstm_size": 7, "hidden_sizes": (6,)}, (4,), 2),
    "lstm, cnn torso": ({"policy": "lstm", "lstm_size": 5, "conv_filters": (4,),
                         "conv_stride": (2,), "hidden_sizes": (6,)}, IMAGE, 3),
    "mlp, Box of 3": ({"hidden_sizes": (6, 5)}, (4,), BOX),
    "cnn, Box of 3": ({"conv_filters": (4,), "conv_stride": (2,), "hidden_sizes": (5,)},
                      IMAGE, BOX),
    "lstm, Box of 3": ({"policy": "lstm", "lstm_size": 7, "hidden_sizes": (6,)}, (4,), BOX),
}


@pytest.mark.parametrize("case", NETWORKS)
def test_the_spec_is_the_variables_of_the_network_model_builds(case):
    flags, obs_shape, actions = NETWORKS[case]
    config = resolve_config(flags)
    N = 3
    with tf.Graph().as_default():
        network = build_network(obs_shape, actions, config, "global")
        built = [(name_in_scope(v), tuple(v.shape.as_list())) for v in network.variables]
        observations = tf.constant(np.random.default_rng(0).random((N, *obs_shape)), tf.float32)
        if network.recurrent:
            logits, values, _ = network.step(observations, zero_state(network, N))
        else:
            logits, values = network(observations)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            logits, values = session.run([logits, values])
    assert built == network_variables(config, obs_shape, actions)
    # The policy: n logits, or a Box's n means and n log stds.
    assert (logits.shape, values.shape) == ((N, as_action_space(actions).policy_size), (N,))
    if as_action_space(actions).continuous:
        assert ("policy/log_std", (3,)) in built


def test_the_cnns_variables_worked_out_by_hand():
    """[3, 7, 5] images, 3x3 convolutions of 4 then 6 filters at stride 2 (7 x 5 -> 4 x 3 ->
    2 x 2), a dense layer of 5, 3 actions."""
    flags, obs_shape, num_actions = NETWORKS["cnn"]
    assert network_variables(resolve_config(flags), obs_shape, num_actions) == [
        ("torso/conv0/kernel", (3, 3, 3, 4)), ("torso/conv0/biases", (4,)),
        ("torso/conv1/kernel", (3, 3, 4, 6)), ("torso/conv1/biases", (6,)),
        ("torso/fc0/weights", (2 * 2 * 6, 5)), ("torso/fc0/biases", (5,)),
        ("policy/weights", (5, 3)), ("policy/biases", (3,)),
        ("value/weights", (5, 1)), ("value/biases", (1,)),
    ]
    assert parameter_count(resolve_config(flags), obs_shape, num_actions) == (
        108 + 4 + 216 + 6 + 24 * 5 + 5 + 5 * 3 + 3 + 5 + 1)


def test_the_nature_network_has_the_parameters_of_rl_zoos():
    """rl-baselines3-zoo's A2C network on Breakout (4 frames of 84x84, 4 actions): 32 8x8
    filters at stride 4, 64 4x4 at 2, 64 3x3 at 1, no padding (84 -> 20 -> 9 -> 7), 512
    units: 8,224 + 32,832 + 36,928 + 3,136 x 512 + 512 + 2,052 + 513 parameters."""
    config = resolve_config({"conv_filters": (32, 64, 64), "conv_kernel": (8, 4, 3),
                             "conv_stride": (4, 2, 1), "conv_padding": "valid",
                             "hidden_sizes": (512,)})
    assert ("torso/fc0/weights", (3136, 512)) in network_variables(config, (4, 84, 84), 4)
    assert parameter_count(config, (4, 84, 84), 4) == 1_686_693


def test_valid_convolutions_on_too_small_an_image_name_the_flag():
    config = resolve_config({"conv_filters": (4, 4), "conv_kernel": (3,), "conv_stride": (2,),
                             "conv_padding": "valid"})
    with pytest.raises(ValueError, match=r"--conv-padding valid: convolution 1 \(3x3\) gets "
                                         r"2x2 pixels"):
        network_variables(config, (3, 6, 6), 3)

"""core/run_spec.py: a run resolved once from its config: the env, the network it needs, the
target it stops at; and every mistake there one ValueError line."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest

from a3c_graph.core.config import resolve_config
from a3c_graph.core.run_spec import describe_target, resolve_run


def test_no_target_reads_as_running_to_the_budget():
    assert describe_target(475.0) == "475"
    assert describe_target(math.inf) == "none (runs to its budget)"


def test_the_target_is_the_flag_else_the_env_threshold():
    run = resolve_run(resolve_config({"env": "CartPole-v1"}))
    assert (run.info.obs_shape, run.target_return) == ((4,), 475.0)
    given = {"env": "CartPole-v1", "target_return": 100.0}
    assert resolve_run(resolve_config(given)).target_return == 100.0


class ExplodingEnv(gym.Env):
    def __init__(self, **options):
        raise RuntimeError("no display\nsecond line")


gym.register(id="ExplodingEnvForStats-v0", entry_point=ExplodingEnv)


@pytest.mark.parametrize("given, message", [
    ({"env": "NoSuchEnv-v9"}, "NoSuchEnv-v9"),
    ({"env": "ExplodingEnvForStats-v0"},
     "env 'ExplodingEnvForStats-v0' cannot be made: no display"),
    ({"env": "CartPole-v1", "policy": "cnn"}, "--policy cnn needs image observations"),
    ({"env": "CartPole-v1", "sde": True},
     "--sde is for Box actions on the mlp policy, not discrete actions"),
    ({"env": "Pendulum-v1", "sde": True, "policy": "lstm"},
     "--sde is for Box actions on the mlp policy, not --policy lstm (lstm)"),
    ({"env": "MinAtar/Breakout-v1", "ortho_init": False},
     "--ortho-init false is for the mlp policy, not --policy auto (cnn)"),
    # MinAtar's 10x10 boards: 8x8 at stride 1 leaves 3x3, too small for a second 8x8.
    ({"env": "MinAtar/Breakout-v1", "conv_filters": (16, 16), "conv_kernel": (8,),
      "conv_padding": "valid"}, "--conv-padding valid: convolution 1 (8x8) gets 3x3 pixels"),
])
def test_an_env_a_run_cannot_use_is_one_value_error(given, message):
    with pytest.raises(ValueError) as raised:
        resolve_run(resolve_config(given))
    assert message in str(raised.value) and "\n" not in str(raised.value)

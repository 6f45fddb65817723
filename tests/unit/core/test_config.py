"""Tests for the dataclass-driven command line in a3c_graph.core.config."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re

import pytest

from a3c_graph.core.config import A3CConfig, add_config_arguments, config_from_args, config_to_argv


def parse(argv: list[str]) -> A3CConfig:
    """The config a worker would build from `argv`."""
    parser = argparse.ArgumentParser(prog="a3c")
    add_config_arguments(parser)
    return config_from_args(parser.parse_args(argv))


def test_no_flags_parse_to_the_defaults():
    config = parse([])
    assert config == A3CConfig()
    assert config.hidden_sizes == (64, 64)
    assert config.target_return is None
    assert config.normalize_advantages is False and config.adam_epsilon == 0.1


def test_every_field_has_a_flag_with_its_help():
    parser = argparse.ArgumentParser(prog="a3c")
    add_config_arguments(parser)
    help_text = " ".join(parser.format_help().split())  # undo line wrapping
    for f in dataclasses.fields(A3CConfig):
        assert "--" + f.name.replace("_", "-") in help_text
    assert "(default: 64,64)" in help_text


def test_scalar_flags_parse_to_their_field_types():
    config = parse(["--env", "Acrobot-v1", "--rollout-length", "5", "--gamma", "0.9",
                    "--learning-rate", "3e-4", "--target-return", "-100"])
    assert config.env == "Acrobot-v1"
    assert config.rollout_length == 5 and isinstance(config.rollout_length, int)
    assert config.gamma == 0.9
    assert config.learning_rate == 3e-4
    assert config.target_return == -100.0


@pytest.mark.parametrize("text, expected", [
    ("32,16", (32, 16)),
    ("128", (128,)),
    ("8, 4, 2", (8, 4, 2)),
])
def test_hidden_sizes_parse_to_a_tuple_of_ints(text, expected):
    assert parse(["--hidden-sizes", text]).hidden_sizes == expected


def test_hidden_sizes_reject_non_integers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(["--hidden-sizes", "32,wide"])
    assert exit_info.value.code == 2
    assert "--hidden-sizes" in capsys.readouterr().err


@pytest.mark.parametrize("text, expected", [
    ("true", True), ("false", False), ("True", True), ("FALSE", False),
    ("1", True), ("0", False), ("yes", True), ("no", False), ("on", True), ("off", False),
])
def test_boolean_flags_parse_true_and_false(text, expected):
    assert parse(["--normalize-advantages", text]).normalize_advantages is expected


def test_boolean_flag_rejects_other_words(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(["--normalize-advantages", "maybe"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--normalize-advantages" in err and "expected true or false" in err


def test_default_config_needs_no_flags():
    assert config_to_argv(A3CConfig()) == []


def test_config_to_argv_round_trips_a_non_default_config():
    config = A3CConfig(
        env="Acrobot-v1", seed=-3, envs_per_worker=4, rollout_length=5, gamma=0.9,
        gae_lambda=1.0, learning_rate=3e-4, entropy_coef=0.0, hidden_sizes=(32, 16),
        normalize_advantages=True, max_steps=1000, max_seconds=60.5,
        target_return=-1e-05, intra_op_threads=0)
    argv = config_to_argv(config)

    # Only the changed fields are written out.
    flags = {arg.split("=")[0] for arg in argv if arg.startswith("--")}
    assert flags == {
        "--env", "--seed", "--envs-per-worker", "--rollout-length", "--gamma", "--gae-lambda",
        "--learning-rate", "--entropy-coef", "--hidden-sizes", "--normalize-advantages",
        "--max-steps", "--max-seconds", "--target-return", "--intra-op-threads"}
    assert parse(argv) == config


@pytest.mark.parametrize("field_name, value", [
    ("target_return", -1e-05),   # printed in scientific notation with a leading minus
    ("target_return", -1e20),
    ("seed", -1),
    ("hidden_sizes", (7,)),
])
def test_config_to_argv_round_trips_awkward_values(field_name, value):
    config = dataclasses.replace(A3CConfig(), **{field_name: value})
    assert parse(config_to_argv(config)) == config


@pytest.mark.parametrize("field_name, bad_value, message", [
    ("rollout_length", 0, "--rollout-length must be at least 1, got 0"),
    ("envs_per_worker", -2, "--envs-per-worker must be at least 1, got -2"),
    ("max_steps", 0, "--max-steps must be at least 1"),
    ("gamma", 1.5, "--gamma must be in [0, 1], got 1.5"),
    ("gamma", math.nan, "--gamma must be in [0, 1]"),
    ("gae_lambda", -0.1, "--gae-lambda must be in [0, 1], got -0.1"),
    ("learning_rate", 0.0, "--learning-rate must be a positive number, got 0.0"),
    ("learning_rate", math.nan, "--learning-rate must be a positive number"),
    ("grad_clip_norm", math.inf, "--grad-clip-norm must be a positive number"),
    ("max_seconds", -1.0, "--max-seconds must be a positive number"),
    ("entropy_coef", -0.01, "--entropy-coef must be a non-negative number"),
    ("value_coef", math.inf, "--value-coef must be a non-negative number"),
    ("keep_checkpoint_every_minutes", -5.0,
     "--keep-checkpoint-every-minutes must be a non-negative number"),
    ("hidden_sizes", (64, 0), "--hidden-sizes must be positive widths"),
    ("hidden_sizes", (), "--hidden-sizes must be positive widths"),
    ("target_return", math.nan, "--target-return must be a number (or inf: no target)"),
    ("target_return", -math.inf, "--target-return must be a number (or inf: no target)"),
    ("conv_filters", (16, 0), "--conv-filters must be positive numbers"),
    ("conv_stride", (0,), "--conv-stride must be one positive number, or one per layer"),
    ("conv_kernel", (3, 3), "--conv-kernel must be one positive number, or one per layer"),
    ("intra_op_threads", -1, "--intra-op-threads must be 0 or more, got -1"),
    ("conv_padding", "full", "--conv-padding must be one of same, valid, got 'full'"),
    ("activation", "tanh", "--activation must be one of elu, relu, got 'tanh'"),
])
def test_validate_names_the_flag_of_a_bad_value(field_name, bad_value, message):
    config = dataclasses.replace(A3CConfig(), **{field_name: bad_value})
    with pytest.raises(ValueError, match=re.escape(message)):
        config.validate()


@pytest.mark.parametrize("argv, message", [
    (["--rollout-length", "0"], "--rollout-length must be at least 1"),
    (["--gamma", "1.01"], "--gamma must be in [0, 1]"),
    (["--learning-rate=-1e-3"], "--learning-rate must be a positive number"),
    (["--hidden-sizes", "64,-1"], "--hidden-sizes must be positive widths"),
    (["--normalize-rewards", "true", "--clip-rewards", "true"],
     "--normalize-rewards and --clip-rewards both rescale the rewards"),
])
def test_bad_flag_on_the_command_line_raises_value_error_naming_it(argv, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse(argv)


@pytest.mark.parametrize("field_name, value", [
    ("gamma", 0.0), ("gamma", 1.0), ("gae_lambda", 0.0), ("entropy_coef", 0.0),
    ("intra_op_threads", 0), ("rollout_length", 1), ("target_return", -500.0),
])
def test_validate_accepts_boundary_values(field_name, value):
    dataclasses.replace(A3CConfig(), **{field_name: value}).validate()


# --------------------------------------------------------------------------- presets

def test_cartpole_preset_is_the_dataclass_defaults():
    assert parse(["--preset", "cartpole"]) == dataclasses.replace(A3CConfig(), preset="cartpole")
    assert parse(["--env", "Acrobot-v1"]) == A3CConfig(env="Acrobot-v1")


def test_atari_preset_is_picked_for_ale_ids_and_fills_only_the_flags_not_given():
    config = parse(["--env", "ALE/Pong-v5", "--rollout-length", "32", "--learning-rate", "1e-3"])
    assert config.preset == "auto"
    assert config.rollout_length == 32 and config.learning_rate == 1e-3  # given: kept
    assert config.hidden_sizes == (256,) and config.grad_clip_norm == 0.5  # the preset's
    assert config.normalize_advantages is False
    assert config.target_return == 18.0  # Pong's spec has no reward_threshold
    assert config.gamma == A3CConfig().gamma  # not in the preset: the default


def test_atari_preset_can_be_asked_for_on_any_env_and_cartpole_preset_on_atari():
    assert parse(["--preset", "atari"]).hidden_sizes == (256,)
    pong = parse(["--env", "ALE/Pong-v5", "--preset", "cartpole", "--target-return", "0"])
    assert pong.hidden_sizes == (64, 64) and pong.learning_rate == 3e-3


def test_atari_preset_trains_each_protocol_for_its_own_budget():
    # ALE v5 (sticky actions, the default): 50M frames; the A3C protocol: 40M frames.
    assert parse(["--env", "ALE/Pong-v5"]).max_steps == 12_500_000
    a3c = parse(["--env", "ALE/Pong-v5", "--repeat-action-probability", "0"])
    assert a3c.max_steps == 10_000_000
    assert a3c.learning_rate_at(5_000_000) == pytest.approx(a3c.learning_rate / 2)
    # The entropy bonus anneals with the rate on the atari preset's protocols, from 0.01.
    assert a3c.entropy_coef_at(5_000_000) == pytest.approx(0.005)
    given = parse(["--env", "ALE/Pong-v5", "--repeat-action-probability", "0",
                   "--max-steps", "12500000"])
    assert given.max_steps == 12_500_000  # a given budget is the user's


@pytest.mark.parametrize("argv", [
    ["--env", "ALE/Pong-v5"],
    ["--env", "ALE/Pong-v5", "--repeat-action-probability", "0"],
    ["--env", "ALE/Pong-v5", "--repeat-action-probability", "0", "--max-steps", "12500000"],
    # A given value that equals the cartpole default must still reach the tasks.
    ["--env", "ALE/Pong-v5", "--learning-rate", "1e-3", "--hidden-sizes", "64,64",
     "--normalize-advantages", "true"],
    ["--env", "ALE/Pong-v5", "--preset", "cartpole", "--target-return", "5", "--policy", "lstm"],
    ["--preset", "atari", "--rollout-length", "32"],
])
def test_config_to_argv_reproduces_a_preset_config(argv):
    config = parse(argv)
    assert parse(config_to_argv(config)) == config


def test_config_to_argv_of_a_pong_run_needs_only_the_env():
    assert config_to_argv(parse(["--env", "ALE/Pong-v5"])) == ["--env=ALE/Pong-v5"]


@pytest.mark.parametrize("argv", [["--preset", "mujoco"], ["--policy", "transformer"],
                                  ["--optimizer", "sgd"]])
def test_unknown_preset_or_policy_is_rejected_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("field_name, bad_value, message", [
    ("preset", "mujoco", "--preset must be one of auto, cartpole, atari"),
    ("policy", "gru", "--policy must be one of auto, mlp, cnn, lstm"),
    ("optimizer", "sgd", "--optimizer must be one of adam, rmsprop, rmsprop-pytorch, got 'sgd'"),
    ("rmsprop_epsilon", 0.0, "--rmsprop-epsilon must be a positive number, got 0.0"),
    ("lstm_size", 0, "--lstm-size must be at least 1"),
    ("repeat_action_probability", 1.5, "--repeat-action-probability must be in [0, 1]"),
])
def test_validate_names_the_flag_of_a_bad_new_field(field_name, bad_value, message):
    config = dataclasses.replace(A3CConfig(), **{field_name: bad_value})
    with pytest.raises(ValueError, match=re.escape(message)):
        config.validate()


def test_the_learning_rate_anneals_linearly_to_zero_over_max_steps():
    config = A3CConfig(learning_rate=1e-3, max_steps=1000)
    assert config.anneal_learning_rate  # the default, as in the A3C paper
    assert [config.learning_rate_at(n) for n in (0, 250, 1000, 5000)] == \
        pytest.approx([1e-3, 7.5e-4, 0.0, 0.0])
    constant = dataclasses.replace(config, anneal_learning_rate=False)
    assert constant.learning_rate_at(900) == 1e-3


@pytest.mark.parametrize("argv, workers, envs, pooled", [
    ([], 1, 8, 1), ([], 2, 8, 1), ([], 3, 5, 2), ([], 4, 4, 2), ([], 8, 2, 4), ([], 15, 1, 8),
    ([], 16, 1, 8), ([], 64, 1, 8),
    (["--env", "ALE/Pong-v5"], 16, 1, 8),  # the atari preset: 8 x 20 steps per 2 workers
    (["--env", "ALE/Breakout-v5", "--protocol", "classic"], 4, 8, 2),  # its 16 per 2
    (["--env", "HalfCheetah-v5"], 8, 1, 1),  # the continuous preset: 1 env whatever the count
    (["--envs-per-worker", "8"], 16, 8, 1),  # given: as given, even when it is the preset's
    (["--envs-per-worker", "3"], 16, 3, 1),
    (["--rollouts-per-update", "2"], 16, 1, 2),
    ([], None, 8, 1),  # the cluster not known: the preset's
])
def test_a_cluster_of_more_workers_steps_fewer_envs_in_each_and_pools_them(argv, workers, envs,
                                                                           pooled):
    """Not given, --envs-per-worker is the preset's for 2 workers spread over the cluster's,
    so its envs in flight stay where the preset's results were measured, and as many
    rollouts are pooled into an update as keep its samples the preset's."""
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    config = config_from_args(parser.parse_args(argv), workers=workers)
    assert (config.envs_per_worker, config.rollouts_per_update) == (envs, pooled)
    preset = config_from_args(parser.parse_args(argv))
    if workers and workers >= 4 and not {"--envs-per-worker", "--rollouts-per-update"} & {*argv}:
        assert config.samples_per_update() == preset.samples_per_update()


def test_pooled_rollouts_are_clipped_at_sqrt_k_and_tolerate_the_lag_of_their_update():
    """An update of k pooled rollouts is judged as one of their samples together: its
    tolerated lag is that of an update of k x the samples, and each rollout's gradient is
    clipped at sqrt(k) x --grad-clip-norm."""
    one = A3CConfig(envs_per_worker=1, rollout_length=20, grad_clip_norm=0.5, lag_tolerance=4.0)
    pooled = dataclasses.replace(one, rollouts_per_update=8)
    assert one.tolerated_lag() == pytest.approx(4.0 * math.sqrt(8))
    assert pooled.tolerated_lag() == pooled.own_pipeline_lag() == 6  # 4 at 160 samples, floor 6
    assert pooled.rollout_clip_norm() == pytest.approx(0.5 * math.sqrt(8))
    assert one.rollout_clip_norm() == 0.5
    with pytest.raises(ValueError, match="--rollouts-per-update must be at least 1, got 0"):
        dataclasses.replace(one, rollouts_per_update=0).validate()


def test_a_command_for_a_known_cluster_keeps_envs_given_equal_to_the_presets():
    """The launcher's task commands and its --background relaunch say --envs-per-worker
    even when it is the preset's 8: unsaid, the receiver would spread it over 16 workers."""
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    given = config_from_args(parser.parse_args(["--envs-per-worker", "8"]), workers=16)
    said = parser.parse_args(config_to_argv(given, say_envs=True))
    assert config_from_args(said, workers=16).envs_per_worker == 8
    unsaid = parser.parse_args(config_to_argv(given))
    assert config_from_args(unsaid, workers=16).envs_per_worker == 1

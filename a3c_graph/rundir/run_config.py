"""The run a log dir holds, as its files tell without TensorFlow: the config.json the chief
wrote (read_run_config) and the Saver's `checkpoint` state file (read_checkpoint_state).

check_logdir_config is the first of a checkpoint's two refusals (the second, with TF, is
checkpoints.restorable_checkpoint): the launcher and a worker task run it before they
write a file or load TF, and it refuses a run whose network flags would build other
variables than the ones checkpointed there. Every error is a CheckpointError (a
ValueError) with one sentence for the user.
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from a3c_graph.core.config import A3CConfig, is_atari
from a3c_graph.core.network_spec import network_settings

CONFIG_FILE = "config.json"
STATE_FILE = "checkpoint"  # the Saver's checkpoint state file (a CheckpointState text proto)
# Flags that add running statistics to the network's variables.
_STATISTICS_FLAGS = ("normalize_observations", "normalize_rewards")


class CheckpointError(ValueError):
    """A log dir or checkpoint this run cannot use: one sentence for the user."""


def read_run_config(logdir: str) -> A3CConfig | None:
    """The A3CConfig in <logdir>/config.json, None if there is none; CheckpointError if it
    cannot be read or is not an a3c_graph config."""
    path = os.path.join(logdir, CONFIG_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            values = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise CheckpointError(f"cannot read {path}: {reason}") from None
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON ({error}); it is damaged") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{path} is not an a3c_graph config (a JSON object)")
    known = {f.name for f in dataclasses.fields(A3CConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise CheckpointError(f"{path} is not an a3c_graph config: unknown field {unknown[0]!r}")
    for name in ("hidden_sizes", "conv_filters", "conv_kernel", "conv_stride"):
        if isinstance(values.get(name), list):  # JSON has lists where the config has tuples
            values[name] = tuple(values[name])
        elif isinstance(values.get(name), int):  # a run of a version with one stride for all
            values[name] = (values[name],)
    try:
        config = A3CConfig(**values)
        config.validate()
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path} is not a valid a3c_graph config: {error}") from None
    return config


@dataclass(frozen=True)
class CheckpointState:
    """What a `checkpoint` state file says; paths are checkpoint prefixes made absolute (as
    tf.train.get_checkpoint_state makes them), `newest` last in `all_paths`."""

    path: str  # the state file itself
    newest: str
    all_paths: tuple[str, ...]

    def newest_first(self) -> list[str]:
        return [self.newest] + [p for p in reversed(self.all_paths) if p != self.newest]


_STATE_LINE = re.compile(r"\s*([A-Za-z_]\w*)\s*:\s*(.*?)\s*")
_STATE_STRINGS = ("model_checkpoint_path", "all_model_checkpoint_paths")
_STATE_NUMBERS = ("all_model_checkpoint_timestamps", "last_preserved_timestamp")


def read_checkpoint_state(logdir: str) -> CheckpointState | None:
    """The log dir's checkpoint state file, None if there is none; CheckpointError if it is
    garbled or names no checkpoint.

    Read here rather than with tf.train.get_checkpoint_state, which needs TF and takes a
    garbled file for "no checkpoint yet" (the chief would then start afresh and overwrite
    the run's checkpoints).
    """
    path = os.path.join(logdir, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise CheckpointError(f"{path} is a directory, not a checkpoint state file") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise CheckpointError(f"cannot read the checkpoint state file {path}: {reason}") from None
    newest, all_paths = None, []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _STATE_LINE.fullmatch(line)
        value = _state_value(match) if match else None
        if value is None:
            raise CheckpointError(f"the checkpoint state file {path} is garbled (line {number}: "
                                  f"{line.strip()[:60]!r}); it is damaged")
        if match.group(1) == "model_checkpoint_path":
            newest = value
        elif match.group(1) == "all_model_checkpoint_paths":
            all_paths.append(value)
    if not newest:
        raise CheckpointError(f"the checkpoint state file {path} names no checkpoint; it is "
                              "damaged")

    def absolute(prefix: str) -> str:
        return prefix if os.path.isabs(prefix) else os.path.join(logdir, prefix)

    all_paths = [absolute(p) for p in all_paths]
    newest = absolute(newest)
    if newest not in all_paths:
        all_paths.append(newest)
    return CheckpointState(path=path, newest=newest, all_paths=tuple(all_paths))


def _state_value(match: re.Match) -> str | float | None:
    """The value of one `key: value` line of a state file, None if it is not a valid one."""
    key, raw = match.groups()
    if key in _STATE_NUMBERS:
        try:
            return float(raw)
        except ValueError:
            return None
    if key not in _STATE_STRINGS or len(raw) < 2 or raw[0] not in "'\"" or raw[-1] != raw[0]:
        return None
    try:  # protobuf's text format escapes strings the C way, as Python bytes literals do
        value = ast.literal_eval("b" + raw)
        return value.decode("utf-8") if isinstance(value, bytes) else None
    except (ValueError, SyntaxError, UnicodeDecodeError):
        return None


def checkpoint_files_exist(prefix: str) -> bool:
    """True if the checkpoint `prefix` (format V2) has its index and data files."""
    return os.path.isfile(prefix + ".index") and bool(data_files(prefix))


def data_files(prefix: str) -> list[str]:
    return sorted(glob.glob(glob.escape(prefix) + ".data-?????-of-?????"))


def network_differences(there: A3CConfig, here: A3CConfig,
                        obs_shape: Sequence[int]) -> list[tuple[str, str, str]]:
    """The settings that decide the network's variables and differ between two configs:
    (flag, value there, value here), most telling first.

    Variables follow from the env (observation shape, number of actions; ALE's
    --full-action-space changes the actions, --screen-size and --frame-stack the shape) and
    from the flags network_spec.network_settings names (the policy after `auto` is
    resolved), --optimizer names the slots saved beside them, and --normalize-observations
    and --normalize-rewards add their running statistics; nothing else (learning rate,
    rollout length, envs per worker, ...) changes a variable's name or shape. A cnn
    torso's --activation is listed too: the same variables, learned for another function.
    `obs_shape` is the env's (both configs must name the same env for the rest to be
    compared).
    """
    if there.env != here.env:
        return [("env", there.env, here.env)]
    differences = []
    if is_atari(there.env):
        differences += _differing_flags(there, here, ("full_action_space", "screen_size",
                                                      "frame_stack"))
    settings = [_network_settings(c, obs_shape) for c in (there, here)]
    kinds = [s["policy"] for s in settings]
    if kinds[0] != kinds[1]:
        shown = [c.policy if c.policy == kind else f"{c.policy} ({kind})"
                 for c, kind in zip((there, here), kinds)]
        differences.append(("policy", *shown))
    for name in ("hidden_sizes", "conv_filters", "conv_kernel", "conv_stride", "conv_padding",
                 "lstm_size"):
        if name in settings[0] and name in settings[1]:  # a setting both networks have
            values = [s[name] for s in settings]
            if str(values[0]) != str(values[1]):
                differences.append((name.replace("_", "-"), *map(_sizes, values)))
    if "conv_filters" in settings[0] and there.activation != here.activation:
        # Not a variable's shape, but the weights were learned for the other function.
        differences.append(("activation", there.activation, here.activation))
    # gSDE's log std is a matrix, the plain Gaussian's a vector; running statistics and
    # the optimizer's slots are variables of the checkpoint too.
    return differences + _differing_flags(there, here, ("sde", *_STATISTICS_FLAGS, "optimizer"))


def _differing_flags(there: A3CConfig, here: A3CConfig,
                     flags: Sequence[str]) -> list[tuple[str, str, str]]:
    """(flag as typed, value there, value here) for each of `flags` the configs differ in."""
    differences = []
    for flag in flags:
        values = [str(getattr(c, flag)).lower() for c in (there, here)]
        if values[0] != values[1]:
            differences.append((flag.replace("_", "-"), *values))
    return differences


def _network_settings(config: A3CConfig, obs_shape: Sequence[int]) -> dict[str, object]:
    try:
        return network_settings(config, obs_shape)
    except ValueError:  # --policy cnn on vectors: no network, only the flags to compare
        return {"policy": config.policy, "hidden_sizes": tuple(config.hidden_sizes)}


def _sizes(sizes: Sequence[int] | int | str) -> str:
    return str(sizes) if isinstance(sizes, int | str) else ",".join(str(s) for s in sizes)


def check_logdir_config(logdir: str, config: A3CConfig, obs_shape: Sequence[int]) -> None:
    """CheckpointError if `logdir` holds checkpoints this run's network cannot restore,
    as far as its config.json tells (no TensorFlow, nothing written).

    A log dir without a `checkpoint` state file is fine (a fresh run, or one that never got
    to its first checkpoint: its config.json is simply rewritten). With one, the state file
    must be readable and name a checkpoint whose files are there, and config.json must
    describe the same network as `config` for the env's observations of `obs_shape`.
    Whether the checkpoint's files are intact is restorable_checkpoint's part (it needs TF).
    """
    state = read_checkpoint_state(logdir)
    if state is None:
        return
    if not any(checkpoint_files_exist(p) for p in state.all_paths):
        raise CheckpointError(
            f"the checkpoint state file {state.path} names {os.path.basename(state.newest)}, "
            "whose files are missing; use a new --logdir (or delete that state file to start "
            "this one afresh)")
    there = read_run_config(logdir)
    if there is None:  # written by the chief at its start: cannot tell, TF's check decides
        return
    differences = network_differences(there, config, obs_shape)
    if differences:
        flag, before, now = differences[0]
        statistics = {f.replace("_", "-"): "other running statistics" for f in _STATISTICS_FLAGS}
        what = {"optimizer": "another optimizer", **statistics}.get(flag, "a different network")
        raise CheckpointError(
            f"log dir {logdir} holds checkpoints of {what} (--{flag} {before} "
            f"there, {now} here); use a new --logdir, or --{flag} {before.split(' ')[0]} to "
            "go on with that run")

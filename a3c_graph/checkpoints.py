"""Is a log dir's checkpoint one this run can go on from? Checked before anything starts.

Two checks, one for each side of a run:

  * check_logdir_config (no TensorFlow: the launcher runs it before it writes a file) reads
    the <logdir>/config.json the chief wrote and the `checkpoint` state file, and refuses a
    run whose network flags would build other variables than the ones checkpointed there.
  * restorable_checkpoint (TensorFlow: the chief runs it after building its graph, before
    its session) opens the checkpoint the chief is about to restore with TF's checkpoint
    reader, reads every tensor (which verifies their checksums), and compares each variable
    the Saver restores (name, shape, dtype) with the checkpoint's.

The chief should write its config.json only once both have passed: a refused run must not
leave the log dir's config.json describing a network its checkpoints are not of.

Damage. A checkpoint whose files are missing, truncated or garbled is skipped for the
newest older one that is intact (the Saver keeps 3), with a warning that names the
damaged file; restore must then use the path returned (ChiefSessionCreator's
checkpoint_filename_with_path). That can lose more than one checkpoint interval, but
refusing to start would lose the whole run to a single bad file, and the user is told. The
damaged files are left where they are (never deleted here). Only when no checkpoint the
state file names is intact is it an error. A checkpoint of a different network is never
skipped: it is an error at once (the older checkpoints of that run are no better).

Every error is a CheckpointError (a ValueError) with one sentence for the user.
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from a3c_graph.core.config import A3CConfig, is_atari
from a3c_graph.core.network_spec import network_settings

CONFIG_FILE = "config.json"
STATE_FILE = "checkpoint"  # the Saver's checkpoint state file (a CheckpointState text proto)
# Variables whose first dimension is the number of workers (stats.EpisodeStats).
WORKER_ROWS_SCOPE = "episode_stats/"


class CheckpointError(ValueError):
    """A log dir or checkpoint this run cannot use: one sentence for the user."""


# --------------------------------------------------------------------------- no TensorFlow

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
    return os.path.isfile(prefix + ".index") and bool(_data_files(prefix))


def _data_files(prefix: str) -> list[str]:
    return sorted(glob.glob(glob.escape(prefix) + ".data-?????-of-?????"))


def network_differences(there: A3CConfig, here: A3CConfig,
                        obs_shape: Sequence[int]) -> list[tuple[str, str, str]]:
    """The settings that decide the network's variables and differ between two configs:
    (flag, value there, value here), most telling first.

    Variables follow from the env (observation shape, number of actions; ALE's
    --full-action-space changes the actions, --screen-size and --frame-stack the shape) and
    from the flags network_spec.network_settings names (the policy after `auto` is
    resolved), and --optimizer names the slots saved beside them; nothing else (learning
    rate, rollout length, envs per worker, ...) changes a variable's name or shape. A cnn
    torso's --activation is listed too: the same variables, learned for another function.
    `obs_shape` is the env's (both configs must name the same env for the rest to be
    compared).
    """
    if there.env != here.env:
        return [("env", there.env, here.env)]
    differences = []
    if is_atari(there.env):
        for flag in ("full_action_space", "screen_size", "frame_stack"):
            values = [str(getattr(c, flag)).lower() for c in (there, here)]
            if values[0] != values[1]:
                differences.append((flag.replace("_", "-"), *values))
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
    if there.optimizer != here.optimizer:  # its slots are variables of the checkpoint
        differences.append(("optimizer", there.optimizer, here.optimizer))
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
        what = "another optimizer" if flag == "optimizer" else "a different network"
        raise CheckpointError(
            f"log dir {logdir} holds checkpoints of {what} (--{flag} {before} "
            f"there, {now} here); use a new --logdir, or --{flag} {before.split(' ')[0]} to "
            "go on with that run")


# --------------------------------------------------------------------------- TensorFlow

@dataclass(frozen=True)
class VariableSpec:
    shape: tuple[int, ...]
    dtype: str  # e.g. "float32"


def saved_variables(saver_or_var_list) -> dict[str, VariableSpec]:
    """Checkpoint name -> shape and dtype of every variable a tf.compat.v1 Saver restores
    (or of a list of variables / a {name: variable} dict, as a Saver's var_list takes)."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    var_list = saver_or_var_list
    if isinstance(var_list, tf1.train.Saver):
        # A built Saver keeps its var_list; an unbuilt one (or one made from a saver_def)
        # saves what a Saver() of the default graph would.
        var_list = var_list._var_list  # noqa: SLF001 - no public accessor
        if var_list is None:
            var_list = tf1.global_variables() + tf1.get_collection(
                tf1.GraphKeys.SAVEABLE_OBJECTS)
    items = (var_list.items() if isinstance(var_list, Mapping)
             else ((variable.op.name, variable) for variable in var_list))
    specs = {}
    for name, variable in items:
        if not isinstance(variable, tf.Variable) or variable.shape.rank is None:
            raise TypeError(f"cannot check {name!r}: only variables of a known shape are "
                            f"supported, got {type(variable).__name__}")
        specs[name] = VariableSpec(tuple(variable.shape.as_list()),
                                   variable.dtype.base_dtype.name)
    return specs


class _Damaged(Exception):
    """A checkpoint whose files are missing or cannot be read: str() says which and why."""


def _tf_reason(error: Exception) -> str:
    text = str(getattr(error, "message", None) or error).strip()
    first = (text.splitlines() or [type(error).__name__])[0]
    return first if len(first) <= 160 else first[:157] + "..."


def _open_checkpoint(prefix: str) -> dict[str, VariableSpec]:
    """Name -> shape and dtype of every tensor in the checkpoint `prefix`, each read once so
    truncated or corrupt data shows up here and not in the middle of a restore; _Damaged
    for a checkpoint that cannot be read."""
    import tensorflow as tf

    index = prefix + ".index"
    if not os.path.isfile(index):
        raise _Damaged(f"checkpoint {prefix} is missing its index file {index}")
    data = _data_files(prefix)
    if not data:
        raise _Damaged(f"checkpoint {prefix} is missing its data file "
                       f"{prefix}.data-00000-of-00001")
    try:
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
        shapes = reader.get_variable_to_shape_map()
        dtypes = reader.get_variable_to_dtype_map()
    except Exception as error:  # noqa: BLE001 - TF raises many kinds for a garbled index
        raise _Damaged(f"checkpoint index file {index} is damaged ({_tf_reason(error)})") \
            from None
    for name in sorted(shapes):
        try:
            reader.get_tensor(name)
        except Exception as error:  # noqa: BLE001 - DataLoss, OutOfRange, ... all mean damage
            where = data[0] if len(data) == 1 else f"{prefix}.data-*"
            raise _Damaged(f"checkpoint data file {where} is damaged (reading {name}: "
                           f"{_tf_reason(error)})") from None
    return {name: VariableSpec(tuple(shapes[name]), dtypes[name].base_dtype.name)
            for name in shapes}


SAME_NETWORK_ADVICE = "use a new --logdir or the same network flags"


def _mismatch(prefix: str, there: Mapping[str, VariableSpec],
              here: Mapping[str, VariableSpec], strict: bool, subject: str,
              advice: str) -> str | None:
    """One sentence naming one variable that differs between the checkpoint `prefix` and the
    network that would restore it ("<subject> a different network (...); <advice>"), or
    None if they fit."""
    name = os.path.basename(prefix)
    for var in sorted(here):
        if var not in there:
            return (f"{subject} a different network ({var} "
                    f"{list(here[var].shape)} is not in {name}); {advice}")
        was, now = there[var], here[var]
        if was == now:
            continue
        if (var.startswith(WORKER_ROWS_SCOPE) and was.dtype == now.dtype and was.shape
                and now.shape and was.shape[1:] == now.shape[1:]):
            # stats.EpisodeStats keeps a row per worker: the cluster's size is checkpointed.
            return (f"{subject} a run with {was.shape[0]} worker(s), this "
                    f"one has {now.shape[0]} ({var} {list(was.shape)} there, "
                    f"{list(now.shape)} here); use a new --logdir or {was.shape[0]} worker(s)")
        return (f"{subject} a different network ({var} is {_show(was)} "
                f"there, {_show(now)} here); {advice}")
    extra = sorted(set(there) - set(here)) if strict else []
    if extra:
        return (f"{subject} a different network ({name} has {extra[0]} "
                f"{list(there[extra[0]].shape)}, which this network lacks); {advice}")
    return None


def _show(spec: VariableSpec) -> str:
    return f"{spec.dtype} {list(spec.shape)}"


def check_checkpoint(prefix: str, saver_or_var_list, strict: bool = False,
                     advice: str = SAME_NETWORK_ADVICE) -> None:
    """CheckpointError unless the checkpoint `prefix` is intact and holds every variable of
    `saver_or_var_list` with the same shape and dtype (strict: and no other variable)."""
    here = saved_variables(saver_or_var_list)
    try:
        there = _open_checkpoint(prefix)
    except _Damaged as damage:
        raise CheckpointError(str(damage)) from None
    problem = _mismatch(prefix, there, here, strict, f"checkpoint {prefix} is of", advice)
    if problem:
        raise CheckpointError(problem)


def _warn_on_stderr(message: str) -> None:
    print(f"a3c_graph: warning: {message}", file=sys.stderr, flush=True)


def restorable_checkpoint(logdir: str, saver, *, strict: bool = True,
                          warn: Callable[[str], None] | None = None,
                          advice: str = SAME_NETWORK_ADVICE,
                          restart_advice: bool = True) -> str | None:
    """The checkpoint prefix to restore `saver`'s variables from, or None if `logdir` has no
    checkpoint (a fresh start). Raises CheckpointError (one sentence) for a garbled state
    file, a checkpoint of a different network, or when no checkpoint is intact.

    The chief calls this after building its graph and before creating its session, and
    restores from the returned path: ChiefSessionCreator(checkpoint_filename_with_path=path)
    (not checkpoint_dir, which would pick the newest checkpoint even when it is damaged).
    A damaged newest checkpoint is skipped for the newest intact older one, with a warning
    through `warn` (default: a line on stderr) naming the damaged file. The Saver is told
    which checkpoints it keeps (recover_last_checkpoints, as a restore from checkpoint_dir
    would do), so it goes on deleting the oldest beyond max_to_keep; damaged ones are left
    on disk, untracked.

    strict: every variable in the checkpoint must be one the saver restores (the chief's
    Saver covers the whole graph); evaluate restores only the network: strict=False.
    advice: the end of the sentence for a checkpoint of a different network.
    restart_advice: end the sentence for "no intact checkpoint" with how to start afresh.
    """
    import tensorflow as tf

    state = read_checkpoint_state(logdir)
    if state is None:
        return None
    here = saved_variables(saver)
    damaged: list[str] = []
    for prefix in state.newest_first():
        try:
            there = _open_checkpoint(prefix)
        except _Damaged as damage:
            damaged.append(str(damage))
            continue
        problem = _mismatch(prefix, there, here, strict,
                            f"log dir {logdir} holds checkpoints of", advice)
        if problem:
            raise CheckpointError(problem)
        for damage in damaged:
            (warn or _warn_on_stderr)(f"{damage}; restoring the older checkpoint "
                                      f"{os.path.basename(prefix)} instead")
        if isinstance(saver, tf.compat.v1.train.Saver):
            # What recover_last_checkpoints does (which logs a deprecation warning): the
            # checkpoints up to this one, with their index file's mtime as their time.
            kept = state.all_paths[:state.all_paths.index(prefix) + 1]
            saver.set_last_checkpoints_with_time(
                [(p, os.path.getmtime(p + ".index")) for p in kept
                 if os.path.isfile(p + ".index")])
        return prefix
    older = f" (and {len(damaged) - 1} older one(s))" if len(damaged) > 1 else ""
    restart = (f"; use a new --logdir (or delete {state.path} to start this one afresh)"
               if restart_advice else "")
    raise CheckpointError(f"log dir {logdir} has no intact checkpoint: {damaged[0]}{older}"
                          f"{restart}")

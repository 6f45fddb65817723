"""A checkpoint's life: what is saved (build_saver), by whom and when (chief_checkpointing:
the chief, at its start, every --checkpoint-secs and at the end), what is restored, and
what is refused.

Refusals, one for each side of a run:

  * run_config.check_logdir_config (no TensorFlow: the launcher and the worker task run it
    before they write a file) reads the <logdir>/config.json the chief wrote and the
    `checkpoint` state file, and refuses a run whose network flags would build other
    variables than the ones checkpointed there.
  * restorable_checkpoint (the chief runs it after building its graph, before its session)
    opens the checkpoint the chief is about to restore with TF's checkpoint reader, reads
    every tensor (which verifies their checksums), and compares each variable the Saver
    restores (name, shape, dtype) with the checkpoint's.

The chief writes its config.json only once both have passed (chief_checkpointing): a
refused run must not leave the log dir's config.json describing a network its checkpoints
are not of.

Restore. The chief restores only when the ps no longer holds the globals (a new cluster);
a chief restarted beside a ps that kept running carries on from the ps, whose variables
are newer than any checkpoint (distributed/sessions.py, ChiefSessionCreator). Other workers
neither restore nor save.

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

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import tensorflow as tf

from a3c_graph.core.config import A3CConfig
from a3c_graph.rundir.progress import write_json_atomic
from a3c_graph.rundir.run_config import (
    CONFIG_FILE,
    CheckpointError,
    data_files,
    read_checkpoint_state,
)
from a3c_graph.system.cli import first_line

tf1 = tf.compat.v1
# Variables whose first dimension is the number of workers (stats.EpisodeStats).
WORKER_ROWS_SCOPE = "episode_stats/"
KEEP = 3  # checkpoints the Saver keeps; a damaged newest one falls back to an older one
NEVER_HOURS = 10_000.0  # the Saver's own default for keep_checkpoint_every_n_hours: none kept


def build_saver(keep_every_minutes: float = 0.0) -> tf1.train.Saver:
    """What a checkpoint holds: every global variable of the graph built so far (the
    network on the ps, its optimizers' slots and beta powers, global_step, the episode and
    observation statistics), so build it last. Not sharded: the chief fetches every variable
    and writes one checkpoint, so no ps needs the chief's filesystem.

    The newest KEEP checkpoints are kept; with keep_every_minutes (--keep-checkpoint-every-
    minutes), also, for good, one of those that fall out of them every that many minutes
    (the Saver's keep_checkpoint_every_n_hours), to evaluate the policy along the run."""
    hours = keep_every_minutes / 60.0 if keep_every_minutes > 0 else NEVER_HOURS
    return tf1.train.Saver(max_to_keep=KEEP, keep_checkpoint_every_n_hours=hours,
                           sharded=False, save_relative_paths=True)


def chief_checkpointing(logdir: str, config: A3CConfig, scaffold: tf1.train.Scaffold,
                        warn: Callable[[str], None]):
    """(the checkpoint to restore or None, the session's hooks), for the chief: the log
    dir's newest intact checkpoint if it fits the scaffold's Saver (CheckpointError if not),
    then config.json written (what evaluate and export need to rebuild this run's network),
    and the hook that saves every --checkpoint-secs and when the session ends. The restore
    itself is the chief's session creator's (distributed/sessions.py), from the path
    returned here, and only when the ps no longer holds the globals."""
    checkpoint = restorable_checkpoint(logdir, scaffold.saver, warn=warn)
    write_json_atomic(os.path.join(logdir, CONFIG_FILE), dataclasses.asdict(config))
    hooks = [tf1.train.CheckpointSaverHook(logdir, save_secs=config.checkpoint_secs,
                                           scaffold=scaffold)]
    return checkpoint, hooks


@dataclass(frozen=True)
class VariableSpec:
    shape: tuple[int, ...]
    dtype: str  # e.g. "float32"


def saved_variables(saver_or_var_list) -> dict[str, VariableSpec]:
    """Checkpoint name -> shape and dtype of every variable a tf.compat.v1 Saver restores
    (or of a list of variables / a {name: variable} dict, as a Saver's var_list takes)."""
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
    return first_line(error, limit=160)


def _open_checkpoint(prefix: str) -> dict[str, VariableSpec]:
    """Name -> shape and dtype of every tensor in the checkpoint `prefix`, each read once so
    truncated or corrupt data shows up here and not in the middle of a restore; _Damaged
    for a checkpoint that cannot be read."""
    index = prefix + ".index"
    if not os.path.isfile(index):
        raise _Damaged(f"checkpoint {prefix} is missing its index file {index}")
    data = data_files(prefix)
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
        if isinstance(saver, tf1.train.Saver):
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

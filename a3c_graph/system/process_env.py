"""What a process sets in its environment before it first imports TensorFlow.

Both settings are defaults: a value the user exported wins. A program sets them for good at
its start (before_tf_import); a function that may run inside someone else's process (the
Slurm resolver, evaluate.main called from Python) sets them only while it runs
(set_while_running), so the caller's environment is left as it was.

* TF_CPP_MIN_LOG_LEVEL=2: TF's C++ start-up lines (CPU features, CUDA probing) stay off
  stderr, where a task's one-line errors go.
* TF_USE_LEGACY_KERAS=1: `import tensorflow` (2.21) loads all of Keras 3, matplotlib
  included, so that Keras's optimizers register for SavedModel, a large part of every
  process's start-up (benchmarks/PERFORMANCE.md). Nothing here uses Keras. The variable
  points tf.keras at the separate tf_keras package instead; it is not a dependency, so TF
  skips the load and tf.keras would fail if anything used it.
* TF_ENABLE_ONEDNN_OPTS=1: TF 2.21's pip build leaves oneDNN's fused CPU kernels off here,
  and its plain Conv2D, bias add, ELU and layout transposes are most of an Atari agent
  step's network cost; with them on, a worker's convolutions run as one fused oneDNN op
  and a Pong worker trains about 1.5x as fast (benchmarks/PERFORMANCE.md, issue 38).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping

DEFAULTS = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1",
            "TF_ENABLE_ONEDNN_OPTS": "1"}


def before_tf_import(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set DEFAULTS in `environ` where the user did not; call it before TF is imported."""
    for name, value in DEFAULTS.items():
        environ.setdefault(name, value)


@contextlib.contextmanager
def set_while_running(defaults: Mapping[str, str] = DEFAULTS,
                      environ: MutableMapping[str, str] = os.environ) -> Iterator[None]:
    """`defaults` set in `environ` where the user did not, while the block runs; afterwards
    the names it added are gone again."""
    added = [name for name in defaults if name not in environ]
    for name in added:
        environ[name] = defaults[name]
    try:
        yield
    finally:
        for name in added:
            environ.pop(name, None)


@contextlib.contextmanager
def stderr_to_devnull() -> Iterator[None]:
    """File descriptor 2 on /dev/null while the block runs: TF's C++ runtime writes lines such
    as "failed call to cuInit" (a machine without a GPU) there when a session first starts,
    which TF_CPP_MIN_LOG_LEVEL=2 keeps, as it keeps every error. Errors that matter are
    raised as Python exceptions, shown once the descriptor is back. One block at a time (the
    descriptor is the process's: evaluate's models start sessions from several threads)."""
    with _STDERR_LOCK:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with open(os.devnull, "wb") as devnull:
                os.dup2(devnull.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


_STDERR_LOCK = threading.Lock()


def import_tensorflow_quietly():
    """`import tensorflow` in a process that may still have to end in a one-line error.

    On import, TF's C++ runtime writes lines such as "WARNING: All log messages before
    absl::InitializeLog() is called are written to STDERR" straight to file descriptor 2,
    before absl logging is set up, so TF_CPP_MIN_LOG_LEVEL cannot silence them. Only
    --cluster slurm needs TF before its last user check (TF's SlurmClusterResolver names
    the cluster); its import runs with descriptor 2 on /dev/null. A failed import still
    raises its Python exception, shown once the descriptor is back.
    """
    with stderr_to_devnull(), set_while_running():
        import tensorflow as tf
    return tf


def graph_mode_tensorflow():
    """`import tensorflow` for a graph-mode program, once its flags are checked: DEFAULTS set
    for good (before_tf_import), eager execution off. The commands call it before they
    import the modules that use TF (docs/architecture.md, "Where the heavy imports load")."""
    before_tf_import()
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    return tf

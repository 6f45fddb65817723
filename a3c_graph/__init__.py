"""A3C on TensorFlow's tf.compat.v1 graph API over a real ps/worker cluster.

The Python API (a3c_graph/api.py), for a notebook or a sweep script::

    import a3c_graph
    summary = a3c_graph.train(env="CartPole-v1", workers=2, logdir="runs/cartpole")
    returns = a3c_graph.evaluate("runs/cartpole", episodes=10).returns
    a3c_graph.export("runs/cartpole", "exported/cartpole")  # a SavedModel plain TF loads

The commands are thin layers over the same code: ``scripts/launch_cluster.sh`` (or
``python -m a3c_graph.launch``), ``python -m a3c_graph.evaluate``, ``python -m a3c_graph.export``,
``python -m a3c_graph.worker``.

Importing this package imports nothing else: the names below load on first use, so a worker
task can set its TF environment before TF loads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from a3c_graph.api import RunFailed, evaluate, export, train
    from a3c_graph.core.config import A3CConfig

__all__ = ["A3CConfig", "RunFailed", "evaluate", "export", "train"]

_LAZY = {"train": "a3c_graph.api", "evaluate": "a3c_graph.api", "export": "a3c_graph.api",
         "RunFailed": "a3c_graph.api",
         "A3CConfig": "a3c_graph.core.config"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'a3c_graph' has no attribute {name!r}")

    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

"""Whole networks across tasks in one message per ps task, not one per variable.

TF's distributed runtime moves every tensor that crosses from one task to another as a
RecvTensor RPC of its own. A3C crosses with a whole network twice per rollout: the sync
reads every global variable from the ps, and the update sends one gradient per variable
back. pulled() and pushed() pack those into one flat tensor per ps task (concatenated on
the sending side, split on the receiving side), so a rollout costs the ps a couple of RPCs
instead of two per variable. benchmarks/PERFORMANCE.md has what this saved.

The variables of one call share a dtype (float32 networks); the pieces come back in the
order of `variables`, with their shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf


def _by_device(variables: Sequence) -> dict[str, list[int]]:
    """Indices of `variables`, grouped by the device each lives on (in first-seen order)."""
    groups: dict[str, list[int]] = {}
    for i, variable in enumerate(variables):
        groups.setdefault(variable.device, []).append(i)
    return groups


def _flat(tensors: Sequence) -> tf.Tensor:
    return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)


def _split_like(flat: tf.Tensor, like: Sequence) -> list[tf.Tensor]:
    shapes = [v.shape.as_list() for v in like]
    sizes = [math.prod(shape) for shape in shapes]
    return [tf.reshape(piece, shape) for piece, shape in zip(tf.split(flat, sizes), shapes)]


def pulled(variables: Sequence) -> list[tf.Tensor]:
    """The values of `variables` (on ps tasks), packed on each variable's device and
    unpacked under the caller's device scope."""
    values: list = [None] * len(variables)
    for device, indices in _by_device(variables).items():
        group = [variables[i] for i in indices]
        with tf.device(device):
            packed = _flat([v.read_value() for v in group])
        for i, value in zip(indices, _split_like(packed, group)):
            values[i] = value
    return values


def pushed(tensors: Sequence, variables: Sequence) -> list[tf.Tensor]:
    """`tensors` (one per variable, made on this worker), packed under the caller's device
    scope and unpacked on each variable's device, where an optimizer applies them."""
    values: list = [None] * len(variables)
    for device, indices in _by_device(variables).items():
        group = [variables[i] for i in indices]
        packed = _flat([tensors[i] for i in indices])
        with tf.device(device):
            for i, value in zip(indices, _split_like(packed, group)):
                values[i] = value
    return values

"""Tensors across tasks in one message, not one per tensor.

TF's distributed runtime moves every tensor that crosses from one task to another as a
RecvTensor RPC of its own, and a control dependency that crosses tasks costs one as well.
A learner's step crosses twice: the gradients (and the rollout's finished episodes) go to
the ps, the updated globals (and the cluster's counters) come back. moved() packs a list of
tensors into one flat float32 tensor on the sending task and unpacks it on the receiving
one, so each of those crossings is one RPC per ps task (benchmarks/PERFORMANCE.md has what
that saved). pulled() is moved() for the values of variables spread over ps tasks.

Any dtype of 4 or 8 bytes travels bit for bit (bitcast to float32 and back); bool travels
as 0.0/1.0. Every tensor needs a static shape except the last, which may be a 1-D tensor of
any length (a rollout's finished episodes).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence

import tensorflow as tf

CARRIER = tf.float32


def devices_of(variables: Sequence) -> dict[str, list[int]]:
    """Indices of `variables`, grouped by the device each lives on (in first-seen order)."""
    groups: dict[str, list[int]] = {}
    for i, variable in enumerate(variables):
        groups.setdefault(variable.device, []).append(i)
    return groups


def _device(name: str | None):
    """tf.device(name), or the caller's device scope left as it is for None."""
    return tf.device(name) if name is not None else contextlib.nullcontext()


def _to_carrier(tensor: tf.Tensor) -> tf.Tensor:
    """`tensor` as a flat float32 tensor holding its bits (bool: 0.0/1.0)."""
    if tensor.dtype == tf.bool:
        tensor = tf.cast(tensor, CARRIER)
    elif tensor.dtype != CARRIER:
        if tensor.dtype.size not in (4, 8):
            raise TypeError(f"cannot move a {tensor.dtype.name} tensor: 4- or 8-byte dtypes only")
        tensor = tf.bitcast(tensor, CARRIER)
    return tf.reshape(tensor, [-1])


def _from_carrier(flat: tf.Tensor, dtype: tf.DType, shape: list) -> tf.Tensor:
    if dtype == tf.bool:
        return tf.reshape(flat, shape) > 0.5
    if dtype == CARRIER:
        return tf.reshape(flat, shape)
    if dtype.size == 8:  # two float32s per element
        return tf.bitcast(tf.reshape(flat, [*shape, 2]), dtype)
    return tf.bitcast(tf.reshape(flat, shape), dtype)


def _carrier_size(dtype: tf.DType, shape: list) -> int:
    """float32s that carry a `dtype` tensor of `shape`; -1 for a length known only later."""
    if None in shape:
        return -1
    return math.prod(shape) * (2 if dtype.size == 8 else 1)


def moved(tensors: Sequence[tf.Tensor], source: str | None = None,
          destination: str | None = None) -> list[tf.Tensor]:
    """`tensors` packed into one tensor on `source` and unpacked on `destination` (None: the
    caller's device scope), each with its own dtype and shape."""
    shapes = [t.shape.as_list() for t in tensors]
    *fixed, last = shapes
    if any(None in shape for shape in fixed) or (None in last and len(last) != 1):
        raise ValueError(f"moved() needs static shapes, except a 1-D last tensor: {shapes}")
    sizes = [_carrier_size(t.dtype, shape) for t, shape in zip(tensors, shapes)]
    with _device(source):
        packed = tf.concat([_to_carrier(t) for t in tensors], axis=0)
    with _device(destination):
        pieces = tf.split(packed, sizes) if len(tensors) > 1 else [packed]
        return [_from_carrier(piece, t.dtype, [-1] if size == -1 else shape)
                for piece, t, shape, size in zip(pieces, tensors, shapes, sizes)]


def in_variable_order(groups: dict[str, list[int]], pieces: dict[str, list]) -> list:
    """One value per variable, in the variables' order: `pieces[device]` starts with the
    values of the variables `groups[device]` names (devices_of), in that order; anything
    after them is not a variable's."""
    values: list = [None] * sum(len(indices) for indices in groups.values())
    for device, indices in groups.items():
        for i, value in zip(indices, pieces[device]):
            values[i] = value
    return values


def pulled(variables: Sequence) -> list[tf.Tensor]:
    """The values of `variables` (on ps tasks), one message from each ps task, unpacked
    under the caller's device scope."""
    groups = devices_of(variables)
    pieces = {}
    for device, indices in groups.items():
        with tf.device(device):
            reads = [variables[i].read_value() for i in indices]
        pieces[device] = moved(reads, source=device)
    return in_variable_order(groups, pieces)

"""Tensors moved between tasks in one message: each arrives whole, with its own dtype and shape.

Two CPU devices of one process stand in for two tasks (a worker and a ps), as the variables
of two ps tasks; a real cluster moving them is in test_worker_command.py and test_devices.py.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from a3c_graph.distributed import transfer

tf1 = tf.compat.v1


def test_packed_transfers_give_every_tensor_its_own_values_dtype_and_shape():
    # Variables spread over two devices (standing in for two ps tasks) in interleaved order,
    # as replica_device_setter places them: each comes back whole and in place. moved()
    # carries counters bit for bit (float64, int64 beyond float32's 24 bits), a flag, and a
    # last tensor whose length is known only when it runs.
    shapes = [[3, 2], [2], [4, 1, 2], [], [5]]
    rng = np.random.default_rng(0)
    values = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
    counters = np.array([1e15 + 3, np.nan, -0.1], np.float64)
    big = np.array([2**53 + 1, -7], np.int64)
    with tf.Graph().as_default():
        variables = []
        for i, value in enumerate(values):
            with tf1.device(f"/device:CPU:{i % 2}"):
                variables.append(tf1.get_variable(f"v{i}", initializer=value))
        pulled = transfer.pulled(variables)
        finished = tf1.placeholder(tf.float32, [None])
        outgoing = [tf.constant(counters), tf.constant(big), tf.constant(True),
                    tf.constant(values[0]), finished]
        arrived = transfer.moved(outgoing, source="/device:CPU:0", destination="/device:CPU:1")
        assert len({p.op.inputs[0].op.name for p in pulled}) == 2  # one message per device
        assert {a.device for a in arrived} == {"/device:CPU:1"}
        assert [a.dtype for a in arrived] == [t.dtype for t in outgoing]
        config = tf1.ConfigProto(device_count={"CPU": 2})
        with tf1.Session(config=config) as session:
            session.run(tf1.global_variables_initializer())
            got_pulled = session.run(pulled)
            for length in (0, 3):
                got = session.run(arrived, {finished: np.arange(length, dtype=np.float32)})
                np.testing.assert_array_equal(got[0], counters)  # NaN where NaN
                np.testing.assert_array_equal(got[1], big)
                assert got[2].dtype == bool and got[2]
                np.testing.assert_array_equal(got[3], values[0])
                np.testing.assert_array_equal(got[4], np.arange(length, dtype=np.float32))
    for value, got in zip(values, got_pulled):
        np.testing.assert_array_equal(got, value)

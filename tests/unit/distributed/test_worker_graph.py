"""worker_graph.py: where a worker's graph puts the globals and its own ops, and what it
sends between tasks. One update through real ps tasks, and a resume, are
tests/cluster/test_worker_graph_cluster.py's; the learner's math is test_learner.py's; the
whole learner on a bandit through the launcher is tests/e2e/test_learns.py's.
"""

from __future__ import annotations

import pytest
import tensorflow as tf

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvBatch, env_info
from a3c_graph.distributed import ps_update, worker_graph
from a3c_graph.distributed.cluster import TaskSpec

# ---------------------------------------------------------------------------------------------
# Placement.
# ---------------------------------------------------------------------------------------------

def test_globals_live_on_the_ps_and_the_local_copy_on_its_worker():
    spec = TaskSpec(cluster={"ps": ["127.0.0.1:1", "127.0.0.1:2"],
                             "worker": ["127.0.0.1:3", "127.0.0.1:4"]}, job="worker", task=1)
    config = A3CConfig(envs_per_worker=2, rollout_length=4)
    batch = EnvBatch("CartPole-v1", 2, seed=0)
    with tf.Graph().as_default() as graph:
        built = worker_graph.build_worker_graph(config, spec, env_info("CartPole-v1"), [batch])
        global_vars = tf.compat.v1.global_variables()
        local_vars = tf.compat.v1.local_variables()
        queue_ops = [op for op in graph.get_operations() if op.type == "FIFOQueueV2"]
    batch.close()

    network = built.global_network.variables
    slots = [v for v in global_vars if "Adam" in v.name]
    assert network and slots
    for var in global_vars:
        assert var.device.startswith("/job:ps/task:"), (var.name, var.device)
    # Round-robin over both ps tasks.
    assert {v.device.split("/")[2] for v in network} == {"task:0", "task:1"}
    assert {v.name.split("/", 1)[1] for v in local_vars if v.name.startswith("local/")} == \
        {v.name.split("/", 1)[1] for v in network}
    for var in local_vars:
        assert var.device.startswith("/job:worker/task:1"), (var.name, var.device)
    assert queue_ops and all(op.device.startswith("/job:worker/task:1") for op in queue_ops)


def _ps_task(device: str) -> str | None:
    spec = tf.compat.v1.DeviceSpec.from_string(device)
    return f"ps:{spec.task}" if spec.job == "ps" else None


@pytest.mark.parametrize("policy", ["mlp", "cnn", "lstm"])
def test_an_update_sends_nothing_from_one_ps_task_to_another(policy):
    # Every edge between two ps tasks is a RecvTensor RPC per update on top of the worker's
    # one message each way (a shared optimizer's beta powers and learning rate, statistics
    # spread by the device setter made 22 of them for the MLP on 2 ps tasks).
    spec = TaskSpec(cluster={"ps": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"],
                             "worker": ["127.0.0.1:4"]}, job="worker", task=0)
    env = "MinAtar/Breakout-v1" if policy != "mlp" else "CartPole-v1"
    config = A3CConfig(env=env, envs_per_worker=2, rollout_length=4, policy=policy)
    batch = EnvBatch(env, 2, seed=0)
    with tf.Graph().as_default() as graph:
        worker_graph.build_worker_graph(config, spec, env_info(env), [batch])
        ops = graph.get_operations()
    batch.close()

    crossings = []
    for op in ops:
        here = _ps_task(op.device)
        if here is None:
            continue
        for source in [t.op for t in op.inputs] + list(op.control_inputs):
            there = _ps_task(source.device)
            if there is not None and there != here:
                crossings.append(f"{source.name} ({there}) -> {op.name} ({here})")
    assert {_ps_task(op.device) for op in ops} >= {"ps:0", "ps:1", "ps:2"}
    assert not crossings, "\n".join(crossings[:10])


def test_one_ps_task_keeps_the_optimizer_names_checkpoints_were_written_with():
    spec = TaskSpec(cluster={"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
                    job="worker", task=0)
    config = A3CConfig(envs_per_worker=2, rollout_length=4)
    batch = EnvBatch("CartPole-v1", 2, seed=0)
    with tf.Graph().as_default():
        built = worker_graph.build_worker_graph(config, spec, env_info("CartPole-v1"), [batch])
        names = {v.op.name for v in tf.compat.v1.global_variables()}
    batch.close()

    assert {"beta1_power", "beta2_power", "global_step"} <= names
    for variable in built.global_network.variables:
        assert {f"{variable.op.name}/Adam", f"{variable.op.name}/Adam_1"} <= names


# ---------------------------------------------------------------------------------------------
# The gradient pool (--rollouts-per-update).
# ---------------------------------------------------------------------------------------------

def test_a_pool_of_three_applies_the_mean_of_the_rollouts_that_count_and_only_those():
    """k = 3 in one process: a rollout at a learning rate of 0 neither counts nor adds its
    gradient nor applies anything, even where the count stands at a multiple of k (the TF2
    holder skips it too); the third rollout that counts applies the mean of the three, and
    the pool is empty after it."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        weight = tf.compat.v1.Variable([0.0, 0.0], use_resource=True)
        pool = ps_update.GradientPool([weight], ps_task=0)
        gradient = tf.compat.v1.placeholder(tf.float32, [2])
        counts = tf.compat.v1.placeholder(tf.bool, [])
        applied_mean = tf.compat.v1.Variable([-1.0, -1.0], use_resource=True)
        update, filled = pool.apply_when_full(
            pool.add([gradient], counts), counts, 3,
            lambda mean: tf.group(applied_mean.assign(mean[0])))
        applied, fills = [], []
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(pool.initialized())
        for value, counted in [([5.0, 5.0], False), ([1.0, 2.0], True), ([100.0, 100.0], False),
                               ([2.0, 4.0], True), ([3.0, 6.0], True), ([7.0, 7.0], False)]:
            fills.append(bool(session.run([update, filled],
                                          {gradient: value, counts: counted})[1]))
            applied.append(session.run(applied_mean).tolist())
        # An apply of the empty pool would write its mean, [0, 0]: the first and last
        # rollouts, at a count of 0 and of 3, apply nothing.
        assert applied == [[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0], [2.0, 4.0],
                           [2.0, 4.0]]
        # Only the rollout that applied says it filled the pool (its worker then counts
        # one global step as its own, not another worker's).
        assert fills == [False, False, False, False, True, False]
        assert session.run(pool.count) == 3
        assert session.run(pool.sums[0]).tolist() == [0.0, 0.0]

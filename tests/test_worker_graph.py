"""worker_graph.py: where a worker's graph puts the globals and its own ops, and what it
sends between tasks; and the whole learner, end to end through the launcher on a bandit. One
update through real ps tasks, and a resume, are in test_worker_graph_cluster.py; the
learner's math is test_learner.py's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, run_launcher

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvBatch, env_info
from a3c_graph.distributed import worker_graph
from a3c_graph.distributed.cluster import TaskSpec
from tests import ground_truth
from tests.bandit_env import PAYING_ARM

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


# The launcher on a two-armed bandit: a few thousand one-step episodes, so that a sign error
# anywhere between the loss and the ps's update (the loss, the gradients, their transfer, Adam
# on the globals, the refresh of the local copy) fails the suite, not just a benchmark.
BANDIT_STEPS = 4096  # 128 updates of 4 steps x 8 envs; the budget is what stops the run
BANDIT_FLAGS = ["--env", "tests.bandit_env:Bandit-v0", "--workers", "1",
                "--max-steps", str(BANDIT_STEPS), "--rollout-length", "4", "--envs-per-worker", "8",
                # Larger steps than the default 1e-3, which in one trial had arm 1 at only
                # p = 0.93 after 64 updates: too close to the verdict's threshold.
                "--learning-rate", "3e-3",
                # Adam scaled to the gradient's size: with the cartpole preset's epsilon of 0.1
                # a bandit's small gradients take damped steps (mean return 0.66 at the budget).
                "--adam-epsilon", "1e-5", "--normalize-advantages", "true",
                "--target-return", "inf",  # no early stop: the last 100 episodes of the budget
                "--max-seconds", "240"]  # a safety net only; the step budget ends the run


@pytest.mark.e2e
def test_the_launcher_learns_to_pull_the_paying_arm_of_a_two_armed_bandit(tmp_path):
    logdir = tmp_path / "run"
    # The env's module is this repository's tests/ package: importable as a user's own would be.
    result = run_launcher(*BANDIT_FLAGS, logdir=logdir, timeout=300, cwd=tmp_path,
                          PYTHONPATH=str(REPO))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["stop_reason"] == "max_steps", summary
    # A random policy gets 0.5 (+-0.05 over 100 episodes), the wrong arm 0.
    assert summary["mean_return_100"] >= 0.9, summary

    # The policy the chief saved last pulls the paying arm.
    reader = tf.train.load_checkpoint(str(logdir))
    weights = {name.split("/", 1)[1]: reader.get_tensor(name)
               for name in reader.get_variable_to_shape_map()
               if name.startswith("global/") and "Adam" not in name}
    logits, _ = ground_truth.mlp_forward(weights, np.ones((1, 1)))
    probabilities = ground_truth.softmax(logits[0])
    assert probabilities[PAYING_ARM] > 0.95, probabilities

"""The memory estimate the launcher checks before it starts anything (a3c_graph.memory).

The parameter count is checked against the networks model.py really builds; the rest of the
estimate against sums worked out by hand for CartPole's default network.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from a3c_graph import memory
from a3c_graph.config import A3CConfig
from a3c_graph.envs import EnvInfo
from a3c_graph.model import build_network

CARTPOLE = EnvInfo(env_id="CartPole-v1", obs_shape=(4,), obs_dtype=np.dtype(np.float32),
                   num_actions=2, reward_threshold=475.0, max_episode_steps=500)
# CartPole's default network: two tanh towers 4 -> 64 -> 64, then 2 logits or 1 value.
CARTPOLE_PARAMETERS = (4 * 64 + 64) * 2 + (64 * 64 + 64) * 2 + (64 * 2 + 2) + (64 + 1)

NETWORKS = {
    "mlp": (A3CConfig(hidden_sizes=(3, 5)), (4,), 2),
    "mlp of an image": (A3CConfig(policy="mlp"), (2, 6, 6), 3),
    "cnn, atari": (A3CConfig(hidden_sizes=(256,)), (4, 42, 42), 6),
    "cnn, minatar": (A3CConfig(conv_filters=(16,), conv_stride=1, hidden_sizes=(128,)),
                     (4, 10, 10), 3),
    "cnn of one channel": (A3CConfig(conv_filters=(8, 4), conv_stride=3), (13, 11), 2),
    "lstm, mlp torso": (A3CConfig(policy="lstm", lstm_size=7), (4,), 2),
    "lstm, cnn torso": (A3CConfig(policy="lstm", lstm_size=5, conv_filters=(4,)), (3, 9, 9), 4),
}


@pytest.mark.parametrize("case", sorted(NETWORKS))
def test_the_parameter_count_is_that_of_the_network_model_builds(case):
    config, obs_shape, num_actions = NETWORKS[case]
    with tf.Graph().as_default():
        network = build_network(obs_shape, num_actions, config, "global")
        built = sum(int(np.prod(v.shape)) for v in network.variables)
    assert memory.parameter_count(config, obs_shape, num_actions) == built


def test_the_estimate_of_cartpoles_default_cluster_adds_up():
    need = memory.estimate(A3CConfig(), CARTPOLE, ps_here=1, workers_here=2, num_ps=1)
    network = CARTPOLE_PARAMETERS * 4
    # T x B observations of 16 bytes, s_t and s_{t+1}: 2 queued, 1 being filled.
    rollouts = 32 * 8 * 16 * 2 * (2 + 1)
    envs = 8 * memory.CLASSIC_ENV_BYTES
    assert need.parameters == CARTPOLE_PARAMETERS
    assert need.parts() == {
        "TF processes": 3 * memory.TASK_BASE_BYTES,
        "network copies": 3 * network + 2 * 2 * network,  # globals + Adam; local + gradients
        "rollouts": 2 * rollouts,
        "envs": 2 * envs,
    }
    assert need.total == sum(need.parts().values())
    assert need.per_worker == memory.TASK_BASE_BYTES + 2 * network + rollouts + envs
    assert need.largest_part() == "TF processes"


def test_acting_only_keeps_one_copy_of_the_network_per_task():
    need = memory.estimate(A3CConfig(learn=False), CARTPOLE, ps_here=1, workers_here=2,
                           num_ps=1)
    assert need.parts()["network copies"] == 3 * CARTPOLE_PARAMETERS * 4


def test_the_ps_tasks_share_the_globals():
    both = memory.estimate(A3CConfig(), CARTPOLE, ps_here=2, workers_here=0, num_ps=2)
    one = memory.estimate(A3CConfig(), CARTPOLE, ps_here=1, workers_here=0, num_ps=2)
    assert both.ps_network == 3 * CARTPOLE_PARAMETERS * 4
    assert one.ps_network == both.ps_network // 2


def test_atari_envs_cost_more_than_classic_ones():
    pong = dataclasses.replace(CARTPOLE, env_id="ALE/Pong-v5", obs_shape=(4, 42, 42),
                               obs_dtype=np.dtype(np.uint8), num_actions=6)
    need = memory.estimate(A3CConfig(envs_per_worker=4, actor_threads=2), pong, 0, 1, 1)
    assert need.worker_envs == 2 * 4 * memory.ATARI_ENV_BYTES
    # uint8 frames: one byte a pixel; 2 rollouts queued and one being filled by each thread.
    assert need.worker_rollouts == 32 * 4 * (4 * 42 * 42) * 2 * (2 + 2)


def test_workers_that_fit_leave_room_for_the_ps():
    need = memory.estimate(A3CConfig(), CARTPOLE, ps_here=1, workers_here=5000, num_ps=1)
    available = 20 * 10**9
    fit = need.workers_that_fit(available)
    ps = memory.TASK_BASE_BYTES + need.ps_network
    assert ps + fit * need.per_worker <= available < ps + (fit + 1) * need.per_worker
    assert need.workers_that_fit(ps - 1) == 0


@pytest.mark.parametrize("count, shown", [
    (0, "0 MB"), (456_400_000, "456 MB"), (12_345_000_000, "12.3 GB"),
    (2_901_300_000_000, "2,901.3 GB"),
])
def test_sizes_are_shown_in_decimal_units(count, shown):
    assert memory.describe_bytes(count) == shown

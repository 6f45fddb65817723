"""The memory estimate the launcher checks before it starts anything (a3c_graph.launcher.resources).

The estimate against sums worked out by hand for CartPole's default network (the parameter
count is network_spec.py's, checked against the networks model.py builds in
test_network_spec.py).
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest

from a3c_graph.core import network_spec
from a3c_graph.core.action_space import ActionSpace
from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvInfo
from a3c_graph.launcher import resources

CARTPOLE = EnvInfo(env_id="CartPole-v1", obs_shape=(4,), obs_dtype=np.dtype(np.float32),
                   actions=ActionSpace(2), reward_threshold=475.0, max_episode_steps=500)
# CartPole's default network: two tanh towers 4 -> 64 -> 64, then 2 logits or 1 value.
CARTPOLE_PARAMETERS = (4 * 64 + 64) * 2 + (64 * 64 + 64) * 2 + (64 * 2 + 2) + (64 + 1)

def test_the_estimate_of_cartpoles_default_cluster_adds_up():
    need = resources.estimate(A3CConfig(), CARTPOLE, ps_here=1, workers_here=2, num_ps=1)
    network = CARTPOLE_PARAMETERS * 4
    # T x B observations of 16 bytes, s_t and s_{t+1}: 2 queued, 1 being filled.
    rollouts = 32 * 8 * 16 * 2 * (2 + 1)
    envs = 8 * resources.CLASSIC_ENV_BYTES
    # s_t and s_{t+1} of T x B in one pass through both towers: 64 + 64 each, 2 logits, 1 value.
    activations = 2 * 32 * 8 * (2 * (64 + 64) + 2 + 1) * 4
    assert need.parameters == CARTPOLE_PARAMETERS
    assert need.parts() == {
        "TF processes": 3 * resources.TASK_BASE_BYTES,
        "network copies": 3 * network + 2 * 2 * network,  # globals + Adam; local + gradients
        "rollouts": 2 * rollouts,
        "envs": 2 * envs,
        "activations": 2 * activations,
    }
    assert need.total == sum(need.parts().values())
    assert need.per_worker == (resources.TASK_BASE_BYTES + 2 * network + rollouts + envs
                               + activations)
    assert need.largest_part() == "TF processes"
    # 1 intra-op and 2 inter-op threads in each of the 3 tasks, one actor in each worker.
    assert need.threads == 3 * (resources.TASK_BASE_THREADS + 1 + 2) + 2 * 1


def test_acting_only_keeps_one_copy_of_the_network_per_task_and_no_learners_activations():
    need = resources.estimate(A3CConfig(learn=False), CARTPOLE, ps_here=1, workers_here=2,
                           num_ps=1)
    assert need.parts()["network copies"] == 3 * CARTPOLE_PARAMETERS * 4
    assert need.parts()["activations"] == 0


def test_the_ps_tasks_share_the_globals():
    both = resources.estimate(A3CConfig(), CARTPOLE, ps_here=2, workers_here=0, num_ps=2)
    one = resources.estimate(A3CConfig(), CARTPOLE, ps_here=1, workers_here=0, num_ps=2)
    assert both.ps_network == 3 * CARTPOLE_PARAMETERS * 4
    assert one.ps_network == both.ps_network // 2


def test_atari_envs_cost_more_than_classic_ones():
    pong = dataclasses.replace(CARTPOLE, env_id="ALE/Pong-v5", obs_shape=(4, 42, 42),
                               obs_dtype=np.dtype(np.uint8), actions=ActionSpace(6))
    need = resources.estimate(A3CConfig(envs_per_worker=4, actor_threads=2), pong, 0, 1, 1)
    assert need.worker_envs == 2 * 4 * resources.ATARI_ENV_BYTES
    # uint8 frames: one byte a pixel; 2 rollouts queued and one being filled by each thread.
    assert need.worker_rollouts == 32 * 4 * (4 * 42 * 42) * 2 * (2 + 2)


def test_workers_that_fit_leave_room_for_the_ps():
    need = resources.estimate(A3CConfig(), CARTPOLE, ps_here=1, workers_here=5000, num_ps=1)
    available = 20 * 10**9
    fit = need.workers_that_fit(available)
    ps = resources.TASK_BASE_BYTES + need.ps_network
    assert ps + fit * need.per_worker <= available < ps + (fit + 1) * need.per_worker
    assert need.workers_that_fit(ps - 1) == 0


@pytest.mark.parametrize("count, shown", [
    (0, "0 bytes"), (110_000, "110 kB"), (456_400_000, "456 MB"), (12_345_000_000, "12.3 GB"),
    (2_901_300_000_000, "2,901.3 GB"),
])
def test_sizes_are_shown_in_decimal_units(count, shown):
    assert resources.describe_bytes(count) == shown


PONG = dataclasses.replace(CARTPOLE, env_id="ALE/Pong-v5", obs_shape=(4, 42, 42),
                           obs_dtype=np.dtype(np.uint8), actions=ActionSpace(6))


@pytest.mark.parametrize("config, obs_shape, actions, count", [
    # Two tanh towers of 3 and 5 units, then 2 logits and 1 value.
    (A3CConfig(hidden_sizes=(3, 5)), (4,), 2, 2 * (3 + 5) + 2 + 1),
    # The frames as floats, four 3x3 stride-2 SAME convolutions of 32 (42 -> 21, 11, 6, 3),
    # 256 units, 6 logits, 1 value.
    (A3CConfig(hidden_sizes=(256,)), (4, 42, 42), 6,
     4 * 42 * 42 + 32 * (21 * 21 + 11 * 11 + 6 * 6 + 3 * 3) + 256 + 6 + 1),
    # The mlp torso, then an LSTM of 7: four gates, cell and output.
    (A3CConfig(policy="lstm", hidden_sizes=(9,), lstm_size=7), (4,), 2, 9 + 6 * 7 + 2 + 1),
], ids=["mlp", "cnn", "lstm"])
def test_the_activations_are_each_layers_output_for_one_observation(config, obs_shape,
                                                                     actions, count):
    assert network_spec.activation_count(config, obs_shape, actions) == count


def test_the_learner_takes_a_whole_rollout_and_the_mlp_its_next_observations_too():
    assert resources.learner_samples(A3CConfig(rollout_length=20, envs_per_worker=4), (4,)) == 160
    assert resources.learner_samples(A3CConfig(rollout_length=20, envs_per_worker=4),
                                  (4, 42, 42)) == 80


SIZE_FLAGS = {
    # flag: (a value 1,000 times the default or so, the env, the parts it must grow; how
    # much of them is refused is test_plan.py's)
    "envs_per_worker": (8000, CARTPOLE, {"envs", "rollouts", "activations"}),
    "actor_threads": (1000, CARTPOLE, {"envs", "rollouts"}),
    "queue_capacity": (2000, CARTPOLE, {"rollouts"}),
    "rollout_length": (32_000, CARTPOLE, {"rollouts", "activations"}),
    "hidden_sizes": ((64_000, 64_000), CARTPOLE, {"network copies", "activations"}),
    "conv_filters": ((32_000,), PONG, {"network copies", "activations"}),
    "lstm_size": (64_000, CARTPOLE, {"network copies", "activations"}),
}


@pytest.mark.parametrize("flag", sorted(SIZE_FLAGS))
def test_every_size_flag_grows_the_estimate(flag):
    value, info, grown = SIZE_FLAGS[flag]
    policy = "lstm" if flag == "lstm_size" else "auto"
    base = A3CConfig(policy=policy, hidden_sizes=(256,) if info is PONG else (64, 64))
    big = dataclasses.replace(base, **{flag: value})
    small, large = resources.estimate(base, info, 1, 2, 1), resources.estimate(big, info, 1, 2, 1)
    small_parts, big_parts = small.parts(), large.parts()
    assert {part for part in big_parts if big_parts[part] > small_parts[part]} == grown
    # Each actor thread is a thread too; nothing else adds threads.
    assert large.threads - small.threads == (2 * (value - 1) if flag == "actor_threads" else 0)


@pytest.mark.parametrize("shape", [(4000, 42, 42), (4, 210, 210)], ids=["frame stack",
                                                                          "screen size"])
def test_a_bigger_frame_stack_or_screen_grows_every_part_an_observation_is_in(shape):
    config = A3CConfig(hidden_sizes=(256,), envs_per_worker=4, rollout_length=20)
    small = resources.estimate(config, PONG, 1, 2, 1).parts()
    big = resources.estimate(config, dataclasses.replace(PONG, obs_shape=shape), 1, 2, 1).parts()
    grown = {part for part in big if big[part] > small[part]}
    assert grown == {"rollouts", "envs", "activations", "network copies"}
    obs = math.prod(shape)
    assert big["envs"] - small["envs"] == 2 * 4 * (obs - 4 * 42 * 42)


def test_workers_ps_and_op_threads_count_in_the_threads():
    need = resources.estimate(A3CConfig(actor_threads=3, intra_op_threads=4, inter_op_threads=0),
                           CARTPOLE, ps_here=2, workers_here=5, num_ps=2)
    each = resources.TASK_BASE_THREADS + 4 + (os.cpu_count() or 1)
    assert need.task_threads == each
    assert need.threads == 7 * each + 5 * 3


@pytest.mark.parametrize("config, tasks, advice", [
    (A3CConfig(actor_threads=50_000), (1, 1), "use fewer --actor-threads"),
    (A3CConfig(intra_op_threads=50_000), (1, 1),
     "use fewer --intra-op-threads and --inter-op-threads"),
    (A3CConfig(), (1, 500), "use fewer workers, or spread the cluster over several machines"),
], ids=["actors", "op threads", "workers"])
def test_too_many_threads_are_refused_with_the_count_and_what_to_cut(config, tasks, advice):
    need = resources.estimate(config, CARTPOLE, *tasks, num_ps=1)
    line = resources.thread_problem(need, 30_000, local=True)
    assert line.startswith(f"the {sum(tasks)} task(s) to start here need at least "
                           f"{need.threads:,} threads")
    assert "more than the 30,000 this machine lets a run start now: " + advice in line
    assert resources.thread_problem(need, need.threads, local=True) is None
    assert resources.thread_problem(need, None, local=True) is None  # the machine cannot tell


def test_this_machine_can_tell_how_many_threads_a_run_may_start():
    left = resources.threads_available()
    assert left is None or 0 <= left < 2**31


def test_a_checkpoint_holds_the_network_and_adams_two_moments():
    assert resources.checkpoint_bytes(A3CConfig(), CARTPOLE) == 3 * 4 * CARTPOLE_PARAMETERS
    assert resources.checkpoint_bytes(A3CConfig(learn=False), CARTPOLE) == 4 * CARTPOLE_PARAMETERS

"""How much memory the tasks one launcher starts need, worked out from the config before any
of them starts.

The problem: nothing kept a user from starting a local cluster of 5,000 workers (each a TF
process of some 600 MB) or a network with a layer of 10^8 units (5 GB a copy, and the ps
holds three copies). These machines have no swap, so the kernel's OOM killer ends processes,
which may be other people's, and the launcher kept restarting the tasks that died until its
deadline.

The decision: add up a lower bound of what the tasks need and refuse a start that needs more
than the machine has available now, naming the estimate and what to change. A lower bound,
so that no run that could fit is refused: the base of a task is the smallest TF task
measured here, and what only exists for a moment (activations, the messages between tasks,
the initializers' scratch space) is left out.

No TensorFlow here: the launcher runs this before it starts anything. parameter_count
follows model.build_network's layers; tests/test_memory.py builds the networks and checks
that the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from a3c_graph.config import A3CConfig, is_atari, is_minatar, resolve_policy

if TYPE_CHECKING:  # envs imports gymnasium, which `status` and `stop` do without
    from a3c_graph.envs import EnvInfo

MB = 10**6
# Resident memory of a TF task before its network and envs count, measured on this project's
# runs: a ps 588-607 MB, a CartPole worker 616-637 MB, a Pong worker 760-777 MB (the soak run
# of docs/operations.md, and `ps -o rss` of a Pong run). The smallest of them, so the estimate
# stays a lower bound.
TASK_BASE_BYTES = 580 * MB
# One env as an EnvBatch holds it, measured as the growth of a process's RSS over 16 ALE Pong
# envs (Atari preprocessing, 4-frame stack), 200 MinAtar Breakout and 2,000 CartPole envs.
ATARI_ENV_BYTES = 1_300_000
MINATAR_ENV_BYTES = 21_000
CLASSIC_ENV_BYTES = 4_700
PARAMETER_BYTES = 4  # float32
CONV_KERNEL = 3  # model.CONV_KERNEL: the cnn torso's convolutions are 3x3


def parameter_count(config: A3CConfig, obs_shape: Sequence[int], num_actions: int) -> int:
    """The trainable parameters of model.build_network(obs_shape, num_actions, config)."""
    torso, recurrent = resolve_policy(config.policy, obs_shape)
    if torso == "mlp" and not recurrent:  # ActorCriticMLP: two towers, each with its output
        obs_dim = math.prod(obs_shape)
        return sum(_dense_stack(obs_dim, (*config.hidden_sizes, out))[0]
                   for out in (num_actions, 1))
    if torso == "cnn":
        count, features = _cnn_torso(config, obs_shape)
    else:
        count, features = _dense_stack(math.prod(obs_shape), config.hidden_sizes)
    if recurrent:
        units = config.lstm_size
        count += (features + units) * 4 * units + 4 * units
        features = units
    return count + features * num_actions + num_actions + features + 1  # policy, value heads


def _dense_stack(in_size: int, sizes: Sequence[int]) -> tuple[int, int]:
    """(weights and biases of dense layers of `sizes` after an input of `in_size`, out size)."""
    count = 0
    for size in sizes:
        count += in_size * size + size
        in_size = size
    return count, in_size


def _cnn_torso(config: A3CConfig, obs_shape: Sequence[int]) -> tuple[int, int]:
    """(parameters of the cnn torso, its feature size): SAME convolutions, then dense layers."""
    channels = 1 if len(obs_shape) == 2 else obs_shape[0]
    height, width = obs_shape[-2:]
    count = 0
    for filters in config.conv_filters:
        count += CONV_KERNEL * CONV_KERNEL * channels * filters + filters
        channels = filters
        height, width = -(-height // config.conv_stride), -(-width // config.conv_stride)
    dense, features = _dense_stack(height * width * channels, config.hidden_sizes)
    return count + dense, features


def env_bytes(env_id: str) -> int:
    """What one env of `env_id` costs a worker (measured per family, see the constants)."""
    if is_atari(env_id):
        return ATARI_ENV_BYTES
    return MINATAR_ENV_BYTES if is_minatar(env_id) else CLASSIC_ENV_BYTES


@dataclass(frozen=True)
class MemoryEstimate:
    """A lower bound of the memory, in bytes, of the tasks one launcher starts."""

    ps: int  # ps tasks started here
    workers: int  # worker tasks started here
    parameters: int  # of one copy of the network
    ps_network: int  # the copies of the network on those ps tasks together
    worker_network: int  # the copies of the network on each worker
    worker_rollouts: int  # the rollouts queued and being filled on each worker
    worker_envs: int  # the envs of each worker

    @property
    def per_worker(self) -> int:
        """What one worker needs, and so what one more would add."""
        return TASK_BASE_BYTES + self.worker_network + self.worker_rollouts + self.worker_envs

    @property
    def total(self) -> int:
        return sum(self.parts().values())

    def parts(self) -> dict[str, int]:
        """The total by what it is for."""
        return {"TF processes": (self.ps + self.workers) * TASK_BASE_BYTES,
                "network copies": self.ps_network + self.workers * self.worker_network,
                "rollouts": self.workers * self.worker_rollouts,
                "envs": self.workers * self.worker_envs}

    def largest_part(self) -> str:
        """The key of parts() to cut first."""
        parts = self.parts()
        return max(parts, key=parts.__getitem__)

    def workers_that_fit(self, available: int) -> int:
        """How many workers would fit in `available` bytes beside the same ps tasks."""
        left = available - self.ps * TASK_BASE_BYTES - self.ps_network
        return max(0, left // self.per_worker)


def estimate(config: A3CConfig, info: EnvInfo, ps_here: int, workers_here: int,
             num_ps: int) -> MemoryEstimate:
    """The memory of `ps_here` ps and `workers_here` worker tasks of a cluster with `num_ps`
    ps tasks, on one machine.

    The ps tasks share the globals and Adam's two moments of each (three copies of the
    network; one when --learn false); a worker holds its local copy and, learning, its
    gradients. A worker's rollouts are s_t and s_{t+1} [T, B, *obs_shape] (rollout.py):
    --queue-capacity of them queued, and one more being filled by each actor thread.
    """
    parameters = parameter_count(config, info.obs_shape, info.num_actions)
    network_bytes = parameters * PARAMETER_BYTES
    ps_copies, worker_copies = (3, 2) if config.learn else (1, 1)
    obs_bytes = math.prod(info.obs_shape) * np.dtype(info.obs_dtype).itemsize
    rollout_bytes = config.rollout_length * config.envs_per_worker * obs_bytes * 2
    return MemoryEstimate(
        ps=ps_here, workers=workers_here, parameters=parameters,
        ps_network=ps_copies * network_bytes * ps_here // num_ps,
        worker_network=worker_copies * network_bytes,
        worker_rollouts=rollout_bytes * (config.queue_capacity + config.actor_threads),
        worker_envs=config.actor_threads * config.envs_per_worker * env_bytes(info.env_id))


def describe_bytes(count: int) -> str:
    """1,234.5 GB, 12.3 GB or 456 MB: decimal units, as in the README's tables."""
    if count >= 1000 * MB:
        return f"{count / (1000 * MB):,.1f} GB"
    return f"{count / MB:,.0f} MB"

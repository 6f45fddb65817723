"""How much memory, and how many threads, the tasks one launcher starts need, worked out from
the config before any of them starts.

A local cluster of thousands of workers (each a TF process of some 600 MB), or a network
with a layer of 10^8 units (5 GB a copy, and the ps holds three), would not fit; without
swap the kernel's OOM killer then ends processes, maybe other people's. So the launcher adds
up a lower bound of what the tasks need and refuses a start that needs more than the machine
has available now, naming the estimate and what to change. A lower bound,
so that no run that could fit is refused: the base of a task is the smallest TF task
measured here, and what only exists for a moment (the messages between tasks, the
initializers' scratch space) is left out. Every size flag counts somewhere: --workers and
--ps in the TF processes; the network flags in its copies and the learner's activations (the
forward pass of a whole rollout, which the backward pass keeps); --envs-per-worker,
--actor-threads, --rollout-length and --queue-capacity in the rollouts and envs, and through
the observation's shape --frame-stack and --screen-size too. Threads are the other thing a
machine runs out of (each takes a pid: /proc/sys/kernel/pid_max): a TF task starts some 80
of its own, and every actor thread is one more.

No TensorFlow here: the launcher runs this before it starts anything. The network's
variables, and so its parameters, come from core/network_spec.py, which model.py builds from.
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import psutil

from a3c_graph.core.config import A3CConfig, is_atari, is_minatar
from a3c_graph.core.network_spec import activation_count, network_kind, parameter_count

if TYPE_CHECKING:  # envs imports gymnasium, which `status` and `stop` do without
    from a3c_graph.core.envs import EnvInfo

MB = 10**6
# The measured sizes below, and how they were measured: docs/operations.md ("The memory
# estimate"). Each is the smallest seen, so the estimate stays a lower bound.
# Resident memory of a TF task before its network and envs count.
TASK_BASE_BYTES = 580 * MB
# One env as an EnvBatch holds it.
ATARI_ENV_BYTES = 1_300_000
MINATAR_ENV_BYTES = 21_000
CLASSIC_ENV_BYTES = 4_700
PARAMETER_BYTES = 4  # float32, of parameters and activations alike
# The observation of ATARI_ENV_BYTES (4 stacked 42x42 frames): an env's frame stack grows with
# --frame-stack and --screen-size, the rest of it (the emulator) does not.
ATARI_DEFAULT_OBS_BYTES = 4 * 42 * 42
# Threads of a TF task (a server, its session, its gRPC and Eigen pools) besides its intra-
# and inter-op threads.
TASK_BASE_THREADS = 80


def learner_samples(config: A3CConfig, obs_shape: Sequence[int]) -> int:
    """Observations of one rollout the learner's forward pass takes at once: s_t and s_{t+1}
    together for the mlp, s_t (and a few s_{t+1}) for the others (model's learner_outputs)."""
    both = 2 if network_kind(config.policy, obs_shape) == "mlp" else 1
    return both * config.rollout_length * config.envs_per_worker


def env_bytes(env_id: str, obs_bytes: int = ATARI_DEFAULT_OBS_BYTES) -> int:
    """What one env of `env_id` costs a worker (measured per family, see the constants); an
    Atari env's frame stack of `obs_bytes` on top of its emulator."""
    if is_atari(env_id):
        return ATARI_ENV_BYTES - ATARI_DEFAULT_OBS_BYTES + obs_bytes
    return MINATAR_ENV_BYTES if is_minatar(env_id) else CLASSIC_ENV_BYTES


def checkpoint_bytes(config: A3CConfig, info: EnvInfo) -> int:
    """A lower bound of one checkpoint's files: the global network, and Adam's two moments
    of each variable when learning."""
    copies = 3 if config.learn else 1
    return copies * PARAMETER_BYTES * parameter_count(config, info.obs_shape, info.actions)


def op_threads(count: int) -> int:
    """TF's intra- or inter-op threads for --intra/inter-op-threads `count` (0: one a core)."""
    return count or (os.cpu_count() or 1)


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
    worker_activations: int = 0  # the learner's forward pass over a rollout, on each worker
    task_threads: int = 0  # threads of each TF task
    actor_threads: int = 0  # and of each worker's actors

    @property
    def per_worker(self) -> int:
        """What one worker needs, and so what one more would add."""
        return (TASK_BASE_BYTES + self.worker_network + self.worker_rollouts + self.worker_envs
                + self.worker_activations)

    @property
    def threads(self) -> int:
        """The threads of all the tasks together."""
        return (self.ps + self.workers) * self.task_threads + self.workers * self.actor_threads

    @property
    def total(self) -> int:
        return sum(self.parts().values())

    def parts(self) -> dict[str, int]:
        """The total by what it is for."""
        return {"TF processes": (self.ps + self.workers) * TASK_BASE_BYTES,
                "network copies": self.ps_network + self.workers * self.worker_network,
                "rollouts": self.workers * self.worker_rollouts,
                "envs": self.workers * self.worker_envs,
                "activations": self.workers * self.worker_activations}

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
    --queue-capacity of them queued, and one more being filled by each actor thread. Its
    learner's activations (activation_count) exist only while it learns.
    """
    parameters = parameter_count(config, info.obs_shape, info.actions)
    network_bytes = parameters * PARAMETER_BYTES
    ps_copies, worker_copies = (3, 2) if config.learn else (1, 1)
    obs_bytes = math.prod(info.obs_shape) * np.dtype(info.obs_dtype).itemsize
    rollout_bytes = config.rollout_length * config.envs_per_worker * obs_bytes * 2
    activations = (learner_samples(config, info.obs_shape) * PARAMETER_BYTES
                   * activation_count(config, info.obs_shape, info.actions)
                   if config.learn else 0)
    return MemoryEstimate(
        ps=ps_here, workers=workers_here, parameters=parameters,
        ps_network=ps_copies * network_bytes * ps_here // num_ps,
        worker_network=worker_copies * network_bytes,
        worker_rollouts=rollout_bytes * (config.queue_capacity + config.actor_threads),
        worker_envs=(config.actor_threads * config.envs_per_worker
                     * env_bytes(info.env_id, obs_bytes)),
        worker_activations=activations,
        task_threads=(TASK_BASE_THREADS + op_threads(config.intra_op_threads)
                      + op_threads(config.inter_op_threads)),
        actor_threads=config.actor_threads)


def describe_bytes(count: int) -> str:
    """1,234.5 GB, 12.3 GB, 456 MB, 789 kB or 12 bytes: decimal units, as in the README's
    tables."""
    if count >= 1000 * MB:
        return f"{count / (1000 * MB):,.1f} GB"
    if count >= MB:
        return f"{count / MB:,.0f} MB"
    return f"{count / 1000:,.0f} kB" if count >= 1000 else f"{count} bytes"


def threads_available() -> int | None:
    """How many more threads this machine lets us start now, or None if it cannot tell: the
    least of what the kernel (threads-max, and pid_max: a thread takes a pid), this cgroup
    (pids.max) and, but for root, RLIMIT_NPROC leave."""
    left = []
    running = _threads_running()
    for path in ("/proc/sys/kernel/threads-max", "/proc/sys/kernel/pid_max"):
        limit = _read_int(path)
        if limit is not None and running is not None:
            left.append(limit - running)
    cgroup = _cgroup_pids()
    if cgroup is not None:
        left.append(cgroup[0] - cgroup[1])
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        mine = 0
        for proc in psutil.process_iter(["uids", "num_threads"]):
            if proc.info["uids"] and proc.info["uids"].real == os.getuid():
                mine += proc.info["num_threads"] or 0
        left.append(soft - mine)
    return max(0, min(left)) if left else None


def _threads_running() -> int | None:
    """Threads of the whole system: /proc/loadavg's fourth field is running/existing."""
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            return int(handle.read().split()[3].split("/")[1])
    except (OSError, IndexError, ValueError):
        return None


def _cgroup_pids() -> tuple[int, int] | None:
    """(pids.max, pids.current) of this process's cgroup (v2, or v1's pids controller), or
    None where there is no limit."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers in ("", "pids"):
            folder = os.path.join("/sys/fs/cgroup", "pids" if controllers else "",
                                  path.lstrip("/"))
            limit = _read_int(os.path.join(folder, "pids.max"))
            current = _read_int(os.path.join(folder, "pids.current"))
            if limit is not None and current is not None:
                return limit, current
    return None


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())  # "max" (no limit) is not a number
    except (OSError, ValueError):
        return None


def thread_problem(need: MemoryEstimate, available: int | None, local: bool) -> str | None:
    """The one line that refuses a start needing more threads than `available`, or None.
    `local`: a local cluster, whose workers the user counts with --workers."""
    if available is None or need.threads <= available:
        return None
    tasks = need.ps + need.workers
    parts = {"use fewer --actor-threads": need.workers * need.actor_threads,
             "use fewer --intra-op-threads and --inter-op-threads":
                 tasks * (need.task_threads - TASK_BASE_THREADS),
             ("use fewer workers" if local else "start fewer tasks here")
             + ", or spread the cluster over several machines (--cluster FILE, or --cluster "
               "slurm)": tasks * TASK_BASE_THREADS}
    advice = max(parts, key=parts.__getitem__)
    return (f"the {tasks} task(s) to start here need at least {need.threads:,} threads "
            f"({need.task_threads:,} of TF's own in each task, {need.actor_threads:,} actor "
            f"thread(s) in each worker), more than the {available:,} this machine lets a run "
            f"start now: {advice}")

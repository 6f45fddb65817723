"""The A3C graph of one worker task, built top-down in the order of one update.

build_worker_graph reads as the algorithm does:
  1. build_globals: on the ps, the global network spread over the ps tasks by
     replica_device_setter, global_step and the cluster's episode statistics on the first ps
     task (universe-starter-agent's layout);
  2. on this worker, the local copy of the network (build_network(..., local=True));
  3. build_actors_and_queue: the actors' in-graph rollouts, each acting on a snapshot of the
     local copy taken as it starts, and the FIFOQueue their QueueRunner threads fill with
     the rollouts and their snapshots;
  4. build_learner: a rollout dequeued, its A3C loss and clipped gradients on the weights
     that acted it (core/learner.py), and the learning rate of this update;
  5. exchange_with_ps: the gradients applied to the globals by --optimizer on each ps task
     (with --rollouts-per-update k, pooled there until k rollouts fill an update; both in
     ps_update.py), the rollout's episodes counted, and the updated globals and the
     counters brought back into the local copy, in one message each way per ps task;
  6. build_sync: the local init op, which syncs the local copy from the globals before any
     actor starts;
  7. the Saver of the chief's checkpoints, built last so it covers every variable
     (a3c_graph/rundir/checkpoints.py).
With --learn false (the acting ceiling of `benchmarks.run --ceiling`), steps 4 and 5 are
replaced by count_on_ps: the rollout is counted and dropped, nothing else is built.

Each part has a tf.name_scope of its own, so TensorBoard's graph view shows these steps. The
names a checkpoint holds (variables, Adam's slots and beta powers) come from variable scopes
and the optimizers' names, never from these name scopes:
tests/unit/distributed/test_checkpoint_names.py holds them against a list written before
this layout.

The policy lag. A rollout's gradient is the A3C gradient of the policy that acted it, as in
the A3C paper (sync, act, compute, apply): the actor reads the local copy once as a rollout
starts (its acting weights, and their version: the global step they were read at), acts
the whole rollout on them, and enqueues them with the rollout; the learner computes the
loss and its gradients on those very tensors. Meanwhile the learner's refreshes make the
local copy newer (one session step per rollout: the refresh rides on the apply), and a
rollout waits behind up to --queue-capacity others, so the globals its gradient is applied
to are lag_apply global updates newer than the weights that acted: about (queue_capacity +
1) x the number of workers, A3C's asynchronous staleness, logged per update.

The lag is counted in the updates applied to the globals, and it grows with the workers
whatever each update holds: 16 workers of one env each (the atari preset spread over them)
made updates of 20 samples 32-35 updates stale, whose gradients were 1.1-4 times the norm
of the same updates 4-6 stale (2 workers of one env). So where the preset's envs are spread
over more workers, their smaller rollouts are pooled on the ps into updates of the preset's
size (GradientPool): as many samples an update as 2 workers make, and about as many updates
in flight (docs/learning/many-workers/runs.md).

Computing the gradient on the local copy as it was when the rollout was dequeued instead
(the on-policy loss on off-policy actions, up to (queue_capacity + 1) refreshes newer than
the policy that acted) made many workers collapse to a deterministic policy within a few
hundred updates: docs/learning.md, "Many workers".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import tensorflow as tf

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvBatch, EnvInfo
from a3c_graph.core.learner import (
    LearnerUpdate,
    entropy_coef_now,
    learner_update,
    learning_rate_now,
)
from a3c_graph.core.model import assign_op, build_network, network_on_weights, rollout_sampler
from a3c_graph.core.normalization import (
    RETURN_SCOPE,
    ROLLOUT_FIELDS,
    LocalScale,
    MeanStd,
    RunningStatistics,
    return_sums,
    rollout_sums,
    scale_in,
)
from a3c_graph.core.rollout import RolloutQueue, build_rollout, episode_ended
from a3c_graph.core.stats import Counters, EpisodeStats
from a3c_graph.distributed import transfer
from a3c_graph.distributed.cluster import TaskSpec
from a3c_graph.distributed.ps_update import GradientPool, apply_to_globals, optimizer_state
from a3c_graph.rundir import checkpoints

tf1 = tf.compat.v1


class TrainFetches(NamedTuple):
    """What one training step returns to the learner's loop (training.py), by name."""

    counters: Counters        # the cluster's, as this update left them
    loss: Any                 # the A3C loss of the rollout, and its parts
    policy_loss: Any
    value_loss: Any
    entropy: Any
    grad_norm: Any            # before clipping
    learning_rate: Any        # this rollout's rate (0 for a skipped update); with
                              # --rollouts-per-update, the pool's filler's is applied
    update_skipped: Any       # bool: NaN/inf loss or gradients, nothing applied
    queue_size: Any           # rollouts waiting after this one was dequeued
    lag_apply: Any            # global updates from the weights that acted the rollout
                              # (and its gradient is computed on) to the globals it is applied to
    rollout_steps: Any        # agent steps in the rollout (T x B)
    finished_returns: Any     # [K] whole episodes that ended in the rollout
    finished_lengths: Any     # [K]


@dataclass
class WorkerGraph:
    """What the worker's session runs: the training step's fetches, and what the chief's
    checkpoints and the session's start need."""

    train_fetches: TrainFetches
    global_network: object
    saver: tf1.train.Saver
    local_init_op: tf.Operation  # initializes the local variables, then syncs the local copy
    optimizer_state: dict  # TensorBoard tag -> scalar tensor (optimizer_state); read by the chief


@dataclass
class Globals:
    """What lives on the ps tasks: the global network, the global step, the episode
    statistics and, with --normalize-observations, the observations' and with
    --normalize-rewards the discounted returns' (normalization.py)."""

    network: object
    global_step: tf.Variable
    stats: EpisodeStats
    observations: RunningStatistics | None = None
    returns: RunningStatistics | None = None
    # --rollouts-per-update above 1: each ps task's GradientPool, by its device.
    pools: dict[str, GradientPool] = dataclasses.field(default_factory=dict)

    def running_statistics(self) -> list[RunningStatistics]:
        """The running statistics this run keeps, in the order every message carries them
        (LocalCopy.scales pairs with it)."""
        return [s for s in (self.observations, self.returns) if s is not None]


@dataclass
class LocalCopy:
    """This worker's copy of what it acts and learns on: the network, its version (the
    global step its weights were read at) and, with --normalize-observations, the
    observation scale; with --normalize-rewards, the discounted return's."""

    network: object
    version: tf.Variable
    scale: LocalScale | None = None
    return_scale: LocalScale | None = None

    def scales(self) -> list[LocalScale]:
        """The copies of Globals.running_statistics' scales, in its order."""
        return [s for s in (self.scale, self.return_scale) if s is not None]

    def snapshot(self):
        """(weights, version, scale) read once: what one rollout acts on."""
        weights = [tf.identity(v.read_value()) for v in self.network.variables]
        version = tf.identity(self.version.read_value())
        return weights, version, None if self.scale is None else self.scale.read()


@dataclass
class Learner:
    """The learner's ops on the worker for one dequeued rollout."""

    update: LearnerUpdate
    learning_rate: tf.Tensor
    finished_returns: tf.Tensor  # [K]
    finished_lengths: tf.Tensor  # [K]
    rollout_steps: int
    env_steps_seen: tf.Variable  # the cluster's env steps as last read: the rate's anneal
    acting_version: tf.Tensor  # the global step the weights that acted the rollout were read at
    # The local copy's version when the rollout was learned, and the other workers' updates
    # between this worker's last refresh and its last apply (the policy lag's estimate;
    # None in the ps capacity benchmark's pusher, which learns nothing).
    copy_version: tf.Tensor | None = None
    others_since_refresh: tf.Variable | None = None
    # --normalize-observations: the count, sum and sum of squares of the rollout's
    # observations, for the cluster's statistics; --normalize-rewards: of its discounted
    # returns.
    observation_sums: list | None = None
    return_sums: list | None = None

    def statistics_sums(self) -> list:
        """The sums for Globals.running_statistics, three each, in its order."""
        return (self.observation_sums or []) + (self.return_sums or [])


def build_worker_graph(config: A3CConfig, spec: TaskSpec, info: EnvInfo,
                       env_batches: list[EnvBatch],
                       worker_device: str | None = None) -> WorkerGraph:
    """Build the whole A3C graph of worker `spec.task` into the default graph (the module
    docstring gives the steps).

    worker_device: where this worker's own ops go (devices.py plans it), e.g.
      "/job:worker/task:3/device:GPU:0"; ops without a kernel there (the env step's
      numpy_function, the queue) fall back to the task's CPU through soft placement.
      Default: the task's CPU. The globals always go to a ps task's CPU.
    """
    worker_device = worker_device or f"/job:worker/task:{spec.task}/cpu:0"
    globals_ = build_globals(config, spec, info, worker_device)
    with tf1.device(worker_device):
        local = build_local_copy(info, config)
        queue = build_actors_and_queue(local, env_batches, config)
        rollout = queue.dequeue()
    if not config.learn:  # the acting ceiling: each rollout counted, nothing learned
        return count_on_ps(globals_, local, rollout, queue, spec.task, worker_device,
                           config.keep_checkpoint_every_minutes)
    with tf1.device(worker_device):
        learner = build_learner(rollout, config, info, local)
    counters, own_updates = exchange_with_ps(globals_, local, learner, spec.task,
                                             worker_device, config)
    with tf1.device(worker_device):
        counters = note_for_next_update(learner, counters, own_updates)
        fetches = train_fetches(learner, counters, queue)
        local_init_op = build_sync(globals_, local, learner.env_steps_seen)
        state = optimizer_state(globals_.network.variables, globals_.global_step, config)
        saver = checkpoints.build_saver(config.keep_checkpoint_every_minutes)
    return WorkerGraph(fetches, globals_.network, saver, local_init_op, state)


def build_globals(config: A3CConfig, spec: TaskSpec, info: EnvInfo,
                  worker_device: str) -> Globals:
    """The global network spread over the ps tasks by replica_device_setter (round-robin),
    and the global step and the episode statistics together on the first ps task."""
    cluster = tf1.train.ClusterSpec(dict(spec.cluster))
    ps_setter = tf1.train.replica_device_setter(
        ps_tasks=spec.num_ps, ps_device="/job:ps/device:CPU:0", worker_device=worker_device,
        cluster=cluster)
    with tf1.device(ps_setter):
        global_step = tf1.train.get_or_create_global_step()
        network = build_network(info.obs_shape, info.actions, config, "global")
    # Not through the setter, which would spread the statistics' variables over the ps
    # tasks too: record() and counters() would then cross between ps tasks on every update.
    with tf1.device(global_step.device):
        stats = EpisodeStats(spec.num_workers)
        observations = (RunningStatistics(math.prod(info.obs_shape))
                        if config.normalize_observations else None)
        returns = (RunningStatistics(1, RETURN_SCOPE) if config.normalize_rewards
                   else None)
    pools = {}
    if config.rollouts_per_update > 1:
        for device, indices in transfer.devices_of(network.variables).items():
            with tf1.device(device):
                pools[device] = GradientPool([network.variables[i] for i in indices],
                                             tf1.DeviceSpec.from_string(device).task)
    return Globals(network, global_step, stats, observations, returns, pools)


def build_local_copy(info: EnvInfo, config: A3CConfig) -> LocalCopy:
    """This worker's local copy (local variables: never saved), on the current device."""
    network = build_network(info.obs_shape, info.actions, config, "local", local=True)
    scale = LocalScale(math.prod(info.obs_shape)) if config.normalize_observations else None
    return_scale = LocalScale(1, RETURN_SCOPE) if config.normalize_rewards else None
    # Its version: the global step its weights were read at, from which the policy lag is
    # measured.
    return LocalCopy(network, local_counter("local_version"), scale, return_scale)


def local_counter(name: str) -> tf.Variable:
    """An int64 scalar of this worker's own (a local variable: never saved, zero at start)."""
    return tf1.get_variable(name, [], tf.int64, initializer=tf1.zeros_initializer(),
                            trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES])


# The queue's fields beside a rollout's own (core/rollout.py): the weights that acted it,
# one per variable ("acting_weights/0", ...), the global step they were read at, and with
# --normalize-observations the observation scale they acted with (normalization.py's
# ROLLOUT_FIELDS).
ACTING_WEIGHTS = "acting_weights/"
ACTING_VERSION = "acting_version"


def build_actors_and_queue(local: LocalCopy, env_batches: list[EnvBatch],
                           config: A3CConfig) -> RolloutQueue:
    """One actor per EnvBatch: a whole rollout of config.rollout_length steps in a
    tf.while_loop (core/rollout.py) acting on the local copy as the rollout starts,
    enqueued with those weights, their version (and observation scale) by a QueueRunner
    thread of its own into one FIFOQueue."""
    with tf.name_scope("actors"):
        rollouts = []
        for batch in env_batches:
            # Read once per run of the enqueue op, that is once per rollout; a refresh of the
            # local copy meanwhile gives the variables new tensors and leaves these as read.
            weights, version, scale = local.snapshot()
            acting = network_on_weights(weights, batch.info.obs_shape, batch.info.actions,
                                        config, "acting_network", observation_scale=scale)
            rollout = build_rollout(batch, _sampling_policy(acting, batch.num_envs),
                                    config.rollout_length,
                                    state_shape=acting.state_shape if acting.recurrent else None,
                                    discount=config.return_discount())
            rollout.update({f"{ACTING_WEIGHTS}{i}": w for i, w in enumerate(weights)})
            rollout[ACTING_VERSION] = version
            if scale is not None:
                rollout.update(zip(ROLLOUT_FIELDS, scale))
            rollouts.append(rollout)
        return RolloutQueue(rollouts, config.queue_capacity)


def _sampling_policy(network, num_envs: int):
    """The rollout loop's policy (core/rollout.build_rollout): actions sampled from `network`
    for `num_envs` envs (built outside the loop, so gSDE's matrices are drawn once a
    rollout)."""
    if not network.recurrent:
        return rollout_sampler(network, num_envs)

    def policy(obs, state):
        params, _, after = network.step(obs, state)
        return network.distribution.sample(params), after
    return policy


def acting_weights(rollout: dict) -> list:
    """The weights that acted a dequeued rollout, in network.variables' order."""
    count = sum(key.startswith(ACTING_WEIGHTS) for key in rollout)
    return [rollout[f"{ACTING_WEIGHTS}{i}"] for i in range(count)]


def build_learner(rollout: dict, config: A3CConfig, info: EnvInfo,
                  local: LocalCopy) -> Learner:
    """The update a dequeued rollout makes (core/learner.py: the A3C loss, its clipped
    gradients, NaN/inf updates zeroed), computed on the weights that acted it (with
    --normalize-rewards, on rewards scaled by the local copy's return scale as the update
    is computed), and the learning rate it applies at: annealed by the cluster's env steps
    as this worker last read them, and scaled down by the rollout's policy lag beyond
    --lag-tolerance.

    The lag at the apply is the local copy's version less the rollout's, plus the updates
    the other workers will have applied since the copy was refreshed: taken as many as
    during this worker's previous update (others_since_refresh), so that the update
    still crosses the network once each way per ps task."""
    with tf.name_scope("learner"):
        acted = network_on_weights(acting_weights(rollout), info.obs_shape, info.actions,
                                   config, "learner_network",
                                   observation_scale=scale_in(rollout))
        return_std = None if local.return_scale is None else local.return_scale.read().std[0]
        env_steps_seen = local_counter("env_steps_seen")
        update = learner_update(acted, rollout, config, return_std,
                                entropy_coef_now(config, env_steps_seen))
        returns, lengths = finished_episodes(rollout)
        copy_version = tf.identity(local.version.read_value(), name="copy_version")
        others_since_refresh = local_counter("others_since_refresh")
        policy_lag = copy_version - rollout[ACTING_VERSION] + others_since_refresh.read_value()
        learning_rate = learning_rate_now(config, update.is_finite, env_steps_seen, policy_lag)
        sums = rollout_sums(rollout["obs"]) if config.normalize_observations else None
        discounted = return_sums(rollout) if config.normalize_rewards else None
    return Learner(update, learning_rate, returns, lengths,
                   rollout["rewards"].shape.num_elements(), env_steps_seen,
                   rollout[ACTING_VERSION], copy_version, others_since_refresh, sums,
                   discounted)


def finished_episodes(rollout: dict):
    """The returns and lengths [K] of the episodes (Atari: whole games) that ended in
    `rollout`, in time order."""
    ended = episode_ended(rollout["episode_lengths"])
    return (tf.boolean_mask(rollout["episode_returns"], ended),
            tf.boolean_mask(rollout["episode_lengths"], ended))


def exchange_with_ps(globals_: Globals, local: LocalCopy, learner: Learner, task: int,
                     worker_device: str, config: A3CConfig):
    """The learner's round trip, as A3C says it: the gradients go to the globals and are
    applied there, the rollout's episodes are counted, and the updated globals come back
    into the local copy. Returns (the cluster's counters on this worker, once the local
    copy is refreshed; the global steps this rollout's update made, 0 or 1).

    Over several ps tasks (ps_shards: what each holds) it is one message from this worker to
    each ps task and one back (transfer.moved), and nothing between ps tasks."""
    shards = ps_shards(globals_)
    returned = {}
    for shard in shards:
        with tf.name_scope("to_ps"):
            arrived = transfer.moved(message_to_ps(shard, learner),
                                     source=worker_device, destination=shard.device)
        with tf1.device(shard.device):
            applied, own_updates = apply_on_ps(shard, arrived, globals_, learner, task, config)
        returned[shard.device] = back_from_ps(globals_, shard, applied, worker_device,
                                              own_updates)
    return refresh_local_copy(local, globals_, shards, returned, worker_device)


@dataclass(frozen=True)
class PsShard:
    """The part of the globals one ps task holds: the indices of its network variables and,
    for the first ps task, global_step and the episode (and observation) statistics."""

    device: str
    indices: list[int]
    holds_statistics: bool


def ps_shards(globals_: Globals) -> list[PsShard]:
    """The ps tasks the globals live on, the statistics' ps first: with one ps task the
    optimizer's names are then those of a single shared optimizer, so checkpoints of either
    read the same."""
    groups = transfer.devices_of(globals_.network.variables)
    stats_device = globals_.stats.device
    return [PsShard(stats_device, groups.get(stats_device, []), True)] + [
        PsShard(device, indices, False)
        for device, indices in groups.items() if device != stats_device]


def message_to_ps(shard: PsShard, learner: Learner) -> list[tf.Tensor]:
    """What goes to one ps task: the gradients of its variables and the learning rate; to
    the statistics' ps also the rollout's sums for the running statistics (if normalized)
    and its finished episodes' returns, last, the one tensor without a static shape."""
    message = [learner.update.gradients[i] for i in shard.indices] + [learner.learning_rate]
    if shard.holds_statistics:
        message += learner.statistics_sums() + [learner.finished_returns]
    return message


def apply_on_ps(shard: PsShard, arrived: list[tf.Tensor], globals_: Globals,
                learner: Learner, task: int, config: A3CConfig):
    """On the ps task: its variables updated by their gradients at the learning rate
    (apply_to_globals); on the statistics' ps also global_step advanced and, after the
    update, the rollout's episodes and steps counted (and its sums added to the running
    statistics). -> (the op, the global steps this rollout's update made: 1, or with
    --rollouts-per-update 0 for a rollout that did not fill the pool; int64)."""
    n = len(shard.indices)
    gradients, learning_rate = arrived[:n], arrived[n]

    def apply(gradients):
        # Adam's beta powers are named by the name scope they are made in: none here, as in
        # every checkpoint written so far.
        return apply_to_globals(
            gradients, [globals_.network.variables[i] for i in shard.indices], learning_rate,
            config, global_step=globals_.global_step if shard.holds_statistics else None,
            ps_task=None if shard.holds_statistics else tf1.DeviceSpec.from_string(
                shard.device).task)

    pool = globals_.pools.get(shard.device)
    if pool is None:
        applied, own_updates = apply(gradients), tf.constant(1, tf.int64)
    else:
        counts = learning_rate > 0.0
        applied, filled = pool.apply_when_full(pool.add(gradients, counts), counts,
                                               config.rollouts_per_update, apply)
        own_updates = tf.cast(filled, tf.int64)
    if not shard.holds_statistics:
        return applied, own_updates
    sums, returns = arrived[n + 1:-1], arrived[-1]
    with tf.control_dependencies([applied]):
        counted = globals_.stats.record(task, returns, learner.rollout_steps)
        for statistics in globals_.running_statistics():
            width = len(statistics.variables)  # count, sum, sum of squares
            counted = tf.group(counted, statistics.add(sums[:width]))
            sums = sums[width:]
    return counted, own_updates


def back_from_ps(globals_: Globals, shard: PsShard, after: tf.Operation,
                 worker_device: str, own_updates) -> list[tf.Tensor]:
    """What comes back from one ps task once `after` has run, in one message: its variables'
    values and, from the statistics' ps, the counters and `own_updates` (apply_on_ps's;
    then the running statistics' scales, if normalized)."""
    with tf.name_scope("from_ps"):
        with tf1.device(shard.device), tf.control_dependencies([after]):
            message = [globals_.network.variables[i].read_value() for i in shard.indices]
            if shard.holds_statistics:
                message.extend(globals_.stats.counters(globals_.global_step))
                message.append(tf.identity(own_updates))
                for statistics in globals_.running_statistics():
                    message.extend(statistics.scale())
        # Outside the control dependency: the worker's unpacking of the message would
        # otherwise wait on the ps's op by a message of its own.
        return transfer.moved(message, source=shard.device, destination=worker_device)


def refresh_local_copy(local: LocalCopy, globals_: Globals, shards: list[PsShard],
                       returned: dict[str, list], worker_device: str):
    """The local copy assigned the globals' values that came back, with their version and
    the running statistics' scales; then (the counters, the global steps this worker's
    update made)."""
    with tf1.device(worker_device), tf.name_scope("refresh_local"):
        stats_shard = shards[0]
        after_variables = returned[stats_shard.device][len(stats_shard.indices):]
        counters = Counters(*after_variables[:len(Counters._fields)])
        own_updates = after_variables[len(Counters._fields)]
        groups = {shard.device: shard.indices for shard in shards}
        refreshed = [assign_op(local.network, transfer.in_variable_order(groups, returned),
                               "refresh_local"),
                     local.version.assign(counters.global_step)]
        scales = after_variables[len(Counters._fields) + 1:]
        width = len(MeanStd._fields)  # mean, std
        for k, copy in enumerate(local.scales()):
            refreshed.append(copy.assign(MeanStd(*scales[width * k:width * (k + 1)])))
        with tf.control_dependencies(refreshed):
            return Counters(*(tf.identity(value) for value in counters)), own_updates


def note_for_next_update(learner: Learner, counters: Counters, own_updates) -> Counters:
    """`counters`, once what the next update's learning rate needs of them is noted on this
    worker: the cluster's env steps (the anneal) and the other workers' updates since the
    local copy was refreshed (the next rollout's lag): the global steps since then less
    `own_updates`, the one this update made (none for a rollout pooled without filling the
    pool)."""
    noted = [learner.env_steps_seen.assign(counters.env_steps),
             learner.others_since_refresh.assign(
                 counters.global_step - own_updates - learner.copy_version)]
    with tf.control_dependencies(noted):
        return Counters(*(tf.identity(value) for value in counters))


def train_fetches(learner: Learner, counters: Counters, queue: RolloutQueue) -> TrainFetches:
    """What a training step returns to the learner's loop."""
    update = learner.update
    # The globals this update was applied to were one update older than the global step
    # read back after it (concurrent updates of other workers in between make it an upper
    # bound by those few). A rollout pooled for a later update (--rollouts-per-update)
    # advanced no global step itself: its lag is to the globals as they stand, at least 0.
    lag_apply = tf.maximum(counters.global_step - 1 - learner.acting_version, 0)
    return TrainFetches(
        counters=counters, loss=update.loss, grad_norm=update.grad_norm,
        learning_rate=learner.learning_rate, update_skipped=tf.logical_not(update.is_finite),
        queue_size=queue.size, rollout_steps=tf.constant(learner.rollout_steps),
        lag_apply=lag_apply,
        finished_returns=learner.finished_returns, finished_lengths=learner.finished_lengths,
        **update.parts)


def build_sync(globals_: Globals, local: LocalCopy, env_steps_seen) -> tf.Operation:
    """The local init op: it initializes the local variables, then syncs the local copy
    from the globals (one packed message from each ps task) with its version and the
    running statistics' scales, and reads the cluster's env steps for the learning rate's
    anneal."""
    with tf.control_dependencies([tf1.train.Scaffold.default_local_init_op()]):
        ops = [sync_local_from_global(local.network, globals_.network),
               local.version.assign(globals_.global_step.read_value())]
        for copy, statistics in zip(local.scales(), globals_.running_statistics()):
            with tf1.device(globals_.stats.device):
                scale = statistics.scale()
            ops.append(copy.assign(scale))
        if env_steps_seen is not None:
            ops.append(env_steps_seen.assign(globals_.stats.env_steps.read_value()))
        for device, pool in globals_.pools.items():
            with tf1.device(device):
                ops.append(pool.initialized())
        return tf.group(*ops, name="local_init")


def sync_local_from_global(local_network, global_network):
    """An op that copies every variable of the global network into the local copy: one
    packed message from each ps task the globals live on (transfer.pulled)."""
    return assign_op(local_network, transfer.pulled(global_network.variables),
                     "sync_local_from_global")


def count_on_ps(globals_: Globals, local: LocalCopy, rollout: dict, queue: RolloutQueue,
                task: int, worker_device: str, keep_every_minutes: float) -> WorkerGraph:
    """--learn false, the acting ceiling `benchmarks.run --ceiling` measures: each rollout is
    dequeued, its episodes and steps counted on the ps and the global step advanced, and
    nothing is learned; the local copy stays as the local init op synced it."""
    stats = globals_.stats
    with tf1.device(worker_device):
        returns, lengths = finished_episodes(rollout)
        steps = rollout["rewards"].shape.num_elements()
    with tf.name_scope("count_on_ps"):
        (arrived,) = transfer.moved([returns], source=worker_device, destination=stats.device)
        with tf1.device(stats.device):
            counted = stats.record(task, arrived, steps)
            with tf.control_dependencies([counted]):
                counted = globals_.global_step.assign_add(1)
        back = back_from_ps(globals_, PsShard(stats.device, [], True), counted, worker_device,
                            tf.constant(1, tf.int64))
    with tf1.device(worker_device):
        zero = tf.constant(0.0)
        no_lag = tf.constant(0, tf.int64)
        fetches = TrainFetches(
            counters=Counters(*back[:len(Counters._fields)]), loss=zero, policy_loss=zero,
            value_loss=zero, entropy=zero, grad_norm=zero, learning_rate=zero,
            update_skipped=tf.constant(False), queue_size=queue.size, lag_apply=no_lag,
            rollout_steps=tf.constant(steps), finished_returns=returns, finished_lengths=lengths)
        local_init_op = build_sync(globals_, local, None)
        saver = checkpoints.build_saver(keep_every_minutes)
    return WorkerGraph(fetches, globals_.network, saver, local_init_op, {})

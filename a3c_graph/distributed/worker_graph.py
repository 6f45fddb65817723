"""The A3C graph of one worker task: where the model, the losses and the rollouts meet.

Placement (universe-starter-agent's layout):
  * on the ps: the global network spread over the ps tasks by replica_device_setter, the
    slots of Adam beside each variable (one optimizer per ps task, so no update crosses
    between ps tasks), and global_step with the cluster-wide episode statistics on the
    first ps task;
  * on this worker: a local copy of the network, the rollout queue, the actor threads'
    in-graph rollouts and the learner's forward and backward pass (core/learner.py).

The learner computes gradients on the local copy as it is when it dequeues a rollout,
applies them to the globals and, in the same step, copies the globals back into the local
copy, so the ps serves one session step per rollout, not two (an actor that synced before
each rollout cost the ps a step of its own). The local copy is first synced by the local
init op, before any actor starts.

So the gradients are not taken on the parameters that acted, but on a local copy that can
be newer: a rollout waits in the queue behind up to --queue-capacity others, each of which
refreshes the copy when it is learned from, and one refresh can land while the rollout is
being collected, which then straddles it (its first steps acted on the older copy, its last
on the newer). With one actor thread the copy is up to queue_capacity + 1 refreshes newer
than the one that acted (each further actor thread waiting to enqueue can add one). This is
A3C's usual policy lag between acting and learning, which the on-policy loss ignores.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvBatch, EnvInfo
from a3c_graph.core.learner import acting_only_update, learner_update, learning_rate_now
from a3c_graph.core.model import assign_op, build_network
from a3c_graph.core.rollout import RolloutQueue, build_rollout, episode_ended, sample_actions
from a3c_graph.core.stats import EpisodeStats
from a3c_graph.distributed import transfer
from a3c_graph.distributed.cluster import TaskSpec

tf1 = tf.compat.v1


@dataclass
class WorkerGraph:
    """Handles the worker's training loop runs."""

    train_fetches: dict
    global_network: object
    saver: tf1.train.Saver
    local_init_op: tf.Operation  # initializes the local variables, then syncs the local copy


def apply_to_globals(gradients, variables, learning_rate, config: A3CConfig,
                     global_step=None, name: str = "Adam"):
    """Adam's update of `variables` by `gradients` (one per variable) at `learning_rate`,
    where the variables live. Each ps task gets an optimizer of its own (see
    exchange_with_ps), so its beta powers sit beside its variables."""
    optimizer = tf1.train.AdamOptimizer(learning_rate, epsilon=config.adam_epsilon, name=name)
    return optimizer.apply_gradients(zip(gradients, variables), global_step=global_step)


@dataclass
class Globals:
    """What lives on the ps tasks: the global network, the global step and the episode
    statistics."""

    network: object
    global_step: tf.Variable
    stats: EpisodeStats


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
        network = build_network(info.obs_shape, info.num_actions, config, "global")
    # Not through the setter, which would spread the statistics' variables over the ps
    # tasks too: record() and counters() would then cross between ps tasks on every update.
    with tf1.device(global_step.device):
        stats = EpisodeStats(spec.num_workers)
    return Globals(network, global_step, stats)


def exchange_with_ps(globals_: Globals, local_network, gradients, learning_rate,
                     finished_returns, rollout_steps: int, task: int, worker_device: str,
                     config: A3CConfig):
    """The learner's round trip: one message from this worker to each ps task and one back
    (transfer.moved), and nothing between ps tasks.

    To each ps task go the gradients of its variables and the learning rate; to the ps of
    the statistics also the rollout's finished episodes. Each ps task applies its own
    variables' update with an Adam of its own: one shared optimizer would keep its beta
    powers beside the first variable and the learning rate on one task, and every other
    ps task would read them across the network on every update (docs/ps_capacity.md
    counts those RPCs). Back come each
    task's updated variables, which refresh the local copy, and from the statistics' ps
    the counters. `gradients` empty (acting only): the rollout is counted, nothing applied.

    Returns the counters (float64 [5], EpisodeStats.counters) on the worker, once the
    local copy is refreshed.
    """
    variables = globals_.network.variables
    stats, global_step = globals_.stats, globals_.global_step
    groups = transfer.devices_of(variables) if gradients else {}
    groups.setdefault(stats.device, [])
    # The statistics' ps first: with one ps task the optimizer's names are those of a
    # single shared optimizer, so checkpoints of either read the same.
    order = [stats.device] + [device for device in groups if device != stats.device]
    arrived, applied = {}, {}
    for device in order:
        indices = groups[device]
        outgoing = [gradients[i] for i in indices] + [learning_rate]
        if device == stats.device:
            outgoing.append(finished_returns)
        arrived[device] = transfer.moved(outgoing, source=worker_device, destination=device)
        with tf1.device(device):
            own_step = global_step if device == stats.device else None
            if gradients:
                task_name = tf1.DeviceSpec.from_string(device).task
                applied[device] = apply_to_globals(
                    arrived[device][:len(indices)], [variables[i] for i in indices],
                    arrived[device][len(indices)], config, global_step=own_step,
                    name="Adam" if device == stats.device else f"Adam_ps{task_name}")
            else:  # acting only: the rollout is counted, nothing is applied
                applied[device] = global_step.assign_add(1)
    with tf1.device(stats.device), tf.control_dependencies([applied[stats.device]]):
        record_op = stats.record(task, arrived[stats.device][-1], rollout_steps)

    returned = {}
    for device in order:
        with tf1.device(device), tf.control_dependencies(
                [record_op if device == stats.device else applied[device]]):
            outgoing = [variables[i].read_value() for i in groups[device]]
            if device == stats.device:
                outgoing.append(stats.counters(global_step))
        returned[device] = transfer.moved(outgoing, source=device, destination=worker_device)

    with tf1.device(worker_device):
        # Acting only, no variable comes back: the local copy stays as the local init op
        # synced it.
        refresh_local = assign_op(local_network, transfer.in_variable_order(groups, returned),
                                  "refresh_local")
        with tf.control_dependencies([refresh_local]):
            return tf.identity(returned[stats.device][-1], name="counters")


def sync_local_from_global(local_network, global_network):
    """An op that copies every variable of the global network into the local copy: one
    packed message from each ps task the globals live on (transfer.pulled)."""
    return assign_op(local_network, transfer.pulled(global_network.variables),
                     "sync_local_from_global")


def build_worker_graph(config: A3CConfig, spec: TaskSpec, info: EnvInfo,
                       env_batches: list[EnvBatch],
                       worker_device: str | None = None) -> WorkerGraph:
    """Build the whole A3C graph of worker `spec.task` into the default graph.

    worker_device: where this worker's own ops go (devices.py plans it), e.g.
      "/job:worker/task:3/device:GPU:0"; ops without a kernel there (the env step's
      numpy_function, the queue) fall back to the task's CPU through soft placement.
      Default: the task's CPU. The globals always go to a ps task's CPU.
    """
    worker_device = worker_device or f"/job:worker/task:{spec.task}/cpu:0"
    globals_ = build_globals(config, spec, info, worker_device)

    with tf1.device(worker_device):
        local_network = build_network(info.obs_shape, info.num_actions, config, "local",
                                      local=True)

        state_shape = local_network.state_shape if local_network.recurrent else None
        if local_network.recurrent:
            def policy(obs, state):
                logits, _, after = local_network.step(obs, state)
                return sample_actions(logits), after
        else:
            def policy(obs):
                logits, _ = local_network(obs)
                return sample_actions(logits)

        rollouts = [
            build_rollout(batch, policy, config.rollout_length, state_shape=state_shape)
            for batch in env_batches
        ]
        queue = RolloutQueue(rollouts, config.queue_capacity)

        rollout = queue.dequeue()
        update = (learner_update(local_network, rollout, config) if config.learn
                  else acting_only_update())
        ended = episode_ended(rollout["episode_lengths"])
        finished_returns = tf.boolean_mask(rollout["episode_returns"], ended)
        finished_lengths = tf.boolean_mask(rollout["episode_lengths"], ended)

        # The cluster's env steps as this worker last read them, for the learning rate's
        # anneal: read from the ps by the local init op, then with every update's counters.
        env_steps_seen = tf1.get_variable(
            "env_steps_seen", [], tf.int64, initializer=tf1.zeros_initializer(),
            trainable=False, collections=[tf1.GraphKeys.LOCAL_VARIABLES])
        learning_rate = learning_rate_now(config, update.is_finite, env_steps_seen)

    counters = exchange_with_ps(globals_, local_network, update.gradients, learning_rate,
                                finished_returns, rollout["rewards"].shape.num_elements(),
                                spec.task, worker_device, config)

    with tf1.device(worker_device):
        with tf.control_dependencies([env_steps_seen.assign(tf.cast(counters[1], tf.int64))]):
            counters = tf.identity(counters)
        train_fetches = {
            "global_step": tf.cast(counters[0], tf.int64),
            "env_steps": tf.cast(counters[1], tf.int64),
            "episodes": tf.cast(counters[2], tf.int64),
            "recent_count": tf.cast(counters[3], tf.int32),
            "mean_return_100": tf.cast(counters[4], tf.float32),
        }
        # Built last so it covers the optimizer's slots too. Not sharded: the chief fetches
        # every variable and writes one checkpoint, so no ps needs the chief's filesystem.
        saver = tf1.train.Saver(max_to_keep=3, sharded=False, save_relative_paths=True)
        with tf.control_dependencies([tf1.train.Scaffold.default_local_init_op()]):
            local_init_op = tf.group(
                sync_local_from_global(local_network, globals_.network),
                env_steps_seen.assign(globals_.stats.env_steps.read_value()),
                name="local_init")
    train_fetches.update({
        "loss": update.loss,
        "grad_norm": update.grad_norm,
        "queue_size": queue.size,
        "finished_returns": finished_returns,
        "finished_lengths": finished_lengths,
        "rollout_steps": tf.size(rollout["rewards"]),
        "update_skipped": tf.logical_not(update.is_finite),
        **update.parts,
    })
    return WorkerGraph(train_fetches=train_fetches, global_network=globals_.network, saver=saver,
                       local_init_op=local_init_op)

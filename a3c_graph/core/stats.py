"""The cluster's episode statistics and the rule that says a run is solved.

A run is solved when the mean return of the last RECENT_EPISODES episodes of the whole
cluster reaches the target (Gym's convention for CartPole: the mean over 100 consecutive
episodes). The workers learn that mean from EpisodeStats, counters every worker updates on
the ps; each worker also shows its own last RECENT_EPISODES in TensorBoard; the TF2
benchmark variants keep the same window in their parameter holder, and the learning
benchmark counts a curve only from that many episodes on.

The window and the rule are read by code that must not import TensorFlow yet, or at all
(the worker before it has checked its flags, the TF2 variants before they choose their
device, the learning benchmark's report), so TensorFlow is imported inside EpisodeStats,
which only the worker's graph builds.

The stop rule lives here too, once for every caller: why a worker stops after an update
(training_stop_reason); the target it stops at is resolved with the run (run_spec.py).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

RECENT_EPISODES = 100


class Counters(NamedTuple):
    """The cluster's counters as an update leaves them, by name from the ps to the progress
    file: scalar tensors in the graph (EpisodeStats.counters), numbers once fetched."""

    global_step: Any      # int64: updates applied by all workers
    env_steps: Any        # int64: agent steps of all workers
    episodes: Any         # int64: episodes (Atari: whole games) ended
    recent_count: Any     # int32: recent episodes known, up to RECENT_EPISODES
    mean_return_100: Any  # float32: their mean return, NaN if none


def solved(recent_count: int, mean_return: float, target_return: float) -> bool:
    """Whether a cluster whose last `recent_count` episodes (at most RECENT_EPISODES) have
    a mean return of `mean_return` has reached `target_return`: never before it has finished
    RECENT_EPISODES episodes, however well the first few went."""
    return recent_count >= RECENT_EPISODES and mean_return >= target_return


def training_stop_reason(counters, config, target_return: float, started: float) -> str | None:
    """Why a worker stops training after an update that read the cluster's `counters` (a
    mapping with recent_count, mean_return_100 and env_steps), or None: solved (solved()),
    the env steps or the seconds of its budget spent, counted from `started`: its first
    applied update (progress.py: one clock for every variant)."""
    if solved(int(counters["recent_count"]), float(counters["mean_return_100"]), target_return):
        return "solved"
    if int(counters["env_steps"]) >= config.max_steps:
        return "max_steps"
    if time.time() - started >= config.max_seconds:
        return "max_seconds"
    return None


class EpisodeStats:
    """Cluster-wide counters on the ps: env steps, episodes, and the recent returns.

    Each worker keeps its own last RECENT_EPISODES returns in its own row, stamped with
    the time they ended, so no two workers ever write the same slot; the mean over the
    RECENT_EPISODES newest stamps of all rows is the cluster's mean return of the last 100.
    """

    def __init__(self, num_workers: int):
        import tensorflow as tf

        tf1 = tf.compat.v1
        with tf1.variable_scope("episode_stats"):
            def counter(name, shape, dtype, init=0):
                return tf1.get_variable(name, shape, dtype, trainable=False,
                                        initializer=tf1.constant_initializer(init))
            self.env_steps = counter("env_steps", [], tf.int64)
            self.episodes = counter("episodes", [], tf.int64)
            self.recent_returns = counter("recent_returns", [num_workers, RECENT_EPISODES],
                                          tf.float32)
            # -1 marks an empty slot; real stamps are seconds since the epoch.
            self.recent_end_times = counter("recent_end_times", [num_workers, RECENT_EPISODES],
                                            tf.float64, init=-1.0)
            self.recent_written = counter("recent_written", [num_workers], tf.int64)

    @property
    def device(self) -> str:
        """The ps task's device the counters live on; record() and counters() run there, so
        only their inputs and one vector of results cross to the worker."""
        return self.env_steps.device

    def record(self, task: int, episode_returns, num_env_steps):
        """Op that adds a rollout's finished episodes ([K] returns, oldest first) and steps."""
        import tensorflow as tf

        with tf.device(self.device):
            returns = episode_returns[-RECENT_EPISODES:]
            count = tf.size(returns, out_type=tf.int64)
            start = self.recent_written[task]
            slots = tf.math.floormod(start + tf.range(count, dtype=tf.int64), RECENT_EPISODES)
            indices = tf.stack([tf.fill([count], tf.constant(task, tf.int64)), slots], axis=1)
            # Distinct, increasing stamps keep the order of episodes that end in one rollout.
            stamps = tf.timestamp() + 1e-6 * tf.cast(tf.range(count), tf.float64)
            # The row's count is read (for the slots) before it is advanced: in one group
            # with no order between them, the add ran first and shifted the slots.
            with tf.control_dependencies([indices]):
                advance = self.recent_written.scatter_nd_add([[task]], tf.reshape(count, [1]))
            return tf.group(
                self.recent_returns.scatter_nd_update(indices, returns),
                self.recent_end_times.scatter_nd_update(indices, stamps),
                advance,
                self.episodes.assign_add(tf.size(episode_returns, out_type=tf.int64)),
                self.env_steps.assign_add(tf.cast(num_env_steps, tf.int64)),
            )

    def counters(self, global_step) -> Counters:
        """The Counters, read on the ps (distributed/transfer.py moves them to a worker in
        one message with the updated variables)."""
        import tensorflow as tf

        with tf.device(self.device), tf.name_scope("counters"):
            count, mean = self.recent()
            return Counters(global_step=global_step.read_value(),
                            env_steps=self.env_steps.read_value(),
                            episodes=self.episodes.read_value(),
                            recent_count=count, mean_return_100=mean)

    def recent(self):
        """(number of recent episodes known, up to RECENT_EPISODES; their mean return, NaN
        if none)."""
        import tensorflow as tf

        stamps = tf.reshape(self.recent_end_times.read_value(), [-1])
        returns = tf.reshape(self.recent_returns.read_value(), [-1])
        k = tf.minimum(RECENT_EPISODES, tf.size(stamps))
        newest = tf.math.top_k(stamps, k=k)
        valid = newest.values > 0
        chosen = tf.boolean_mask(tf.gather(returns, newest.indices), valid)
        count = tf.size(chosen)
        mean = tf.cond(count > 0, lambda: tf.reduce_mean(chosen),
                       lambda: tf.constant(float("nan")))
        return count, mean

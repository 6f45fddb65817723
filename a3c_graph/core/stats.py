"""The cluster's episode statistics on the ps: env steps, episodes, and the recent returns
every worker's updates count and every update reads back (stop_rule.py says what a run
stops at)."""

from __future__ import annotations

import tensorflow as tf

from a3c_graph.core.stop_rule import RECENT_EPISODES, Counters


class EpisodeStats:
    """Cluster-wide counters on the ps: env steps, episodes, and the recent returns.

    Each worker keeps its own last RECENT_EPISODES returns in its own row, stamped with
    the time they ended, so no two workers ever write the same slot; the mean over the
    RECENT_EPISODES newest stamps of all rows is the cluster's mean return of the last 100.
    """

    def __init__(self, num_workers: int):
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
        with tf.device(self.device), tf.name_scope("counters"):
            count, mean = self.recent()
            return Counters(global_step=global_step.read_value(),
                            env_steps=self.env_steps.read_value(),
                            episodes=self.episodes.read_value(),
                            recent_count=count, mean_return_100=mean)

    def recent(self):
        """(number of recent episodes known, up to RECENT_EPISODES; their mean return, NaN
        if none)."""
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

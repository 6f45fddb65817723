"""The cluster's episode statistics (a3c_graph.core.stats): the solved rule, and EpisodeStats'
counters as the ps keeps them, here in a graph of one process.

Two workers record finished episodes into their own rows; the mean the workers read back
is over the RECENT_EPISODES newest episodes of all rows, whichever worker finished them.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import tensorflow as tf

from a3c_graph.core.config import resolve_config
from a3c_graph.core.stats import EpisodeStats
from a3c_graph.core.stop_rule import RECENT_EPISODES, solved, training_stop_reason

tf1 = tf.compat.v1


@pytest.mark.parametrize("count, mean, target, expected", [
    (RECENT_EPISODES, 475.0, 475.0, True),
    (RECENT_EPISODES, 474.9, 475.0, False),
    (RECENT_EPISODES - 1, 500.0, 475.0, False),  # a good start is not a solved run
    (RECENT_EPISODES, 1e9, math.inf, False),  # --target-return inf: run to the budget
])
def test_a_run_is_solved_by_the_mean_of_a_full_window(count, mean, target, expected):
    assert solved(count, mean, target) is expected


def counters(env_steps=0, recent_count=0, mean=math.nan):
    return {"env_steps": env_steps, "recent_count": recent_count, "mean_return_100": mean}


def test_training_stops_when_solved_or_its_budget_is_spent():
    config = resolve_config({"max_steps": 1000, "max_seconds": 60.0})
    now = time.time()
    assert training_stop_reason(counters(999, 50, 500.0), config, 475.0, now) is None
    assert training_stop_reason(counters(999, RECENT_EPISODES, 475.0), config, 475.0,
                                now) == "solved"
    # Solved wins over a budget spent in the same update.
    assert training_stop_reason(counters(1000, RECENT_EPISODES, 475.0), config, 475.0,
                                now - 61) == "solved"
    assert training_stop_reason(counters(1000), config, 475.0, now) == "max_steps"
    assert training_stop_reason(counters(10), config, 475.0, now - 61) == "max_seconds"


class Cluster:
    """EpisodeStats of `workers` workers, and ops to record a batch of returns for each."""

    def __init__(self, workers: int = 2):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.stats = EpisodeStats(workers)
            self.global_step = tf1.train.get_or_create_global_step()
            self.returns = tf1.placeholder(tf.float32, [None])
            self.steps = tf1.placeholder(tf.int64, [])
            self.record = [self.stats.record(task, self.returns, self.steps)
                           for task in range(workers)]
            self.counters = self.stats.counters(self.global_step)
            self.session = tf1.Session(graph=self.graph)
            self.session.run(tf1.global_variables_initializer())

    def add(self, task: int, returns, steps: int = 0) -> None:
        self.session.run(self.record[task], {self.returns: returns, self.steps: steps})

    def read(self) -> tuple[int, int, int, int, float]:
        """(global step, env steps, episodes, recent count, recent mean)."""
        step, env_steps, episodes, count, mean = self.session.run(self.counters)
        return int(step), int(env_steps), int(episodes), int(count), float(mean)


def test_before_any_episode_there_is_no_mean():
    assert Cluster().read()[3:] == (0, pytest.approx(math.nan, nan_ok=True))


def test_env_steps_and_episodes_add_up_over_all_workers():
    cluster = Cluster()
    cluster.add(0, [1.0, 2.0], steps=256)
    cluster.add(1, [3.0], steps=256)
    assert cluster.read()[:4] == (0, 512, 3, 3)
    assert cluster.read()[4] == pytest.approx(2.0)


def test_the_mean_is_over_the_newest_window_of_all_workers():
    cluster = Cluster()
    cluster.add(0, np.zeros(80))  # the oldest 80
    cluster.add(1, np.ones(50))   # then 50 newer ones from the other worker
    _, _, episodes, count, mean = cluster.read()
    assert (episodes, count) == (130, RECENT_EPISODES)
    # The 50 ones and the newest 50 of the zeros.
    assert mean == pytest.approx(50 / RECENT_EPISODES)


def test_a_worker_keeps_only_its_own_newest_window():
    cluster = Cluster(workers=1)
    cluster.add(0, np.zeros(RECENT_EPISODES - 10))
    cluster.add(0, np.full(30, 4.0))  # wraps around its row: the 20 oldest are overwritten
    _, _, episodes, count, mean = cluster.read()
    assert (episodes, count) == (RECENT_EPISODES + 20, RECENT_EPISODES)
    assert mean == pytest.approx(30 * 4.0 / RECENT_EPISODES)

"""When a run stops, once for every caller: the window of recent episodes, the rule that
says a run is solved, and why a worker stops after an update.

A run is solved when the mean return of the last RECENT_EPISODES episodes of the whole
cluster reaches the target (Gym's convention for CartPole: the mean over 100 consecutive
episodes). The workers learn that mean from the counters on the ps (stats.EpisodeStats);
each worker also shows its own last RECENT_EPISODES in TensorBoard; the TF2 benchmark
variants keep the same window in their parameter holder, and the learning benchmark counts
a curve only from that many episodes on. The target a run stops at is resolved with the
run (run_spec.py).

No TensorFlow: code that must not import it yet, or at all, reads the window and the rule
(the TF2 variants before they choose their device, the learning benchmark's report).
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

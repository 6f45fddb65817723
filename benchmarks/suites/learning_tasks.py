"""What the learning suite runs and how it judges a run: its tasks (an env, the flags that
make the task, the return that counts as reached) and a run's learning curve, read from the
progress history every worker appends, with the verdict the table reports."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from a3c_graph.core.config import A3CConfig, resolve_config
from a3c_graph.core.stop_rule import RECENT_EPISODES
from a3c_graph.rundir.progress import run_clock


@dataclass(frozen=True)
class Task:
    """One row of the suite: an env, the flags that make the task, what counts as reached."""

    name: str
    flags: Mapping[str, Any]  # A3CConfig fields the task sets; the preset gives the rest
    target: float             # the return the table measures the time to
    floor: float | None = None  # stability: after first reaching target, never below this
    default: bool = True        # run when --tasks is not given
    evaluation_games: int = 0   # games the final checkpoint plays, greedy and sampled (0: none)
    evaluation_steps: int = 0   # and more, whole batches of games, until this many agent steps

    def config(self, given: Mapping[str, Any]) -> A3CConfig:
        return resolve_config({**self.flags, **given})


def _minatar(name: str, game: str, target: float, default: bool = False) -> Task:
    return Task(name, {"env": f"MinAtar/{game}-v1"}, target, default=default)


# MinAtar targets: what a working A3C reaches within the 5M-frame budget (Young and Tian
# 2019, Figure 2, and PPO's published curves); Breakout's is the one the project commits to.
TASKS = {task.name: task for task in (
    Task("cartpole", {"env": "CartPole-v1"}, 475.0),
    Task("cartpole-stability", {"env": "CartPole-v1", "target_return": 1e9,
                                "max_steps": 2_000_000, "max_seconds": 1200.0},
         475.0, floor=400.0),
    _minatar("breakout", "Breakout", 15.0, default=True),
    _minatar("asterix", "Asterix", 10.0),
    _minatar("freeway", "Freeway", 40.0),
    _minatar("seaquest", "Seaquest", 10.0),
    _minatar("space-invaders", "SpaceInvaders", 50.0),
    Task("pong", {"env": "ALE/Pong-v5"}, 18.0, default=False, evaluation_games=10),
    # The A3C paper's and universe-starter-agent's Pong: deterministic, frame skip 4. Trained
    # for the whole budget, not stopped at 18: the first reading of 18 is the luckiest
    # 100-game window of a policy still improving, whose own games average less (2026-11-26:
    # checkpoints taken there played 16.4-17.9 sampled); the budget's end 18.1-19.6.
    Task("pong-deterministic", {"env": "ALE/Pong-v5", "repeat_action_probability": 0.0,
                                "max_seconds": 2700.0, "target_return": math.inf}, 18.0,
         default=False, evaluation_games=10),
    # The A3C paper's other games on the classic protocol, each to the atari preset's 40M
    # frames (the launcher's command plus --protocol classic); the target, a line on the
    # curve and no stop rule, is rl-baselines3-zoo's A2C score at 40M frames. The final
    # checkpoint plays at least 100 whole games and 150,000 agent steps (rl-zoo's
    # evaluation of these games: 150,000 agent steps of whole games, 47 to 194 of them).
    *(Task(name, {"env": f"ALE/{game}-v5", "protocol": "classic"}, a2c_score,
           default=False, evaluation_games=100, evaluation_steps=150_000)
      for name, game, a2c_score in (("atari-breakout", "Breakout", 280.0),
                                    ("atari-beamrider", "BeamRider", 2890.0),
                                    ("atari-qbert", "Qbert", 3882.0),
                                    ("atari-spaceinvaders", "SpaceInvaders", 627.0))),
    # Continuous control (the continuous preset) for its budget of 1M env steps. The line on
    # the curve is rl-baselines3-zoo's A2C at 1M steps (benchmark.md: v3 envs, one seed, its
    # final agent's mean action over 150k eval steps); the verdict is the final checkpoint's
    # mean action over 30 whole episodes, as rl-zoo evaluates.
    # Pendulum carries rl-zoo's A2C settings for it (hyperparams/a2c.yml: 8 envs x 8 steps,
    # gamma and GAE 0.9, vf_coef 0.4 on the squared error (0.8 on this project's half
    # squared error), the rate annealed from 7e-4, PyTorch's RMSprop, rewards scaled, gSDE
    # from a log std of -2, PyTorch's default initialization): on the preset's plain
    # Gaussian it did not learn (docs/learning.md).
    Task("pendulum", {"env": "Pendulum-v1", "envs_per_worker": 4, "rollout_length": 8,
                      "gamma": 0.9, "gae_lambda": 0.9, "value_coef": 0.8,
                      "anneal_learning_rate": True, "optimizer": "rmsprop-pytorch",
                      "normalize_rewards": True, "sde": True, "log_std_init": -2.0,
                      "ortho_init": False},
         -163.0, default=False, evaluation_games=30),
    *(Task(name, {"env": env}, a2c_score, default=False, evaluation_games=30)
      for name, env, a2c_score in (("halfcheetah", "HalfCheetah-v5", 3041.0),
                                   ("hopper", "Hopper-v5", 733.0),
                                   ("walker2d", "Walker2d-v5", 582.0))),
)}


# --------------------------------------------------------------------------- one run's curve

# The points of a curve results.json keeps (Curve.thinned): a plot's resolution and more.
STORED_POINTS = 2000


@dataclass
class Curve:
    """A run's learning curve: one point per progress write of any worker, oldest first
    (results.json keeps it thinned).

    seconds since launch, env steps, frames (env steps x frame skip), the cluster's mean
    return of the last 100 episodes, the lowest mean read since the worker's previous
    write, and the policy's entropy (None before the first update).
    """

    seconds: list[float] = field(default_factory=list)
    env_steps: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    mean_return: list[float] = field(default_factory=list)
    lowest_return: list[float] = field(default_factory=list)
    entropy: list[float | None] = field(default_factory=list)

    @classmethod
    def from_history(cls, rows: Sequence[dict], launches: Sequence[float],
                     frame_skip: int) -> Curve:
        """The curve of a run's history (read_history), its seconds on the run's own clock
        (run_clock: a run resumed in its log dir sums the training time of its pieces)."""
        curve = cls()
        for row, seconds in zip(rows, run_clock(rows, launches)):
            # The mean of "the last 100 episodes" means something once there are 100.
            if row.get("mean_return_100") is None or (row.get("episodes") or 0) < RECENT_EPISODES:
                continue
            mean = float(row["mean_return_100"])
            curve.seconds.append(round(seconds, 2))
            curve.env_steps.append(int(row["env_steps"]))
            curve.frames.append(int(row["env_steps"]) * frame_skip)
            curve.mean_return.append(mean)
            lowest = row.get("lowest_mean_return_100")
            curve.lowest_return.append(mean if lowest is None else min(float(lowest), mean))
            curve.entropy.append(row.get("entropy"))
        return curve

    def first_reaching(self, target: float) -> int | None:
        return next((i for i, m in enumerate(self.mean_return) if m >= target), None)

    def thinned(self, points: int = STORED_POINTS) -> Curve:
        """The curve as results.json stores it: every worker writes the cluster's counters,
        so 16 workers over hours make ~100k near-identical points. Kept: the first and the
        last point, one at least every 1/`points` of the run's seconds, and every new best
        mean, so the first point at or past any return is the full curve's; a dropped
        point's dip goes into the next kept point's lowest."""
        if len(self.seconds) <= points:
            return self
        spacing = (self.seconds[-1] - self.seconds[0]) / points
        kept = Curve()
        best, last_kept, dip = -math.inf, -math.inf, math.inf
        for i, mean in enumerate(self.mean_return):
            dip = min(dip, mean, self.lowest_return[i])
            if not (mean > best or self.seconds[i] >= last_kept + spacing
                    or i == len(self.seconds) - 1):
                continue
            for name in (f.name for f in fields(self) if f.name != "lowest_return"):
                getattr(kept, name).append(getattr(self, name)[i])
            kept.lowest_return.append(dip)
            best, last_kept, dip = max(best, mean), self.seconds[i], math.inf
        return kept


def judge(curve: Curve, task: Task) -> dict[str, Any]:
    """What the table reports of one run's curve."""
    first = curve.first_reaching(task.target)
    entropies = [e for e in curve.entropy if e is not None]
    result: dict[str, Any] = {
        "reached": first is not None,
        "seconds_to_target": curve.seconds[first] if first is not None else None,
        "env_steps_to_target": curve.env_steps[first] if first is not None else None,
        "frames_to_target": curve.frames[first] if first is not None else None,
        "final_mean_return_100": curve.mean_return[-1] if curve.mean_return else None,
        "best_mean_return_100": max(curve.mean_return, default=None),
        "lowest_entropy": min(entropies, default=None),
    }
    if task.floor is not None:
        # The readings after the first that reached the target (whose own interval's lowest
        # reading still belongs to the climb).
        after = range(first + 1, len(curve.seconds)) if first is not None else range(0)
        lowest = min([curve.mean_return[first]] + [curve.lowest_return[i] for i in after]
                     ) if first is not None else None
        # Time below the target after first reaching it: the intervals with a reading below.
        below = sum(curve.seconds[i] - curve.seconds[i - 1] for i in after
                    if curve.lowest_return[i] < task.target)
        result.update({
            "lowest_mean_after_target": lowest,
            "seconds_below_target_after": round(float(below), 1) if first is not None else None,
            "held": first is not None and lowest is not None and lowest >= task.floor,
        })
    return result

"""The Atari table's statistics, as the field now reports them (Agarwal et al. 2021, "Deep RL
at the Edge of the Statistical Precipice"), for benchmarks.atari_games.

- A run's evaluation: the mean of its games, the standard error of that mean and a 95 %
  percentile bootstrap interval (scipy.stats.bootstrap).
- A game's score over seeds: the mean of the seeds' evaluation means, and a 95 % interval by
  a two-level bootstrap (the seeds drawn with replacement, then each drawn seed's games), so
  that both the spread between seeds and each evaluation's own noise widen it; 3 seeds alone
  give a bootstrap over seeds only 10 distinct draws. The verdict against an anchor's score
  is read off that interval: above, level or below.
- Over games: the interquartile mean (IQM) and the mean of scores normalised by random and
  human play, with stratified bootstrap intervals over games x seeds, and the performance
  profile (the fraction of runs above each normalised score), from the `rliable` library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 10_000
SEED = 0  # every interval is drawn with this seed: the same data renders the same table

# Random and human play per game (Mnih et al. 2015, as the normalised scores of the
# literature use them; rliable's Atari data the same).
RANDOM_AND_HUMAN = {
    "atari-breakout": (1.7, 30.5),
    "atari-beamrider": (363.9, 16926.5),
    "atari-qbert": (163.9, 13455.0),
    "atari-spaceinvaders": (148.0, 1668.7),
}


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error and 95 % interval."""

    mean: float
    standard_error: float
    low: float
    high: float

    def verdict(self, anchor: float) -> str:
        """Where `anchor` falls against the interval: "above" (the interval above it),
        "below", or "level" (inside it)."""
        if self.low > anchor:
            return "above"
        if self.high < anchor:
            return "below"
        return "level"

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "standard_error": self.standard_error,
                "low": self.low, "high": self.high}


def evaluation_estimate(returns: Sequence[float]) -> Estimate:
    """One evaluation's games: their mean, its standard error (the games' sample standard
    deviation / sqrt(games)) and a 95 % percentile bootstrap interval of the mean."""
    from scipy.stats import bootstrap

    values = np.asarray(returns, dtype=float)
    if values.size < 2:
        raise ValueError(f"an interval needs at least 2 games, got {values.size}")
    mean = float(values.mean())
    error = float(values.std(ddof=1) / np.sqrt(values.size))
    if np.all(values == values[0]):  # every game the same score: no spread to resample
        return Estimate(mean, 0.0, mean, mean)
    interval = bootstrap((values,), np.mean, confidence_level=CONFIDENCE,
                         n_resamples=RESAMPLES, method="percentile",
                         random_state=np.random.default_rng(SEED)).confidence_interval
    return Estimate(mean, error, float(interval.low), float(interval.high))


def game_estimate(evaluations: Sequence[Sequence[float]]) -> Estimate:
    """A game's score over its seeds, from each seed's evaluation games: the mean of the
    seeds' means; the standard error of that mean over seeds (one seed: its evaluation's);
    and the 95 % interval of a two-level bootstrap, seeds and then each drawn seed's games
    drawn with replacement."""
    seeds = [np.asarray(games, dtype=float) for games in evaluations]
    if not seeds or any(games.size < 2 for games in seeds):
        raise ValueError("a game's interval needs at least one seed of at least 2 games")
    means = np.array([games.mean() for games in seeds])
    if len(seeds) == 1:
        return evaluation_estimate(seeds[0])
    rng = np.random.default_rng(SEED)
    draws = np.empty(RESAMPLES)
    for r in range(RESAMPLES):
        picked = rng.integers(len(seeds), size=len(seeds))
        draws[r] = np.mean([rng.choice(seeds[k], size=seeds[k].size).mean() for k in picked])
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Estimate(float(means.mean()), float(means.std(ddof=1) / np.sqrt(len(seeds))),
                    float(low), float(high))


def normalized(game: str, scores: np.ndarray | float) -> np.ndarray:
    """Scores of `game` as (score - random) / (human - random)."""
    random_play, human = RANDOM_AND_HUMAN[game]
    return (np.asarray(scores, dtype=float) - random_play) / (human - random_play)


def score_matrix(scores: Mapping[str, Sequence[float]], games: Sequence[str]) -> np.ndarray:
    """Normalised scores as rliable takes them: [runs, games], run k of each game in row k
    (every game needs the same number of runs)."""
    runs = {len(scores[game]) for game in games}
    if len(runs) != 1:
        raise ValueError(f"every game needs as many runs; got {[len(scores[g]) for g in games]}")
    return np.stack([normalized(game, scores[game]) for game in games], axis=1)


@dataclass(frozen=True)
class Aggregates:
    """rliable's aggregates of one agent's normalised scores, each (point, low, high)."""

    iqm: tuple[float, float, float]
    mean: tuple[float, float, float]


def aggregates(matrices: Mapping[str, np.ndarray]) -> dict[str, Aggregates]:
    """Per agent ([runs, games] normalised scores): the IQM and the mean over runs x games,
    with 95 % stratified bootstrap intervals (rliable.library.get_interval_estimates)."""
    from rliable import library, metrics

    def both(scores: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores)])

    points, intervals = library.get_interval_estimates(
        dict(matrices), both, reps=RESAMPLES, confidence_interval_size=CONFIDENCE,
        random_state=np.random.RandomState(SEED))
    return {name: Aggregates(
        iqm=(float(points[name][0]), float(intervals[name][0, 0]), float(intervals[name][1, 0])),
        mean=(float(points[name][1]), float(intervals[name][0, 1]),
              float(intervals[name][1, 1])))
        for name in matrices}


def performance_profiles(matrices: Mapping[str, np.ndarray], taus: np.ndarray
                         ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per agent, the fraction of its runs x games whose normalised score exceeds each tau,
    and its 95 % stratified bootstrap band (rliable.library.create_performance_profile)."""
    from rliable import library

    np.random.seed(SEED)  # rliable draws the profile's bands from NumPy's global generator
    return library.create_performance_profile(dict(matrices), taus, reps=2_000,
                                              confidence_interval_size=CONFIDENCE)

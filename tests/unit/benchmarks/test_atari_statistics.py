"""The Atari table's statistics (benchmarks/suites/atari_statistics.py) against figures worked
out by hand and against what a bootstrap interval must do."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rliable", reason="the bench extra is not installed")

from benchmarks.suites import atari_statistics as stats  # noqa: E402


def test_an_evaluation_has_its_mean_standard_error_and_a_bootstrap_interval_around_it():
    estimate = stats.evaluation_estimate([1.0, 2.0, 3.0, 4.0, 5.0])
    assert estimate.mean == 3.0
    assert estimate.standard_error == pytest.approx(np.sqrt(2.5 / 5))  # s^2 = 2.5
    assert 1.0 <= estimate.low < 3.0 < estimate.high <= 5.0


def test_the_interval_of_many_games_is_about_two_standard_errors_each_side_and_narrows():
    rng = np.random.default_rng(7)
    games = rng.normal(280.0, 60.0, size=400)
    estimate = stats.evaluation_estimate(games)
    assert estimate.low == pytest.approx(estimate.mean - 1.96 * estimate.standard_error, abs=1.0)
    assert estimate.high == pytest.approx(estimate.mean + 1.96 * estimate.standard_error, abs=1.0)
    quarter = stats.evaluation_estimate(games[:100])
    # Four times the games: about half the width.
    ratio = (estimate.high - estimate.low) / (quarter.high - quarter.low)
    assert 0.4 < ratio < 0.6


def test_the_same_data_gives_the_same_interval_and_one_game_gives_none():
    games = [10.0, 30.0, 20.0, 50.0, 15.0]
    assert stats.evaluation_estimate(games) == stats.evaluation_estimate(games)
    assert stats.evaluation_estimate([7.0, 7.0, 7.0]) == stats.Estimate(7.0, 0.0, 7.0, 7.0)
    with pytest.raises(ValueError, match="at least 2 games"):
        stats.evaluation_estimate([3.0])


@pytest.mark.parametrize("anchor, verdict", [(280.0, "level"), (240.0, "above"),
                                             (330.0, "below"), (250.0, "level")])
def test_the_verdict_against_an_anchor_is_read_off_the_interval(anchor, verdict):
    assert stats.Estimate(287.5, 20.0, 250.0, 320.0).verdict(anchor) == verdict


def test_seeds_that_disagree_widen_a_games_interval_beyond_each_evaluations_own():
    rng = np.random.default_rng(3)
    apart = [rng.normal(mean, 5.0, size=100) for mean in (100.0, 200.0, 300.0)]
    estimate = stats.game_estimate(apart)
    assert estimate.mean == pytest.approx(np.mean([games.mean() for games in apart]))
    # The standard error over seeds: the seeds' means' spread / sqrt(3), about 100 / sqrt(3).
    means = [games.mean() for games in apart]
    assert estimate.standard_error == pytest.approx(np.std(means, ddof=1) / np.sqrt(3))
    assert estimate.low < 160.0 and estimate.high > 240.0
    # Seeds that agree: about the pooled evaluation's width, far narrower.
    agree = [rng.normal(200.0, 5.0, size=100) for _ in range(3)]
    narrow = stats.game_estimate(agree)
    assert narrow.high - narrow.low < 5.0
    assert narrow.low < 200.0 < narrow.high


def test_one_seed_is_its_evaluations_estimate():
    games = [5.0, 9.0, 12.0, 3.0, 8.0, 10.0]
    assert stats.game_estimate([games]) == stats.evaluation_estimate(games)


def test_scores_are_normalised_by_random_and_human_play():
    random_play, human = stats.RANDOM_AND_HUMAN["atari-breakout"]
    assert stats.normalized("atari-breakout", [random_play, human]).tolist() == [0.0, 1.0]
    # rl-zoo's A2C on Breakout, 279.8: about 9.6 human.
    assert stats.normalized("atari-breakout", 279.8) == pytest.approx((279.8 - 1.7) / 28.8)


def test_iqm_drops_the_outer_quarters_where_the_mean_does_not():
    scores = {"atari-breakout": [0.0, 0.0], "atari-beamrider": [0.0, 0.0],
              "atari-qbert": [0.0, 0.0], "atari-spaceinvaders": [0.0, 100.0]}
    games = list(stats.RANDOM_AND_HUMAN)
    matrix = stats.score_matrix(scores, games)
    assert matrix.shape == (2, 4)
    # Normalised: one run of Space Invaders at (100 - 148) / 1520.7, every other score random
    # play's 0 less its own random score.
    flat = np.sort(matrix.ravel())
    result = stats.aggregates({"agent": matrix})["agent"]
    assert result.iqm[0] == pytest.approx(flat[2:6].mean())
    assert result.mean[0] == pytest.approx(flat.mean())
    for point, low, high in (result.iqm, result.mean):
        assert low <= point <= high


def test_games_with_different_numbers_of_runs_are_refused():
    with pytest.raises(ValueError, match="as many runs"):
        stats.score_matrix({"atari-breakout": [1.0, 2.0], "atari-qbert": [3.0]},
                           ["atari-breakout", "atari-qbert"])


def test_the_performance_profile_is_the_fraction_of_runs_above_each_score():
    matrix = np.array([[0.1, 0.5], [0.9, 1.5]])
    profiles, bands = stats.performance_profiles({"agent": matrix}, np.array([0.0, 0.6, 1.0]))
    assert profiles["agent"].tolist() == [1.0, 0.5, 0.25]
    assert bands["agent"].shape == (2, 3)

"""benchmarks.step_budget: the CPU budget of an agent step, from step_cost's rows and the
cluster runs' CPU time. Its arithmetic is checked on hand-made figures; a real budget of a
short CartPole run is the slow test (three cluster runs and step_cost: about a minute)."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import REPO, run_to_end

from benchmarks.suites.step_budget import budget_rows

PROG = [sys.executable, "-m", "benchmarks.step_budget"]


def test_each_row_is_its_share_of_the_training_runs_cpu_per_agent_step():
    # step_cost, us per step of B = 4 envs: env 800, +80 at the numpy_function boundary,
    # policy 200, the rollout 1,200 in all; learner 320. The cluster: acting 400 us per
    # agent step (5 of them the ps's), training 600 (45 the ps's).
    cost = {"env only": 800.0, "numpy_function": 880.0, "policy only": 200.0,
            "graph rollout": 1200.0, "learner": 320.0}
    rows = budget_rows(cost, 4, {"total": 600.0, "ps": 45.0}, {"total": 400.0, "ps": 5.0},
                       cores=2, steps_per_sec=3000.0)
    figures = {row: value for _, row, value in rows}
    assert list(figures.values()) == [
        200.0,  # env: 800 / 4
        20.0,  # boundary: (880 - 800) / 4
        50.0,  # policy: 200 / 4
        30.0,  # loop and recorder: (1200 - 880 - 200) / 4
        100.0,  # the cluster's share of acting: 400 - 1200 / 4
        400.0,  # acting
        80.0,  # forward and backward: 320 / 4
        120.0,  # the rest of an update: 600 - 400 - 80
        40.0,  # of which the ps: 45 - 5
        200.0,  # learning: 600 - 400
        600.0,  # total
        pytest.approx(2e6 / 600.0),  # what two cores allow at 600 us a step
        3000.0]
    # Acting's parts add up to acting, learning's to learning.
    assert sum(list(figures.values())[:5]) == figures["= acting, in the cluster"]


def test_a_bad_flag_ends_in_one_line(tmp_path):
    result = run_to_end([*PROG, "--seconds", "0", "--out", tmp_path], cwd=REPO, timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("benchmarks.step_budget: error: ")
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_cartpole_budget_accounts_for_its_training_runs_cpu(tmp_path):
    result = run_to_end([*PROG, "--env", "CartPole-v1", "--seconds", "5", "--rollouts", "5",
                         "--out", tmp_path, "--progress-secs", "1"], cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    budget = json.loads((tmp_path / "budget.json").read_text())
    figures = {row["row"]: row["us_per_step"] for row in budget["rows"]}
    training = budget["records"]["main-graph-w2-seed0"]["cpu_us_per_step"]["total"]
    assert figures["training, CPU per agent step"] == training > 0
    env = figures["env (EnvBatch.step; for ALE ids the emulator)"]
    assert figures["= acting, in the cluster"] > env > 0
    assert (tmp_path / "budget.md").read_text() in result.stdout

"""The launcher end to end with the real worker (@pytest.mark.e2e): CartPole solved, then
played from its checkpoint and its curves read from TensorBoard; runs whose workers crash or
hang before their first update, which fail and say why; and a background run that `status`
reports live and `stop` ends.

Every process a test starts is stopped by the test (run_cleanup stops the run in its log dir
through the launcher's own `stop`, by the pids in its pid files), never by name.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from conftest import evaluate_run, last_json_line

from a3c_graph.rundir.progress import read_history
from a3c_graph.system.processes import read_pid_files
from tests.support.launch_helpers import assert_all_gone, run_script

# --------------------------------------------------------------------------- end to end

@pytest.mark.e2e
def test_cartpole_is_solved_end_to_end(tmp_path, run_cleanup):
    logdir = tmp_path / "run"
    run_cleanup(logdir)
    result = run_script("--env", "CartPole-v1", "--workers", "2", "--target-return", "195",
                        "--max-seconds", "150", "--logdir", str(logdir), timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = last_json_line(result.stdout)
    assert summary["solved"] is True, summary
    assert summary["stop_reason"] == "solved"
    assert summary["mean_return_100"] >= 195 and summary["episodes"] >= 100
    assert summary == json.loads((logdir / "summary.json").read_text())
    # The run's history: every worker's progress writes, the cluster's env steps growing.
    history = read_history(logdir)
    assert {row["task"] for row in history} == {0, 1}
    for task in (0, 1):  # each worker reads the global counters at its own moments
        steps = [row["env_steps"] for row in history
                 if row["task"] == task and row["state"] != "starting"]
        assert steps and steps == sorted(steps), steps
    assert summary["env_steps"] in {row["env_steps"] for row in history}
    assert any(row["entropy"] is not None and 0 < row["entropy"] <= math.log(2)
               for row in history)
    assert summary["env_steps_per_sec"] > 0
    assert 0 < summary["startup_seconds"] < summary["wall_seconds"]
    records = read_pid_files(logdir)
    assert set(records) == {"launcher", "ps_0", "worker_0", "worker_1"}
    assert all(record.proc is None for record in records.values()), records
    assert_all_gone([record.pid for record in records.values()])

    # The trained agent plays from its checkpoint in a fresh graph, far better than random
    # (a random CartPole policy averages about 22).
    evaluation = evaluate_run(logdir, 3, timeout=120)
    assert evaluation["checkpoint"].startswith(str(logdir))
    assert evaluation["mean_return"] > 100, evaluation

    # TensorBoard (installed with the project) finds the curves the README lists, per worker.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for task in (0, 1):
        events = EventAccumulator(str(logdir / "tb" / f"worker_{task}"))
        events.Reload()
        tags = set(events.Tags()["scalars"])
        assert TENSORBOARD_TAGS <= tags, sorted(TENSORBOARD_TAGS - tags)
        returns = events.Scalars("episode/cluster_mean_return_100")
        assert returns and returns[-1].value > 22  # random play averages about 22
    # The chief's graph, for TensorBoard's graph view, in the worker graph's named parts.
    graph = EventAccumulator(str(logdir / "tb" / "worker_0"))
    graph.Reload()
    scopes = {node.name.split("/")[0] for node in graph.Graph().node}
    assert {"global", "local", "actors", "learner", "to_ps", "from_ps", "refresh_local"} <= scopes


@pytest.mark.e2e
@pytest.mark.parametrize("env, why", [
    # Each process of a worker fails before its first update, and is restarted while its
    # budget lasts: the run ends when none is left, or at the deadline.
    pytest.param("BrokenResetCartPole-v0", r"worker task \d exited with status 1 \(RuntimeError: "
                 r"simulated env failure at reset\); its log is ", id="crashing"),
    # The workers hang before their first update: the backstop deadline ends the run. Slow:
    # it waits out the backstop's minute (`pytest tests/e2e/test_launch_e2e.py -m slow`).
    pytest.param("HangingResetCartPole-v0", r"worker task 0 has not trained yet; its log .* "
                 r"ends: ", marks=pytest.mark.slow, id="hanging"),
])
def test_a_run_whose_workers_never_train_fails_and_says_why(env, why, tmp_path, run_cleanup):
    """It used to end with exit 0 and stop_reason "deadline"; a failed run must not."""
    logdir = tmp_path / "run"
    run_cleanup(logdir)
    result = run_script("--env", f"tests.support.faulty_env:{env}", "--max-seconds", "1",
                        "--max-restarts", "100", "--logdir", str(logdir), timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    error = result.stderr.splitlines()[-1]
    assert re.match(r"launch_cluster: error: no worker trained( within --max-seconds 1 \+ 60 "
                    r"s)?: " + why, error), error
    summary = last_json_line(result.stdout)
    assert summary["exit_code"] == 1 and summary["stop_reason"] in ("crash", "deadline")
    assert summary == json.loads((logdir / "summary.json").read_text())
    records = read_pid_files(logdir)
    assert set(records) == {"launcher", "ps_0", "worker_0", "worker_1"}
    assert all(record.proc is None for record in records.values()), records
    assert_all_gone([record.pid for record in records.values()])


# The scalars the README documents for TensorBoard.
TENSORBOARD_TAGS = {
    "episode/return", "episode/length", "episode/cluster_mean_return_100", "loss/loss",
    "loss/policy_loss", "loss/value_loss", "loss/entropy", "loss/grad_norm",
    "perf/env_steps_per_sec", "perf/queue_size", "train/learning_rate",
}


@pytest.mark.e2e
def test_background_run_reports_live_and_stops_on_request(tmp_path, run_cleanup):
    logdir = tmp_path / "run"
    run_cleanup(logdir)
    started = run_script("--background", "--max-seconds", "120", "--logdir", str(logdir))
    assert started.returncode == 0, started.stderr
    assert str(logdir) in started.stdout and "stop --logdir" in started.stdout

    status = run_script("status", "--logdir", str(logdir))
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"run {logdir}: live" in status.stdout
    pids = [record.pid for record in read_pid_files(logdir).values()]
    assert len(pids) == 4

    stop = run_script("stop", "--logdir", str(logdir), timeout=60)
    assert stop.returncode == 0, stop.stderr
    assert_all_gone(pids)
    assert json.loads((logdir / "summary.json").read_text())["stop_reason"] == "interrupted"

    after = run_script("status", "--logdir", str(logdir))
    assert after.returncode == 3
    assert "not live; summary.json exists" in after.stdout

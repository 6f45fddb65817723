"""The benchmark harness run for real (`python -m benchmarks.run`), one variant at a time, and
the ParameterServerStrategy probe the README quotes.

Each smoke run trains one worker for a few seconds and checks what a user reads afterwards: a
complete record per run, the results files and plots, the one clock's accounting rules on the
run's own records (a3c_graph.rundir.progress), and no process of the run left on the
machine. No test asserts a speed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_to_end

from a3c_graph.rundir.progress import read_history
from benchmarks.harness import one_run
from tests.support.benchmark_helpers import HAS_RAY, gone

# A few seconds of one worker: long enough for a few progress reports, a curve and a checkpoint.
SMOKE_FLAGS = ["--seeds", "1", "--workers", "1", "--max-seconds", "4", "--progress-secs", "1",
               "--rollout-length", "16", "--envs-per-worker", "4"]
SMOKE_TIMEOUT_SECS = 240


def assert_the_one_clock(record: dict) -> None:
    """The accounting rules every variant keeps (a3c_graph.rundir.progress), on a run's records."""
    logdir = Path(record["logdir"])
    history = read_history(logdir)
    rollout_steps = 16 * 4  # SMOKE_FLAGS: T x B
    # Start-up ends at the run's first applied update, whose report is written at once:
    # each worker's first report after "starting" holds its first rollout and no other.
    started = [r["training_started"] for r in history if r["training_started"]]
    assert record["training_started"] == min(started)
    assert record["startup_s"] == pytest.approx(min(started) - record["launched"], abs=0.011)
    for task in {r["task"] for r in history}:
        reports = [r for r in history if r["task"] == task]
        first = next(r for r in reports if r["state"] != "starting")
        assert first["local_env_steps"] == rollout_steps, reports
        final = reports[-1]
        assert final["state"] == "done"
        # Its --max-seconds counted from its own first applied update, not from launch.
        if final["stop_reason"] == "max_seconds":
            assert final["time"] - final["training_started"] >= record["max_seconds"]
    # The final report is written when training ends, before the teardown: the graph's
    # chief writes its last checkpoint after it, and every variant its summary.
    # (Both sides rounded to 0.01 s: they may differ by one in the last place.)
    assert record["stopped_s"] == pytest.approx(
        max(r["time"] for r in history) - record["launched"], abs=0.011)
    assert record["launched"] + record["stopped_s"] <= (logdir / "summary.json").stat().st_mtime
    if record["variant"] == "graph":
        last_checkpoint = max(p.stat().st_mtime for p in logdir.glob("model.ckpt-*.index"))
        assert record["launched"] + record["stopped_s"] <= last_checkpoint
    # Memory is PSS, shared pages counted once: never more than the summed RSS.
    assert 0 < record["peak_memory_mb"] <= record["peak_rss_mb"]


@pytest.mark.e2e
@pytest.mark.parametrize("variant", [
    "graph",
    "tf2_mp",
    # Slow: Ray's start-up doubles the run; the tf2_ray variant's own run is in the default
    # suite through tests/e2e/test_security.py, the harness's path through tf2_mp's.
    pytest.param("tf2_ray", marks=[pytest.mark.slow, pytest.mark.skipif(
        not HAS_RAY, reason="ray is not installed (pip install -e '.[bench]')")]),
])
def test_harness_smoke_run(tmp_path, variant):
    out = tmp_path / "results"
    # Past the timeout, the harness and every run it started are stopped by their pids.
    result = run_to_end([sys.executable, "-m", "benchmarks.run", "--variants", variant, "--out",
                         out, *SMOKE_FLAGS], cwd=REPO, timeout=SMOKE_TIMEOUT_SECS)
    assert result.returncode == 0, result.stderr[-2000:]

    data = json.loads((out / "results.json").read_text())
    (record,) = data["records"]
    assert tuple(record) == one_run.RECORD_KEYS
    assert record["variant"] == variant and record["exit_code"] == 0
    assert record["stop_reason"] in ("solved", "max_seconds", "max_steps")
    assert record["steps_per_sec"] > 0
    assert record["frame_skip"] == 1 and record["frames_per_sec"] == record["steps_per_sec"]
    assert data["medians"][variant]["frames_per_sec"] == data["medians"][variant]["steps_per_sec"]
    assert record["startup_s"] > 0 and record["final_env_steps"] > 0 and record["return_curve"]
    assert_the_one_clock(record)
    assert record["solved"] == (record["time_to_solve_s"] is not None)
    assert data["medians"][variant]["runs"] == 1
    assert {"cpu_count", "memory_gb", "python", "versions"} <= set(data["machine"])

    # What the variant itself wrote, in the graph launcher's format.
    summary = json.loads((Path(record["logdir"]) / "summary.json").read_text())
    assert summary["env_steps"] == record["final_env_steps"]
    table = (out / "results.md").read_text()
    assert f"| {variant} | 1 | " in table and f"| {variant} | 1 | " in result.stdout
    for plot in ("returns.png", "steps_per_sec.png"):
        assert (out / plot).read_bytes()[:4] == b"\x89PNG"

    # Nothing the run started is left: the harness checked, and so do we.
    assert record["leftover_processes"] == []
    assert len(record["processes"]) >= 2
    assert all(gone(p["pid"], p["create_time"]) for p in record["processes"])


@pytest.mark.e2e
def test_the_ps_strategy_probe_finds_python_steps_run_in_the_coordinator():
    # What the README says of TF2's ParameterServerStrategy: if a TF release lets a worker
    # run a numpy_function of its own, this fails and the README's answer is out of date.
    result = run_to_end([sys.executable, "-m", "benchmarks.probes.ps_strategy"], cwd=REPO,
                        timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = dict(line.strip().split(": ", 1) for line in result.stdout.splitlines()
                   if line.startswith("  "))
    assert answers["tf ops"].startswith("runs") and answers["tf ops, again"].startswith("runs")
    assert answers["numpy_function"].startswith("fails")
    assert answers["py_function"].startswith("fails")
    assert answers["the Python function ran in the coordinator's process"].startswith("runs")

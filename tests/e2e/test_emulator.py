"""The env alone (benchmarks.variants.emulator): the run benchmarks.run --ceiling measures
every variant against. It must time what it says on the harness's one clock, stop on a
signal with its report written, refuse a bad flag in one line, and leave nothing running."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import REPO, run_to_end

from a3c_graph.core.config import A3CConfig
from a3c_graph.rundir.progress import read_history
from benchmarks.harness import one_run
from tests.support.benchmark_helpers import gone

PROG = [sys.executable, "-m", "benchmarks.variants.emulator"]
ENVS = 4


@pytest.mark.e2e
def test_the_harness_times_the_env_alone_on_its_one_clock(tmp_path):
    config = A3CConfig(env="CartPole-v1", envs_per_worker=ENVS, progress_secs=0.5)
    spec = one_run.RunSpec(one_run.EMULATOR, 0, 2, 2.0, "ceiling")
    record = one_run.run_one(spec, config, tmp_path)
    assert record["exit_code"] == 0 and record["stop_reason"] == "max_seconds"
    assert record["steps_per_sec"] > 0 and record["startup_s"] > 0
    assert record["cpu_us_per_step"]["total"] > 0
    history = read_history(tmp_path / "runs" / spec.name)
    final = history[-1]
    assert final["state"] == "done" and final["stop_reason"] == "max_seconds"
    # It stepped for its budget, counted from the first report: every process's envs,
    # whole batches of B each.
    assert final["time"] - final["training_started"] >= 2.0
    assert final["env_steps"] > 0 and final["env_steps"] % ENVS == 0
    # Two env processes under the one the harness started; all gone now.
    assert len(record["processes"]) >= 3
    assert record["leftover_processes"] == []
    assert all(gone(p["pid"], p["create_time"]) for p in record["processes"])


@pytest.mark.e2e
def test_a_signal_stops_it_with_its_report_and_its_processes(tmp_path):
    process = subprocess.Popen([*PROG, "--env", "CartPole-v1", "--workers", "2", "--logdir",
                                tmp_path, "--max-seconds", "600", "--progress-secs", "0.5"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not any(row["state"] == "running" for row in read_history(tmp_path)):
            assert time.monotonic() < deadline and process.poll() is None, process.stderr
            time.sleep(0.2)
        children = [(child.pid, child.create_time())
                    for child in psutil.Process(process.pid).children(recursive=True)]
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr
    final = read_history(tmp_path)[-1]
    assert final["state"] == "done" and final["stop_reason"] == "signal"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["exit_code"] == 143 and summary["env_steps"] == final["env_steps"] > 0
    assert len(children) >= 2
    # Each ends on its own: the env processes before the main one exits, multiprocessing's
    # resource tracker once it reads the main one's end of their pipe.
    deadline = time.monotonic() + 10
    while not all(gone(pid, created) for pid, created in children):
        assert time.monotonic() < deadline, [c for c in children if not gone(*c)]
        time.sleep(0.1)


def test_a_bad_flag_ends_in_one_line(tmp_path):
    result = run_to_end([*PROG, "--workers", "0", "--logdir", tmp_path], cwd=REPO, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "benchmarks.variants.emulator: error: --workers must be at least 1, got 0"]
    assert not (tmp_path / "summary.json").exists()

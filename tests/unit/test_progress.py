"""The progress files' totals as the launcher and the benchmarks read them."""

import pytest

from a3c_graph.rundir.progress import run_totals


def report(task, time, state, global_step, env_steps):
    return {"task": task, "time": time, "state": state, "global_step": global_step,
            "env_steps": env_steps, "episodes": 0, "mean_return_100": None,
            "local_steps_per_sec": 0.0, "training_started": None if state == "starting" else 1.0}


def test_the_newest_reading_of_the_global_counters_wins():
    totals = run_totals({0: report(0, 10.0, "running", 300, 9600),
                         1: report(1, 11.0, "running", 310, 9920)})
    assert (totals.global_step, totals.env_steps) == (310, 9920)


def test_a_restarted_worker_that_is_still_starting_does_not_reset_the_totals():
    # Its file is the newest, but it has not read the global counters yet.
    totals = run_totals({0: report(0, 10.0, "running", 300, 9600),
                         1: report(1, 12.0, "starting", 0, 0)})
    assert (totals.global_step, totals.env_steps) == (300, 9600)


def test_before_any_worker_trains_the_starting_reports_are_all_there_is():
    totals = run_totals({0: report(0, 5.0, "starting", 0, 0)})
    assert totals.global_step == 0


def test_the_first_applied_update_ends_start_up_and_is_reported_at_once(tmp_path):
    import json

    from a3c_graph.rundir.progress import ProgressFile, read_history

    progress = ProgressFile(tmp_path, 0, 195.0, progress_secs=60.0)
    progress.write("starting")
    assert not progress.due()
    progress.update({"global_step": 1, "env_steps": 256}, 256)  # the first applied update
    assert progress.training_started is not None and progress.due()
    progress.write("running")
    progress.update({"global_step": 2, "env_steps": 512}, 256)
    assert not progress.due()  # then every progress_secs, as before
    progress.write("done", stop_reason="max_seconds")
    starting, first, final = read_history(tmp_path)
    assert starting["training_started"] is None
    assert first["training_started"] == final["training_started"] == progress.training_started
    assert first["time"] >= first["training_started"]
    # The first rollout was collected during start-up: counted, but not in a rate.
    assert (first["local_env_steps"], final["local_env_steps"]) == (256, 512)
    assert json.loads((tmp_path / "progress" / "worker_0.json").read_text())["state"] == "done"


def history_row(task, time, env_steps, state="running", training_started=None, **extra):
    """One progress report as a worker appends it to its history (progress/worker_<i>.jsonl)."""
    return {"task": task, "time": time, "state": state, "env_steps": env_steps,
            "global_step": env_steps // 64, "episodes": 0, "mean_return_100": None,
            "local_steps_per_sec": 0.0, "training_started": training_started,
            "stop_reason": None, **extra}


def test_start_up_and_steps_per_sec_come_from_the_history_since_launch(tmp_path):
    import json

    from a3c_graph.rundir.progress import run_timing, summary_fields

    # Launched at 95. Worker 0's first update is applied at 110 and reported at once with
    # the 256 steps applied so far; worker 1's at 110.5. Both stop (final reports) at 125
    # and 125.4, where the cluster's counter reads 60,256.
    run = [history_row(0, 101.0, 0, "starting"), history_row(1, 101.2, 0, "starting"),
           history_row(0, 110.0, 256, training_started=110.0),
           history_row(1, 110.5, 512, training_started=110.5),
           history_row(0, 112.0, 8_000, training_started=110.0),
           history_row(0, 125.0, 60_000, "done", training_started=110.0,
                       stop_reason="max_seconds"),
           history_row(1, 125.4, 60_256, "done", training_started=110.5,
                       stop_reason="max_seconds")]
    # The same logdir held an earlier run, launched at 0 (the run resumed in it): its
    # reports are not this run's, nor is its start.
    earlier = [history_row(0, 20.0, 5_000, training_started=10.0),
               history_row(0, 50.0, 40_000, "done", training_started=10.0)]
    # Start-up: 110 - 95 = 15 s. Steps/s: (60,256 - 256) steps in 125.4 - 110 = 15.4 s,
    # 3,896.1 steps/s: worker 0's first 256 steps were collected during start-up.
    assert run_timing(earlier + run, launched=95.0) == (15.0, pytest.approx(60_000 / 15.4))
    assert run_timing(run[:2], launched=95.0) == (None, None)  # no worker has trained
    assert run_timing(run[:3], launched=95.0) == (15.0, None)  # one report is no rate

    (tmp_path / "progress").mkdir()
    for row in earlier + run:  # as the workers wrote them: the history, and the latest
        path = tmp_path / "progress" / f"worker_{row['task']}.json"
        path.write_text(json.dumps(row))
        with open(path.with_suffix(".jsonl"), "a") as history:
            history.write(json.dumps(row) + "\n")
    summary, _ = summary_fields(tmp_path, started=95.0)
    assert (summary["startup_seconds"], summary["env_steps_per_sec"]) == (15.0, 3896.1)

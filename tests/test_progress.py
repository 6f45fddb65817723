"""The progress files' totals as the launcher and the benchmarks read them."""

from a3c_graph.progress import run_totals


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

    from a3c_graph.progress import ProgressFile, read_history

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

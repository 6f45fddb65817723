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

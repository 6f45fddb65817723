"""The supervisor's decisions, without processes: whether and when a task that exited starts
again, whether a run that ended failed (launcher/restarts.py); which error of its log is
relayed, the progress line, its rate and the stall warnings (launcher/report.py).

The supervisor at work (real processes, signals, the summary) is in
test_launch_supervision.py, with a fake worker module, and in test_supervision.py with
real clusters.
"""

from __future__ import annotations

import pytest

from a3c_graph.launcher.report import (
    STALL_SECS,
    StallWarnings,
    newest_output,
    progress_line,
    steps_per_sec_between,
    task_error,
)
from a3c_graph.launcher.restarts import (
    HEALTHY_SECS,
    RESTART_BACKOFF_SECS,
    RunVerdict,
    TaskExit,
    restart_decision,
    run_verdict,
)
from a3c_graph.rundir.progress import Totals

SHORT = 5.0  # seconds a process ran before it crashed: not healthy


def decide(code: int, job: str = "worker", ran: float = SHORT, before: int = 0,
           max_restarts: int = 5):
    return restart_decision(job, code, ran, before, max_restarts)


# --------------------------------------------------------------------------- restarts

def test_a_worker_that_stopped_on_its_own_is_done():
    decision = decide(0)
    assert (decision.exit, decision.restart_in) == (TaskExit.DONE, None)


def test_a_ps_that_exits_at_all_has_crashed():
    # A ps serves until it is stopped: exit 0 means it went away by itself.
    decision = decide(0, job="ps")
    assert (decision.exit, decision.crashes_in_a_row) == (TaskExit.CRASH, 1)
    assert decision.restart_in == RESTART_BACKOFF_SECS[0]


@pytest.mark.parametrize("code, kind", [(2, TaskExit.USAGE), (69, TaskExit.GAVE_UP),
                                        (74, TaskExit.STORAGE)])
@pytest.mark.parametrize("job", ["ps", "worker"])
def test_bad_input_giving_up_and_a_log_dir_it_cannot_write_are_never_restarted(code, kind, job):
    """74: a full or read-only disk, which a restart cannot cure (no restart loop)."""
    decision = decide(code, job=job, before=1)
    assert (decision.exit, decision.restart_in) == (kind, None)
    assert decision.crashes_in_a_row == 1  # not a crash: the count is left as it was


def test_a_worker_that_lost_the_ps_starts_again_at_once_and_is_not_counted():
    decision = decide(75, before=3, max_restarts=0)
    assert decision.exit is TaskExit.LOST_PS
    assert decision.restart_in == RESTART_BACKOFF_SECS[0]
    assert decision.crashes_in_a_row == 3


def test_crashes_in_a_row_wait_longer_each_time_up_to_the_last_back_off():
    waits, crashes = [], 0
    for _ in range(len(RESTART_BACKOFF_SECS) + 2):
        decision = decide(1, before=crashes, max_restarts=100)
        waits.append(decision.restart_in)
        crashes = decision.crashes_in_a_row
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert crashes == len(waits)


@pytest.mark.parametrize("code", [1, -9, 139])
def test_a_crash_after_max_restarts_in_a_row_ends_the_run(code):
    decision = decide(code, before=2, max_restarts=2)
    assert (decision.exit, decision.crashes_in_a_row, decision.restart_in) == (
        TaskExit.CRASH, 3, None)


def test_with_no_restarts_allowed_the_first_crash_ends_the_run():
    assert decide(1, max_restarts=0).restart_in is None


def test_a_crash_after_a_healthy_run_starts_a_new_series():
    decision = decide(1, ran=HEALTHY_SECS, before=5, max_restarts=5)
    assert (decision.crashes_in_a_row, decision.restart_in) == (1, RESTART_BACKOFF_SECS[0])


# --------------------------------------------------------------------------- the run's end

@pytest.mark.parametrize("exits, trained, at_deadline, verdict", [
    ([0, 0], True, False, RunVerdict.OK),  # solved, budget or signal
    ([], False, True, RunVerdict.OK),  # a launcher of only ps tasks serves to the deadline
    ([1, 1], False, False, RunVerdict.NEVER_TRAINED),  # every process crashed first
    ([None, None], False, True, RunVerdict.NEVER_TRAINED),  # hung before the first update
    ([0, None], True, True, RunVerdict.STUCK),  # trained, then one had to be stopped
    ([0, 1], True, False, RunVerdict.CRASHED),  # a crash when its budget was spent
    ([75, 0], True, False, RunVerdict.CRASHED),  # lost the ps, no budget left to restart
    ([0, -9], True, True, RunVerdict.CRASHED),  # killed, not restarted, at the deadline
])
def test_only_a_run_whose_workers_all_stopped_by_themselves_succeeds(exits, trained,
                                                                     at_deadline, verdict):
    assert run_verdict(exits, trained, at_deadline) is verdict


# --------------------------------------------------------------------------- the error relayed

TRACEBACK = """\
2026-11-23 12:00:00.1 I tensorflow/core/... Started server with target: grpc://localhost:1
Traceback (most recent call last):
  File "a3c_graph/worker.py", line 640, in <module>
    exit_code = main()
                ^^^^^^
  File "tests/support/faulty_env.py", line 54, in reset
    raise RuntimeError("simulated env failure at reset")
RuntimeError: simulated env failure at reset
""".splitlines()


def test_the_workers_own_error_line_is_relayed_without_its_prefix():
    lines = ["some noise", "a3c_graph.worker: error: --envs-per-worker 9999 is too many",
             "more noise"]
    assert task_error(lines) == "--envs-per-worker 9999 is too many"


def test_a_traceback_is_relayed_as_its_exception():
    assert task_error(TRACEBACK) == "RuntimeError: simulated env failure at reset"


def test_of_chained_tracebacks_the_last_exception_is_relayed():
    chained = [*TRACEBACK, "", "During handling of the above exception, another exception "
               "occurred:", "", "Traceback (most recent call last):", '  File "x.py", line 1',
               "MemoryError"]
    assert task_error(chained) == "MemoryError"


def test_a_process_that_said_nothing_has_no_error_to_relay():
    assert task_error(["Segmentation fault (pretend)"]) is None
    assert task_error([]) is None


def test_only_the_newest_process_of_a_task_is_read(tmp_path):
    log = tmp_path / "worker_0.log"
    log.write_text("# 2026-11-23 12:00:00 launch_cluster: python -m a3c_graph.worker ...\n"
                   "a3c_graph.worker: error: from the first process\n"
                   "# 2026-11-23 12:00:05 launch_cluster: python -m a3c_graph.worker ...\n"
                   "Segmentation fault (pretend)\n")
    assert newest_output(log) == ["Segmentation fault (pretend)"]
    assert task_error(newest_output(log)) is None
    assert newest_output(tmp_path / "missing.log") == []


# --------------------------------------------------------------------------- progress line

def test_the_progress_line_before_and_during_training():
    assert progress_line(3.0, None, None) == (
        "[  0:03] waiting for the workers' first progress (connecting to the ps)")
    totals = Totals(time=0.0, global_step=1234, env_steps=56789, episodes=321,
                    mean_return_100=187.25, local_steps_per_sec=0.0, stop_reason=None,
                    solved=False, training_started=1.0)
    assert progress_line(125.0, totals, 4321.6) == (
        "[  2:05] step 1,234  env steps 56,789  4,322 steps/s  episodes 321  "
        "mean return(100) 187.2")
    assert "- steps/s" in progress_line(125.0, totals, None)


def totals_at(time: float, global_step: int, env_steps: int) -> Totals:
    return Totals(time=time, global_step=global_step, env_steps=env_steps, episodes=0,
                  mean_return_100=None, local_steps_per_sec=0.0, stop_reason=None,
                  solved=False, training_started=1.0)


def test_the_rate_is_env_steps_per_second_between_two_readings():
    assert steps_per_sec_between(totals_at(10.0, 5, 1000), totals_at(15.0, 9, 3000)) == 400.0
    assert steps_per_sec_between(None, totals_at(15.0, 9, 3000)) is None
    assert steps_per_sec_between(totals_at(10.0, 5, 1000), None) is None


def test_there_is_no_rate_across_a_restart_or_before_training():
    # A restarted task's counters start from zero, and a restored checkpoint steps back.
    assert steps_per_sec_between(totals_at(10.0, 5, 3000), totals_at(15.0, 9, 1000)) is None
    assert steps_per_sec_between(totals_at(10.0, 0, 0), totals_at(15.0, 9, 3000)) is None
    assert steps_per_sec_between(totals_at(10.0, 5, 1000), totals_at(10.0, 5, 1000)) is None


# --------------------------------------------------------------------------- stall warnings

NOW = 1_000_000.0


def running(age: float, pid: int = 100) -> dict:
    return {"state": "running", "time": NOW - age, "pid": pid}


def test_a_worker_that_stopped_reporting_is_warned_about_once_per_stall():
    stalls = StallWarnings(progress_secs=1.0)
    late = STALL_SECS + 5
    assert stalls.new_stalls({0: running(1.0), 1: running(late)}, {0: 100, 1: 100}, NOW) == [
        f"launch_cluster: warning: worker task 1 has not reported for {late:.0f} s "
        "(cannot reach the ps?)"]
    assert stalls.new_stalls({1: running(late + 5)}, {1: 100}, NOW) == []
    # It reported again, then stalled again: a new warning.
    assert stalls.new_stalls({1: running(1.0)}, {1: 100}, NOW) == []
    assert len(stalls.new_stalls({1: running(late)}, {1: 100}, NOW)) == 1


def test_a_slow_progress_interval_is_no_stall():
    stalls = StallWarnings(progress_secs=10.0)  # its files are due every 10 s: 100 s limit
    assert stalls.new_stalls({0: running(STALL_SECS + 5)}, {0: 100}, NOW) == []


def test_the_file_of_an_earlier_process_or_a_stopped_worker_is_no_stall():
    stalls = StallWarnings(progress_secs=1.0)
    old = STALL_SECS + 5
    # Restarted: the new process (pid 200) is still starting.
    assert stalls.new_stalls({0: running(old, pid=100)}, {0: 200}, NOW) == []
    assert stalls.new_stalls({0: running(old)}, {}, NOW) == []  # no longer running
    assert stalls.new_stalls({0: {**running(old), "state": "done"}}, {0: 100}, NOW) == []

"""The Python API: a3c_graph.train(...) and a3c_graph.evaluate(...) from a caller's process.

One small CartPole run is trained from a thread that is not the main one, as a notebook's
or a sweep script's helper thread would, and everything else reads that run: its summary
against summary.json, its checkpoint played by evaluate(), against the command's own result.
Bad input is refused with the command's line, before anything starts.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import threading

import pytest
from conftest import REPO, child_env, stop_run

import a3c_graph
from a3c_graph.system import processes
from a3c_graph.system.cli import as_flags

# A run that ends at its budget whether it learns or not: one worker, a small network.
SMALL_RUN = dict(workers=1, hidden_sizes=(16,), max_steps=20_000, progress_secs=0.5,
                 checkpoint_secs=5.0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The run trained by a3c_graph.train in a thread of its own, and what was seen of it."""
    logdir = tmp_path_factory.mktemp("api") / "run"
    environ_before = dict(os.environ)
    readings, outcome = [], {}
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("a3c_graph")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    def train() -> None:
        network_before = os.readlink("/proc/thread-self/ns/net")
        try:
            outcome["summary"] = a3c_graph.train(logdir=logdir, on_progress=readings.append,
                                                 **SMALL_RUN)
        except BaseException as error:  # noqa: BLE001 - shown by the test that reads it
            outcome["error"] = error
        outcome["network_changed"] = os.readlink("/proc/thread-self/ns/net") != network_before

    thread = threading.Thread(target=train, name="notebook-helper")
    try:
        thread.start()
        thread.join(timeout=300)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        stop_run(logdir)  # a failed or stuck run leaves nothing behind
    assert not thread.is_alive(), "train() did not return in 300 s"
    if "error" in outcome:
        raise outcome["error"]
    return {"logdir": logdir, "summary": outcome["summary"], "readings": readings,
            "records": records, "environ_changed": dict(os.environ) != environ_before,
            "network_changed": outcome["network_changed"]}


@pytest.mark.e2e
def test_train_from_a_thread_returns_the_summary_json_holds(trained):
    summary = trained["summary"]
    on_disk = json.loads((trained["logdir"] / "summary.json").read_text())
    assert summary == on_disk
    assert summary["exit_code"] == 0
    assert summary["stop_reason"] in ("solved", "max_steps")
    assert summary["env_steps"] >= SMALL_RUN["max_steps"] or summary["solved"]
    assert summary["workers"] == 1 and summary["logdir"] == str(trained["logdir"])
    # Every task has ended: none of the run's pid files names a live process of ours.
    assert all(record.proc is None
               for record in processes.read_pid_files(trained["logdir"]).values())


@pytest.mark.e2e
def test_train_reports_progress_to_the_callback_and_the_logger(trained):
    readings = trained["readings"]
    assert readings, "on_progress was never called"
    assert all(r.env_steps <= trained["summary"]["env_steps"] for r in readings)
    lines = [record.getMessage() for record in trained["records"]]
    assert any("env steps" in line for line in lines), lines


@pytest.mark.e2e
def test_train_leaves_the_callers_environment_and_network_as_they_were(trained):
    assert not trained["environ_changed"]
    # Only the supervising thread entered the private network, not the calling one.
    assert not trained["network_changed"]


@pytest.mark.e2e
def test_evaluate_plays_the_runs_checkpoint_as_the_command_does(trained, capsys):
    from a3c_graph.trained import evaluation

    logdir = str(trained["logdir"])
    environ_before = dict(os.environ)
    result = a3c_graph.evaluate(logdir, episodes=3, seed=7)
    assert dict(os.environ) == environ_before
    assert len(result.returns) == 3
    assert all(1 <= value <= 500 and math.isfinite(value) for value in result.returns)
    assert evaluation.main(["--logdir", logdir, "--episodes", "3", "--seed", "7"]) == 0
    printed = json.loads(capsys.readouterr().out.splitlines()[-1])
    # Greedy actions from the same checkpoint on the same seeds: the same episodes.
    assert printed == result.summary()
    assert printed["mean_return"] == pytest.approx(sum(result.returns) / 3)


@pytest.mark.e2e
def test_ctrl_c_on_the_main_thread_stops_the_run_in_order_then_reaches_the_caller(tmp_path):
    """A notebook's interrupt: the run stops as the command's would (its summary says so,
    no task is left), the caller's handlers are back, and the KeyboardInterrupt is theirs."""
    logdir = tmp_path / "run"
    # A notebook's own SIGINT handler, whatever a test before this one in the same pytest
    # process left installed.
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    handlers = {signum: signal.getsignal(signum)
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def interrupt(reading) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    try:
        with pytest.raises(KeyboardInterrupt):
            a3c_graph.train(logdir=logdir, workers=1, hidden_sizes=(16,), on_progress=interrupt)
        assert {signum: signal.getsignal(signum) for signum in handlers} == handlers
    finally:
        stop_run(logdir)
        signal.signal(signal.SIGINT, outer)
    summary = json.loads((logdir / "summary.json").read_text())
    assert (summary["stop_reason"], summary["exit_code"]) == ("interrupted", 130)
    assert all(record.proc is None for record in processes.read_pid_files(logdir).values())


BAD_TRAIN_INPUT = {
    "not a number": ({"max_steps": "lots"}, "argument --max-steps: invalid int value: 'lots'"),
    "misspelled field": ({"max_step": 10}, "unrecognized arguments: --max-step=10"),
    "no workers": ({"workers": 0}, "--workers must be at least 1, got 0"),
    "gamma above 1": ({"gamma": 1.5}, "--gamma must be in [0, 1], got 1.5"),
    "a command-line-only flag": ({"dry_run": True},
                                 "argument --dry-run: ignored explicit argument 'true'"),
}


@pytest.mark.parametrize("case", BAD_TRAIN_INPUT)
def test_train_refuses_bad_input_with_the_commands_line_and_starts_nothing(tmp_path, capsys,
                                                                           case):
    options, expected = BAD_TRAIN_INPUT[case]
    logdir = tmp_path / "run"
    with pytest.raises(ValueError) as raised:
        a3c_graph.train(logdir=logdir, **options)
    assert str(raised.value).startswith(expected)
    from a3c_graph.launcher import commands

    assert commands.main(["start", "--logdir", str(logdir), *as_flags(options)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"launch_cluster: error: {raised.value}"]
    assert not logdir.exists()


def test_evaluate_refuses_bad_input_with_the_commands_line(tmp_path):
    with pytest.raises(ValueError, match=r"^--episodes must be at least 1, got 0$"):
        a3c_graph.evaluate(tmp_path, episodes=0)
    with pytest.raises(ValueError, match=r"config\.json not found: is .* the log dir of a "
                                         r"training run\?$"):
        a3c_graph.evaluate(tmp_path)


def test_importing_a3c_graph_loads_neither_tensorflow_nor_the_launcher():
    import subprocess
    import sys

    code = ("import sys, a3c_graph; a3c_graph.train; "
            "print(sorted(m for m in ('tensorflow', 'numpy', 'gymnasium', "
            "'a3c_graph.launcher.commands') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO, env=child_env(), timeout=60, check=True)
    assert result.stdout.strip() == "[]"

"""benchmarks.learning: how a run's history becomes its curve and its verdict, the table, and
its bad input. The suite's real runs are long; test_launch_e2e's end-to-end CartPole run
checks the history files they are drawn from."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import colored_pixels, untrained_run

from a3c_graph.rundir.progress import read_progress, run_totals
from benchmarks.harness.one_run import RunSpec
from benchmarks.suites import learning, resume
from benchmarks.suites.learning_report import markdown, median_curve
from benchmarks.suites.learning_tasks import TASKS, Curve, judge

REPO = Path(__file__).resolve().parents[3]
MACHINE = {"cpu_count": 2, "memory_gb": 24, "load_average_at_start": [0, 0, 0],
           "python": "3.11", "versions": {"tensorflow": "2.21.0"}}


def _row(time, env_steps, mean, lowest=None, episodes=500, entropy=0.5):
    return {"time": time, "env_steps": env_steps, "mean_return_100": mean,
            "lowest_mean_return_100": lowest, "episodes": episodes, "entropy": entropy}


def test_a_curve_starts_once_there_are_100_episodes_and_counts_frames_by_frame_skip():
    rows = [_row(101.0, 100, 20.0, episodes=50), _row(103.0, 400, 30.0, episodes=100),
            _row(105.0, 800, 40.0, lowest=25.0, episodes=150)]
    curve = Curve.from_history(rows, launches=[100.0], frame_skip=4)
    assert curve.seconds == [3.0, 5.0]
    assert curve.env_steps == [400, 800] and curve.frames == [1600, 3200]
    assert curve.mean_return == [30.0, 40.0]
    assert curve.lowest_return == [30.0, 25.0]  # a dip between two writes is kept


def test_a_resumed_run_counts_the_training_time_of_its_pieces_and_its_frames_go_on():
    # Launched at 100, trained from 110 until the machine stopped at 160; launched again at
    # 1000 in its log dir, restored, first update at 1020: the pause and the second start-up
    # are not the run's time.
    rows = [_row(105.0, 0, None), _row(130.0, 4000, 10.0), _row(160.0, 9000, 12.0),
            {**_row(1005.0, 9000, 12.0), "training_started": None},
            {**_row(1020.0, 9100, 12.0), "training_started": 1020.0},
            {**_row(1050.0, 14000, 15.0), "training_started": 1020.0}]
    curve = Curve.from_history(rows, launches=[100.0, 1000.0], frame_skip=4)
    assert curve.seconds == [30.0, 60.0, 60.0, 60.0, 90.0]
    assert curve.frames == [16000, 36000, 36000, 36400, 56000]


def _many_workers_history(workers=16, writes=1500):
    """Every worker writes the cluster's counters every 2 s: a mean that climbs by a point
    every 100 writes, with one dip to -30 between two writes."""
    rows = []
    for k in range(writes):
        for w in range(workers):
            t = 100.0 + 2.0 * k + 0.1 * w
            mean = -21.0 + k // 100 + 0.01 * w
            rows.append(_row(t, 1000 * k + w, mean, lowest=-30.0 if k == 750 and w == 3
                             else None))
    return rows


def test_results_json_keeps_a_thinned_curve_with_the_same_first_readings_and_dips(tmp_path):
    full = Curve.from_history(_many_workers_history(), launches=[100.0], frame_skip=4)
    record = {"task": "pong", "env": "ALE/Pong-v5", "seed": 0, "target": 18.0, "floor": None,
              "curve": dataclasses.asdict(full), "wall_s": 3000.0, "steps_per_sec": 500.0,
              **judge(full, TASKS["pong"])}
    settings = {"tasks": ["pong"], "seeds": 1, "workers": 16, "a3c_flags": []}
    learning.write_results(tmp_path, settings, MACHINE, [record], [TASKS["pong"]])
    stored = Curve(**json.loads((tmp_path / "results.json").read_text())["records"][0]["curve"])
    assert len(full.seconds) == 24_000 and len(stored.seconds) < 2_400
    for level in (-21.0, -15.0, -10.0, -7.9, -6.9):
        i, j = full.first_reaching(level), stored.first_reaching(level)
        assert stored.frames[j] == full.frames[i], level
    assert stored.frames[-1] == full.frames[-1]
    assert stored.mean_return[-1] == full.mean_return[-1]
    assert min(stored.lowest_return) == -30.0  # the dip between two writes is not lost
    assert record["curve"]["frames"] == full.frames  # the record in memory keeps it whole


def _stability_curve(means, lowest=None):
    rows = [_row(float(t), 1000 * t, m, None if lowest is None else lowest[t])
            for t, m in enumerate(means)]
    return Curve.from_history(rows, launches=[0.0], frame_skip=1)


def _finished_suite(out: Path, settings: dict, started: dict) -> None:
    """A suite in `out` whose one CartPole run reached its target."""
    task = TASKS["cartpole"]
    curve = _stability_curve([100, 480, 500])
    name = RunSpec("graph", 0, 2, 0, "cartpole", None).name
    record = {"name": name, "task": "cartpole", "env": "CartPole-v1", "seed": 0, "workers": 2,
              "target": 475.0, "curve": curve.__dict__, "wall_s": 60.0,
              "steps_per_sec": 2000.0, "exit_code": 0, "stop_reason": "target",
              **judge(curve, task)}
    learning.write_results(out, settings, started, [record], [task])
    resume.save_command(out, ["--tasks", "cartpole", "--seeds", "1", "--max-seconds", "600"])


def test_resume_keeps_the_machine_the_suite_started_on_and_adds_the_load_at_a_resume(
        tmp_path, capsys):
    """The results' machine line is the start's: --resume on a finished suite rewrites the
    results without touching it; a resume that goes on a run adds the load it found and the
    commit of the code it runs."""
    settings = {"tasks": ["cartpole"], "seeds": 1, "workers": 2, "a3c_flags": []}
    started = {**MACHINE, "load_average_at_start": [7.5, 7.0, 6.5], "commit": "abc123"}
    _finished_suite(tmp_path, settings, started)
    assert learning.main(["--resume", "--out", str(tmp_path)]) == 0
    assert "finished before" in capsys.readouterr().out
    assert json.loads((tmp_path / "results.json").read_text())["machine"] == started
    assert "load [7.5, 7.0, 6.5] at start; Python" in (tmp_path / "results.md").read_text()

    assert "Code: commit abc123 at start." in (tmp_path / "results.md").read_text()

    now = {**MACHINE, "load_average_at_start": [1.25, 2.0, 3.0], "commit": "def456 + changes"}
    goes_on = resume.machine(tmp_path, now, resumes_a_run=True)
    assert goes_on["load_average_at_start"] == [7.5, 7.0, 6.5]
    assert goes_on["load_average_at_resumes"] == [[1.25, 2.0, 3.0]]
    line = markdown(settings, goes_on, {}, [])
    assert "load [7.5, 7.0, 6.5] at start, [1.25, 2.0, 3.0] at a resume; Python" in line
    assert "Code: commit abc123 at start, def456 + changes at a resume." in line
    assert "another machine" not in line  # the same cores, memory, platform and versions
    assert resume.machine(tmp_path / "none", now, resumes_a_run=True) == now
    # A resume on a machine unlike the start's names what differed.
    elsewhere = resume.machine(tmp_path, {**now, "cpu_count": 16, "python": "3.11.9"},
                               resumes_a_run=True)
    assert ("Resume 1 ran on another machine: cpu_count 16; python 3.11.9."
            in markdown(settings, elsewhere, {}, []))


def test_a_resume_that_finds_its_cut_off_runs_log_dir_gone_records_a_new_start(tmp_path):
    """A run cut off, whose runs/ was left behind (a move to another machine): the resume
    names it and trains it from the start, and the results give the machine and the commit
    of that start, not the lost piece's."""
    settings = {"tasks": ["cartpole"], "seeds": 1, "workers": 2, "a3c_flags": []}
    started = {**MACHINE, "load_average_at_start": [7.5, 7.0, 6.5], "commit": "abc123"}
    _finished_suite(tmp_path, settings, started)
    results = json.loads((tmp_path / "results.json").read_text())
    name = results["records"][0]["name"]
    results["records"][0].update(stop_reason="signal", exit_code=143)
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / f"{name}.log").write_text("launched\n")
    now = {**MACHINE, "load_average_at_start": [1.25, 2.0, 3.0], "commit": "def456"}
    assert resume.lost_runs(tmp_path, [name, "never-launched"]) == [name]
    assert resume.machine(tmp_path, now, resumes_a_run=True) == now
    # With its log dir there it goes on from its checkpoint: the start's record is kept.
    (tmp_path / "runs" / name).mkdir(parents=True)
    assert resume.lost_runs(tmp_path, [name]) == []
    goes_on = resume.machine(tmp_path, now, resumes_a_run=True)
    assert (goes_on["commit"], goes_on["commit_at_resumes"]) == ("abc123", ["def456"])


def test_the_suite_tells_every_five_minutes_where_the_run_it_trains_is(tmp_path, capsys):
    """A 40M-frame run trains for hours: the suite's output says how far it is, how it is
    learning, and how long it has to go at its speed, from the run's progress files."""
    (tmp_path / "progress").mkdir()
    started = time.time() - 4000.0  # its first update, 4,000 s ago
    reading = {"task": 0, "time": started + 4000.0, "global_step": 40_000,
               "env_steps": 3_200_000, "episodes": 2_000, "mean_return_100": 1234.5,
               "local_steps_per_sec": 1100.0, "training_started": started, "state": "running"}
    (tmp_path / "progress" / "worker_0.json").write_text(json.dumps(reading))
    config = learning.A3CConfig(env="ALE/BeamRider-v5", max_steps=10_000_000,
                                max_seconds=86_400)
    now = [0.0]
    watch = learning.RunProgress("atari-beamrider-graph-w2-seed1", tmp_path, config, 4,
                                 clock=lambda: now[0])
    watch()
    now[0] = learning.PROGRESS_EVERY_SECS - 1
    watch()
    assert capsys.readouterr().out == ""  # not yet due
    now[0] = learning.PROGRESS_EVERY_SECS
    watch()
    # 6.8M agent steps left at 1,100 a second: 103 minutes.
    assert capsys.readouterr().out == (
        "benchmarks.learning: atari-beamrider-graph-w2-seed1: 12.80M of 40M frames, mean "
        "return(100) 1,234.5, 1,100 agent steps/s, about 1 h 43 min to its budget\n")
    watch()
    assert capsys.readouterr().out == ""  # the next one five minutes on
    # Five minutes on: the speed is the run's since the line before (330k steps in 300 s).
    (tmp_path / "progress" / "worker_0.json").write_text(json.dumps(
        {**reading, "time": started + 4300.0, "env_steps": 3_530_000}))
    now[0] = 2 * learning.PROGRESS_EVERY_SECS
    watch()
    assert capsys.readouterr().out.endswith(
        "14.12M of 40M frames, mean return(100) 1,234.5, 1,100 agent steps/s, about 1 h 38 "
        "min to its budget\n")
    # A time budget that ends first: its seconds left; none before the first update; a run
    # that is stopping says so.
    short = dataclasses.replace(config, max_seconds=4600.0)
    assert learning.RunProgress("r", tmp_path, short, 4).line(
        run_totals(read_progress(tmp_path)), now=started + 4000.0).endswith(
            "about 10 min to its budget")
    assert watch.line(None, now=started) is None
    (tmp_path / "progress" / "worker_0.json").write_text(json.dumps(
        {**reading, "env_steps": 10_000_000, "stop_reason": "max_steps", "state": "done"}))
    assert watch.line(run_totals(read_progress(tmp_path)), now=started + 9000.0).endswith(
        "40.00M of 40M frames, mean return(100) 1,234.5, stopping (max_steps)")


def test_a_progress_line_that_cannot_be_printed_ends_the_lines_not_the_run(tmp_path,
                                                                          monkeypatch, capsys):
    (tmp_path / "progress").mkdir()
    (tmp_path / "progress" / "worker_0.json").write_text(json.dumps(
        {"task": 0, "time": time.time(), "global_step": 10, "env_steps": 800, "episodes": 3,
         "local_steps_per_sec": 90.0, "training_started": time.time() - 9, "state": "running"}))
    now = [0.0]
    watch = learning.RunProgress("r", tmp_path, learning.A3CConfig(env="CartPole-v1"), 1,
                                 clock=lambda: now[0])

    class ClosedPipe:  # the suite's stdout piped to a reader that has gone
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    now[0] = learning.PROGRESS_EVERY_SECS
    watch()  # no exception reaches the harness's sampling loop, which would stop the run
    assert "no more progress lines for r: [Errno 32] Broken pipe" in capsys.readouterr().err
    now[0] = 100 * learning.PROGRESS_EVERY_SECS
    watch()
    assert capsys.readouterr().err == ""  # one warning, then quiet


def test_a_new_budget_given_at_a_resume_is_kept_for_the_next(tmp_path, capsys):
    _finished_suite(tmp_path, {"tasks": ["cartpole"], "seeds": 1, "workers": 2,
                               "a3c_flags": []}, MACHINE)
    assert learning.main(["--resume", "--out", str(tmp_path), "--max-seconds", "6000"]) == 0
    assert "finished before" in capsys.readouterr().out  # a finished run stays as it ended
    assert resume.saved_command(tmp_path) == ["--tasks", "cartpole", "--seeds", "1",
                                              "--max-seconds", "6000"]


def test_a_policy_that_stays_above_the_floor_after_the_target_holds():
    task = TASKS["cartpole-stability"]
    verdict = judge(_stability_curve([100, 300, 480, 450, 500, 500]), task)
    assert verdict["reached"] and verdict["seconds_to_target"] == 2.0
    assert verdict["env_steps_to_target"] == 2000
    assert verdict["lowest_mean_after_target"] == 450
    assert verdict["seconds_below_target_after"] == 1.0
    assert verdict["held"] is True
    assert verdict["final_mean_return_100"] == 500


def test_a_dip_below_the_floor_between_two_writes_fails_the_stability_task():
    task = TASKS["cartpole-stability"]
    means = [100, 480, 490, 495, 500]
    lowest = [100, 480, 490, 120, 500]  # fell to 120 and came back before the next write
    verdict = judge(_stability_curve(means, lowest), task)
    assert verdict["lowest_mean_after_target"] == 120
    assert verdict["held"] is False


def test_a_run_that_never_reaches_the_target_neither_reaches_nor_holds():
    verdict = judge(_stability_curve([10, 20, 30]), TASKS["cartpole-stability"])
    assert verdict["reached"] is False and verdict["held"] is False
    assert verdict["frames_to_target"] is None and verdict["seconds_below_target_after"] is None


def test_the_median_curve_is_taken_on_a_common_grid_up_to_the_shortest_run():
    a = [(0.0, 0.0), (1.0, 10.0), (2.0, 20.0)]
    b = [(0.0, 2.0), (1.0, 4.0)]
    c = [(0.0, 6.0), (1.5, 8.0), (3.0, 9.0)]
    median = median_curve([a, b, c], points=3)
    assert [x for x, _ in median] == [0.0, 0.5, 1.0]
    assert [y for _, y in median] == [2.0, 2.0, 6.0]


def test_the_table_reports_seeds_reaching_the_target_and_the_stability_verdicts(tmp_path):
    records = []
    for seed, means in enumerate(([100, 480, 500], [100, 200, 300])):
        curve = _stability_curve(means)
        records.append({"task": "cartpole-stability", "env": "CartPole-v1", "seed": seed,
                        "target": 475.0, "floor": 400.0, "curve": curve.__dict__,
                        "wall_s": 60.0, "steps_per_sec": 20000.0,
                        **judge(curve, TASKS["cartpole-stability"])})
    settings = {"tasks": ["cartpole-stability"], "seeds": 2, "workers": 2, "a3c_flags": []}
    text = learning.write_results(tmp_path, settings, MACHINE, records,
                                  [TASKS["cartpole-stability"]])
    assert "| cartpole-stability | CartPole-v1 | 475 | 1/2 |" in text
    assert "| cartpole-stability | 0 | 1.0 | 480.0 | 0.0 |" in text
    assert "NO (floor 400)" in text
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["summary"]["cartpole-stability"]["held"] == 1
    plot = learning.plot_task(tmp_path, TASKS["cartpole-stability"], records)
    assert plot == tmp_path / "cartpole-stability.png"
    assert colored_pixels(plot) > 100  # each seed's curve is drawn


def test_a_sweep_over_workers_reports_each_count_and_plots_the_tasks_against_it(tmp_path):
    """--workers 1,2,4: a row per task and count (its seeds, frames to target, final mean),
    each run's row named with its count, and workers.png with a line per task."""
    records = []
    # CartPole reaches 475 later with more workers: at env step 2000, 3000 and 4000.
    for workers, means in ((1, [100, 300, 480, 500, 500]), (2, [100, 200, 300, 480, 500]),
                           (4, [100, 150, 200, 300, 480])):
        for seed in (0, 1):
            curve = _stability_curve(means)
            records.append({"task": "cartpole", "env": "CartPole-v1", "seed": seed,
                            "workers": workers, "envs_per_worker": 16 // workers,
                            "target": 475.0, "floor": None, "curve": curve.__dict__,
                            "wall_s": 60.0, "steps_per_sec": 2000.0,
                            **judge(curve, TASKS["cartpole"])})
    settings = {"tasks": ["cartpole"], "seeds": 2, "workers": [1, 2, 4], "cluster_envs": 16,
                "a3c_flags": []}
    text = learning.write_results(tmp_path, settings, MACHINE, records, [TASKS["cartpole"]])
    assert text.startswith("# Learning suite: 1, 2, 4 worker(s), 2 seed(s)")
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    for workers, frames in ((1, 2000), (2, 3000), (4, 4000)):
        row = summary[f"cartpole w{workers}"]
        assert (row["workers"], row["reached"], row["median_frames_to_target"]) == (
            workers, 2, frames)
        assert f"| cartpole w{workers} | CartPole-v1 | 475 | 2/2 |" in text
        assert f"| cartpole w{workers} | 1 | yes | {frames:,} |" in text
    assert summary["cartpole w4"]["envs_per_worker"] == 4
    assert "Envs per worker: 16 // workers" in text
    plot = learning.plot_against_workers(tmp_path, [TASKS["cartpole"]], records)
    assert plot == tmp_path / "workers.png" and colored_pixels(plot) > 100
    assert colored_pixels(learning.plot_task(tmp_path, TASKS["cartpole"], records)) > 100


@pytest.mark.parametrize("counts, envs", [("2", None), ("1,2,4,8,16", 16), ("16,32", 16)])
def test_cluster_envs_spreads_the_envs_over_the_workers(counts, envs):
    expected = {"2": [None], "1,2,4,8,16": [16, 8, 4, 2, 1], "16,32": [1, 1]}[counts]
    runs = learning.plan([TASKS["cartpole"]], learning._worker_counts(counts), seeds=2,
                         base_seed=3, cluster_envs=envs)
    assert [run.spec.envs_per_worker for run in runs[::2]] == expected
    assert [run.spec.seed for run in runs] == [3, 4] * len(expected)
    assert [run.spec.workers for run in runs[::2]] == learning._worker_counts(counts)
    assert len({run.name for run in runs}) == len(runs)  # each run its own directory


@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "--workers must be distinct counts of at least 1"),
    (["--workers", "2,2"], "--workers must be distinct counts of at least 1"),
    (["--workers", "two"], "--workers must be a count or counts like 1,2,4"),
    (["--cluster-envs", "0"], "--cluster-envs must be at least 1"),
    (["--tasks", "nope"], "--tasks must name some of"),
    (["--tasks", ""], "--tasks must name some of"),
    (["--seeds", "0"], "--seeds must be at least 1"),
    (["--env", "CartPole-v1"], "--env is the task's"),
    (["--tasks", "cartpole", "--learning-rate", "-1"], "task cartpole: --learning-rate"),
])
def test_bad_suite_flags_are_one_line_exit_2_and_write_nothing(argv, message, tmp_path):
    out = tmp_path / "results"
    result = subprocess.run([sys.executable, "-m", "benchmarks.learning", *argv, "--out",
                             str(out)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not out.exists()


def test_the_final_checkpoint_is_played_greedy_and_sampled_and_reported(tmp_path):
    logdir = tmp_path / "runs" / "cartpole-graph-w2-seed0"
    logdir.parent.mkdir()
    untrained_run(logdir)
    played = learning.evaluate_final_checkpoint(logdir, 2, tmp_path / "evaluations")
    for mode in ("greedy", "sampled"):
        result = played[mode]
        assert result["episodes"] == 2 and result["checkpoint"] == "model.ckpt-0", result
        assert 1 <= result["min_return"] <= result["mean_return"] <= result["max_return"]
        printout = (tmp_path / result["printout"]).read_text()
        assert "episode 2/2: return" in printout
    curve = _stability_curve([100, 480, 500])
    record = {"task": "cartpole", "env": "CartPole-v1", "seed": 0, "target": 475.0,
              "floor": None, "curve": curve.__dict__, "wall_s": 60.0,
              "steps_per_sec": 20000.0, "evaluation": played,
              **judge(curve, TASKS["cartpole"])}
    task = dataclasses.replace(TASKS["cartpole"], evaluation_games=2)
    text = learning.write_results(tmp_path, {"workers": 2, "seeds": 1, "a3c_flags": []},
                                  MACHINE, [record], [task])
    greedy, sampled = played["greedy"], played["sampled"]
    assert (f"| {greedy['mean_return']:.1f} ({greedy['min_return']:g} to "
            f"{greedy['max_return']:g}) / {sampled['mean_return']:.1f} (") in text
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]["cartpole"]
    assert summary["median_sampled_evaluation"] == sampled["mean_return"]


def test_a_suite_stopped_while_it_evaluates_leaves_no_evaluation_playing(tmp_path,
                                                                         monkeypatch):
    """The two modes play at once; a stop (the suite's SIGTERM) while the first is awaited
    ends both processes, not only the suite."""
    logdir = tmp_path / "runs" / "cartpole-graph-w2-seed0"
    logdir.parent.mkdir()
    untrained_run(logdir)
    started, stops = [], []

    class StoppedWhileWaiting(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

        def wait(self, timeout=None):
            if not stops and len(started) == 2:
                stops.append(self)
                raise KeyboardInterrupt  # as the suite's signal handler stops it
            return super().wait(timeout)

    monkeypatch.setattr(learning.subprocess, "Popen", StoppedWhileWaiting)
    with pytest.raises(KeyboardInterrupt):
        learning.evaluate_final_checkpoint(logdir, 1000, tmp_path / "evaluations")
    assert len(started) == 2 and stops == started[:1]
    assert all(process.poll() is not None for process in started)
    assert not list((tmp_path / "evaluations").glob("*.txt"))


def test_a_run_stopped_during_its_evaluation_is_evaluated_at_a_resume_without_a_launch(
        tmp_path, monkeypatch):
    """A stop while the final checkpoint is played loses neither the training nor its
    record: the resumed run plays the checkpoint and launches nothing."""
    task = dataclasses.replace(TASKS["cartpole"], evaluation_games=2)
    run = learning.plan([task], [2], 1, 0, None)[0]
    logdir = tmp_path / "runs" / run.spec.name
    logdir.parent.mkdir()
    untrained_run(logdir)
    trained = {"name": run.spec.name, "logdir": str(logdir), "exit_code": 0,
               "stop_reason": "max_steps", "final_env_steps": 1234}
    launches = []

    def launch(spec, config, out, watch=None):
        launches.append(spec.name)
        return dict(trained)

    monkeypatch.setattr(learning, "run_one", launch)
    monkeypatch.setattr(learning, "_learning_fields", lambda record, *rest: {})
    real_evaluation = learning.evaluate_final_checkpoint

    def stopped(*args):
        raise KeyboardInterrupt  # as the suite's SIGTERM stops it

    monkeypatch.setattr(learning, "evaluate_final_checkpoint", stopped)
    config = learning.A3CConfig(env="CartPole-v1", max_seconds=600)
    with pytest.raises(KeyboardInterrupt):
        learning.run_task(run, config, tmp_path)
    monkeypatch.setattr(learning, "evaluate_final_checkpoint", real_evaluation)
    record = learning.run_task(run, config, tmp_path)
    assert launches == [run.spec.name]
    assert record["final_env_steps"] == 1234 and record["stop_reason"] == "max_steps"
    assert record["evaluation"]["sampled"]["episodes"] == 2, record["evaluation"]


def test_a_final_checkpoint_that_cannot_be_played_is_an_error_in_the_record(tmp_path):
    logdir = tmp_path / "empty-run"
    logdir.mkdir()
    played = learning.evaluate_final_checkpoint(logdir, 2, tmp_path / "evaluations")
    assert set(played) == {"greedy", "sampled"}
    assert all("config.json" in result["error"] for result in played.values()), played


def test_the_machine_names_the_commit_of_the_code_and_whether_it_was_changed(tmp_path,
                                                                              monkeypatch):
    """A record's run names the commit it ran (benchmarks.harness.machine.source_commit):
    the checkout's HEAD, "+ changes" while a tracked file differs from it; none outside git."""
    from benchmarks.harness import machine

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "code")
    monkeypatch.setattr(machine, "REPO", tmp_path)
    head = git("rev-parse", "HEAD")
    assert machine.machine_info()["commit"] == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert machine.source_commit() == f"{head} + changes"
    (tmp_path / "notes.txt").write_text("untracked files are not the code that ran\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    assert machine.source_commit() == head
    monkeypatch.setattr(machine, "REPO", tmp_path / "elsewhere")
    assert machine.source_commit() is None

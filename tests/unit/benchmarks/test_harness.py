"""The benchmark harness (benchmarks.harness, `python -m benchmarks.run`): the order of its
runs, each run's command and record (the one clock's accounting), the results tables and plots,
its bad flags. The harness run for real is tests/e2e/test_benchmark_runs.py; the TF2
variants' own pieces are tested in tests/e2e/test_tf2_variants.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, colored_pixels

from a3c_graph.core.config import A3CConfig
from benchmarks.harness import compare, one_run, report
from benchmarks.harness.machine import machine_info
from benchmarks.variants import tf2_run
from tests.support.benchmark_helpers import PONG, needs_ale

# --------------------------------------------------------------------------- harness, pure

def test_runs_are_interleaved_seed_by_seed_then_scaling():
    runs = compare.plan_runs(["graph", "tf2_mp"], seeds=2, base_seed=5, workers=2,
                             max_seconds=300, scaling=[1, 4], scaling_seconds=60)
    assert [(r.phase, r.variant, r.seed, r.workers, r.max_seconds) for r in runs] == [
        ("main", "graph", 5, 2, 300), ("main", "tf2_mp", 5, 2, 300),
        ("main", "graph", 6, 2, 300), ("main", "tf2_mp", 6, 2, 300),
        ("scaling", "graph", 5, 1, 60), ("scaling", "tf2_mp", 5, 1, 60),
        ("scaling", "graph", 5, 4, 60), ("scaling", "tf2_mp", 5, 4, 60)]


def test_ceiling_runs_follow_each_seed_and_only_they_act_without_learning(tmp_path):
    runs = compare.plan_runs(["graph", "tf2_mp"], seeds=2, base_seed=5, workers=2,
                             max_seconds=300, scaling=[], scaling_seconds=60,
                             ceiling_seconds=30)
    assert [(r.phase, r.variant, r.seed, r.max_seconds) for r in runs] == [
        ("main", "graph", 5, 300), ("main", "tf2_mp", 5, 300),
        ("ceiling", "graph", 5, 30), ("ceiling", "tf2_mp", 5, 30), ("ceiling", "emulator", 5, 30),
        ("main", "graph", 6, 300), ("main", "tf2_mp", 6, 300),
        ("ceiling", "graph", 6, 30), ("ceiling", "tf2_mp", 6, 30), ("ceiling", "emulator", 6, 30)]
    commands = [one_run.variant_command(r, A3CConfig(), tmp_path) for r in runs[:5]]
    assert ["--learn=false" in c for c in commands] == [False, False, True, True, True]
    # The env alone gets the same env flags and as many processes as the runs have workers.
    assert commands[4][1:3] == ["-m", "benchmarks.variants.emulator"]
    assert commands[4][commands[4].index("--workers") + 1] == "2"


def test_the_env_alone_also_runs_at_the_emulator_envs_asked_for(tmp_path):
    runs = compare.plan_runs(["graph"], seeds=1, base_seed=0, workers=2, max_seconds=300,
                             scaling=[], scaling_seconds=60, ceiling_seconds=30,
                             emulator_envs=[4])
    assert [r.name for r in runs] == ["main-graph-w2-seed0", "ceiling-graph-w2-seed0",
                                      "ceiling-emulator-w2-seed0",
                                      "ceiling-emulator-e4-w2-seed0"]
    commands = [one_run.variant_command(r, A3CConfig(envs_per_worker=16), tmp_path)
                for r in runs]
    assert ["--envs-per-worker=16" in c for c in commands] == [True, True, True, False]
    assert "--envs-per-worker=4" in commands[3]


def test_every_variant_has_an_acting_ceiling():
    compare.parse_args(["--ceiling", "--variants", "tf2_mp"])
    tf2_run.check_tf2_config(A3CConfig(learn=False))  # the TF2 variants act only too


def row(task: int, time: float, env_steps: int, state: str = "running",
        training_started: float | None = None, **extra) -> dict:
    """One progress report as a worker appends it to its history (a3c_graph.rundir.progress)."""
    return {"task": task, "time": time, "state": state, "env_steps": env_steps,
            "training_started": training_started, "stop_reason": None, **extra}


# Two workers: worker 0's first update is applied at 110 and reported at once, worker 1's at
# 110.5; they report every 2 s, and stop (final reports) at 125 and 125.4, before teardown.
HISTORY = [
    row(0, 101.0, 0, "starting"), row(1, 101.2, 0, "starting"),
    row(0, 110.0, 256, training_started=110.0), row(1, 110.5, 512, training_started=110.5),
    row(0, 112.0, 8_000, training_started=110.0),
    row(1, 125.4, 60_256, "done", training_started=110.5, stop_reason="max_seconds"),
    row(0, 125.0, 60_000, "done", training_started=110.0, stop_reason="max_seconds"),
]
HISTORY.sort(key=lambda r: r["time"])


def test_a_run_is_watched_at_every_sample_until_it_ends(monkeypatch):
    """The learning suite's progress line rides on the harness's sampling of a run."""

    class Run:  # a run that ends at its fourth poll
        polls = 0

        def poll(self):
            self.polls += 1
            return 0 if self.polls == 4 else None

    class Samples:
        taken = 0

        def sample(self):
            self.taken += 1

    monkeypatch.setattr(one_run, "SAMPLE_SECS", 0.0)
    run, samples, watched = Run(), Samples(), []
    ended = one_run._sample_until_exit(run, samples, float("inf"),
                                       lambda: watched.append(samples.taken))
    assert ended is None
    assert watched == [1, 2, 3]  # once after each sample, none after the run ended


def test_the_first_solved_report_times_the_solve():
    history = [*HISTORY[:5], row(1, 113.0, 9_000, "done", 110.5, stop_reason="solved"),
               row(0, 113.5, 9_000, "done", 110.0, stop_reason="solved")]
    assert one_run.solve_report(history)["time"] == 113.0


def test_graph_runs_through_the_users_launcher_with_the_shared_flags(tmp_path):
    config = A3CConfig(rollout_length=16)
    spec = one_run.RunSpec("graph", seed=3, workers=2, max_seconds=60, phase="main")
    command = one_run.variant_command(spec, config, tmp_path)
    assert command[:2] == [str(REPO / "scripts" / "launch_cluster.sh"), "start"]
    assert {"--rollout-length=16", "--seed=3", "--max-seconds=60"} <= set(command)
    mp_spec = one_run.RunSpec("tf2_mp", seed=3, workers=2, max_seconds=60, phase="main")
    assert command[2:] == one_run.variant_command(mp_spec, config, tmp_path)[3:]


@pytest.mark.parametrize("variant", one_run.VARIANTS)
def test_the_harness_passes_allow_remote_on_to_every_run_and_only_then(tmp_path, variant):
    # Without it a run inherits the harness's private network (tests/e2e/test_security.py).
    spec = one_run.RunSpec(variant, seed=0, workers=2, max_seconds=60, phase="main")
    assert "--allow-remote" not in one_run.variant_command(spec, A3CConfig(), tmp_path)
    assert "--allow-remote" in one_run.variant_command(spec, A3CConfig(), tmp_path,
                                                       allow_remote=True)


def fake_record(variant: str, phase: str, seed: int, workers: int, rate: float,
                solve_time: float | None, frame_skip: int = 1) -> dict:
    record = dict.fromkeys(one_run.RECORD_KEYS)
    record.update(name=f"{phase}-{variant}-{workers}-{seed}", variant=variant, phase=phase,
                  seed=seed, workers=workers, steps_per_sec=rate, frame_skip=frame_skip,
                  frames_per_sec=rate * frame_skip, solved=solve_time is not None,
                  time_to_solve_s=solve_time, startup_s=5.0, peak_memory_mb=1000.0,
                  max_seconds=300.0, time_to_solve_or_budget_s=solve_time or 305.0,
                  return_curve=[[6.0, 100, 20.0], [9.0, 5000, 80.0]], processes=[],
                  leftover_processes=[])
    return record


def test_results_table_medians_and_plots(tmp_path):
    records = [fake_record("graph", "main", 0, 2, 1000.0, 40.0),
               fake_record("graph", "main", 1, 2, 3000.0, None),
               fake_record("graph", "main", 2, 2, 2000.0, 60.0),
               fake_record("tf2_mp", "main", 0, 2, 500.0, None),
               fake_record("graph", "scaling", 0, 1, 900.0, None),
               fake_record("graph", "scaling", 0, 4, 2500.0, None)]
    settings = {"env": "CartPole-v1", "workers": 2, "seeds": 3, "max_seconds": 300.0,
                "scaling_seconds": 60.0}
    machine = machine_info()
    markdown = report.write_results(tmp_path, settings, machine, records,
                                    ["graph", "tf2_mp"])
    medians = json.loads((tmp_path / "results.json").read_text())["medians"]
    assert medians["graph"]["runs"] == 3 and medians["graph"]["solved"] == 2
    assert medians["graph"]["steps_per_sec"] == 2000.0
    assert medians["graph"]["time_to_solve_s"] == 50.0  # over the solved runs only
    assert medians["tf2_mp"]["time_to_solve_s"] is None
    assert medians["graph"]["frames_per_sec"] == 2000.0  # CartPole: one frame per step
    # Every seed: the unsolved one counts as its start-up plus budget (305 s).
    assert medians["graph"]["time_to_solve_or_budget_s"] == 60.0
    assert "| graph | 3 | 2/3 | 2,000 | 2,000 | 50.0 s | 60.0 s |" in markdown
    assert "| 1 | > 305.0 s | - |" in markdown  # the per-seed table
    assert "| agent steps/s | frames/s |" in markdown
    assert "| graph | 900 | 2,500 |" in markdown  # scaling: 1 and 4 workers
    plots = report.plot_results(tmp_path, records, ["graph", "tf2_mp"], 475.0)
    assert [p.name for p in plots] == ["returns.png", "steps_per_sec.png", "scaling.png"]
    assert all(colored_pixels(plot) > 100 for plot in plots)  # curves and bars are drawn


def test_results_give_the_graph_variants_ratios_and_each_share_of_its_acting_ceiling(tmp_path):
    records = [fake_record("graph", "main", 0, 2, 3000.0, 20.0),
               fake_record("tf2_mp", "main", 0, 2, 1000.0, 80.0),
               fake_record("tf2_ray", "main", 0, 2, 1500.0, None),
               fake_record("graph", "ceiling", 0, 2, 4000.0, None),
               fake_record("graph", "ceiling", 1, 2, 6000.0, None),
               fake_record("tf2_mp", "ceiling", 0, 2, 2000.0, None)]
    settings = {"env": "CartPole-v1", "workers": 2, "seeds": 1, "max_seconds": 300.0,
                "scaling_seconds": 60.0, "ceiling_seconds": 30.0}
    variants = ["graph", "tf2_mp", "tf2_ray"]
    markdown = report.write_results(tmp_path, settings, machine_info(), records,
                                    variants)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["graph_versus"] == {
        "tf2_mp": {"steps_per_sec": 3.0, "time_to_solve": 0.25, "time_to_solve_or_budget": 0.25},
        "tf2_ray": {"steps_per_sec": 2.0, "time_to_solve": None,
                    "time_to_solve_or_budget": round(20.0 / 305.0, 2)}}
    assert data["ceiling"] == {
        "graph": {"runs": 2, "steps_per_sec": 5000.0, "training_steps_per_sec": 3000.0,
                  "training_share": 0.6, "training_of_emulator": None,
                  "acting_of_emulator": None},
        "tf2_mp": {"runs": 1, "steps_per_sec": 2000.0, "training_steps_per_sec": 1000.0,
                   "training_share": 0.5, "training_of_emulator": None,
                   "acting_of_emulator": None}}
    assert data["medians"]["graph"]["runs"] == 1  # ceiling runs are not training runs
    assert "| tf2_mp | 3.00 | 0.25 | 0.25 |" in markdown
    assert "| graph | 2 | 5,000 | 3,000 | 60 % | - | - |" in markdown
    assert "| tf2_mp | 1 | 2,000 | 1,000 | 50 % | - | - |" in markdown
    plots = report.plot_results(tmp_path, records, variants, 475.0)
    # Ceiling runs are no curves of their own, nor a scaling plot.
    assert [p.name for p in plots] == ["returns.png", "steps_per_sec.png"]
    assert all(colored_pixels(plot) > 100 for plot in plots)  # curves and bars are drawn


def test_results_give_each_variants_share_of_the_env_alone_and_its_cpu_per_step(tmp_path):
    records = [fake_record("graph", "main", 0, 2, 3000.0, None),
               fake_record("graph", "ceiling", 0, 2, 5000.0, None),
               fake_record("emulator", "ceiling", 0, 2, 7000.0, None),
               fake_record("emulator", "ceiling", 1, 2, 9000.0, None)]
    records[0]["cpu_us_per_step"] = {"ps": 40.0, "workers": 560.0, "other": 0.0, "total": 600.0}
    records[1]["cpu_us_per_step"] = {"ps": 5.0, "workers": 395.0, "other": 0.0, "total": 400.0}
    records[2]["cpu_us_per_step"] = {"other": 240.0, "total": 240.0}
    records[3]["cpu_us_per_step"] = {"other": 200.0, "total": 200.0}
    settings = {"env": "ALE/Pong-v5", "workers": 2, "seeds": 1, "max_seconds": 300.0,
                "scaling_seconds": 60.0, "ceiling_seconds": 30.0}
    markdown = report.write_results(tmp_path, settings, machine_info(), records, ["graph"])
    data = json.loads((tmp_path / "results.json").read_text())
    # The env alone: the median of its runs, 8,000; graph trains at 3/8 and acts at 5/8 of it.
    assert data["ceiling"]["emulator"] == {"runs": 2, "steps_per_sec": 8000.0}
    assert data["ceiling"]["graph"]["training_of_emulator"] == 0.375
    assert data["ceiling"]["graph"]["acting_of_emulator"] == 0.625
    assert "| graph | 1 | 5,000 | 3,000 | 60 % | 38 % | 62 % |" in markdown
    assert "| emulator (env alone) | 2 | 8,000 | - | - | 100 % | 100 % |" in markdown
    # CPU per agent step: learning adds training - acting, 600 - 400 us.
    assert data["cpu_us_per_step"]["graph"]["learning"] == 200.0
    assert data["cpu_us_per_step"]["emulator"] == {
        "training": None, "acting": {"other": 220.0, "total": 220.0}, "learning": None}
    assert "| graph | 600 us | 40 us | 400 us | 200 us |" in markdown
    assert "| emulator | - | - | 220 us | - |" in markdown
    # The env alone at another env count per process: a row of its own, not in the median.
    records.append(fake_record("emulator", "ceiling", 0, 2, 6000.0, None))
    records[-1]["envs_per_worker"] = 4
    markdown = report.write_results(tmp_path, {**settings, "envs_per_worker": 16}, machine_info(),
                                    records, ["graph"])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["ceiling"]["emulator"] == {"runs": 2, "steps_per_sec": 8000.0}
    assert data["ceiling"]["emulator at 4 envs"] == {"runs": 1, "steps_per_sec": 6000.0,
                                                     "of_emulator": 0.75}
    assert "| emulator (env alone, 16 envs) | 2 | 8,000 | - | - | 100 % | 100 % |" in markdown
    assert "| emulator at 4 envs (env alone) | 1 | 6,000 | - | - | 75 % | 75 % |" in markdown
    plots = report.plot_results(tmp_path, records, ["graph"], None)
    assert all(colored_pixels(plot) > 100 for plot in plots)


def test_cpu_per_step_is_read_off_the_sampled_cpu_between_two_reports():
    # Two roles sampled at t = 10, 12, 14: the ps uses 0.1 s of CPU per second, the workers
    # 1.9 s per second; the reports at t = 11 and 13 saw 2,000 env steps between them.
    timeline = [(10.0, {"ps": 1.0, "workers": 10.0}), (12.0, {"ps": 1.2, "workers": 13.8}),
                (14.0, {"ps": 1.4, "workers": 17.6})]
    first, last = {"time": 11.0, "env_steps": 1000}, {"time": 13.0, "env_steps": 3000}
    # 0.2 s of ps CPU and 3.8 s of workers' over 2,000 steps: 100 and 1,900 us per step.
    assert one_run.cpu_window(timeline, first, last) == {
        "ps": 100.0, "workers": 1900.0, "total": 2000.0}
    # A process seen only from the second sample on counts from zero before it.
    late = [(10.0, {"ps": 1.0}), (12.0, {"ps": 1.2, "workers": 2.0}),
            (14.0, {"ps": 1.4, "workers": 4.0})]
    assert one_run.cpu_window(late, first, last)["workers"] == 1000.0
    # Reports outside the sampled span, or no steps between them: nothing to tell.
    assert one_run.cpu_window(timeline, {"time": 9.0, "env_steps": 0}, last) is None
    assert one_run.cpu_window(timeline, first, {"time": 13.0, "env_steps": 1000}) is None


def test_the_median_of_every_seed_gets_a_distribution_free_interval():
    # 10 seeds at 95 %: from the 2nd to the 9th smallest (binomial coverage 97.9 %).
    assert report.median_interval([float(v) for v in range(10, 0, -1)]) == [2.0, 9.0]
    assert report.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # too few seeds
    assert report.median_interval([1.0, None, 2.0, 3.0, 4.0, 5.0, 6.0]) == [1.0, 6.0]


def write_history(logdir: Path, history: list[dict]) -> None:
    """The progress files of a run whose workers wrote `history` (oldest first)."""
    (logdir / "progress").mkdir(parents=True)
    for entry in history:
        path = logdir / "progress" / f"worker_{entry['task']}.json"
        path.write_text(json.dumps(entry))
        with open(path.with_suffix(".jsonl"), "a") as lines:
            lines.write(json.dumps(entry) + "\n")


def test_records_keep_the_one_clocks_accounting(tmp_path):
    write_history(tmp_path, HISTORY)
    sampler = one_run.Sampler(root_pid=0, peak_pss=300 * 2**20, peak_rss=900 * 2**20)
    spec = one_run.RunSpec("graph", seed=0, workers=2, max_seconds=15, phase="main")
    record = one_run.build_record(spec, ["cmd"], tmp_path, tmp_path / "log", 0, 95.0, 131.0,
                                  sampler, [], None)
    assert tuple(record) == one_run.RECORD_KEYS
    assert (record["launched"], record["training_started"]) == (95.0, 110.0)
    assert (record["startup_s"], record["stopped_s"], record["wall_s"]) == (15.0, 30.4, 36.0)
    assert record["steps_per_sec"] == round((60_256 - 256) / 15.4, 1)
    assert (record["peak_memory_mb"], record["peak_rss_mb"]) == (300.0, 900.0)  # PSS first
    assert [point[0] for point in record["return_curve"]] == [15.0, 15.5, 17.0, 30.0, 30.4]


def test_records_carry_frames_per_sec_from_the_envs_frame_skip(tmp_path):
    write_history(tmp_path, [row(0, 100.0, 1000, training_started=100.0),
                             row(0, 102.0, 2000, training_started=100.0)])
    spec = one_run.RunSpec("graph", seed=0, workers=2, max_seconds=120, phase="main")
    record = one_run.build_record(spec, ["cmd"], tmp_path, tmp_path / "log", 0, 95.0, 103.0,
                                  one_run.Sampler(root_pid=0), [], None, frame_skip=4)
    assert (record["steps_per_sec"], record["frame_skip"], record["frames_per_sec"]) == (
        500.0, 4, 2000.0)
    assert "500 agent steps/s, 2,000 frames/s" in compare._run_line(record)
    assert one_run.frame_skip(A3CConfig()) == 1  # CartPole: frames/s == agent steps/s


@needs_ale
def test_pong_has_four_frames_per_agent_step_and_every_variant_gets_the_atari_preset(tmp_path):
    _, config, _ = compare.parse_args(["--env", PONG, "--max-seconds", "120"])
    assert one_run.frame_skip(config) == 4
    spec = one_run.RunSpec("tf2_mp", seed=0, workers=2, max_seconds=120, phase="main")
    command = one_run.variant_command(spec, config, tmp_path / "run")
    # The TF2 variant resolves its flags as the graph launcher does: the atari preset.
    run = tf2_run.parse_variant_args("tf2_mp", "", command[3:])
    assert run.config == dataclasses.replace(config, max_seconds=120.0)
    assert (run.config.hidden_sizes, run.config.rollout_length, run.config.learning_rate,
            run.config.target_return) == ((256,), 20, 5.7e-4, 18.0)
    graph_command = one_run.variant_command(dataclasses.replace(spec, variant="graph"),
                                            config, tmp_path / "run")
    assert graph_command[2:] == command[3:]  # the graph launcher gets the same flags


@pytest.mark.parametrize("flags, words", [
    (["--variants", "graph,nope"], "--variants"),
    (["--seeds", "0"], "--seeds"),
    (["--scaling", "1,x"], "--scaling"),
    (["--env", "NoSuchEnv-v9"], "NoSuchEnv-v9"),
])
def test_bad_harness_flags_end_in_one_line(tmp_path, flags, words):
    result = subprocess.run([sys.executable, "-m", "benchmarks.run", "--out", str(tmp_path / "r"),
                             *flags], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("benchmarks.run: error:") and words in lines[0]
    assert not (tmp_path / "r").exists()

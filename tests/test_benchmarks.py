"""The benchmarks: the TF2 variants' shared pieces, and the harness run for real.

The smoke tests run `python -m benchmarks.run` for one variant each, a few seconds of
training with one worker, and check what a user reads afterwards: a complete record per
run, the results files and plots, and no process of the run left on the machine. No test
asserts a speed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
# benchmarks/ is not an installed package (setup.py packages a3c_graph only).
sys.path.insert(0, str(REPO))

from a3c_graph.cli import UsageError  # noqa: E402
from a3c_graph.config import A3CConfig  # noqa: E402
from a3c_graph.progress import ProgressFile, Totals, read_progress, run_totals  # noqa: E402
from benchmarks import run as bench_run  # noqa: E402
from benchmarks import runtime  # noqa: E402
from tests import ground_truth  # noqa: E402

HAS_RAY = importlib.util.find_spec("ray") is not None
HAS_ALE = importlib.util.find_spec("ale_py") is not None
needs_ale = pytest.mark.skipif(not HAS_ALE, reason="ale_py is not installed (the atari extra: "
                               "pip install -e '.[atari]')")
PONG = "ALE/Pong-v5"
SMOKE_FLAGS = ["--seeds", "1", "--workers", "1", "--max-seconds", "6", "--progress-secs", "1",
               "--rollout-length", "16", "--envs-per-worker", "4"]
SMOKE_TIMEOUT_SECS = 240


# --------------------------------------------------------------------------- harness, pure

def totals(time: float, env_steps: int) -> Totals:
    """A progress reading with these counters (every other field empty)."""
    empty = dict.fromkeys(f.name for f in dataclasses.fields(Totals))
    return Totals(**{**empty, "time": time, "env_steps": env_steps})


def test_runs_are_interleaved_seed_by_seed_then_scaling():
    runs = bench_run.plan_runs(["graph", "tf2_mp"], seeds=2, base_seed=5, workers=2,
                               max_seconds=300, scaling=[1, 4], scaling_seconds=60)
    assert [(r.phase, r.variant, r.seed, r.workers, r.max_seconds) for r in runs] == [
        ("main", "graph", 5, 2, 300), ("main", "tf2_mp", 5, 2, 300),
        ("main", "graph", 6, 2, 300), ("main", "tf2_mp", 6, 2, 300),
        ("scaling", "graph", 5, 1, 60), ("scaling", "tf2_mp", 5, 1, 60),
        ("scaling", "graph", 5, 4, 60), ("scaling", "tf2_mp", 5, 4, 60)]


def test_ceiling_runs_follow_each_seed_and_only_they_act_without_learning(tmp_path):
    runs = bench_run.plan_runs(["graph", "tf2_mp"], seeds=2, base_seed=5, workers=2,
                               max_seconds=300, scaling=[], scaling_seconds=60,
                               ceiling_seconds=30)
    assert [(r.phase, r.variant, r.seed, r.max_seconds) for r in runs] == [
        ("main", "graph", 5, 300), ("main", "tf2_mp", 5, 300), ("ceiling", "graph", 5, 30),
        ("main", "graph", 6, 300), ("main", "tf2_mp", 6, 300), ("ceiling", "graph", 6, 30)]
    commands = [bench_run.variant_command(r, A3CConfig(), tmp_path) for r in runs[:3]]
    assert ["--learn=False" in c for c in commands] == [False, False, True]


def test_ceiling_needs_the_graph_variant_and_tf2_variants_refuse_acting_only():
    with pytest.raises(UsageError, match="--ceiling measures the graph variant"):
        bench_run.parse_args(["--ceiling", "--variants", "tf2_mp"])
    with pytest.raises(ValueError, match="graph-only"):
        runtime.check_tf2_network(A3CConfig(learn=False))


def test_steps_per_sec_starts_at_the_first_counted_step():
    # Start-up (no env steps yet) is left out: 3000 steps in the 2 s after the first count.
    progress = [totals(100.0, 0), totals(110.0, 1000), totals(111.0, 2500), totals(112.0, 4000)]
    assert bench_run.steps_per_sec(progress) == pytest.approx(1500.0)
    assert bench_run.startup_seconds(progress, launched=95.0) == pytest.approx(15.0)
    assert bench_run.steps_per_sec(progress[:2]) is None  # one counted report has no rate


def test_graph_runs_through_the_users_launcher_with_the_shared_flags(tmp_path):
    config = A3CConfig(rollout_length=16)
    spec = bench_run.RunSpec("graph", seed=3, workers=2, max_seconds=60, phase="main")
    command = bench_run.variant_command(spec, config, tmp_path)
    assert command[:2] == [str(REPO / "scripts" / "launch_cluster.sh"), "start"]
    assert {"--rollout-length=16", "--seed=3", "--max-seconds=60"} <= set(command)
    mp_spec = bench_run.RunSpec("tf2_mp", seed=3, workers=2, max_seconds=60, phase="main")
    assert command[2:] == bench_run.variant_command(mp_spec, config, tmp_path)[3:]


@pytest.mark.parametrize("variant", bench_run.VARIANTS)
def test_the_harness_passes_allow_remote_on_to_every_run_and_only_then(tmp_path, variant):
    # Without it a run inherits the harness's private network (tests/test_security.py).
    spec = bench_run.RunSpec(variant, seed=0, workers=2, max_seconds=60, phase="main")
    assert "--allow-remote" not in bench_run.variant_command(spec, A3CConfig(), tmp_path)
    assert "--allow-remote" in bench_run.variant_command(spec, A3CConfig(), tmp_path,
                                                         allow_remote=True)


def fake_record(variant: str, phase: str, seed: int, workers: int, rate: float,
                solve_time: float | None, frame_skip: int = 1) -> dict:
    record = dict.fromkeys(bench_run.RECORD_KEYS)
    record.update(name=f"{phase}-{variant}-{workers}-{seed}", variant=variant, phase=phase,
                  seed=seed, workers=workers, steps_per_sec=rate, frame_skip=frame_skip,
                  frames_per_sec=rate * frame_skip, solved=solve_time is not None,
                  time_to_solve_s=solve_time, startup_s=5.0, peak_memory_mb=1000.0,
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
    machine = bench_run.machine_info()
    markdown = bench_run.write_results(tmp_path, settings, machine, records,
                                       ["graph", "tf2_mp"])
    medians = json.loads((tmp_path / "results.json").read_text())["medians"]
    assert medians["graph"]["runs"] == 3 and medians["graph"]["solved"] == 2
    assert medians["graph"]["steps_per_sec"] == 2000.0
    assert medians["graph"]["time_to_solve_s"] == 50.0  # over the solved runs only
    assert medians["tf2_mp"]["time_to_solve_s"] is None
    assert medians["graph"]["frames_per_sec"] == 2000.0  # CartPole: one frame per step
    assert "| graph | 3 | 2/3 | 2,000 | 2,000 | 50.0 s |" in markdown
    assert "| agent steps/s | frames/s |" in markdown
    assert "| graph | 900 | 2,500 |" in markdown  # scaling: 1 and 4 workers
    plots = bench_run.plot_results(tmp_path, records, ["graph", "tf2_mp"], 475.0)
    assert [p.name for p in plots] == ["returns.png", "steps_per_sec.png", "scaling.png"]


def test_results_give_the_graph_variants_ratios_and_its_share_of_the_acting_ceiling(tmp_path):
    records = [fake_record("graph", "main", 0, 2, 3000.0, 20.0),
               fake_record("tf2_mp", "main", 0, 2, 1000.0, 80.0),
               fake_record("tf2_ray", "main", 0, 2, 1500.0, None),
               fake_record("graph", "ceiling", 0, 2, 4000.0, None),
               fake_record("graph", "ceiling", 1, 2, 6000.0, None)]
    settings = {"env": "CartPole-v1", "workers": 2, "seeds": 1, "max_seconds": 300.0,
                "scaling_seconds": 60.0, "ceiling_seconds": 30.0}
    variants = ["graph", "tf2_mp", "tf2_ray"]
    markdown = bench_run.write_results(tmp_path, settings, bench_run.machine_info(), records,
                                       variants)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["graph_versus"] == {"tf2_mp": {"steps_per_sec": 3.0, "time_to_solve": 0.25},
                                    "tf2_ray": {"steps_per_sec": 2.0, "time_to_solve": None}}
    assert data["ceiling"] == {"runs": 2, "steps_per_sec": 5000.0,
                               "training_steps_per_sec": 3000.0, "training_share": 0.6}
    assert data["medians"]["graph"]["runs"] == 1  # ceiling runs are not training runs
    assert "| tf2_mp | 3.00 | 0.25 |" in markdown
    assert "5,000 steps/s; training runs reach 3,000 steps/s, 60 % of it" in markdown
    assert bench_run.plot_results(tmp_path, records, variants, 475.0)


def test_records_carry_frames_per_sec_from_the_envs_frame_skip(tmp_path):
    sampler = bench_run.Sampler(root_pid=0, logdir=tmp_path, launched=95.0,
                                progress=[totals(100.0, 1000), totals(102.0, 2000)])
    spec = bench_run.RunSpec("graph", seed=0, workers=2, max_seconds=120, phase="main")
    record = bench_run.build_record(spec, ["cmd"], tmp_path, tmp_path / "log", 0, 95.0, 103.0,
                                    sampler, [], None, frame_skip=4)
    assert tuple(record) == bench_run.RECORD_KEYS
    assert (record["steps_per_sec"], record["frame_skip"], record["frames_per_sec"]) == (
        500.0, 4, 2000.0)
    assert "500 agent steps/s, 2,000 frames/s" in bench_run._run_line(record)
    assert bench_run.frame_skip(A3CConfig()) == 1  # CartPole: frames/s == agent steps/s


@needs_ale
def test_pong_has_four_frames_per_agent_step_and_every_variant_gets_the_atari_preset(tmp_path):
    _, config, _ = bench_run.parse_args(["--env", PONG, "--max-seconds", "120"])
    assert bench_run.frame_skip(config) == 4
    spec = bench_run.RunSpec("tf2_mp", seed=0, workers=2, max_seconds=120, phase="main")
    command = bench_run.variant_command(spec, config, tmp_path / "run")
    # The TF2 variant resolves its flags as the graph launcher does: the atari preset.
    run = runtime.parse_variant_args("tf2_mp", "", command[3:])
    assert run.config == dataclasses.replace(config, max_seconds=120.0)
    assert (run.config.hidden_sizes, run.config.rollout_length, run.config.learning_rate,
            run.config.target_return) == ((256,), 20, 4e-4, 18.0)
    graph_command = bench_run.variant_command(dataclasses.replace(spec, variant="graph"),
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


# --------------------------------------------------------------------------- runtime

@pytest.mark.parametrize("spec, cuda_visible_devices, entries", [
    ("0,1", None, ("0", "1")),
    ("none", None, ()),
    ("", None, ()),
    # Ids count within this process's CUDA_VISIBLE_DEVICES, as the launcher's --gpus.
    ("1", "3,1", ("1",)),
    ("auto", "3,1", ("3", "1")),
    ("count:2", "3,1", ("3", "1")),
])
def test_tf2_variants_read_gpus_as_the_launcher_does(monkeypatch, spec, cuda_visible_devices,
                                                     entries):
    from a3c_graph.devices import CUDA_ENV, FAKE_GPUS_ENV

    monkeypatch.setenv(FAKE_GPUS_ENV, "4")
    if cuda_visible_devices is None:
        monkeypatch.delenv(CUDA_ENV, raising=False)
    else:
        monkeypatch.setenv(CUDA_ENV, cuda_visible_devices)
    assert runtime.visible_device_entries("benchmarks.tf2_ray", spec) == entries


def test_run_stats_stop_with_the_graph_workers_rule(tmp_path):
    config = A3CConfig(target_return=50.0)
    stats = runtime.RunStats(config)
    stats.record(256, [60.0] * 99)
    assert stats.check_stop() is None  # 99 episodes are not enough to call it solved
    stats.record(256, [60.0, 10.0])  # the window holds the newest 100
    assert stats.snapshot()["mean_return_100"] == pytest.approx((98 * 60 + 60 + 10) / 100)
    assert stats.check_stop() == "solved"

    progress = ProgressFile(tmp_path, 0, 50.0, progress_secs=1.0)
    progress.update(stats.snapshot(), 512)
    progress.write("done", stop_reason="solved")
    read = run_totals(read_progress(tmp_path))  # what the launcher and the harness read
    assert (read.env_steps, read.episodes, read.solved) == (512, 101, True)


@pytest.mark.parametrize("module", [
    "benchmarks.tf2_multiprocessing",
    pytest.param("benchmarks.tf2_ray", marks=pytest.mark.skipif(not HAS_RAY, reason="no ray")),
    "benchmarks.run",
])
def test_parents_never_import_tensorflow(module):
    # A process that imported TF must not fork; the variants' parents spawn or start Ray.
    code = f"import sys, {module}; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


@pytest.mark.parametrize("flags, words", [
    (["--policy", "lstm"], "not the lstm"),
    (["--policy", "cnn"], "--policy cnn needs image observations"),
    (["--workers", "0"], "--workers"),
    (["--env", "NoSuchEnv-v9"], "NoSuchEnv-v9"),
    (["--no-such-flag"], "--no-such-flag"),
])
def test_tf2_variant_bad_flags_end_in_one_line(tmp_path, flags, words):
    result = subprocess.run([sys.executable, "-m", "benchmarks.tf2_multiprocessing", "--logdir",
                             str(tmp_path / "run"), *flags], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- TF2 variants' learner

# The TF2 variants call the graph's own learner_loss: comparing their loss or gradients with the
# graph's would compare learner_loss with itself and pass with any bug in it. So the networks
# are compared with the graph's (same weights, same outputs), and the loss and the clipped
# gradients a TF2 worker sends with the NumPy ground truth of tests/ground_truth.py.

def consistent_rollout(config: A3CConfig, obs_shape: tuple, obs_dtype, num_actions: int) -> dict:
    """Random [T, B] fields in which next_obs[t] is obs[t + 1] unless an episode ended at t,
    as in every recorded rollout (the cnn learner relies on it: values_of_next_obs). Env 0
    is truncated at t = 1 and the last env terminates at t = 2, whatever else is drawn."""
    T, B = config.rollout_length, config.envs_per_worker
    rng = np.random.default_rng(0)
    if np.dtype(obs_dtype) == np.uint8:
        observations = lambda: rng.integers(0, 256, size=(T, B, *obs_shape), dtype=np.uint8)  # noqa: E731
    else:
        observations = lambda: rng.normal(size=(T, B, *obs_shape)).astype(obs_dtype)  # noqa: E731
    rollout = {"obs": observations(), "next_obs": observations(),
               "actions": rng.integers(0, num_actions, size=(T, B)).astype(np.int32),
               "rewards": (2.0 * rng.normal(size=(T, B))).astype(np.float32),
               "terminated": rng.random((T, B)) < 0.2, "truncated": rng.random((T, B)) < 0.1}
    rollout["terminated"][1, 0], rollout["truncated"][1, 0] = False, True
    rollout["terminated"][2, -1] = True
    goes_on = ~(rollout["terminated"] | rollout["truncated"])[:-1]
    rollout["next_obs"][:-1][goes_on] = rollout["obs"][1:][goes_on]
    return rollout


def tf2_model_like_the_graphs(config: A3CConfig, rollout: dict):
    """The TF2 variants' network for config, holding the weights of the graph worker's network
    (model.build_network); asserts that both give the same logits and values on every
    observation of `rollout`. Returns (the TF2 model, the env's info, and the graph network's
    logits [T, B, A], V(s_t) [T, B] and V(s_{t+1}) [T, B] on the rollout)."""
    import tensorflow as tf

    from a3c_graph.envs import env_info, env_options
    from a3c_graph.model import build_network
    from benchmarks import tf2_common

    T, B = config.rollout_length, config.envs_per_worker
    info = env_info(config.env, **env_options(config))
    flat = {key: rollout[key].reshape(T * B, *info.obs_shape) for key in ("obs", "next_obs")}
    with tf.Graph().as_default():
        network = build_network(info.obs_shape, info.num_actions, config, "graph")
        outputs = [network(tf.constant(flat[key])) for key in ("obs", "next_obs")]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            weights, graph_outputs = session.run([network.variables, outputs])

    model = tf2_common.build_model(info, config)
    assert type(model).__mro__[1:] == (tf2_common._EagerWeights, type(network),
                                       *type(network).__mro__[1:])
    assert [w.shape for w in model.get_weights()] == [w.shape for w in weights]
    model.set_weights(weights)
    for key, (graph_logits, graph_values) in zip(("obs", "next_obs"), graph_outputs):
        tf2_logits, tf2_values = model(flat[key])
        np.testing.assert_allclose(tf2_logits.numpy(), graph_logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tf2_values.numpy(), graph_values, rtol=1e-5, atol=1e-6)
    (logits, values), (_, next_values) = graph_outputs
    return model, info, logits.reshape(T, B, -1), values.reshape(T, B), next_values.reshape(T, B)


def tf2_gradient_step(model, config: A3CConfig, info, rollout: dict):
    """(clipped gradients, loss parts) of one rollout, as a TF2 worker computes them."""
    from a3c_graph.rollout import rollout_fields
    from benchmarks import tf2_common

    fields = rollout_fields(info.obs_shape, info.obs_dtype, *rollout["rewards"].shape)
    gradients, parts = tf2_common.make_gradient_step(model, config, fields)(
        {key: rollout[key] for key in tf2_common.LEARNER_KEYS})
    assert set(parts) >= {"loss", "grad_norm", "policy_loss", "value_loss", "entropy"}
    return [g.numpy() for g in gradients], {key: float(value) for key, value in parts.items()}


def assert_loss_is_the_ground_truth(parts: dict, want: dict) -> None:
    for key, truth in (("loss", "total"), ("policy_loss", "policy_loss"),
                       ("value_loss", "value_loss"), ("entropy", "entropy")):
        np.testing.assert_allclose(parts[key], want[truth], rtol=5e-5, atol=1e-6, err_msg=key)


def name_in_scope(variable) -> str:
    """"tf2/policy/fc0/weights:0" -> "policy/fc0/weights", as tests/ground_truth.py names them."""
    return variable.name.split("/", 1)[1].rsplit(":", 1)[0]


def test_tf2_network_is_the_graphs_and_its_loss_and_clipped_gradients_the_ground_truth():
    # A clip norm the gradients exceed, so that the clipping is checked too.
    config = A3CConfig(rollout_length=5, envs_per_worker=3, hidden_sizes=(8, 6),
                       grad_clip_norm=0.05)
    rollout = consistent_rollout(config, (4,), np.float32, 2)
    model, info, *_ = tf2_model_like_the_graphs(config, rollout)
    gradients, parts = tf2_gradient_step(model, config, info, rollout)

    weights = {name_in_scope(v): v.numpy() for v in model.variables}
    assert_loss_is_the_ground_truth(parts, ground_truth.mlp_loss(weights, rollout, config))
    semi_gradient = ground_truth.mlp_semi_gradient(weights, rollout, config)
    norm = np.sqrt(sum(np.sum(g ** 2) for g in semi_gradient.values()))
    assert norm > 2 * config.grad_clip_norm
    np.testing.assert_allclose(parts["grad_norm"], norm, rtol=1e-3)
    want = ground_truth.clipped(semi_gradient, config.grad_clip_norm)
    assert len(gradients) == len(model.variables) == len(want)
    for variable, gradient in zip(model.variables, gradients):  # in model.variables order
        name = name_in_scope(variable)
        np.testing.assert_allclose(gradient, want[name], rtol=1e-3, atol=1e-6, err_msg=name)


@needs_ale
def test_tf2_cnn_network_is_the_graphs_and_its_loss_the_ground_truth():
    from a3c_graph.config import resolve_config

    # The atari preset (raw GAE advantages, clipped rewards) with a smaller dense layer;
    # episodes end mid-rollout, so the learner also evaluates final observations.
    config = resolve_config({"env": PONG, "rollout_length": 4, "envs_per_worker": 2,
                             "hidden_sizes": (16,)})
    rollout = consistent_rollout(config, (4, 42, 42), np.uint8, 6)
    model, info, logits, values, next_values = tf2_model_like_the_graphs(config, rollout)
    _, parts = tf2_gradient_step(model, config, info, rollout)
    assert_loss_is_the_ground_truth(
        parts, ground_truth.loss(logits, values, next_values, rollout, config))


# --------------------------------------------------------------------------- smoke runs

def _gone(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return (abs(proc.create_time() - create_time) > 0.01
                or proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@pytest.mark.e2e
@pytest.mark.parametrize("variant", [
    "graph",
    "tf2_mp",
    pytest.param("tf2_ray", marks=pytest.mark.skipif(
        not HAS_RAY, reason="ray is not installed (pip install -e '.[bench]')")),
])
def test_harness_smoke_run(tmp_path, variant):
    out = tmp_path / "results"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--variants", variant, "--out", str(out),
         *SMOKE_FLAGS], cwd=REPO, capture_output=True, text=True, timeout=SMOKE_TIMEOUT_SECS)
    assert result.returncode == 0, result.stderr[-2000:]

    data = json.loads((out / "results.json").read_text())
    (record,) = data["records"]
    assert tuple(record) == bench_run.RECORD_KEYS
    assert record["variant"] == variant and record["exit_code"] == 0
    assert record["stop_reason"] in ("solved", "max_seconds", "max_steps")
    assert record["steps_per_sec"] > 0
    assert record["frame_skip"] == 1 and record["frames_per_sec"] == record["steps_per_sec"]
    assert data["medians"][variant]["frames_per_sec"] == data["medians"][variant]["steps_per_sec"]
    assert record["startup_s"] > 0 and record["peak_memory_mb"] > 0
    assert record["final_env_steps"] > 0 and record["return_curve"]
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
    assert all(_gone(p["pid"], p["create_time"]) for p in record["processes"])

"""The benchmarks' TF2 variants (benchmarks/variants): tf2_run's shared pieces (GPUs as the
launcher reads them, the run's stats and each worker's budget, bad flags, parents that never
import TF), which shared flags they honour and which they refuse, their networks, loss and
clipped gradients against the graph's network and the NumPy ground truth, and a TF2 worker's
actor threads, flat weights and parameter holder.

The harness that runs them, and the smoke runs of every variant, are in test_harness.py.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO

from a3c_graph.core.config import A3CConfig
from a3c_graph.rundir.progress import ProgressFile, read_progress, run_totals
from a3c_graph.system.cli import UsageError
from benchmarks.harness import compare
from benchmarks.variants import tf2_run
from tests.support import ground_truth
from tests.support.benchmark_helpers import HAS_RAY, PONG, needs_ale

# --------------------------------------------------------------------------- tf2_run

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
    from a3c_graph.system.devices import CUDA_ENV, FAKE_GPUS_ENV

    monkeypatch.setenv(FAKE_GPUS_ENV, "4")
    if cuda_visible_devices is None:
        monkeypatch.delenv(CUDA_ENV, raising=False)
    else:
        monkeypatch.setenv(CUDA_ENV, cuda_visible_devices)
    assert tf2_run.visible_device_entries("benchmarks.variants.tf2_ray", spec) == entries


def test_run_stats_stop_with_the_graph_workers_rule(tmp_path):
    config = A3CConfig(target_return=50.0)
    stats = tf2_run.RunStats(config)
    stats.record(0, 256, [60.0] * 99)
    assert stats.worker_stop_reason(0) is None  # 99 episodes are not enough to call it solved
    stats.record(1, 256, [60.0, 10.0])  # the window holds the newest 100
    assert stats.snapshot()["mean_return_100"] == pytest.approx((98 * 60 + 60 + 10) / 100)
    assert stats.worker_stop_reason(1) == "solved"
    assert stats.worker_stop_reason(0) == "solved"  # solved stops the whole run

    progress = ProgressFile(tmp_path, 0, 50.0, progress_secs=1.0)
    progress.update(stats.snapshot(), 512)
    progress.write("done", stop_reason="solved")
    read = run_totals(read_progress(tmp_path))  # what the launcher and the harness read
    assert (read.env_steps, read.episodes, read.solved) == (512, 101, True)


def test_each_tf2_worker_spends_its_own_budget_and_a_solve_stops_them_all():
    # As graph workers: --max-seconds count from each worker's own first applied update.
    stats = tf2_run.RunStats(A3CConfig(max_seconds=50.0, target_return=50.0))
    stats.record(0, 256, [])
    stats.record(1, 256, [])
    stats.first_update[0] -= 51.0  # worker 0 has trained for 51 s, worker 1 just began
    assert (stats.worker_stop_reason(0), stats.worker_stop_reason(1)) == ("max_seconds", None)
    assert stats.stop_reason is None  # the run goes on with worker 1
    stats.record(1, 256, [60.0] * 100)
    assert (stats.worker_stop_reason(1), stats.worker_stop_reason(0)) == ("solved", "solved")


def test_a_tf2_workers_budget_runs_on_the_clock_of_its_progress_file():
    # The holder sees a worker's first update before the worker gets the reply and marks
    # its training_started; the budget must not end before the worker's own clock says so.
    stats = tf2_run.RunStats(A3CConfig(max_seconds=50.0, target_return=50.0))
    stats.record(0, 256, [])
    stats.first_update[0] -= 50.5  # the holder's mark: 50.5 s ago
    stats.record(0, 256, [], started=time.time() - 49.5)  # the worker's: 49.5 s ago
    assert stats.worker_stop_reason(0) is None
    stats.record(0, 256, [], started=time.time() - 50.0)
    assert stats.worker_stop_reason(0) == "max_seconds"


@pytest.mark.parametrize("module", [
    "benchmarks.variants.tf2_multiprocessing",
    pytest.param("benchmarks.variants.tf2_ray",
                 marks=pytest.mark.skipif(not HAS_RAY, reason="no ray")),
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
    result = subprocess.run([sys.executable, "-m", "benchmarks.variants.tf2_multiprocessing",
                             "--logdir", str(tmp_path / "run"), *flags], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- shared flags

TF2_MODULES = ["benchmarks.variants.tf2_multiprocessing", pytest.param(
    "benchmarks.variants.tf2_ray", marks=pytest.mark.skipif(not HAS_RAY, reason="no ray"))]


def test_every_shared_flag_is_honoured_or_refused_by_the_tf2_variants():
    # The graph variant is the reference: it honours every flag. A new flag must be put on
    # one side for the TF2 variants, or this fails.
    names = {f.name for f in dataclasses.fields(A3CConfig)}
    assert tf2_run.TF2_HONOURED | set(tf2_run.TF2_REFUSED) == names
    assert not tf2_run.TF2_HONOURED & set(tf2_run.TF2_REFUSED)


@pytest.mark.parametrize("module", TF2_MODULES)
@pytest.mark.parametrize("flag, value", [("--checkpoint-secs", "5"),
                                         ("--connect-timeout", "30"), ("--policy", "lstm")])
def test_tf2_variants_refuse_the_flags_they_cannot_honour_in_one_line(tmp_path, module, flag,
                                                                      value):
    result = subprocess.run([sys.executable, "-m", module, "--logdir", str(tmp_path / "run"),
                             f"{flag}={value}"], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "graph" in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


def test_the_harness_refuses_a_flag_its_tf2_variants_cannot_honour_before_any_run():
    with pytest.raises(UsageError, match="--checkpoint-secs"):
        compare.parse_args(["--checkpoint-secs", "5"])
    compare.parse_args(["--checkpoint-secs", "5", "--variants", "graph"])  # graph honours it


def test_tf2_workers_take_the_gpus_round_robin_and_the_ps_runs_on_the_cpu():
    from a3c_graph.system.devices import CUDA_ENV

    environ = {CUDA_ENV: "0,1,2,3"}  # a child process's own environment
    seen = []
    for index in (0, 1, 2):
        tf2_run.pin_visible_gpus(("3", "5"), index, environ)  # worker `index`
        seen.append(environ[CUDA_ENV])
    tf2_run.pin_visible_gpus((), 0, environ)  # the parameter holder's
    assert seen + [environ[CUDA_ENV]] == ["3", "5", "3", ""]
    assert environ["TF_USE_LEGACY_KERAS"] == "1"  # and the graph agent's import settings


# --------------------------------------------------------------------------- TF2 variants' learner

# The TF2 variants call the graph's own learner_loss: comparing their loss or gradients with the
# graph's would compare learner_loss with itself and pass with any bug in it. So the networks
# are compared with the graph's (same weights, same outputs), and the loss and the clipped
# gradients a TF2 worker sends with the NumPy ground truth of tests/support/ground_truth.py.

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
    done = rollout["terminated"] | rollout["truncated"]
    rollout["episode_returns"] = np.where(done, rng.normal(size=(T, B)), 0.0).astype(np.float32)
    rollout["episode_lengths"] = np.where(done, rng.integers(1, 500, (T, B)), 0).astype(np.int32)
    return rollout


def tf2_model_like_the_graphs(config: A3CConfig, rollout: dict):
    """The TF2 variants' network for config, holding the weights of the graph worker's network
    (model.build_network); asserts that both give the same logits and values on every
    observation of `rollout`. Returns (the TF2 model, the env's info, and the graph network's
    logits [T, B, A], V(s_t) [T, B] and V(s_{t+1}) [T, B] on the rollout)."""
    import tensorflow as tf

    from a3c_graph.core.envs import env_info, env_options
    from a3c_graph.core.model import build_network
    from benchmarks.variants import tf2_common

    T, B = config.rollout_length, config.envs_per_worker
    info = env_info(config.env, **env_options(config))
    flat = {key: rollout[key].reshape(T * B, *info.obs_shape) for key in ("obs", "next_obs")}
    with tf.Graph().as_default():
        network = build_network(info.obs_shape, info.actions, config, "graph")
        outputs = [network(tf.constant(flat[key])) for key in ("obs", "next_obs")]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            weights, graph_outputs = session.run([network.variables, outputs])

    model = tf2_common.build_model(info, config)
    assert type(model).__mro__[1:] == type(network).__mro__
    assert [tuple(v.shape) for v in model.variables] == [w.shape for w in weights]
    tf2_common.FlatWeights(model.variables).assign(
        np.concatenate([w.ravel() for w in weights]))
    for key, (graph_logits, graph_values) in zip(("obs", "next_obs"), graph_outputs):
        tf2_logits, tf2_values = model(flat[key])
        np.testing.assert_allclose(tf2_logits.numpy(), graph_logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tf2_values.numpy(), graph_values, rtol=1e-5, atol=1e-6)
    (logits, values), (_, next_values) = graph_outputs
    return model, info, logits.reshape(T, B, -1), values.reshape(T, B), next_values.reshape(T, B)


def tf2_gradient_step(model, config: A3CConfig, info, rollout: dict):
    """(clipped gradients, one per variable, loss parts) of one rollout acted on `model`'s
    weights, as a TF2 worker computes them (flat, here split back into its variables'
    shapes)."""
    from a3c_graph.core.rollout import rollout_fields
    from benchmarks.variants import tf2_common

    fields = rollout_fields(info.obs_shape, info.obs_dtype, *rollout["rewards"].shape)
    weights = tf2_common.FlatWeights(model.variables)
    signature = tf2_common.learner_signature(fields)
    gradients_of = tf2_common.make_gradient_function(
        weights, tf2_common.network_on(info, config), config, fields)
    inputs = {**{key: rollout[key] for key in signature},
              tf2_common.ACTING_WEIGHTS: weights.read()}
    if config.anneal_entropy:  # the atari preset's: at the start, the full --entropy-coef
        inputs[tf2_common.ENTROPY_COEF] = np.float32(config.entropy_coef_at(0))
    flat, finished, parts = gradients_of(inputs)
    done = rollout["terminated"] | rollout["truncated"]
    np.testing.assert_array_equal(finished.numpy(), rollout["episode_returns"][done])
    assert set(parts) >= {"loss", "grad_norm", "policy_loss", "value_loss", "entropy"}
    return ([g.numpy() for g in weights.split(flat)],
            {key: float(value) for key, value in parts.items()})


def assert_loss_is_the_ground_truth(parts: dict, want: dict) -> None:
    for key, truth in (("loss", "total"), ("policy_loss", "policy_loss"),
                       ("value_loss", "value_loss"), ("entropy", "entropy")):
        np.testing.assert_allclose(parts[key], want[truth], rtol=5e-5, atol=1e-6, err_msg=key)


def name_in_scope(variable) -> str:
    """"tf2/policy/fc0/weights:0" -> "policy/fc0/weights", as tests/support/ground_truth.py
    names them."""
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
    from a3c_graph.core.config import resolve_config

    # The atari preset (raw GAE advantages, clipped rewards) with a smaller dense layer;
    # episodes end mid-rollout, so the learner also evaluates final observations.
    config = resolve_config({"env": PONG, "rollout_length": 4, "envs_per_worker": 2,
                             "hidden_sizes": (16,)})
    rollout = consistent_rollout(config, (4, 42, 42), np.uint8, 6)
    model, info, logits, values, next_values = tf2_model_like_the_graphs(config, rollout)
    _, parts = tf2_gradient_step(model, config, info, rollout)
    assert_loss_is_the_ground_truth(
        parts, ground_truth.loss(logits, values, next_values, rollout, config))


# --------------------------------------------------------------------------- TF2 worker

def test_a_tf2_worker_honours_actor_threads_and_queue_capacity():
    from a3c_graph.core.envs import EnvBatch
    from benchmarks.variants import tf2_worker

    config = A3CConfig(actor_threads=2, queue_capacity=3, envs_per_worker=2, rollout_length=5,
                       seed=7)
    worker = tf2_worker.TF2Worker(config, task=1, device="/CPU:0")
    try:
        # One batch of envs per actor thread, seeded as the graph worker's actor threads'.
        assert len(worker.threads) == len(worker.recorders) == 2
        for k, recorder in enumerate(worker.recorders):
            twin = EnvBatch(config.env, 2, seed=7 + 1000 * 1 + 100 * k)
            np.testing.assert_array_equal(recorder.envs.observe(), twin.observe())
            twin.close()
        assert worker.rollouts.maxsize == 3
        worker.set_weights(np.zeros(worker.weights.size, np.float32), 0)
        worker.start_actors()
        rollouts = [worker.next_rollout() for _ in range(40)]
        rollout = next(r for r in rollouts if r is not None)
    finally:
        worker.stop()
    assert not any(thread.is_alive() for thread in worker.threads)

    # One tf.function call made the whole rollout, recorded as the graph's (RolloutRecorder).
    assert rollout["obs"].shape == (5, 2, 4) and rollout["actions"].shape == (5, 2)
    obs, next_obs = rollout["obs"].numpy(), rollout["next_obs"].numpy()
    going_on = ~(rollout["terminated"].numpy() | rollout["truncated"].numpy())[:-1]
    np.testing.assert_array_equal(next_obs[:-1][going_on], obs[1:][going_on])
    assert set(np.unique(rollout["actions"].numpy())) <= {0, 1}
    result = worker.learn(rollout)
    assert result.gradients.shape == (worker.weights.size,) and result.env_steps == 10
    assert result.task == 1 and np.isfinite(result.entropy)


def test_a_tf2_worker_anneals_the_entropy_bonus_by_the_env_steps_the_holder_reported():
    """--anneal-entropy in the TF2 variants: after a reply at 750 of 1,000 env steps, a
    worker's gradient of a rollout is that of a worker whose constant bonus is a quarter of
    --entropy-coef, and apart from the full bonus's (the graph worker's
    entropy_coef_now, through A3CConfig.entropy_coef_at)."""
    from benchmarks.variants import tf2_common, tf2_worker

    base = A3CConfig(envs_per_worker=2, rollout_length=5, hidden_sizes=(8, 6), seed=3,
                     max_steps=1000, entropy_coef=1.0, grad_clip_norm=1e6)
    configs = {"annealed": dataclasses.replace(base, anneal_entropy=True),
               "quarter": dataclasses.replace(base, entropy_coef=0.25), "full": base}
    workers = {name: tf2_worker.TF2Worker(config, task=0, device="/CPU:0")
               for name, config in configs.items()}
    try:
        first = workers["annealed"]
        start = np.random.default_rng(0).normal(0, 0.3, first.weights.size).astype(np.float32)
        reply = tf2_common.Reply(start, {"global_step": 0, "env_steps": 750}, None, None, None)
        for worker in workers.values():
            worker.adopt(reply)
        first.start_actors()
        rollout = next(r for r in (first.next_rollout() for _ in range(40)) if r is not None)
    finally:
        for worker in workers.values():
            worker.stop()
    got = {name: worker.learn(rollout).gradients for name, worker in workers.items()}
    np.testing.assert_allclose(got["annealed"], got["quarter"], rtol=1e-4, atol=1e-7)
    assert np.abs(got["annealed"] - got["full"]).max() > 1e-3


def test_flat_weights_read_and_assign_every_variable_in_order():
    from benchmarks.variants import tf2_common

    model = tf2_common.build_model(*_cartpole_info_and_config())
    weights = tf2_common.FlatWeights(model.variables)
    flat = np.arange(weights.size, dtype=np.float32)
    weights.assign(flat)
    np.testing.assert_array_equal(weights.read().numpy(), flat)
    first = model.variables[0]
    np.testing.assert_array_equal(first.numpy(),
                                  flat[:first.shape.num_elements()].reshape(first.shape))


def test_the_parameter_holder_returns_the_weights_after_each_update():
    from benchmarks.variants import tf2_common

    info, config = _cartpole_info_and_config()
    holder = tf2_common.ParameterHolder(config, "/CPU:0", info)
    before = holder.initial().weights
    gradients = np.ones_like(before)
    reply = holder.update(tf2_common.RolloutResult(0, gradients, 0, 256, [10.0], 0.6))
    # Adam's first step moves every weight by about the learning rate, against the gradient.
    np.testing.assert_allclose(before - reply.weights, config.learning_rate, rtol=0.05)
    assert reply.stats["env_steps"] == 256 and reply.stop_reason is None
    # Acting only (--learn false): the rollout is counted, nothing is applied.
    acting = holder.update(tf2_common.RolloutResult(1, np.zeros(0, np.float32), 0, 256, [], None))
    assert acting.weights is None and acting.stats["global_step"] == 2
    np.testing.assert_array_equal(holder.weights.read().numpy(), reply.weights)


def test_the_parameter_holder_scales_a_stale_update_by_lag_tolerance_over_lag():
    """The graph's lag rule in the TF2 variants: 13 updates of the same gradient, all acted
    on the initial weights (version 0), arrive when the holder has applied 0, 1, ..., 12
    updates. With --lag-tolerance 1 the tolerated lag is 2 workers' own, 2 x (queue capacity
    2 + 1) = 6 (the tolerance's 1 x sqrt(160 / 256) is below it): the first seven move each
    weight by Adam's full step (about the learning rate for a constant gradient), the 13th,
    12 updates stale, by half of it."""
    from benchmarks.variants import tf2_common

    info, config = _cartpole_info_and_config()
    config = dataclasses.replace(config, lag_tolerance=1.0, queue_capacity=2)
    holder = tf2_common.ParameterHolder(config, "/CPU:0", info)
    weights = [holder.initial().weights]
    for _ in range(13):
        reply = holder.update(tf2_common.RolloutResult(0, np.ones_like(weights[0]), 0, 256, [],
                                                       0.6))
        weights.append(reply.weights)
    steps = [before - after for before, after in zip(weights, weights[1:])]
    for stale in range(7):
        np.testing.assert_allclose(steps[stale], config.learning_rate, rtol=0.05)
    np.testing.assert_allclose(steps[12], config.learning_rate / 2, rtol=0.05)


def test_the_parameter_holder_pools_rollouts_into_one_update_of_their_mean():
    """--rollouts-per-update 2 in the TF2 variants, as the graph's ps: the first rollout of a
    pair leaves the weights and the global step as they were; the second applies Adam's
    first step of the pair's mean gradient (a constant gradient of 1 where the pair's signs
    agree, a zero one where they cancel) and advances the global step once."""
    from benchmarks.variants import tf2_common

    info, config = _cartpole_info_and_config()
    holder = tf2_common.ParameterHolder(dataclasses.replace(config, rollouts_per_update=2),
                                        "/CPU:0", info)
    before = holder.initial().weights
    signs = np.where(np.arange(before.size) % 2 == 0, 1.0, -1.0).astype(np.float32)
    first = holder.update(tf2_common.RolloutResult(0, np.ones_like(before), 0, 256, [], 0.6))
    np.testing.assert_array_equal(first.weights, before)
    assert first.stats["global_step"] == 0 and first.stats["env_steps"] == 256
    second = holder.update(tf2_common.RolloutResult(1, signs, 0, 256, [], 0.6))
    step = before - second.weights
    np.testing.assert_allclose(step[signs > 0], config.learning_rate, rtol=0.05)
    np.testing.assert_allclose(step[signs < 0], 0.0, atol=1e-7)
    assert second.stats["global_step"] == 1 and second.stats["env_steps"] == 512


@pytest.mark.parametrize("optimizer, denominator", [
    # TF's first step: the mean square from 1, epsilon inside the root
    ("rmsprop", lambda g, eps: np.sqrt(0.99 + 0.01 * g ** 2 + eps)),
    # PyTorch's: from 0, epsilon outside
    ("rmsprop-pytorch", lambda g, eps: np.sqrt(0.01 * g ** 2) + eps),
])
def test_the_parameter_holder_applies_rmsprop_when_asked(optimizer, denominator):
    """--optimizer rmsprop and rmsprop-pytorch in the TF2 variants: RMSProp's first step,
    lr g / denominator, where Adam's would move each weight by about the learning rate."""
    from benchmarks.variants import tf2_common

    info, config = _cartpole_info_and_config()
    config = dataclasses.replace(config, optimizer=optimizer)
    holder = tf2_common.ParameterHolder(config, "/CPU:0", info)
    before = holder.initial().weights
    reply = holder.update(tf2_common.RolloutResult(0, np.full_like(before, 3.0), 0, 256, [], None))
    want = config.learning_rate * 3.0 / denominator(3.0, config.rmsprop_epsilon)
    np.testing.assert_allclose(before - reply.weights, want, rtol=1e-4)


def _cartpole_info_and_config():
    from a3c_graph.core.envs import env_info

    config = A3CConfig(hidden_sizes=(8, 6), anneal_learning_rate=False, adam_epsilon=1e-8,
                       target_return=195.0)
    return env_info(config.env), config



def test_a_tf2_worker_acts_on_a_box_and_the_holder_keeps_the_running_statistics():
    """The TF2 variants' continuous actions, --normalize-observations and --normalize-rewards
    (TargetBox: 2 actions in [-2, 2]): a rollout's actions are float [T, B, 2] as sampled,
    its gradients include the log std's, the holder adds the result's observation and
    discounted-return sums and replies with their mean and standard deviation, the worker's
    next rollouts act on that observation scale and its updates learn on that return std."""
    from a3c_graph.core.config import resolve_config
    from a3c_graph.core.envs import env_info, env_options
    from benchmarks.variants import tf2_common, tf2_worker

    config = resolve_config({"env": "tests.support.action_space_envs:TargetBox-v0",
                             "envs_per_worker": 3, "rollout_length": 4, "seed": 2,
                             "normalize_rewards": True})
    assert config.normalize_observations  # the continuous preset, picked by auto
    info = env_info(config.env, **env_options(config))
    holder = tf2_common.ParameterHolder(config, "/CPU:0", info)
    first = holder.initial()
    np.testing.assert_allclose(first.scale, [[0.0], [1.0]], atol=1e-4)
    assert first.return_std == pytest.approx(1.0)
    worker = tf2_worker.TF2Worker(config, task=0, device="/CPU:0")
    try:
        worker.adopt(first)
        worker.start_actors()
        rollout = next(r for r in (worker.next_rollout() for _ in range(40)) if r is not None)
        result = worker.learn(rollout)
        reply = holder.update(result)
        worker.adopt(reply)
        return_std = float(worker.return_std.numpy())
        later = next(r for r in (worker.next_rollout() for _ in range(80))
                     if r is not None and int(r[tf2_common.ACTING_VERSION]) == 1)
    finally:
        worker.stop()
    assert rollout["actions"].dtype == "float32" and rollout["actions"].shape == (4, 3, 2)
    assert result.gradients.shape == (worker.weights.size,) and np.isfinite(result.gradients).all()
    obs = rollout["obs"].numpy().reshape(-1, 1).astype(np.float64)
    count, total, squares = result.observation_sums
    assert count == 12
    np.testing.assert_allclose(total, obs.sum(axis=0))
    np.testing.assert_allclose(squares, (obs ** 2).sum(axis=0))
    np.testing.assert_allclose(reply.scale[0], obs.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(reply.scale[1], np.sqrt(obs.var(axis=0) + 1e-8), rtol=1e-5)
    np.testing.assert_allclose(later[tf2_common.ACTING_SCALE[0]].numpy(), reply.scale[0])
    discounted = rollout["discounted_returns"].numpy().astype(np.float64)
    count, total, squares = result.return_sums
    assert count == 12
    np.testing.assert_allclose(total, [discounted.sum()], rtol=1e-6)
    np.testing.assert_allclose(squares, [(discounted ** 2).sum()], rtol=1e-6)
    assert reply.return_std == pytest.approx(np.sqrt(discounted.var() + 1e-8), rel=1e-5)
    assert return_std == pytest.approx(reply.return_std, rel=1e-6)


def test_a_tf2_worker_explores_with_gsde_when_asked():
    """--sde in the TF2 variants (TargetBox, a policy tower of 3 features): each env's
    exploration noise over a rollout is its step's features times one matrix (fitted on 3
    steps, it predicts the other 3), and the update has a gradient for the log std matrix
    [3, 2]."""
    import tensorflow as tf

    from a3c_graph.core.config import resolve_config
    from benchmarks.variants import tf2_worker

    config = resolve_config({"env": "tests.support.action_space_envs:TargetBox-v0",
                             "envs_per_worker": 2, "rollout_length": 6, "seed": 3,
                             "hidden_sizes": (3,), "sde": True})
    worker = tf2_worker.TF2Worker(config, task=0, device="/CPU:0")
    try:
        worker.start_actors()
        rollout = next(r for r in (worker.next_rollout() for _ in range(40)) if r is not None)
        result = worker.learn(rollout)
    finally:
        worker.stop()
    model = worker.model
    obs = tf.reshape(tf.cast(rollout["obs"], tf.float32), [12, -1])
    params, features = model.policy_and_features(obs)
    noise = (rollout["actions"].numpy().reshape(12, 2) - params.numpy()[:, :2]).reshape(6, 2, 2)
    features = features.numpy().reshape(6, 2, 3)
    for env in range(2):
        matrix = np.linalg.lstsq(features[:3, env], noise[:3, env], rcond=None)[0]
        np.testing.assert_allclose(features[3:, env] @ matrix, noise[3:, env], rtol=1e-3,
                                   atol=1e-5)
    split = worker.weights.split(result.gradients)
    [log_std] = [g for v, g in zip(model.variables, split) if "log_std" in v.name]
    assert log_std.shape == (3, 2) and np.abs(np.asarray(log_std)).max() > 0

"""A real cluster: ps and worker tasks as separate processes, training together."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import tensorflow as tf

T, B = 16, 4  # small rollouts: a few hundred env steps give many updates
FAST = ["--rollout-length", str(T), "--envs-per-worker", str(B), "--progress-secs", "0.5",
        "--env", "CartPole-v1"]


def read_progress(logdir, task):
    return json.loads((logdir / "progress" / f"worker_{task}.json").read_text())


def wait_all(processes, timeout):
    for process in processes:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"task did not finish in {timeout}s; log: {process.log_path}")


def run_workers(cluster, logdir, max_steps):
    workers = [cluster.start("worker", i, "--logdir", str(logdir), "--max-steps", str(max_steps),
                             *FAST) for i in range(cluster.num_workers)]
    wait_all(workers, timeout=180)
    for process in workers:
        assert process.returncode == 0, open(process.log_path).read()[-3000:]
    return [read_progress(logdir, i) for i in range(cluster.num_workers)]


def test_two_workers_train_the_same_global_network(local_cluster, tmp_path):
    cluster = local_cluster(workers=2)
    logdir = tmp_path / "run"
    cluster.start("ps", 0)
    progress = run_workers(cluster, logdir, max_steps=3000)

    # Both workers contributed rollouts to the one global step on the ps.
    local_steps = [p["local_env_steps"] for p in progress]
    assert all(steps > 0 for steps in local_steps), local_steps
    # The worker that stopped last saw every update: the global counters are the sum of both.
    last = max(progress, key=lambda p: p["global_step"])
    assert last["env_steps"] == sum(local_steps) >= 3000
    assert last["global_step"] == sum(local_steps) // (T * B)
    assert all(p["state"] == "done" and p["stop_reason"] == "max_steps" for p in progress)
    # Each episode is counted once, with its return: a CartPole episode lasts at least 8 steps
    # and returns its length, so no more than env_steps / 8 of them ended, and the last 100
    # averaged between 8 and 500. (Whether the updates learn is
    # test_worker_graph.py's bandit run and test_model.py's image task.)
    assert 0 < last["episodes"] <= last["env_steps"] / 8
    assert 8 <= last["mean_return_100"] <= 500
    # The chief wrote a final checkpoint and the run's config; every worker wrote summaries.
    # (written when the chief stops; the other worker may still add a few updates after it).
    checkpoint_step = int(tf.train.latest_checkpoint(str(logdir)).rsplit("-", 1)[1])
    assert progress[0]["global_step"] <= checkpoint_step <= last["global_step"]
    assert json.loads((logdir / "config.json").read_text())["rollout_length"] == T
    for task in range(2):
        assert list((logdir / "tb" / f"worker_{task}").glob("events.out.tfevents.*"))

    # A new cluster on the same log dir restores from the checkpoint and goes on from there.
    second = local_cluster(workers=2)
    second.start("ps", 0)
    resumed = run_workers(second, logdir, max_steps=last["env_steps"] + 2000)
    assert max(p["global_step"] for p in resumed) > last["global_step"]
    assert max(p["env_steps"] for p in resumed) >= last["env_steps"] + 2000
    # Restored counters: reaching the new budget took about 2000 more steps, where a fresh
    # start would have needed all of last["env_steps"] + 2000 (over 5000).
    assert sum(p["local_env_steps"] for p in resumed) < 2000 + 1000


def test_two_ps_tasks_each_apply_the_gradients_of_their_variables(local_cluster, tmp_path):
    # The network's variables are spread over both ps tasks, the statistics live on one:
    # every variable must have been updated (Adam's first moment is zero until a gradient
    # arrives), and the counters must still add up.
    cluster = local_cluster(workers=2, ps=2)
    logdir = tmp_path / "run"
    cluster.start("ps", 0)
    cluster.start("ps", 1)
    progress = run_workers(cluster, logdir, max_steps=2000)

    last = max(progress, key=lambda p: p["global_step"])
    assert last["env_steps"] == sum(p["local_env_steps"] for p in progress) >= 2000
    reader = tf.train.load_checkpoint(str(logdir))
    moments = [name for name in reader.get_variable_to_shape_map()
               if name.startswith("global/") and name.endswith("/Adam")]
    assert len(moments) >= 4, moments
    for name in moments:
        assert np.any(reader.get_tensor(name) != 0), f"{name}: no gradient ever applied"


def test_an_acting_only_worker_steps_the_envs_and_learns_nothing(local_cluster, tmp_path):
    # --learn false is the acting ceiling the benchmarks measure: rollouts are counted,
    # no optimizer exists (no Adam slots are saved) and the policy stays the random one.
    cluster = local_cluster(workers=1)
    logdir = tmp_path / "run"
    cluster.start("ps", 0)
    worker = cluster.start("worker", 0, "--logdir", str(logdir), "--max-steps", "3000",
                           "--learn", "false", *FAST)
    wait_all([worker], timeout=180)
    assert worker.returncode == 0, open(worker.log_path).read()[-3000:]
    progress = read_progress(logdir, 0)
    assert progress["stop_reason"] == "max_steps" and progress["env_steps"] >= 3000
    assert progress["global_step"] == progress["env_steps"] // (T * B)
    saved = [name for name, _ in tf.train.list_variables(str(logdir))]
    assert any(name.startswith("global/") for name in saved)
    assert not [name for name in saved if "Adam" in name]
    assert json.loads((logdir / "config.json").read_text())["learn"] is False


def test_a_dead_actor_thread_stops_the_worker_with_its_error(local_cluster, tmp_path):
    # The learner waits on the rollout queue; when the only actor dies, the Coordinator
    # closes the queue and the worker must exit with the actor's error, not wait forever.
    cluster = local_cluster(workers=1)
    cluster.start("ps", 0)
    worker = cluster.start("worker", 0, "--logdir", str(tmp_path / "run"),
                           "--env", "tests.support.faulty_env:FaultyCartPole-v0",
                           "--max-seconds", "120")
    wait_all([worker], timeout=90)
    log = open(worker.log_path).read()
    assert worker.returncode == 1, log[-2000:]
    assert "simulated env failure" in log

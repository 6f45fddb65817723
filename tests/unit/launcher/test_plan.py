"""The launch plan's pure parts: the refusal of a cluster too big for the machine, --tasks,
the private network, each task's command and environment, and the log dir check.

plan_start as a whole, through the real command line, is tested in test_launch_checks.py (local
clusters, cluster files, TF_CONFIG), test_slurm.py and test_security.py.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from a3c_graph.core.config import A3CConfig
from a3c_graph.launcher import resources
from a3c_graph.launcher.plan import (
    LOCAL_SOURCE,
    TaskPlan,
    check_logdir_writable,
    command_line,
    memory_problem,
    parse_tasks_flag,
    private_network_wanted,
    task_argv,
)
from a3c_graph.system.cli import UsageError

GB = 10**9
CLUSTER = {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}


# --------------------------------------------------------------------------- memory

def need(workers=2, parameters=10_000, worker_rollouts=0, worker_envs=0, worker_activations=0):
    network = parameters * resources.PARAMETER_BYTES
    return resources.MemoryEstimate(ps=1, workers=workers, parameters=parameters,
                                 ps_network=3 * network, worker_network=2 * network,
                                 worker_rollouts=worker_rollouts, worker_envs=worker_envs,
                                 worker_activations=worker_activations)


def test_a_cluster_that_fits_is_no_problem():
    assert memory_problem(need(), 24 * GB, LOCAL_SOURCE) is None


def test_too_many_workers_of_a_local_cluster_are_told_how_many_fit():
    line = memory_problem(need(workers=5000), 22 * GB, LOCAL_SOURCE)
    assert line.startswith("the 5001 task(s) to start here need at least 2,9")
    assert "more than the 22.0 GB this machine has available" in line
    fit = need(workers=5000).workers_that_fit(22 * GB)
    assert f"use fewer workers (no more than {fit} can fit here)" in line
    assert line.endswith("or spread the cluster over several machines (--cluster FILE, or "
                         "--cluster slurm)")


def test_the_tasks_of_a_cluster_file_are_told_to_start_fewer_here():
    line = memory_problem(need(workers=100), 22 * GB, "cluster file c.json")
    assert "start fewer tasks here, or spread the cluster" in line


@pytest.mark.parametrize("estimate, advice", [
    (need(parameters=10**9), "use smaller --hidden-sizes, --conv-filters or --lstm-size"),
    (need(worker_rollouts=20 * GB), "a shorter --rollout-length, a smaller --queue-capacity or "
                                    "smaller observations (--frame-stack, --screen-size)"),
    (need(worker_envs=20 * GB), "use fewer --envs-per-worker or --actor-threads (or a smaller "
                                "--frame-stack)"),
    (need(worker_activations=20 * GB), "use smaller --hidden-sizes, --conv-filters or "
                                       "--lstm-size, fewer --envs-per-worker, a shorter "
                                       "--rollout-length or smaller observations "
                                       "(--frame-stack, --screen-size)"),
], ids=["network", "rollouts", "envs", "activations"])
def test_the_advice_is_for_the_largest_part_of_the_estimate(estimate, advice):
    line = memory_problem(estimate, 22 * GB, LOCAL_SOURCE)
    assert line.endswith(advice)
    assert f"the network has {estimate.parameters:,} parameters" in line


# --------------------------------------------------------------------------- --tasks

def test_tasks_are_named_once_in_the_order_given():
    assert parse_tasks_flag("worker:1, ps:0,worker:1", CLUSTER) == [("worker", 1), ("ps", 0)]


@pytest.mark.parametrize("text, words", [
    ("chief:0", "is not of the form worker:I or ps:I"),
    ("worker:x", "is not of the form"),
    ("worker:2", "is outside the cluster: job 'worker' has 2 task(s)"),
])
def test_tasks_outside_the_cluster_are_refused(text, words):
    with pytest.raises(UsageError, match=re.escape(words)):
        parse_tasks_flag(text, CLUSTER)


# --------------------------------------------------------------------------- private network

ALL_TASKS = [("ps", 0), ("worker", 0), ("worker", 1)]


def test_a_loopback_cluster_started_by_one_launcher_runs_in_a_private_network():
    assert private_network_wanted(CLUSTER, ALL_TASKS, LOCAL_SOURCE, allow_remote=False)


def test_allow_remote_or_another_address_means_the_host_network():
    assert not private_network_wanted(CLUSTER, ALL_TASKS, LOCAL_SOURCE, allow_remote=True)
    remote = {**CLUSTER, "ps": ["10.1.2.3:2222"]}
    assert not private_network_wanted(remote, ALL_TASKS, "cluster file c", allow_remote=True)


def test_a_loopback_cluster_split_over_launchers_needs_allow_remote():
    with pytest.raises(UsageError, match="this launcher would start 1 of the 3 tasks"):
        private_network_wanted(CLUSTER, [("worker", 0)], "cluster file c", allow_remote=False)


# --------------------------------------------------------------------------- each task

def test_a_task_gets_the_cluster_the_logdir_and_the_changed_flags(tmp_path):
    config = A3CConfig(learning_rate=0.01, target_return=195.0)
    argv = task_argv("worker", 1, CLUSTER, tmp_path, config, allow_remote=True,
                     hosts_in_flags=True)
    assert argv[:7] == [sys.executable, "-m", "a3c_graph.worker", "--job", "worker",
                        "--task", "1"]
    assert argv[7:] == ["--ps-hosts", "127.0.0.1:2222",
                        "--worker-hosts", "127.0.0.1:2223,127.0.0.1:2224",
                        "--logdir", str(tmp_path), "--allow-remote",
                        # always said, so the task does not spread the preset's itself
                        "--envs-per-worker=8",
                        "--learning-rate=0.01", "--target-return=195.0"]


def test_with_tf_config_the_cluster_is_left_to_the_environment(tmp_path):
    argv = task_argv("ps", 0, CLUSTER, tmp_path, A3CConfig(), allow_remote=False,
                     hosts_in_flags=False)
    assert "--ps-hosts" not in argv and "--allow-remote" not in argv


def test_a_command_line_is_one_pasteable_shell_line_environment_first():
    task = TaskPlan(job="worker", index=0, address="127.0.0.1:1",
                    argv=("python", "-m", "a3c_graph.worker", "--logdir", "/runs/a b"),
                    env_overrides={"TF_CONFIG": '{"task": 1}', "A": "1"})
    line = command_line(task)
    assert line == "A=1 TF_CONFIG='{\"task\": 1}' python -m a3c_graph.worker --logdir '/runs/a b'"
    assert shlex.split(line)[2:] == list(task.argv)


# --------------------------------------------------------------------------- log dir

def test_a_logdir_that_can_be_made_passes_and_is_not_made(tmp_path):
    check_logdir_writable(tmp_path / "a" / "b")
    check_logdir_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("logdir, words", [
    (Path("/proc/nope/run"), "--logdir /proc/nope/run cannot be created: no directory can be "
                             "made in /proc"),
    (Path("/proc"), "--logdir /proc cannot be written: no directory can be made in /proc"),
])
def test_a_logdir_where_no_directory_can_be_made_is_refused(logdir, words):
    with pytest.raises(UsageError, match=words):
        check_logdir_writable(logdir)


def test_a_logdir_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="file is not a directory"):
        check_logdir_writable(tmp_path / "file" / "run")

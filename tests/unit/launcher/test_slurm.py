"""--cluster slurm: the cluster of a Slurm job step, for the worker and the launcher.

No Slurm here: each test makes a fake job step, the variables srun sets for one of its tasks
(monkeypatch), and puts a stub `scontrol` first on PATH that records any call (TF 2.21's
SlurmClusterResolver expands the node list itself and must not need it). Only bad-input runs
of the worker start a process, and those end before any TF server starts.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

import portpicker
import pytest

from a3c_graph import worker as worker_command
from a3c_graph.core.config import config_from_args
from a3c_graph.distributed.cluster import SLURM_DEFAULT_PORT, ClusterError, resolve_task
from a3c_graph.launcher import commands, slurm_job
from a3c_graph.launcher.plan import (
    SLURM_SOURCE,
    plan_start,
    resolve_cluster,
    slurm_logdir,
)
from a3c_graph.system.cli import UsageError
from tests.unit.distributed.test_worker_cli import usage_error

REPO = Path(__file__).resolve().parents[3]
SBATCH = REPO / "scripts" / "slurm" / "a3c.sbatch"
PORT = SLURM_DEFAULT_PORT


@dataclass(frozen=True)
class Step:
    """A Slurm job step: its node list and tasks per node as srun writes them, and `layout`,
    the same as (node, tasks) in Slurm's order, where block distribution puts the ranks."""

    nodelist: str
    tasks_per_node: str
    layout: tuple[tuple[str, int], ...]

    @property
    def num_tasks(self) -> int:
        return sum(count for _, count in self.layout)

    def place(self, rank: int) -> tuple[str, int]:
        """(node, rank on that node) of task `rank`."""
        for node, count in self.layout:
            if rank < count:
                return node, rank
            rank -= count
        raise IndexError(rank)


# srun --nodes=2 --ntasks-per-node=2
TWO_NODES = Step("node[1-2]", "2(x2)", (("node1", 2), ("node2", 2)))
# 1 ps first, then the workers; the tasks on one node on PORT, PORT+1.
CLUSTER = {"ps": [f"node1:{PORT}"],
           "worker": [f"node1:{PORT + 1}", f"node2:{PORT}", f"node2:{PORT + 1}"]}
ROLES = [("ps", 0), ("worker", 0), ("worker", 1), ("worker", 2)]


class FakeSlurm:
    """The environment srun gives one task of a job step, set with monkeypatch."""

    def __init__(self, monkeypatch, tmp_path: Path):
        self.monkeypatch = monkeypatch
        for name in list(os.environ):
            if name.startswith("SLURM"):
                monkeypatch.delenv(name)
        bin_dir = tmp_path / "slurm-bin"
        bin_dir.mkdir()
        self.scontrol_calls = tmp_path / "scontrol.calls"
        stub = bin_dir / "scontrol"
        stub.write_text(f'#!/bin/sh\necho "$@" >> {shlex.quote(str(self.scontrol_calls))}\n'
                        "exit 1\n")
        stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def task(self, rank: int, step: Step = TWO_NODES) -> None:
        """Be task `rank` of `step`."""
        node, local_id = step.place(rank)
        variables = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
                     "SLURM_STEP_NUM_TASKS": str(step.num_tasks),
                     "SLURM_STEP_NODELIST": step.nodelist,
                     "SLURM_STEP_TASKS_PER_NODE": step.tasks_per_node,
                     "SLURMD_NODENAME": node, "SLURM_LOCALID": str(local_id)}
        for name, value in variables.items():
            self.monkeypatch.setenv(name, value)


@pytest.fixture
def slurm(monkeypatch, tmp_path) -> FakeSlurm:
    return FakeSlurm(monkeypatch, tmp_path)


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(ClusterError) as excinfo:
        fn(*args, **kwargs)
    message = str(excinfo.value)
    assert message.strip() and "\n" not in message, repr(message)
    return message


def slurm_task(**kwargs):
    return resolve_task(None, None, "slurm", kwargs.pop("job", None), kwargs.pop("task", None),
                        environ={}, **kwargs)


# --------------------------------------------------------------------------- the cluster

def test_every_task_of_a_two_node_step_resolves_the_same_cluster_and_its_own_task(slurm):
    for rank, role in enumerate(ROLES):
        slurm.task(rank)
        spec = slurm_task(num_ps=1, port=PORT)
        assert spec.cluster == CLUSTER
        assert (spec.job, spec.task) == role
        # Its address is where srun started it: its node, PORT + its rank on that node.
        node, local_id = TWO_NODES.place(rank)
        assert spec.address == f"{node}:{PORT + local_id}"
    assert not slurm.scontrol_calls.exists(), "the resolver called scontrol"


def test_ps_count_and_base_port_come_from_the_flags(slurm):
    slurm.task(3)
    spec = slurm_task(num_ps=2, port=5000)
    assert spec.cluster == {"ps": ["node1:5000", "node1:5001"],
                            "worker": ["node2:5000", "node2:5001"]}
    assert (spec.job, spec.task) == ("worker", 1)
    # Defaults: one ps, SLURM_DEFAULT_PORT.
    assert slurm_task() == slurm_task(num_ps=1, port=PORT)


def test_uneven_tasks_per_node(slurm):
    step = Step("cpu3,gpu[07-08]", "3,1(x2)", (("cpu3", 3), ("gpu07", 1), ("gpu08", 1)))
    for rank in range(5):
        slurm.task(rank, step)
        spec = slurm_task()
        assert spec.cluster == {"ps": [f"cpu3:{PORT}"],
                                "worker": [f"cpu3:{PORT + 1}", f"cpu3:{PORT + 2}",
                                           f"gpu07:{PORT}", f"gpu08:{PORT}"]}
    assert (spec.job, spec.task, spec.address) == ("worker", 3, f"gpu08:{PORT}")


def test_the_resolver_leaves_cuda_visible_devices_alone(slurm, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    slurm.task(1)
    slurm_task()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"


# --------------------------------------------------------------------------- bad input

def test_outside_an_allocation(slurm):
    message = error_of(slurm_task)
    assert "no Slurm job here" in message and "srun" in message


def test_in_an_allocation_but_not_in_a_job_step(slurm, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")  # a batch script's own shell: no srun
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    message = error_of(slurm_task)
    assert "SLURM_PROCID is not set" in message and "start the tasks with srun" in message


def test_more_ps_than_the_step_has_tasks(slurm):
    slurm.task(0)
    for num_ps in (4, 7):
        message = error_of(slurm_task, num_ps=num_ps)
        assert f"--ps {num_ps} leaves no worker in a Slurm step of 4 task(s)" in message
    assert "--ps must be at least 1" in error_of(slurm_task, num_ps=0)
    assert "--port 70000 is outside 1-65535" in error_of(slurm_task, port=70000)


def test_job_and_task_flags_do_not_go_with_slurm(slurm):
    slurm.task(0)
    assert "drop --job and --task" in error_of(slurm_task, job="worker")
    assert "drop --job and --task" in error_of(slurm_task, task=1)


def test_ps_and_port_go_with_slurm_only(tmp_path):
    for kwargs in ({"num_ps": 1}, {"port": 3000}):
        message = error_of(resolve_task, "127.0.0.1:1", "127.0.0.1:2", None, "worker", 0,
                           environ={}, **kwargs)
        assert "--ps and --port go with --cluster slurm" in message


def test_step_variables_that_disagree(slurm, monkeypatch):
    slurm.task(0)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "5")
    assert "Requested 5 tasks but only 4 were assigned" in error_of(slurm_task)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "four")
    assert "SLURM_STEP_NUM_TASKS='four' is not a number" in error_of(slurm_task)


def test_nodes_whose_names_do_not_sort_in_slurm_order(slurm):
    # Slurm ranks node9 before node10; the resolver sorts the names, so puts rank 0 on node10.
    slurm.task(0, Step("node[9-10]", "1(x2)", (("node9", 1), ("node10", 1))))
    message = error_of(slurm_task)
    assert f"puts task 0 at node10:{PORT}, but Slurm started it on node9" in message
    assert "--distribution=block" in message


# --------------------------------------------------------------------------- the worker CLI

def test_worker_outside_an_allocation(slurm, tmp_path):
    logdir = tmp_path / "run"
    line = usage_error(["--cluster", "slurm", "--logdir", str(logdir), "--allow-remote"])
    assert "no Slurm job here" in line
    assert not logdir.exists()


def test_worker_with_more_ps_than_tasks(slurm, tmp_path):
    slurm.task(1)
    logdir = tmp_path / "run"
    line = usage_error(["--cluster", "slurm", "--ps", "4", "--logdir", str(logdir),
                        "--allow-remote"])
    assert "--ps 4 leaves no worker" in line
    assert not logdir.exists()


def test_worker_needs_allow_remote_for_the_nodes_addresses(slurm, tmp_path):
    slurm.task(1)
    logdir = tmp_path / "run"
    # TF is imported to resolve the cluster; its start-up lines must not reach stderr.
    line = usage_error(["--cluster", "slurm", "--logdir", str(logdir)])
    assert f"node1:{PORT} is not a loopback address" in line and "--allow-remote" in line
    assert not logdir.exists()  # refused before the log dir, and so before any TF server


# --------------------------------------------------------------------------- the launcher

def start_args(*argv: str):
    return commands.build_start_parser().parse_args(list(argv))


def test_each_launcher_starts_the_task_of_its_rank(slurm, tmp_path):
    port = portpicker.pick_unused_port()  # the plan checks its task's port is free here
    slurm.task(2)  # worker 1, on node2 at `port`
    args = start_args("--cluster", "slurm", "--port", str(port), "--allow-remote",
                      "--logdir", str(tmp_path / "run"))
    plan = plan_start(args, os.environ)
    assert plan.source == SLURM_SOURCE
    assert plan.cluster == {"ps": [f"node1:{port}"],
                            "worker": [f"node1:{port + 1}", f"node2:{port}", f"node2:{port + 1}"]}
    [task] = plan.tasks
    assert (task.job, task.index, task.address) == ("worker", 1, f"node2:{port}")
    # srun gives every launcher the same --logdir: each keeps its run in its own directory.
    assert plan.logdir == tmp_path / "run" / "worker_1"
    # The task gets the resolved cluster spelled out: the flags a task started by hand takes.
    task_args = worker_command.parse_args(list(task.argv[3:]))
    assert task_args.ps_hosts == ",".join(plan.cluster["ps"])
    assert task_args.worker_hosts == ",".join(plan.cluster["worker"])
    assert (task_args.job, task_args.task, task_args.allow_remote) == ("worker", 1, True)


def test_launcher_default_logdir_is_named_after_the_slurm_job(slurm):
    assert slurm_logdir(None, "MinAtar/Breakout-v1", ("ps", 0), {"SLURM_JOB_ID": "77"}) \
        == os.path.join("runs", "MinAtar-Breakout-v1-slurm-77", "ps_0")


@pytest.mark.parametrize("argv, words", [
    ([], "is not a loopback address"),  # no --allow-remote
    (["--allow-remote", "--tasks", "ps:0"], "drop --tasks"),
    (["--allow-remote", "--workers", "2"], "--workers 2 disagrees with the Slurm step"),
    (["--allow-remote", "--ps", "4"], "--ps 4 leaves no worker"),
])
def test_launcher_bad_input(slurm, argv, words):
    slurm.task(0)
    with pytest.raises(UsageError, match=re.escape(words)):
        resolve_cluster(start_args("--cluster", "slurm", *argv), os.environ)


def test_launcher_port_without_slurm_and_background_with_it(slurm):
    with pytest.raises(UsageError, match="--port goes with --cluster slurm"):
        resolve_cluster(start_args("--port", "3000"), os.environ)
    with pytest.raises(UsageError, match="--background does not go with --cluster slurm"):
        commands.cmd_start(["--cluster", "slurm", "--background", "--allow-remote"])


# --------------------------------------------------------------------------- the sbatch example

def sbatch_options() -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", SBATCH.read_text(), re.MULTILINE))


def srun_command() -> list[str]:
    """The example's srun command, continuation lines joined, as the shell splits it; the
    flags given to sbatch ("$@", none here) and what follows the command (|| ...) left out."""
    text = SBATCH.read_text().replace("\\\n", " ")
    [line] = [line for line in text.splitlines() if line.lstrip().startswith("srun ")]
    return [word for word in shlex.split(line.split("||")[0]) if word != "$@"]


def test_the_sbatch_example_runs_the_worker_with_flags_it_accepts():
    command = srun_command()
    module = command.index("-m")
    assert command[module + 1] == "a3c_graph.worker"
    args = worker_command.parse_args(command[module + 2:])
    config_from_args(args)  # every A3C flag valid
    assert args.cluster == "slurm" and args.allow_remote and args.logdir
    assert "--distribution=block" in command[:module]  # what the resolver assumes
    # A task that dies ends the step at once, and the job requeues itself (slurm_job.py).
    assert "--kill-on-bad-exit=1" in command[:module]
    assert re.search(r"^#SBATCH --requeue$", SBATCH.read_text(), re.MULTILINE)


def test_the_sbatch_example_allocation_gives_every_task_its_place(slurm):
    options = sbatch_options()
    nodes, per_node = int(options["nodes"]), int(options["ntasks-per-node"])
    step = Step(f"node[1-{nodes}]", f"{per_node}(x{nodes})",
                tuple((f"node{i + 1}", per_node) for i in range(nodes)))
    command = srun_command()
    args = worker_command.parse_args(command[command.index("-m") + 2:])
    roles, clusters = [], []
    for rank in range(step.num_tasks):
        slurm.task(rank, step)
        spec = resolve_task(args.ps_hosts, args.worker_hosts, args.cluster, args.job, args.task,
                            environ={}, num_ps=args.ps, port=args.port)
        roles.append((spec.job, spec.task))
        clusters.append(spec.cluster)
    assert all(cluster == clusters[0] for cluster in clusters)
    assert roles == ([("ps", i) for i in range(args.ps)]
                     + [("worker", i) for i in range(step.num_tasks - args.ps)])


# --------------------------------------------------------------------------- the job's end

@pytest.mark.parametrize("reason, restarts, expected", [
    ("solved", 0, 0), ("max_steps", 3, 0), ("max_seconds", 1, 0),
    ("signal", 0, slurm_job.EXIT_REQUEUE), (None, 2, slurm_job.EXIT_REQUEUE),
    ("signal", 3, 1), (None, 5, 1),
])
def test_a_run_that_is_not_over_requeues_the_job_a_bounded_number_of_times(
        reason, restarts, expected):
    assert slurm_job.verdict(reason, restarts, max_requeues=3) == expected


def test_a_task_that_refused_its_input_or_gave_up_is_not_run_again():
    assert slurm_job.verdict(None, 0, 3, step_status=2) == 2  # bad input
    assert slurm_job.verdict("signal", 0, 3, step_status=69) == 69  # NaN losses, no ps in time
    assert slurm_job.verdict(None, 0, 3, step_status=137) == slurm_job.EXIT_REQUEUE  # killed
    assert slurm_job.verdict("solved", 0, 3, step_status=137) == 0


def write_progress(logdir: Path, task: int, **fields) -> None:
    (logdir / "progress").mkdir(parents=True, exist_ok=True)
    data = {"task": task, "time": 1000.0 + task, "state": "done", "global_step": 1200,
            "env_steps": 300_000, "episodes": 900, "mean_return_100": 480.0,
            "local_env_steps": 100_000, "training_started": 990.0, **fields}
    (logdir / "progress" / f"worker_{task}.json").write_text(json.dumps(data))


def test_the_job_summary_says_what_the_workers_decided(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    (tmp_path / "config.json").write_text(json.dumps({"env": "CartPole-v1"}))
    for task in range(3):
        write_progress(tmp_path, task, stop_reason="solved" if task == 0 else "signal")
    code = slurm_job.main(["--logdir", str(tmp_path), "--step-status", "0",
                           "--started", "980"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == json.loads((tmp_path / "summary.json").read_text())
    assert (printed["solved"], printed["stop_reason"], printed["workers"]) == (True, "solved", 3)
    assert (printed["slurm_job_id"], printed["slurm_restart_count"]) == ("77", 1)
    assert (printed["env"], printed["global_step"], printed["exit_code"]) == ("CartPole-v1",
                                                                            1200, 0)
    # Stopped by the time limit's signal: the job is to run again.
    for task in range(3):
        write_progress(tmp_path, task, stop_reason="signal")
    assert slurm_job.main(["--logdir", str(tmp_path), "--step-status", "0",
                           "--started", "980"]) == slurm_job.EXIT_REQUEUE


def test_the_job_summary_of_a_step_that_wrote_nothing(tmp_path, capsys):
    missing = tmp_path / "never"
    assert slurm_job.main(["--logdir", str(missing), "--step-status", "2",
                           "--started", "0"]) == 1
    assert capsys.readouterr().err.strip() == (f"{slurm_job.PROG}: error: log dir {missing} "
                                               "does not exist: the step wrote nothing")
    assert not missing.exists()

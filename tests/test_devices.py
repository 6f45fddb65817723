"""Device placement: the launcher's plan of which task sees which device (launcher/
device_plan.py, shown by `--dry-run`), a task's own device (devices.py), their errors, and
where ops ran (evaluate.py's several graphs on their own devices: test_evaluate.py).

This machine may have no GPU, so GPU plans are made against an injected inventory
(A3C_GRAPH_FAKE_GPUS=N in a subprocess's environment, or a GpuInventory in-process); the
checks that TF really put ops where the plan says run on CPU-only machines by giving a
process several logical CPU devices (device_count {"CPU": N}) and reading the devices of
a traced session.run from RunMetadata. Those runs happen in a child process that hosts the
servers (tests/cluster_child.py), so no TF server outlives its test.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from a3c_graph.launcher.device_plan import plan_devices
from a3c_graph.system import devices
from a3c_graph.system.devices import CUDA_ENV, FAKE_GPUS_ENV, DeviceError

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "launch_cluster.sh"
TIMEOUT_SECS = 60


def fake_gpus(count: int, cuda_visible_devices: str | None = None) -> devices.GpuInventory:
    environ = {FAKE_GPUS_ENV: str(count)}
    if cuda_visible_devices is not None:
        environ[CUDA_ENV] = cuda_visible_devices
    return devices.detect_gpus(environ)


def cluster_keys(workers: int, ps: int = 1) -> list[tuple[str, int]]:
    return [("ps", i) for i in range(ps)] + [("worker", i) for i in range(workers)]


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TF_CONFIG", CUDA_ENV, FAKE_GPUS_ENV)}
    environ["PYTHONPATH"] = str(REPO)
    environ.update(env)
    return subprocess.run(argv, cwd=REPO, env=environ, capture_output=True, text=True,
                          timeout=TIMEOUT_SECS)


def one_error_line(result: subprocess.CompletedProcess, prefix: str) -> str:
    shown = f"status {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 2, shown
    assert "Traceback" not in result.stderr, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{prefix}: error: "), shown
    return lines[0]


# --------------------------------------------------------------------------- the plan

def test_workers_take_the_gpus_round_robin_and_the_ps_stays_on_cpu():
    plan = plan_devices(cluster_keys(4, ps=2), "0,1", inventory=fake_gpus(2))
    by_task = {(t.job, t.index): t for t in plan.tasks}
    assert [by_task["worker", i].gpu for i in range(4)] == [0, 1, 0, 1]
    for i in range(4):
        task = by_task["worker", i]
        # Launcher's way: the child sees only its GPU (as GPU:0); visible_device_list empty.
        assert task.env == {CUDA_ENV: str(i % 2)}
        assert task.device == f"/job:worker/task:{i}/device:GPU:0"
        assert task.config == {"gpu_options": {"allow_growth": True, "visible_device_list": ""}}
        assert task.flags == ()
    for i in range(2):
        ps = by_task["ps", i]
        assert ps.gpu is None and ps.device == f"/job:ps/task:{i}/device:CPU:0"
        assert ps.env == {CUDA_ENV: "-1"} and ps.config == {"device_count": {"GPU": 0}}
    assert plan.missing == () and plan.notes == ()
    assert "worker 0, worker 2 on GPU 0; worker 1, worker 3 on GPU 1" in plan.summary_line()


def test_gpu_ids_count_within_the_launchers_own_cuda_visible_devices():
    # This process sees physical GPUs 3 and 1 as its GPU 0 and 1; a child shown its GPU 0
    # must be given CUDA_VISIBLE_DEVICES=3.
    plan = plan_devices(cluster_keys(2), "0,1", inventory=fake_gpus(4, "3,1"))
    assert [plan.for_task("worker", i).env[CUDA_ENV] for i in range(2)] == ["3", "1"]
    with pytest.raises(DeviceError, match=r"GPU 2 is not visible: CUDA_VISIBLE_DEVICES=3,1 "
                                          r"shows this process 2 GPUs, ids 0, 1"):
        plan_devices(cluster_keys(1), "2", inventory=fake_gpus(4, "3,1")).check_visible()


@pytest.mark.parametrize("value, visible", [
    ("-1", ()), ("", ()), ("1,0", ("1", "0")), ("2", ("2",)),
    ("1,7,0", ("1",)),  # CUDA stops at the first entry that names no GPU
    # A GPU named twice hides every GPU (seen on an H100 with driver 580: 0,0 shows none).
    ("0,0", ()), ("0,0,1", ()), ("1,0,1", ()),
    ("0,7,0", ("0",)),  # the list ended at 7, before the repeat
    ("0, 1", ("0", "1")),
])
def test_cuda_visible_devices_follows_cudas_rules(value, visible):
    assert fake_gpus(3, value).physical == visible


def test_gpus_are_found_with_nvidia_smi_and_narrowed_by_uuid(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   "echo 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa1111-0000)'\n"
                   "echo 'GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb2222-0000)'\n"
                   "echo '  MIG 1g.5gb     Device  0: (UUID: MIG-cccc3333)'\n")
    smi.chmod(0o755)
    inventory = devices.detect_gpus({}, nvidia_smi=str(smi))
    assert inventory.physical == ("0", "1") and "nvidia-smi found 2 GPU(s)" in inventory.source
    assert devices.detect_gpus({CUDA_ENV: "GPU-bbbb"}, str(smi)).physical == ("GPU-bbbb",)
    assert devices.detect_gpus({CUDA_ENV: "GPU-ffff"}, str(smi)).physical == ()
    failing = tmp_path / "broken-smi"
    failing.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not "
                       "communicate with the NVIDIA driver'\nexit 9\n")
    failing.chmod(0o755)
    broken = devices.detect_gpus({}, nvidia_smi=str(failing))
    assert broken.count == 0 and "NVIDIA-SMI has failed" in broken.describe()


def test_none_hides_gpus_from_every_task_only_where_there_are_gpus():
    assert all(t.env == {} and not t.on_gpu
               for t in plan_devices(cluster_keys(2), "none", inventory=fake_gpus(0)).tasks)
    assert all(t.env == {CUDA_ENV: "-1"} and not t.on_gpu
               for t in plan_devices(cluster_keys(2), "none", inventory=fake_gpus(2)).tasks)


def test_auto_uses_every_visible_gpu_or_runs_on_cpu_and_says_so_once():
    plan = plan_devices(cluster_keys(3), "auto", inventory=fake_gpus(2))
    assert plan.gpus == (0, 1) and plan.notes == ()
    cpu = plan_devices(cluster_keys(3), "auto", inventory=fake_gpus(0))
    assert cpu.gpus == () and all(not t.on_gpu and t.env == {} for t in cpu.tasks)
    [note] = cpu.notes
    assert note.startswith("--gpus auto: no GPU is visible here") and "runs on CPU" in note


def test_a_count_takes_the_first_gpus_and_an_absent_gpu_is_missing():
    plan = plan_devices(cluster_keys(4), "count:3", inventory=fake_gpus(2))
    assert plan.gpus == (0, 1, 2) and plan.missing == (2,)
    assert "GPU 2 is not visible" in plan.missing_warning()
    with pytest.raises(DeviceError, match=r"^--gpus count:3: GPU 2 is not visible: the GPUs "
                                          r"visible here are 0, 1 \(A3C_GRAPH_FAKE_GPUS=2\)$"):
        plan.check_visible()


@pytest.mark.parametrize("text, words", [
    ("gpu", "is not one of none, auto, count:N or GPU ids"),
    ("0,0", "names a GPU twice"),
    ("-1", "is not one of"),
    ("count:0", "count:N needs N of at least 1"),
    ("1.5", "is not one of"),
])
def test_bad_gpus_flags_are_one_sentence(text, words):
    with pytest.raises(DeviceError, match=words):
        devices.parse_gpus(text)


def test_memory_fraction_must_fit_the_tasks_that_share_a_gpu():
    plan = plan_devices(cluster_keys(4), "0,1", 0.5, inventory=fake_gpus(2))
    options = plan.for_task("worker", 3).config["gpu_options"]
    assert options == {"allow_growth": False, "per_process_gpu_memory_fraction": 0.5,
                       "visible_device_list": ""}
    assert plan.for_task("worker", 3).flags == ("--gpu-memory-fraction=0.5",)
    with pytest.raises(DeviceError, match=r"--gpu-memory-fraction 0.4 does not fit: 3 tasks "
                                          r"share GPU 0 \(worker 0, worker 1, worker 2\) and "
                                          r"3 x 0.4 > 1; use at most 0.333"):
        plan_devices(cluster_keys(3), "0", 0.4, inventory=fake_gpus(1))
    with pytest.raises(DeviceError, match=r"must be in \(0, 1\], got 1.5"):
        plan_devices(cluster_keys(1), "0", 1.5, inventory=fake_gpus(1))


def test_a_task_process_uses_one_mechanism():
    # Started by the launcher: CUDA_VISIBLE_DEVICES shows it one GPU, visible_device_list empty.
    env_task = devices.process_task_device("worker", 1, None, None,
                                           {FAKE_GPUS_ENV: "2", CUDA_ENV: "1"})
    assert env_task.device == "/job:worker/task:1/device:GPU:0"
    assert env_task.config["gpu_options"]["visible_device_list"] == ""
    # Started by hand with --gpu 1: visible_device_list, the environment untouched.
    hand = devices.process_task_device("worker", 1, 1, None, {FAKE_GPUS_ENV: "2"})
    assert hand.device == "/job:worker/task:1/device:GPU:0" and hand.env == {}
    assert hand.config["gpu_options"]["visible_device_list"] == "1"
    # Neither: CPU, and no GPU device even if the machine has some.
    cpu = devices.process_task_device("worker", 1, None, None, {FAKE_GPUS_ENV: "2"})
    assert cpu.device == "/job:worker/task:1/cpu:0" and cpu.config == {"device_count": {"GPU": 0}}
    hidden = devices.process_task_device("worker", 1, None, None,
                                         {FAKE_GPUS_ENV: "2", CUDA_ENV: "-1"})
    assert not hidden.on_gpu
    with pytest.raises(DeviceError, match=r"^--gpu 1 is not visible: CUDA_VISIBLE_DEVICES=1 "
                                          r"shows this process 1 GPU, id 0 \(ids count within"):
        devices.process_task_device("worker", 0, 1, None, {FAKE_GPUS_ENV: "2", CUDA_ENV: "1"})
    with pytest.raises(DeviceError, match="a ps task always runs on CPU"):
        devices.process_task_device("ps", 0, 0, None, {FAKE_GPUS_ENV: "2"})


# --------------------------------------------------------------------------- command lines

def dry_run(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess:
    return run([str(SCRIPT), *flags, "--dry-run", "--logdir", str(tmp_path / "run")], **env)


def cuda_visible_devices_by_task(stdout: str) -> dict[tuple[str, int], str | None]:
    """{(job, index): the CUDA_VISIBLE_DEVICES of its command} of a dry run's commands."""
    seen = {}
    for line in stdout.splitlines():
        argv = shlex.split(line)
        env = dict(token.split("=", 1) for token in argv if token.startswith(f"{CUDA_ENV}="))
        job, task = argv[argv.index("--job") + 1], int(argv[argv.index("--task") + 1])
        seen[job, task] = env.get(CUDA_ENV)
        assert "--gpu" not in argv, "one mechanism per child: no visible_device_list"
    return seen


def test_launcher_dry_run_says_which_workers_share_which_gpu(tmp_path):
    result = dry_run(tmp_path, "--gpus", "0,1", "--workers", "4", **{FAKE_GPUS_ENV: "2"})
    assert result.returncode == 0, result.stderr
    assert cuda_visible_devices_by_task(result.stdout) == {
        ("ps", 0): "-1", ("worker", 0): "0", ("worker", 1): "1", ("worker", 2): "0",
        ("worker", 3): "1"}
    devices_note, network = result.stderr.splitlines()
    assert devices_note == ("launch_cluster: note: devices: ps 0 on CPU; worker 0, worker 2 on "
                            "GPU 0; worker 1, worker 3 on GPU 1 (by CUDA_VISIBLE_DEVICES; "
                            "allow_growth)")
    assert "private network" in network


def test_launcher_dry_run_gives_gpu_tasks_their_memory_fraction(tmp_path):
    result = dry_run(tmp_path, "--gpus", "1", "--workers", "2", "--gpu-memory-fraction", "0.5",
                     **{FAKE_GPUS_ENV: "2"})
    assert result.returncode == 0, result.stderr
    commands = {(argv[argv.index("--job") + 1], int(argv[argv.index("--task") + 1])): argv
                for argv in map(shlex.split, result.stdout.splitlines())}
    for index in (0, 1):
        assert f"{CUDA_ENV}=1" in commands["worker", index]
        assert "--gpu-memory-fraction=0.5" in commands["worker", index]
    assert not any(token.startswith("--gpu") for token in commands["ps", 0])
    assert ("launch_cluster: note: devices: ps 0 on CPU; worker 0, worker 1 on GPU 1 (by "
            "CUDA_VISIBLE_DEVICES; per_process_gpu_memory_fraction 0.5)") in result.stderr


@pytest.mark.parametrize("flags, words", [
    (["--gpus", "0,0"], "--gpus '0,0' names a GPU twice"),
    (["--gpus", "count:0"], "count:N needs N of at least 1"),
    (["--gpus", "0", "--gpu-memory-fraction", "1.5"], "must be in (0, 1], got 1.5"),
])
def test_launcher_dry_run_bad_gpu_flags_are_one_line_exit_2(tmp_path, flags, words):
    result = dry_run(tmp_path, *flags, **{FAKE_GPUS_ENV: "1"})
    assert words in one_error_line(result, "launch_cluster")
    assert not (tmp_path / "run").exists()


def test_launcher_dry_run_plans_for_gpus_this_machine_lacks_with_a_warning(tmp_path):
    # No GPU here: a dry run still prints the plan (it may be for another machine).
    result = dry_run(tmp_path, "--gpus", "0,1", "--workers", "4", **{FAKE_GPUS_ENV: "0"})
    assert result.returncode == 0, result.stderr
    assert cuda_visible_devices_by_task(result.stdout) == {
        ("ps", 0): "-1", ("worker", 0): "0", ("worker", 1): "1", ("worker", 2): "0",
        ("worker", 3): "1"}
    warning, devices_note, network = result.stderr.splitlines()
    assert warning.startswith("launch_cluster: warning: GPUs 0, 1 are not visible: no GPU is "
                              "visible here (A3C_GRAPH_FAKE_GPUS=0); the plan is for a machine "
                              "that has them")
    assert devices_note.startswith("launch_cluster: note: devices: ps 0 on CPU; worker 0, ")
    assert "private network" in network
    assert not (tmp_path / "run").exists()


def test_launcher_gpus_auto_without_a_gpu_runs_on_cpu_and_says_so_once(tmp_path):
    result = run([str(SCRIPT), "--gpus", "auto", "--workers", "3", "--dry-run",
                  "--logdir", str(tmp_path / "run")], **{FAKE_GPUS_ENV: "0"})
    assert result.returncode == 0, result.stderr
    note, network = result.stderr.splitlines()
    assert note == ("launch_cluster: note: --gpus auto: no GPU is visible here "
                    "(A3C_GRAPH_FAKE_GPUS=0); every task runs on CPU")
    assert "private network" in network
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and not any(CUDA_ENV in line or "--gpu" in line for line in lines)


def test_launcher_start_on_a_gpu_that_is_not_there_is_one_line_exit_2(tmp_path):
    logdir = tmp_path / "run"
    result = run([str(SCRIPT), "--gpus", "0", "--logdir", str(logdir)], **{FAKE_GPUS_ENV: "0"})
    line = one_error_line(result, "launch_cluster")
    assert line == ("launch_cluster: error: --gpus 0: GPU 0 is not visible: no GPU is visible "
                    "here (A3C_GRAPH_FAKE_GPUS=0)")
    assert not logdir.exists()


def test_launcher_checks_the_memory_fraction_even_in_a_dry_run(tmp_path):
    result = run([str(SCRIPT), "--gpus", "0", "--workers", "3", "--gpu-memory-fraction", "0.4",
                  "--dry-run", "--logdir", str(tmp_path / "run")], **{FAKE_GPUS_ENV: "1"})
    assert "3 tasks share GPU 0" in one_error_line(result, "launch_cluster")


@pytest.mark.parametrize("env, flags, words", [
    ({FAKE_GPUS_ENV: "0"}, ["--gpu", "0"], "--gpu 0 is not visible: no GPU is visible here"),
    ({FAKE_GPUS_ENV: "2", CUDA_ENV: "1"}, ["--gpu", "1"],
     "--gpu 1 is not visible: CUDA_VISIBLE_DEVICES=1 shows this process 1 GPU, id 0"),
    ({FAKE_GPUS_ENV: "2"}, ["--gpu", "0,1"], "expected one GPU id"),
    ({FAKE_GPUS_ENV: "2"}, ["--gpu", "0", "--gpu-memory-fraction", "0"], "must be in (0, 1]"),
])
def test_worker_with_a_gpu_it_cannot_have_is_one_line_exit_2(tmp_path, env, flags, words):
    logdir = tmp_path / "run"
    result = run([sys.executable, "-m", "a3c_graph.worker", "--job", "worker", "--task", "0",
                  "--ps-hosts", "127.0.0.1:1", "--worker-hosts", "127.0.0.1:2",
                  "--logdir", str(logdir), *flags], **env)
    assert words in one_error_line(result, "a3c_graph.worker")
    assert not logdir.exists()


# --------------------------------------------------------------------------- where ops ran

class Ran(dict):
    """{node name: devices it ran on} of a traced run, and each node's op type."""

    def __init__(self, run_metadata):
        super().__init__()
        self.partition_graphs = list(run_metadata.partition_graphs)
        self.op_types: dict[str, str] = {}
        for stats in run_metadata.step_stats.dev_stats:
            for node in stats.node_stats:
                self.setdefault(node.node_name, set()).add(stats.device)
                # timeline_label reads "name = OpType(inputs)".
                self.op_types[node.node_name] = node.timeline_label.partition(" = ")[2] \
                    .partition("(")[0]

    def received_from_other_tasks(self) -> dict[str, int]:
        """{task: tensors it received from another task} in the run: each is a message."""
        counts: dict[str, int] = {}
        for graph in self.partition_graphs:
            for node in graph.node:
                if node.op in ("_Recv", "_HostRecv"):
                    sender, receiver = (node.attr[key].s.decode().split("/device:")[0]
                                        for key in ("send_device", "recv_device"))
                    if sender != receiver:
                        counts[receiver] = counts.get(receiver, 0) + 1
        return counts

    def matmuls(self, scope: str) -> set[str]:
        """Devices where the matrix products under `scope` ran, in whatever fused op the
        CPU's graph rewrites put them (MatMul, _FusedMatMul, _MklNativeFusedMatMul, ...)."""
        return {device for name, op_type in self.op_types.items()
                if name.startswith(scope) and "MatMul" in op_type for device in self[name]}


def traced_train_step(cluster: dict, worker_device: str | None) -> dict:
    """Run in a cluster child (tests/cluster_child.py): a ps and a worker server whose worker
    has two logical CPUs, configured from a device plan whose worker has a GPU (on a machine
    without one, that worker's GPU ops must fall back to its CPU). Builds the worker graph on
    `worker_device` (None: the plan's), runs one rollout and one update, traced."""
    import tensorflow as tf

    from a3c_graph.core.config import A3CConfig
    from a3c_graph.core.envs import EnvBatch, env_info
    from a3c_graph.distributed.cluster import TaskSpec, session_config
    from a3c_graph.distributed.worker_graph import build_worker_graph
    from tests.cluster_child import start_servers

    tf1 = tf.compat.v1
    plan = plan_devices(cluster_keys(1), "0", inventory=fake_gpus(1))
    specs = {job: TaskSpec(cluster, job, 0) for job in ("ps", "worker")}
    configs = {job: devices.apply_to_config(session_config(spec), plan.for_task(job, 0))
               for job, spec in specs.items()}
    configs["worker"].device_count["CPU"] = 2
    servers = start_servers(cluster, configs)
    worker_device = worker_device or plan.for_task("worker", 0).device

    config = A3CConfig(envs_per_worker=2, rollout_length=4, hidden_sizes=(8,))
    batch = EnvBatch("CartPole-v1", 2, seed=0)
    try:
        with tf.Graph().as_default():
            worker = build_worker_graph(config, specs["worker"], env_info("CartPole-v1"),
                                        [batch], worker_device=worker_device)
            [runner] = tf1.get_collection(tf1.GraphKeys.QUEUE_RUNNERS)
            init = [tf1.global_variables_initializer(), tf1.local_variables_initializer()]
            with tf1.Session(servers["worker", 0].target, config=configs["worker"]) as session:
                devices_here = {d.name for d in session.list_devices()}
                session.run(init)
                trace = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE,
                                       output_partition_graphs=True)
                rollout, update = tf1.RunMetadata(), tf1.RunMetadata()
                session.run(runner.enqueue_ops[0], options=trace, run_metadata=rollout)
                fetched = session.run(worker.train_fetches, options=trace, run_metadata=update)
    finally:
        batch.close()
    return {"worker_device": worker_device, "devices_here": devices_here,
            "global_step": int(fetched.counters.global_step),
            "rollout_steps": int(fetched.rollout_steps),
            "rollout": rollout.SerializeToString(), "update": update.SerializeToString(),
            "global_names": {v.op.name for v in worker.global_network.variables}}


def traced_in_cluster(in_cluster, worker_device: str | None = None):
    """(worker device, Ran of the rollout, Ran of the update, global names, devices here)."""
    import tensorflow as tf

    got = in_cluster("tests.test_devices:traced_train_step", worker_device=worker_device)
    assert got["global_step"] == 1 and got["rollout_steps"] == 8
    ran = [Ran(tf.compat.v1.RunMetadata.FromString(got[key])) for key in ("rollout", "update")]
    return got["worker_device"], *ran, got["global_names"], got["devices_here"]


PS_CPU = "/job:ps/replica:0/task:0/device:CPU:0"
WORKER = "/job:worker/replica:0/task:0/device:"


def test_globals_on_the_ps_and_the_rollout_on_the_planned_worker_device(in_cluster):
    # CPU:1 stands in for an accelerator: the plan's device is where the worker's ops run.
    _, rollout, update, global_names, devices_here = traced_in_cluster(
        in_cluster, "/job:worker/task:0/device:CPU:1")
    assert {PS_CPU, WORKER + "CPU:0", WORKER + "CPU:1"} <= devices_here
    # The rollout: the local copy's forward pass and the env step, on the worker's CPU:1.
    assert rollout.matmuls("actors/rollout/body/") == {WORKER + "CPU:1"}
    assert rollout["actors/rollout/body/_1/env_step_0"] == {WORKER + "CPU:1"}
    # An actor never talks to the ps: the learner's step refreshes the local copy.
    assert all(PS_CPU not in where for where in rollout.values()), "nothing of a rollout on the ps"
    # The update: gradients applied to the globals on the ps, each global variable there.
    applied = {name: where for name, where in update.items() if name.endswith("ResourceApplyAdam")}
    assert len(applied) == len(global_names)
    assert all(where == {PS_CPU} for where in applied.values()), applied
    for name in global_names:
        assert update[name] == {PS_CPU}, (name, update[name])
    # The learner's loss on the local copy ran on the worker's planned device.
    assert update.matmuls("") == {WORKER + "CPU:1"}
    # One message each way (transfer.py): the gradients with the finished episodes to the
    # ps, split there; the updated globals with the counters back, concatenated there. Not
    # a message per variable, nor one per cross-task control dependency.
    assert update.received_from_other_tasks() == {
        "/job:ps/replica:0/task:0": 1, "/job:worker/replica:0/task:0": 1}
    on_ps = [update.op_types[name] for name, where in update.items() if PS_CPU in where]
    assert (on_ps.count("SplitV"), on_ps.count("ConcatV2")) == (1, 1), sorted(on_ps)


def test_a_worker_planned_on_a_gpu_runs_its_ops_there_and_the_env_step_on_its_cpu(in_cluster):
    device, rollout, update, global_names, devices_here = traced_in_cluster(in_cluster)
    assert device == "/job:worker/task:0/device:GPU:0"
    has_gpu = WORKER + "GPU:0" in devices_here
    # numpy_function has no GPU kernel: soft placement puts it on the worker's CPU.
    assert rollout["actors/rollout/body/_1/env_step_0"] == {WORKER + "CPU:0"}
    # The forward pass goes to the GPU when there is one, else (this machine) to the CPU.
    expected = WORKER + ("GPU:0" if has_gpu else "CPU:0")
    assert rollout.matmuls("actors/rollout/body/") == {expected}
    for name in global_names:
        assert update[name] == {PS_CPU}

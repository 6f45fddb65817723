"""Devices: the launcher's plan of which task sees which device (launcher/device_plan.py),
a task's own device (system/devices.py), CUDA_VISIBLE_DEVICES read by CUDA's rules, and
their errors. This machine may have no GPU, so plans are made against an injected
inventory (tests/support/fake_gpus.py). The same plan through the command lines:
tests/e2e/test_launch_devices.py; where TF really ran the ops: tests/cluster/test_placement.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from a3c_graph.launcher.device_plan import plan_devices
from a3c_graph.system import devices
from a3c_graph.system.devices import CUDA_ENV, FAKE_GPUS_ENV, DeviceError
from tests.support.fake_gpus import cluster_keys, fake_gpus

REPO = Path(__file__).resolve().parents[3]










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





















# --------------------------------------------------------------------------- where ops ran












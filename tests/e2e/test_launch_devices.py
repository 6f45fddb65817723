"""The device plan through the real command lines: the launcher's --dry-run shows which task
sees which GPU (against an injected inventory, A3C_GRAPH_FAKE_GPUS=N, since this machine
may have none), and bad GPU flags of the launcher and of a worker are one line, exit 2."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from a3c_graph.system.devices import CUDA_ENV, FAKE_GPUS_ENV

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "launch_cluster.sh"
TIMEOUT_SECS = 60


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

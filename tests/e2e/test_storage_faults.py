"""A log dir that cannot be written, as a user meets it: a worker whose write fails exits 74
in one line, a launcher that cannot write refuses to start, a start on a full or read-only
disk (a small tmpfs) is refused, and a disk that fills up, or turns read-only, mid-run stops
the run in one line with its checkpoints restorable. The rules themselves (which error is
which fault, what a failed write leaves): tests/unit/test_storage.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, checkpoint_step, child_env, stop_process_tree
from conftest import stop_run as stop_logged_run

from a3c_graph.rundir import storage
from a3c_graph.rundir.progress import read_progress
from a3c_graph.rundir.run_config import read_checkpoint_state
from a3c_graph.system.processes import read_pid_files

# --------------------------------------------------------------------------- a worker

# A worker whose training fails on a write: its command line is checked as usual (on the host
# network, with --allow-remote), then run_worker raises `FAULT`.
FAILING_WORKER = textwrap.dedent('''
    import errno, os, sys
    from a3c_graph import worker as worker_command
    from a3c_graph.distributed import worker_task

    def run_worker(spec, run, args, *rest):
        import tensorflow as tf
        path = os.path.join(args.logdir, "model.ckpt-7.data-00000-of-00001.tempstate1")
        open(path, "w").close()  # what a failed save leaves
        raise {fault}

    worker_task.run_worker = run_worker
    sys.exit(worker_command.main(sys.argv[1:]))
''')


@pytest.mark.parametrize("fault, words", [
    ("OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))", storage.FULL),
    ("tf.errors.FailedPreconditionError(None, None, path + '; Read-only file system')",
     storage.READ_ONLY),
])
def test_a_worker_that_cannot_write_its_log_dir_exits_74_in_one_line(fault, words, tmp_path):
    import portpicker

    logdir = tmp_path / "run"
    ports = [portpicker.pick_unused_port() for _ in range(2)]
    result = subprocess.run(
        [sys.executable, "-c", FAILING_WORKER.format(fault=fault), "--job", "worker",
         "--task", "0", "--ps-hosts", f"127.0.0.1:{ports[0]}", "--worker-hosts",
         f"127.0.0.1:{ports[1]}", "--logdir", str(logdir), "--allow-remote"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 74, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "a3c_graph.worker: error: " + storage.fault_line(str(logdir), words, "worker 0"))
    assert "Traceback" not in result.stderr
    # The chief removed what its failed write left.
    assert not list(logdir.glob("*tempstate*"))


# --------------------------------------------------------------------------- the launcher

# The launcher whose first write into the log dir (its pid file) finds the disk full.
LAUNCHER_ON_A_FULL_DISK = textwrap.dedent('''
    import errno, os, sys
    import a3c_graph.launcher.commands as launch
    from a3c_graph.launcher.supervisor import Supervisor

    def prepare_logdir(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                      str(self.plan.logdir / "pids" / "launcher.pid"))

    Supervisor.prepare_logdir = prepare_logdir
    sys.exit(launch.main())
''')


def test_a_launcher_that_cannot_write_the_log_dir_says_so_in_one_line_and_starts_nothing(
        tmp_path):
    logdir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-c", LAUNCHER_ON_A_FULL_DISK, "--logdir",
                             str(logdir)], cwd=REPO, env=child_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 74, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "launch_cluster: error: " + storage.fault_line(logdir, storage.FULL, "the launcher"))
    assert "Traceback" not in result.stderr
    summary = json.loads(result.stdout.splitlines()[-1])
    assert (summary["exit_code"], summary["stop_reason"], summary["task_exit_codes"]) == (
        74, "storage", {})


# --------------------------------------------------------------------------- small disks

@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` for the block; root only (else the test skips)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small file system needs root and mount(8)")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        unmount(path)


def unmount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)  # busy: detach it


def fill(path: Path) -> Path:
    """Write zeros into a file at `path` until its file system is full."""
    chunk = bytes(64 * 1024)
    with open(path, "wb", buffering=0) as handle:
        with contextlib.suppress(OSError):
            while True:
                handle.write(chunk)
    with contextlib.suppress(OSError), open(path, "ab", buffering=0) as handle:
        while True:  # the last few kB
            handle.write(b"\0" * 512)
    return path


def launch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "a3c_graph.launch", *args], cwd=REPO,
                          env=child_env(), capture_output=True, text=True, timeout=timeout)


def test_a_start_on_a_full_disk_is_refused_in_one_line_and_writes_nothing(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        fill(disk / "filler")
        result = launch("--logdir", str(disk / "run"))
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.splitlines()
        assert re.fullmatch(rf"launch_cluster: error: --logdir {disk / 'run'} has "
                            r"\d+ (kB|bytes) free, less than the 110 kB one checkpoint of this "
                            r"network takes: free some space there or give another --logdir",
                            line), line
        assert [p.name for p in disk.iterdir()] == ["filler"]
        assert storage.diagnose(disk) == storage.FULL


def test_a_start_on_a_read_only_disk_is_refused_in_one_line(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True,
                       capture_output=True)
        assert storage.diagnose(disk) == storage.READ_ONLY
        result = launch("--logdir", str(disk / "run"))
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith(f"launch_cluster: error: --logdir {disk / 'run'} cannot be "
                               f"created: no directory can be made in {disk} (Read-only file "
                               "system)"), line


# --------------------------------------------------------------------------- a run

SMALL = ["--workers", "1", "--rollout-length", "16", "--envs-per-worker", "4",
         "--progress-secs", "0.5", "--checkpoint-secs", "1", "--max-seconds", "120",
         "--target-return", "100000"]


def start_run(logdir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "a3c_graph.launch", "--logdir", str(logdir),
                             *SMALL], cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for_training(process: subprocess.Popen, logdir: Path, timeout: float = 180) -> int:
    """The global step of the first checkpoint, once the worker trains past it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]
        saved = checkpoint_step(logdir)
        progress = read_progress(logdir).get(0)
        if saved and progress and progress["global_step"] > saved:
            return saved
        time.sleep(0.3)
    pytest.fail(f"no training and checkpoint within {timeout} s; logs in {logdir / 'logs'}")


def stop_run(process: subprocess.Popen, logdir: Path) -> None:
    """Nothing of the run is left: the launcher's own stop on its pid files, then whatever is
    left of the launcher's process tree, by pid."""
    stop_logged_run(logdir)
    stop_process_tree(process)


def assert_stopped_cleanly(stdout: str, stderr: str, logdir: Path, line: str) -> None:
    assert stderr.splitlines()[-1] == "launch_cluster: error: " + line, stderr
    assert "Traceback" not in stderr
    summary = json.loads(stdout.splitlines()[-1])
    assert summary["exit_code"] == 74 and summary["stop_reason"] == "storage"
    assert summary["restarts"] == {}  # a full disk is not restarted into
    assert summary["task_exit_codes"]["worker_0"] == 74
    assert not [r.pid for r in read_pid_files(logdir).values() if r.proc is not None]
    leftovers = [path for path in logdir.rglob("*")
                 if storage.TF_TEMP.fullmatch(path.name) or storage.OUR_TEMP.fullmatch(path.name)]
    assert leftovers == []


def assert_restorable(logdir: Path) -> None:
    """The state file names a complete checkpoint, every tensor of which reads back."""
    import tensorflow as tf

    state = read_checkpoint_state(str(logdir))
    newer = [path for path in logdir.glob("model.ckpt-*")
             if int(re.search(r"-(\d+)", path.name).group(1)) > int(state.newest.rsplit("-")[-1])]
    assert newer == []
    reader = tf.train.load_checkpoint(state.newest)
    for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)


@pytest.mark.e2e
def test_a_disk_that_fills_up_mid_run_stops_it_in_one_line_without_restarts(tmp_path):
    with tmpfs(tmp_path / "disk", "64m") as disk:
        logdir = disk / "run"
        process = start_run(logdir)
        try:
            wait_for_training(process, logdir)
            filler = fill(disk / "filler")
            stdout, stderr = process.communicate(timeout=120)
        finally:
            stop_run(process, logdir)
        assert process.returncode == 74, stderr
        assert_stopped_cleanly(stdout, stderr, logdir,
                               storage.fault_line(logdir, storage.FULL, "worker task 0"))
        assert_restorable(logdir)
        filler.unlink()


@pytest.mark.e2e
def test_a_log_dir_that_turns_read_only_mid_run_stops_it_in_one_line(tmp_path):
    """progress/ is a bind mount of its own, made read-only while the run writes to it (a
    whole file system cannot be: the task logs on it are open for writing)."""
    with tmpfs(tmp_path / "disk", "64m") as disk:
        logdir = disk / "run"
        progress = logdir / "progress"
        progress.mkdir(parents=True)
        subprocess.run(["mount", "--bind", str(progress), str(progress)], check=True)
        try:
            process = start_run(logdir)
            try:
                wait_for_training(process, logdir)
                for _ in range(50):  # busy while a progress file is open for writing
                    if subprocess.run(["mount", "-o", "remount,bind,ro", str(progress)],
                                      capture_output=True).returncode == 0:
                        break
                    time.sleep(0.1)
                else:
                    pytest.fail("progress/ could not be made read-only")
                stdout, stderr = process.communicate(timeout=120)
            finally:
                stop_run(process, logdir)
        finally:
            unmount(progress)
        assert process.returncode == 74, stderr
        assert_stopped_cleanly(stdout, stderr, logdir,
                               storage.fault_line(logdir, storage.READ_ONLY, "worker task 0"))
        assert_restorable(logdir)

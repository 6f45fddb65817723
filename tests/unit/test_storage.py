"""A log dir that cannot be written: full, read-only, not permitted (a3c_graph/rundir/storage.py).

Which errors are storage faults, the lines that tell the user, what a failed write leaves
and its removal, and the launcher's check for room. As a user meets them (a worker's exit
74, real small file systems that fill up mid-run): tests/e2e/test_storage_faults.py.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.run_spec import resolve_run
from a3c_graph.launcher import plan
from a3c_graph.rundir import storage
from a3c_graph.rundir.progress import write_atomic
from a3c_graph.rundir.run_config import read_checkpoint_state
from a3c_graph.system.cli import UsageError

LOGDIR = "/runs/a"


class OpError(Exception):
    """What a TF error is to the classifier: an error_code and a message."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.error_code = code


def os_error(code: int, filename: str | None = None) -> OSError:
    return OSError(code, os.strerror(code), filename)


@pytest.mark.parametrize("error, fault", [
    (os_error(errno.ENOSPC), storage.FULL),  # a print to the task's log names no file
    (os_error(errno.ENOSPC, f"{LOGDIR}/progress/.worker_0.json.12.tmp"), storage.FULL),
    (os_error(errno.EDQUOT, f"{LOGDIR}/x"), storage.QUOTA),
    (os_error(errno.EROFS, f"{LOGDIR}/progress/worker_0.jsonl"), storage.READ_ONLY),
    (os_error(errno.EACCES, f"{LOGDIR}/config.json"), storage.DENIED),
    # TF's own: ResourceExhausted, FailedPrecondition, PermissionDenied with the strerror.
    (OpError(8, f"{LOGDIR}/model.ckpt-5.data-00000-of-00001.tempstate9; No space left on "
                "device [Op:SaveV2]"), storage.FULL),
    (OpError(9, f"{LOGDIR}/graph.pbtxt.tmp0a; Read-only file system"), storage.READ_ONLY),
    (RuntimeError("coordinator"), None),
    # Outside the log dir, or another error: not the log dir's fault.
    (os_error(errno.ENOSPC, "/home/u/.cache/x"), None),
    (os_error(errno.ENOENT, f"{LOGDIR}/x"), None),
    (RuntimeError("No space left on device"), None),  # not TF's, not an OSError
])
def test_a_storage_fault_is_told_by_errno_or_by_tfs_message(error, fault):
    assert storage.storage_fault(error, LOGDIR) == fault


def test_a_fault_behind_another_error_is_found():
    try:
        try:
            raise os_error(errno.ENOSPC)
        except OSError as cause:
            raise RuntimeError("an actor thread's error, raised by the coordinator") from cause
    except RuntimeError as error:
        assert storage.storage_fault(error, LOGDIR) == storage.FULL


def test_the_line_names_the_log_dir_why_and_what_to_do():
    line = storage.fault_line(LOGDIR, storage.FULL, "worker 0")
    assert line == ("worker 0 cannot write the log dir /runs/a: no space left on the device; "
                    "free some space there, then start the run again with the same --logdir: "
                    "it goes on from its last checkpoint")
    assert storage.fault_of_line(line) == storage.FULL
    # The launcher names the task its own way, and the fault the task's line gave.
    assert storage.task_fault_line(LOGDIR, "worker task 0", line, None) == (
        line.replace("worker 0", "worker task 0"))
    # No line reached the task's log (the disk is full): the file system tells.
    assert storage.task_fault_line(LOGDIR, "ps task 0", None, storage.READ_ONLY).startswith(
        "ps task 0 cannot write the log dir /runs/a: the file system is read-only; make it "
        "writable again")
    assert storage.task_fault_line(LOGDIR, "ps task 0", None, None) == (
        "ps task 0 cannot write the log dir /runs/a: see its log")


def test_a_writable_log_dir_shows_no_fault(tmp_path):
    assert storage.diagnose(tmp_path) in (None, storage.FULL)  # FULL if this disk is
    assert storage.diagnose(tmp_path / "missing") is None


def write_state(logdir: Path, *steps: int) -> None:
    paths = "".join(f'all_model_checkpoint_paths: "model.ckpt-{s}"\n' for s in steps)
    (logdir / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{steps[-1]}"\n'
                                       + paths)


def checkpoint_files(logdir: Path, step: int) -> list[Path]:
    names = [f"model.ckpt-{step}.{suffix}" for suffix in ("index", "meta",
                                                          "data-00000-of-00001")]
    for name in names:
        (logdir / name).write_bytes(b"x")
    return [logdir / name for name in names]


def test_what_failed_writes_left_is_removed_and_the_complete_checkpoints_kept(tmp_path):
    kept = checkpoint_files(tmp_path, 10) + checkpoint_files(tmp_path, 20)
    write_state(tmp_path, 10, 20)
    (tmp_path / "tb").mkdir()
    kept += [tmp_path / "config.json", tmp_path / "graph.pbtxt", tmp_path / "events.out.x",
             tmp_path / "tb" / ".worker_0.json.7.tmp"]  # below tb/: not ours to judge
    for path in kept[-4:]:
        path.write_text("{}")
    (tmp_path / "progress").mkdir()
    left = [tmp_path / "model.ckpt-30.data-00000-of-00001",  # the failed save: no index
            tmp_path / "model.ckpt-30.index.tempstate8814426547",
            tmp_path / f"graph.pbtxt.tmp{'0a' * 16}", tmp_path / f"checkpoint.tmp{'b1' * 16}",
            tmp_path / "progress" / ".worker_1.json.4242.tmp",
            tmp_path / ".summary.json.99.tmp"]
    for path in left:
        path.write_bytes(b"partial")
    (tmp_path / "model.ckpt-30_temp").mkdir()
    (tmp_path / "model.ckpt-30_temp" / "part-00000-of-00001.index").write_bytes(b"x")
    left.append(tmp_path / "model.ckpt-30_temp")

    # The chief removes only what its own writes leave: other tasks may still be writing.
    assert sorted(storage.remove_partial_checkpoint(tmp_path)) == sorted(left[:4] + left[-1:])
    assert (tmp_path / "progress" / ".worker_1.json.4242.tmp").exists()
    # The launcher, once every task is stopped, the rest.
    assert sorted(storage.remove_partial_files(tmp_path)) == sorted(left[4:6])
    assert all(path.exists() for path in kept), [p for p in kept if not p.exists()]
    assert read_checkpoint_state(str(tmp_path)).newest == str(tmp_path / "model.ckpt-20")


def test_with_no_complete_checkpoint_every_checkpoint_file_is_partial(tmp_path):
    partial = checkpoint_files(tmp_path, 5)
    assert sorted(storage.remove_partial_checkpoint(tmp_path)) == sorted(partial)


def test_a_damaged_state_file_leaves_everything_to_the_checkpoint_checks(tmp_path):
    files = checkpoint_files(tmp_path, 5)
    (tmp_path / "checkpoint").write_text("garbled\n")
    assert storage.remove_partial_checkpoint(tmp_path) == []
    assert all(path.exists() for path in files)


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "worker_0.json"
    write_atomic(path, "old")

    def full(*_args):
        raise os_error(errno.ENOSPC)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        write_atomic(path, "new")
    assert [p.name for p in tmp_path.iterdir()] == ["worker_0.json"]
    assert path.read_text() == "old"


def test_a_log_dir_without_room_for_one_checkpoint_is_refused(tmp_path, monkeypatch):
    free = 50_000  # CartPole's network: 9,155 parameters, three copies of 4 bytes: 110 kB
    monkeypatch.setattr(plan.shutil, "disk_usage",
                        lambda _path: shutil._ntuple_diskusage(10**9, 10**9 - free, free))
    with pytest.raises(UsageError) as refused:
        plan.check_logdir_space(tmp_path / "run", resolve_run(A3CConfig()))
    assert str(refused.value) == (f"--logdir {tmp_path / 'run'} has 50 kB free, less than the "
                                  "110 kB one checkpoint of this network takes: free some "
                                  "space there or give another --logdir")
    monkeypatch.setattr(plan.shutil, "disk_usage",
                        lambda _path: shutil._ntuple_diskusage(10**9, 0, 110_000))
    plan.check_logdir_space(tmp_path / "run", resolve_run(A3CConfig()))

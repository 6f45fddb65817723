"""When the log dir cannot be written: a full disk, a read-only or a forbidden file system.

The problem: a run writes to its log dir from start to end (task logs, progress files,
events, graph.pbtxt, checkpoints). When its file system fills up or turns read-only, every
task fails at its next write, and a restart cannot cure that: the workers were restarted
over and over, the launcher died with a traceback writing a task's log, and TF's temporary
files (graph.pbtxt.tmp...) were left behind.

The decision: a task that cannot write its log dir exits with cli.EXIT_STORAGE (74,
sysexits' EX_IOERR), after the chief removed what its failed writes left; the supervisor
never restarts such a task: it stops the run in order, removes what is left, and says in
one line which log dir, why and what to do; the launcher then exits 74 too. The last
complete checkpoint stays restorable: TF's Saver writes a checkpoint's files under
temporary names and names it in the `checkpoint` state file last (atomically), so a save
that fails leaves the state file naming the previous one; the files of the failed one are
removed here. A log dir that is already too full when a run starts is refused before
anything starts (plan.py, with the size of one checkpoint).

How a fault is told: by its errno for OSError (ours, and the print of a task whose log is
on that disk), and by the strerror text TF puts in its errors' messages ("<path>; No space
left on device") for TF's. No TensorFlow here: the launcher imports this.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from a3c_graph.rundir.run_config import CheckpointError, read_checkpoint_state

FULL = "no space left on the device"
QUOTA = "the disk quota is exceeded"
READ_ONLY = "the file system is read-only"
DENIED = "writing is not permitted"
FAULTS = {errno.ENOSPC: FULL, errno.EDQUOT: QUOTA, errno.EROFS: READ_ONLY,
          errno.EACCES: DENIED, errno.EPERM: DENIED}
ADVICE = {
    FULL: "free some space there",
    QUOTA: "free some space there or raise the quota",
    READ_ONLY: "make it writable again (or copy the log dir to a writable file system and "
               "give that --logdir)",
    DENIED: "give this user write access to it",
}
# Less free space than this after a task gave up on a write: a full disk, whatever the task
# could still say (its own log is on that disk).
NEARLY_FULL_BYTES = 1_000_000

# What failed writes leave: TF's atomic writes (graph.pbtxt.tmp<uuid hex>, checkpoint.tmp...),
# its tensor bundles (.tempstate<n>), a sharded Saver's <prefix>_temp directory, and
# progress.write_atomic's .<name>.<pid>.tmp.
TF_TEMP = re.compile(r".+\.tmp[0-9a-f]{32}|.+\.tempstate\d+|.+_temp(_[0-9a-f]+)?")
OUR_TEMP = re.compile(r"\..+\.\d+\.tmp")
CHECKPOINT_FILE = re.compile(r"model\.ckpt-(\d+)\.(index|meta|data-\d{5}-of-\d{5})")


def storage_fault(error: BaseException | None, logdir: str | Path | None = None) -> str | None:
    """FULL, QUOTA, READ_ONLY or DENIED if `error` (or what caused it) failed a write for
    want of storage, else None. An OSError by its errno, and only for a file in `logdir` when
    it names one (a print to a full log names none); TF's errors (anything with an
    error_code) by the strerror text in their message."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FAULTS:
            if error.filename is None or logdir is None or _inside(error.filename, logdir):
                return FAULTS[error.errno]
        elif hasattr(error, "error_code"):
            text = str(error)
            for code, fault in FAULTS.items():
                if os.strerror(code) in text:
                    return fault
        error = error.__cause__ or error.__context__
    return None


def _inside(path: str | bytes | int, logdir: str | Path) -> bool:
    if not isinstance(path, (str, Path)):
        return True  # a file descriptor: our log or one of ours
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(logdir))


def fault_of_line(line: str | None) -> str | None:
    """The fault a task's error line (fault_line) names, or None."""
    return next((fault for fault in ADVICE if line and f": {fault}" in line), None)


def fault_line(logdir: str | Path, fault: str, who: str = "") -> str:
    """The one line that tells the user: which log dir, why, what to do."""
    return (f"{who + ' ' if who else ''}cannot write the log dir {logdir}: {fault}; "
            f"{ADVICE[fault]}, then start the run again with the same --logdir: it goes on "
            "from its last checkpoint")


def task_fault_line(logdir: str | Path, label: str, task_line: str | None,
                    diagnosed: str | None) -> str:
    """The launcher's line for a task that could not write the log dir (exit 74): the fault
    its own error line names, else the one its file system shows now (`diagnosed`: on a full
    disk the task's line may not have reached its log)."""
    fault = fault_of_line(task_line) or diagnosed
    if fault is None:
        return f"{label} cannot write the log dir {logdir}: {task_line or 'see its log'}"
    return fault_line(logdir, fault, label)


def diagnose(logdir: str | Path) -> str | None:
    """Which fault the log dir's file system shows now, or None if it looks writable."""
    try:
        stats = os.statvfs(logdir)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return READ_ONLY
    if stats.f_bavail * stats.f_frsize < NEARLY_FULL_BYTES:
        return FULL
    if not os.access(logdir, os.W_OK):
        return DENIED
    return None


def remove_partial_checkpoint(logdir: str | Path) -> list[Path]:
    """Remove what a failed checkpoint or graph write of the chief left in `logdir`: TF's
    temporary files, and the files of any checkpoint newer than the one the state file names
    last (the state file is written after a checkpoint's files). The paths removed."""
    logdir = Path(logdir)
    try:
        state = read_checkpoint_state(str(logdir))
    except CheckpointError:
        return []  # a damaged state file: checkpoints.py tells the user; touch nothing
    newest = -1
    if state is not None:
        match = re.search(r"-(\d+)$", state.newest)
        newest = int(match.group(1)) if match else float("inf")
    removed = []
    for path in _entries(logdir):
        checkpoint = CHECKPOINT_FILE.fullmatch(path.name)
        if TF_TEMP.fullmatch(path.name) or (checkpoint and int(checkpoint.group(1)) > newest):
            removed += _remove(path)
    return removed


def remove_partial_files(logdir: str | Path) -> list[Path]:
    """remove_partial_checkpoint, and the temporary files of progress.write_atomic in the log
    dir and its progress/ and pids/ (call it once no task of the run is left). The paths
    removed."""
    logdir = Path(logdir)
    removed = remove_partial_checkpoint(logdir)
    for folder in (logdir, logdir / "progress", logdir / "pids"):
        removed += [gone for path in _entries(folder) if OUR_TEMP.fullmatch(path.name)
                    for gone in _remove(path)]
    return removed


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _remove(path: Path) -> list[Path]:
    """Remove a file or a directory tree; on a read-only file system nothing can be."""
    try:
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                _remove(child)
            path.rmdir()
        else:
            path.unlink()
    except OSError:
        return []
    return [path]

"""The launcher's `status` and `stop` commands: a run found by the pid files its launcher
wrote (a3c_graph/system/processes.py), never by a process's name, so other people's jobs on
the same machine are safe; `stop` stops the launcher, the workers, then the ps, the
supervisor's order (processes.stop_in_order).

Exit status: 0, or 3 (EXIT_NOT_LIVE) when the log dir holds no live run; 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from a3c_graph.launcher.plan import PROG
from a3c_graph.launcher.report import progress_line
from a3c_graph.launcher.supervisor import PS_STOP_MIN_SECS
from a3c_graph.rundir.progress import read_progress, run_totals
from a3c_graph.system import processes
from a3c_graph.system.cli import EXIT_NOT_LIVE, OneLineParser

# `stop` waits this long for the launcher to wind everything down before killing.
STOP_COMMAND_TIMEOUT_SECS = 20.0


def build_logdir_parser(command: str, description: str) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=f"{PROG} {command}", allow_abbrev=False, description=description)
    parser.add_argument("--logdir", required=True, help="The run's log directory.")
    return parser



def _find_run(command: str, description: str, argv: Sequence[str]
              ) -> tuple[Path, dict[str, processes.PidRecord] | None]:
    """(the log dir `argv` names, its run's pid records by name or None, with one line on
    stderr, when there is no run)."""
    args = build_logdir_parser(command, description).parse_args(argv)
    logdir = Path(os.path.abspath(args.logdir))
    records = processes.read_pid_files(logdir)
    if "launcher" not in records:
        print(f"{PROG}: no run in {logdir} (no pids/launcher.pid)", file=sys.stderr)
        return logdir, None
    return logdir, records


def _describe(record: processes.PidRecord) -> str:
    pid = "?" if record.pid is None else str(record.pid)
    return f"{record.name.replace('_', ' '):<10} pid {pid:>7}  {record.state}"


def cmd_status(argv: Sequence[str]) -> int:
    logdir, records = _find_run("status", "Show a run's tasks and progress.", argv)
    if records is None:
        return EXIT_NOT_LIVE
    live = any(record.proc is not None for record in records.values())
    for record in records.values():
        print("  " + _describe(record))
    summary_path = logdir / "summary.json"
    totals = run_totals(read_progress(logdir))
    # One reading has no rate of its own: the running workers' local rates add up to one.
    rate = totals.local_steps_per_sec if totals and live else None
    print("  " + progress_line(_status_elapsed(logdir, summary_path), totals, rate))
    if live and records["launcher"].proc is None:
        print(f"run {logdir}: live, but its launcher is gone; `stop` ends the tasks left")
        return 0
    if live:
        print(f"run {logdir}: live")
        return 0
    ended = ("summary.json exists" if summary_path.exists()
             else "no summary.json (the launcher did not finish cleanly)")
    print(f"run {logdir}: not live; {ended}")
    return EXIT_NOT_LIVE


def _status_elapsed(logdir: Path, summary_path: Path) -> float:
    """Seconds since launch (the launcher's pid file is written at launch), or the run's total."""
    try:
        return float(json.loads(summary_path.read_text(encoding="utf-8"))["wall_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        return time.time() - (processes.pid_dir(logdir) / "launcher.pid").stat().st_mtime
    except OSError:
        return 0.0


def cmd_stop(argv: Sequence[str]) -> int:
    logdir, records = _find_run("stop", "Stop a run and every task it started.", argv)
    if records is None:
        return EXIT_NOT_LIVE
    for record in records.values():
        if record.proc is None:
            print(f"{_describe(record)}: stale pid file, left alone")
    alive = {r.name: r.proc for r in records.values() if r.proc is not None}
    if not alive:
        print(f"run {logdir} is not live; nothing to stop")
        return 0
    began = time.monotonic()
    # A live launcher stops its tasks in order and writes summary.json; tasks it left, or
    # that nobody supervises any more, are stopped here in the same order.
    groups = [[alive[name] for name in alive if name.startswith(job + "_")]
              for job in ("worker", "ps")]
    if "launcher" in alive:
        groups.insert(0, [alive["launcher"]])
    killed = processes.stop_in_order(groups, STOP_COMMAND_TIMEOUT_SECS,
                                     last_group_min_secs=PS_STOP_MIN_SECS)
    left = [name for name, proc in alive.items() if proc in killed]
    if left:
        print(f"{PROG}: warning: killed {', '.join(left)} after {STOP_COMMAND_TIMEOUT_SECS:.0f} s",
              file=sys.stderr)
    print(f"stopped run {logdir}: {', '.join(alive)} gone in {time.monotonic() - began:.1f} s")
    return 0

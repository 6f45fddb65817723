"""The end of one run of a Slurm batch job: its summary, and whether to requeue it.

    python -m a3c_graph.launcher.slurm_job --logdir DIR --step-status N --started UNIX_TIME

Under a bare srun no launcher writes summary.json, and Slurm by itself brings a job back
only after a node failure or a preemption. scripts/slurm/a3c.sbatch runs this after its
srun step: it writes <logdir>/summary.json from the workers' progress files (progress.py,
as the launcher does) with the job's facts, prints it as one JSON line, and exits

  * 0 when the run is over: solved, or --max-steps/--max-seconds spent;
  * 75 (EX_TEMPFAIL) when it is not and the job may run again: the step was stopped by a
    signal (the time limit's --signal) or a task died and srun --kill-on-bad-exit ended the
    step. The batch script then requeues its own job (`scontrol requeue`), which starts
    again and whose chief restores the latest checkpoint: the global step carries on;
  * 1 when it is not over and the job has been requeued --max-requeues times already;
    srun's own status when a task refused its input (2) or gave up (69): a new run would do
    the same.

Stdlib only: it runs once the TF tasks have ended.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from a3c_graph.rundir.progress import read_progress, summary_fields, write_json_atomic
from a3c_graph.system.cli import (
    EXIT_GAVE_UP,
    EXIT_LOST_PS,
    EXIT_USAGE,
    OneLineParser,
    UsageError,
    fail,
)

PROG = "a3c_graph.launcher.slurm_job"
FINISHED = ("solved", "max_steps", "max_seconds")
EXIT_REQUEUE = EXIT_LOST_PS  # 75: run it again


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--logdir", required=True, help="The run's log dir (the tasks' --logdir).")
    parser.add_argument("--step-status", type=int, required=True,
                        help="srun's exit status.")
    parser.add_argument("--started", type=float, required=True,
                        help="Unix time at which this run of the job started.")
    parser.add_argument("--max-requeues", type=int, default=3,
                        help="Requeue an unfinished run at most this many times (default: 3).")
    return parser


def verdict(stop_reason: str | None, restarts: int, max_requeues: int,
            step_status: int = 0) -> int:
    """0 when the run is over, EXIT_REQUEUE to run the job again, else the job's failure."""
    if stop_reason in FINISHED:
        return 0
    if step_status in (EXIT_USAGE, EXIT_GAVE_UP):  # srun: the highest status of its tasks
        return step_status
    return EXIT_REQUEUE if restarts < max_requeues else 1


def job_summary(logdir: Path, step_status: int, started: float, max_requeues: int,
                environ=os.environ) -> dict:
    summary, totals = summary_fields(logdir, started)
    restarts = int(environ.get("SLURM_RESTART_COUNT") or 0)
    stop_reason = totals.stop_reason if totals else None
    try:
        env = json.loads((logdir / "config.json").read_text(encoding="utf-8")).get("env")
    except (OSError, ValueError, AttributeError):
        env = None
    summary.update({
        "env": env,
        "workers": len(read_progress(logdir)),
        "stop_reason": stop_reason,
        "logdir": str(logdir),
        "slurm_job_id": environ.get("SLURM_JOB_ID"),
        "slurm_restart_count": restarts,
        "step_exit_code": step_status,
        "exit_code": verdict(stop_reason, restarts, max_requeues, step_status),
    })
    return summary


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as error:
        return fail(PROG, error)
    logdir = Path(args.logdir)
    if not logdir.is_dir():
        return fail(PROG, f"log dir {logdir} does not exist: the step wrote nothing", 1)
    summary = job_summary(logdir, args.step_status, args.started, args.max_requeues)
    write_json_atomic(logdir / "summary.json", summary)
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary["exit_code"]


if __name__ == "__main__":
    sys.exit(main())

"""The launcher's command line (behind scripts/launch_cluster.sh): start, status, stop.

    launch_cluster.sh [start] [--workers N] [--ps N] [--logdir D] [--dry-run] [--background]
                      [--cluster FILE [--tasks worker:0,ps:0]] [--allow-remote] [A3C flags]
    srun launch_cluster.sh --cluster slurm [--ps N] [--port P] --allow-remote [A3C flags]
    launch_cluster.sh status --logdir D
    launch_cluster.sh stop --logdir D

`start` plans the run (plan.py: every check, every task's command), then either prints the
commands (--dry-run), re-runs itself detached (--background), or supervises the tasks until
the workers stop (supervisor.py: one process per task, restarted when it crashes, stopped in
order). `status` and `stop` (status.py) find a run's processes by its pid files, never by
name, so other people's jobs on the same machine are safe.

TF's server listens on every interface whatever host the cluster names, so the tasks of a
loopback cluster run in a private network: a network namespace with only loopback, which the
launcher enters right before starting them (a3c_graph/system/netns.py). Anything else, a cluster
with another address or split over several launchers, takes --allow-remote and a warning.

With --cluster slurm, srun starts one launcher per task of a Slurm job step; each resolves
the step's cluster (cluster.cluster_from_slurm) and starts and supervises its own task, as
with TF_CONFIG, in <logdir>/<job>_<index>: srun gives every task the same command line.

Files under <logdir>: logs/<job>_<i>.log (stdout+stderr of a task), pids/<job>_<i>.pid and
pids/launcher.pid, progress/worker_<i>.json (written by the workers), summary.json (written
here when the run ends; its JSON is also the last line the launcher prints), launcher.log
(only with --background).

Exit status of `start`: 0 after a normal end, 2 for bad input (one line on stderr, nothing
started or written; a cluster whose memory would not fit this machine is bad input too), 1
when a task crashed or no worker ever trained, 130/143/129 after SIGINT/SIGTERM/SIGHUP.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from a3c_graph.core.config import add_config_arguments, config_to_argv
from a3c_graph.core.run_spec import describe_target
from a3c_graph.distributed import cluster as cluster_lib
from a3c_graph.launcher.options import LaunchOptions
from a3c_graph.launcher.plan import (
    DEFAULT_MAX_RESTARTS,
    LOCAL_SOURCE,
    PACKAGE_ROOT,
    PROG,
    LaunchPlan,
    command_line,
    plan_start,
)
from a3c_graph.launcher.report import Outcome, build_summary
from a3c_graph.launcher.status import cmd_status, cmd_stop
from a3c_graph.launcher.supervisor import (
    LAUNCHER_SIGNALS,
    STOP_TIMEOUT_SECS,
    Supervisor,
    print_progress,
)
from a3c_graph.rundir import storage
from a3c_graph.rundir.progress import write_atomic
from a3c_graph.system import devices as devices_lib
from a3c_graph.system import netns, processes
from a3c_graph.system.cli import (
    EXIT_CRASH,
    EXIT_STORAGE,
    EXIT_USAGE,
    SIGNAL_EXIT,
    OneLineParser,
    StopSignals,
    UsageError,
    fail,
)

WRAPPER_SCRIPT = PACKAGE_ROOT / "scripts" / "launch_cluster.sh"
BACKGROUND_START_TIMEOUT_SECS = 30.0


# --------------------------------------------------------------------------- command line

def build_start_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG, allow_abbrev=False,
        usage=f"{PROG} [start] [options]  |  {PROG} status --logdir D  |  {PROG} stop --logdir D",
        description="Start a local a3c_graph cluster (one process per ps/worker task) and "
                    "supervise it until the workers stop.",
        epilog="`status --logdir D` shows a run's tasks and progress (exit 0 if live, 3 if "
               "not); `stop --logdir D` stops a run started with --background.")
    group = parser.add_argument_group("cluster and launcher")
    group.add_argument("--workers", type=int, default=None,
                       help="Worker tasks of a local cluster (default: 2).")
    group.add_argument("--ps", type=int, default=None,
                       help="Parameter-server tasks of a local cluster, or the first N tasks of "
                            "the Slurm step with --cluster slurm (default: 1).")
    group.add_argument("--logdir", default=None,
                       help="Logs, pids, progress, checkpoints (default: runs/<env>-<time>); "
                            "with --cluster slurm, each launcher's <logdir>/<job>_<index> "
                            "(default: runs/<env>-slurm-<Slurm job id>).")
    group.add_argument("--dry-run", action="store_true",
                       help="Print the command of every task; start nothing, write nothing.")
    group.add_argument("--background", action="store_true",
                       help="Run the launcher detached (log in <logdir>/launcher.log).")
    group.add_argument("--cluster", metavar="FILE|slurm", default=None,
                       help='Multi-machine: JSON {"ps": [...], "worker": [...]}; starts the '
                            "tasks whose host is this machine (or those named by --tasks). "
                            "TF_CONFIG in the environment works too and starts just its task. "
                            "slurm: run by srun, one launcher per task of the Slurm step, each "
                            "starting its own task (see --ps, --port).")
    group.add_argument("--port", type=int, default=None, metavar="P",
                       help="With --cluster slurm: the tasks on one node listen on ports P, "
                            f"P+1, ... (default: {cluster_lib.SLURM_DEFAULT_PORT}).")
    group.add_argument("--tasks", default=None, metavar="JOB:I[,JOB:I..]",
                       help="With --cluster/TF_CONFIG: tasks to start here, e.g. worker:0,ps:0.")
    group.add_argument("--allow-remote", action="store_true",
                       help="Allow non-loopback addresses, and tasks of a loopback cluster on "
                            "the host network (no private network; needed when they are split "
                            "over several launchers). TF listens on every interface and its "
                            "server is unauthenticated gRPC that runs any graph sent to it: use "
                            "only on a trusted network.")
    group.add_argument("--max-restarts", type=int, default=DEFAULT_MAX_RESTARTS, metavar="N",
                       help="Restart a task that crashes, with back-off, up to N times in a row "
                            "(0: a crash ends the run). A worker that lost the ps is always "
                            f"restarted. Default: {DEFAULT_MAX_RESTARTS}.")
    devices_lib.add_gpu_arguments(group)
    add_config_arguments(parser)
    return parser


# --------------------------------------------------------------------------- private network

def warn_if_remote(plan: LaunchPlan) -> None:
    """The warning for tasks on the host network, loopback cluster or not: TF listens there
    on every interface."""
    if plan.private_network:
        return
    remote = cluster_lib.non_loopback_hosts(plan.cluster)
    why = (f"address(es) {', '.join(remote)} are not loopback" if remote
           else "--allow-remote, so not in a private network")
    print(f"{PROG}: warning: the tasks run on the host network ({why}), where TF listens on "
          "every interface: the TF server is unauthenticated gRPC that runs any graph sent to "
          "it; it must only be reachable on a trusted network", file=sys.stderr, flush=True)


PRIVATE_NETWORK_LINE = ("the tasks {verb} in a private network (a network namespace with only "
                        "loopback: no other machine can reach them)")


def enter_private_network(plan: LaunchPlan | None, say) -> None:
    """Move this launcher, and so every task it will start, into a private network, and
    `say` so; UsageError when the kernel refuses, before anything is written or started.

    The command (`plan` given) calls it right before the tasks start, so a --background
    launcher does it too; the pid namespace stays the host's, so pid files, `status` and
    `stop` work as before. An unprivileged user gets the namespace through a user namespace
    of its own, which the kernel makes only for a single-threaded process, and numpy
    (imported while planning) has started BLAS threads by now: then this launcher is
    executed again through a3c_graph.system.netns (same pid and command line, with the
    logdir it chose), plans again and comes back here in the private network.

    The Python API (`plan` None) calls it from the thread that will start the tasks, which
    the kernel alone moves (root only); it cannot execute the caller's program again.
    """

    if netns.is_isolated() and plan is None:
        return
    try:
        if plan is not None:
            netns.enter_or_reexecute([*sys.orig_argv[1:], "--logdir", str(plan.logdir)])
        else:
            netns.enter_private_network()
    except netns.NamespaceError as error:
        raise UsageError(
            f"cannot run the tasks in a private network: {error}; --allow-remote runs them on "
            "the host network instead, where TF listens on every interface (trusted networks "
            "only)") from None
    say(PRIVATE_NETWORK_LINE.format(verb="run"))


# --------------------------------------------------------------------------- commands

def run_foreground(plan: LaunchPlan) -> int:
    """`start` in the foreground: this process supervises the run (in a private network,
    re-executed into one if it must be) and prints its summary's JSON as the last line."""
    if plan.private_network:
        # UsageError if refused: nothing written or started yet.
        enter_private_network(plan, say=lambda line: print(f"{PROG}: {line}", flush=True))
    signals = StopSignals(LAUNCHER_SIGNALS)
    signals.install()  # before any task exists: a signal must never orphan one
    summary, error = supervise(plan, signals)
    # A background launcher's output is its launcher.log, maybe on the disk that is full.
    with contextlib.suppress(OSError):
        if error:
            print(f"{PROG}: error: {error}", file=sys.stderr, flush=True)
        print(json.dumps(summary, sort_keys=True), flush=True)  # always the last line
    return summary["exit_code"]


def supervise(plan: LaunchPlan, signals: StopSignals,
              on_progress=None) -> tuple[dict, str | None]:
    """Start the planned tasks, supervise them until the workers stop (or `signals` says
    stop), stop them all and write summary.json: (the summary, the run's one-line error or
    None). The summary's exit_code is the `start` command's status. The caller has put this
    thread in the private network the plan wants; the one path of the command and of
    a3c_graph.train (api.py), whose on_progress (Supervisor's hook; default: print the line)
    also gets a last reading once the tasks have stopped."""
    warn_if_remote(plan)
    supervisor = Supervisor(plan, signals, on_progress or print_progress)
    outcome = Outcome(EXIT_CRASH, "crash")
    try:
        supervisor.prepare_logdir()
        supervisor.start_tasks()
        print(f"{PROG}: started {len(supervisor.tasks)} task(s) of the {plan.source} "
              f"({len(plan.cluster['ps'])} ps, {len(plan.cluster['worker'])} workers), target "
              f"return {describe_target(plan.config.target_return)}; logs in "
              f"{plan.logdir / 'logs'}", flush=True)
        outcome = supervisor.watch()
    except OSError as error:  # the launcher's own writes: pid files, a task's log
        outcome = storage_outcome(plan, error)
    finally:
        # Runs on every path, including a bug in the code above: nothing is left running.
        killed = supervisor.stop_tasks()
    if killed:
        print(f"{PROG}: warning: killed {', '.join(killed)} after {STOP_TIMEOUT_SECS:.0f} s",
              file=sys.stderr, flush=True)
    if on_progress is not None:  # the API's last reading, even of a short run
        supervisor.report_progress()
    if outcome.exit_code == EXIT_STORAGE:
        storage.remove_partial_files(plan.logdir)
    summary = build_summary(plan, supervisor.started, outcome, supervisor.tasks,
                            supervisor.restarts, supervisor.first_training)
    try:
        write_atomic(plan.logdir / "summary.json",
                     json.dumps(summary, sort_keys=True, indent=2) + "\n")
    except OSError as error:
        if outcome.error is None:  # else the run's own error says it already
            outcome = storage_outcome(plan, error)
            summary.update(exit_code=outcome.exit_code, stop_reason=outcome.stop_reason)
    return summary, outcome.error


def storage_outcome(plan: LaunchPlan, error: OSError) -> Outcome:
    """The end of a run whose launcher could not write its log dir (storage.py); any other
    OSError is a bug, raised."""
    fault = storage.storage_fault(error, plan.logdir)
    if fault is None:
        raise error
    return Outcome(EXIT_STORAGE, "storage", storage.fault_line(plan.logdir, fault, "the launcher"))


def start_background(plan: LaunchPlan) -> int:
    """Re-run this launcher detached, with every decision of `plan` spelled out."""
    local = plan.source == LOCAL_SOURCE
    options = LaunchOptions(
        logdir=plan.logdir, ps=len(plan.cluster["ps"]) if local else None,
        workers=len(plan.workers) if local else None, cluster=plan.cluster_file,
        tasks=plan.tasks_flag, allow_remote=plan.allow_remote, max_restarts=plan.max_restarts,
        gpus=plan.devices.request.text if plan.devices is not None else None,
        gpu_memory_fraction=plan.devices.memory_fraction if plan.devices is not None else None)
    argv = ["start", *options.to_argv(), *config_to_argv(plan.config, say_envs=True)]
    created = not plan.logdir.exists()
    plan.logdir.mkdir(parents=True, exist_ok=True)
    log_path = plan.logdir / "launcher.log"
    with open(log_path, "ab") as log:
        popen = subprocess.Popen([sys.executable, "-m", processes.LAUNCH_MODULE, *argv],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    pid_file = processes.pid_dir(plan.logdir) / "launcher.pid"
    # Return once `status` can see the run: its launcher has written its pid file.
    processes.wait_until(lambda: (popen.poll() is not None
                             or processes.read_pid_file(pid_file, plan.logdir).proc is not None),
                    BACKGROUND_START_TIMEOUT_SECS)
    if popen.poll() is not None:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        error = next((ln for ln in reversed(lines) if ln.startswith(f"{PROG}: error:")), None)
        if error and created and not pid_file.exists():
            log_path.unlink(missing_ok=True)
            _remove_empty_dirs(plan.logdir)
        print(error or f"{PROG}: error: the background launcher exited with status "
              f"{popen.returncode}; see {log_path}", file=sys.stderr)
        return EXIT_USAGE if error else EXIT_CRASH
    me = (shlex.quote(str(WRAPPER_SCRIPT)) if WRAPPER_SCRIPT.exists()
          else f"python -m {processes.LAUNCH_MODULE}")
    logdir = shlex.quote(str(plan.logdir))
    print(f"started in the background (launcher pid {popen.pid}): logdir {plan.logdir}\n"
          f"  status: {me} status --logdir {logdir}\n"
          f"  stop:   {me} stop --logdir {logdir}\n"
          f"  log:    {plan.logdir / 'launcher.log'}", flush=True)
    return 0


def _remove_empty_dirs(path: Path) -> None:
    for sub in (path / "pids", path / "logs", path / "progress", path):
        try:
            sub.rmdir()
        except OSError:
            pass


def cmd_start(argv: Sequence[str]) -> int:
    args = build_start_parser().parse_args(argv)
    if args.dry_run and args.background:
        raise UsageError("--dry-run and --background do not go together")
    if args.background and args.cluster == cluster_lib.SLURM:
        raise UsageError("--background does not go with --cluster slurm: Slurm ends a step's "
                          "processes once srun's tasks exit; run the launcher in the foreground")
    plan = plan_start(args, os.environ)
    for note in plan.devices.notes if plan.devices else ():  # e.g. --gpus auto found no GPU
        print(f"{PROG}: note: {note}", file=sys.stderr, flush=True)
    if args.dry_run:
        # A dry run may plan for another machine: what this one lacks is only a warning.
        missing = plan.devices.missing_warning() if plan.devices else None
        for warning in ([missing] if missing else []) + list(plan.dry_run_warnings):
            print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
        if plan.devices is not None and plan.devices.gpus:  # which task shares which GPU
            print(f"{PROG}: note: {plan.devices.summary_line()}", file=sys.stderr, flush=True)
        warn_if_remote(plan)
        if plan.private_network:  # stdout holds only the commands
            print(f"{PROG}: note: {PRIVATE_NETWORK_LINE.format(verb='would run')}",
                  file=sys.stderr, flush=True)
        for task in plan.tasks:
            print(command_line(task))
        return 0
    check_devices_visible(plan)
    if args.background:
        warn_if_remote(plan)
        return start_background(plan)
    return run_foreground(plan)


def check_devices_visible(plan: LaunchPlan) -> None:
    """UsageError unless the GPUs the plan gives the tasks are visible here; says which."""
    if plan.devices is None:
        return
    try:
        plan.devices.check_visible()
    except devices_lib.DeviceError as error:
        raise UsageError(str(error)) from None
    if plan.devices.gpus:
        print(f"{PROG}: {plan.devices.summary_line()}", flush=True)


COMMANDS = {"start": cmd_start, "status": cmd_status, "stop": cmd_stop}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = "start"
    if argv and not argv[0].startswith("-"):
        command = argv.pop(0)
    try:
        if command not in COMMANDS:
            raise UsageError(f"unknown command {command!r}; use start, status or stop")
        return COMMANDS[command](argv)
    except UsageError as error:
        return fail(PROG, error)
    except KeyboardInterrupt:  # Ctrl-C before anything was started
        return SIGNAL_EXIT[signal.SIGINT]


if __name__ == "__main__":
    sys.exit(main())

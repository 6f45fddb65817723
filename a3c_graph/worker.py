"""The command of one task of the cluster, ps or worker:
``python -m a3c_graph.worker --job worker --task 3 ...``, as users, the launcher, Slurm and
Kubernetes start it.

A ps task starts its server and serves until it is told to stop
(distributed/ps_task.py). A worker task starts its server, builds its A3C graph and trains
(distributed/worker_task.py).

A task never tries to recover in place (but for a step the ps refused as a duplicate
request, which it runs again: sessions.py): a worker that loses the ps exits with status 75
and its supervisor (the launcher) starts it again; the new process waits for the ps, and
the chief restores the globals from the latest checkpoint (sessions.py: the session
creators, the wait for the ps, what a lost ps means). Exit status (cli.py): 0 after a
normal stop (solved, budget spent, SIGTERM/SIGINT), 2 for bad input, 1 for a crash, 69 when
it gave up (no ps within --connect-timeout, or losses that stay NaN/inf), 74 when the log dir
cannot be written (full, read-only, not permitted: storage.py), 75 after losing the ps.

This module is the task's command: parse and check its flags (before TF is imported, so a
bad input is one line), then run the task, and turn how it ended into the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from typing import NoReturn

from a3c_graph.core.config import add_config_arguments, config_from_args, for_workers
from a3c_graph.core.run_spec import resolve_run
from a3c_graph.distributed.cluster import (
    SLURM_DEFAULT_PORT,
    ClusterError,
    check_loopback,
    check_port_free,
    releases_ps,
    resolve_task,
)
from a3c_graph.rundir import storage
from a3c_graph.rundir.run_config import check_logdir_config
from a3c_graph.system import netns, process_env
from a3c_graph.system.cli import (
    EXIT_GAVE_UP,
    EXIT_LOST_PS,
    EXIT_STORAGE,
    WORKER_PROG,
    OneLineParser,
    StopSignals,
    UsageError,
    fail,
)
from a3c_graph.system.devices import process_task_device

PROG = WORKER_PROG


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0], help_hint=False)
    parser.add_argument("--job", choices=["ps", "worker"],
                        help="This task's job (or TF_CONFIG; with --cluster slurm, its rank).")
    parser.add_argument("--task", type=int, help="This task's index within its job.")
    parser.add_argument("--ps-hosts", help="Comma-separated host:port of the ps tasks.")
    parser.add_argument("--worker-hosts", help="Comma-separated host:port of the worker tasks.")
    parser.add_argument("--cluster", metavar="FILE|slurm",
                        help='JSON {"ps": [...], "worker": [...]}; or slurm: the Slurm job step '
                             "this task is one of (start every task with srun), named by TF's "
                             "SlurmClusterResolver, the task's job and index by its rank.")
    parser.add_argument("--ps", type=int, default=None, metavar="N",
                        help="With --cluster slurm: the first N tasks of the step are the ps, "
                             "the rest the workers (default: 1).")
    parser.add_argument("--port", type=int, default=None, metavar="P",
                        help="With --cluster slurm: the tasks on one node listen on ports P, "
                             f"P+1, ... (default: {SLURM_DEFAULT_PORT}).")
    parser.add_argument("--logdir", help="Checkpoints, summaries and progress go here.")
    parser.add_argument("--gpu", type=_gpu_id, default=None,
                        metavar="ID",
                        help="Run this worker on GPU ID, chosen by gpu_options.visible_device_list "
                             "(ids count within CUDA_VISIBLE_DEVICES). Default: GPU:0 of the "
                             "GPUs CUDA_VISIBLE_DEVICES shows it (how the launcher places "
                             "workers), else the CPU. A ps always runs on CPU.")
    parser.add_argument("--gpu-memory-fraction", type=float, default=None, metavar="F",
                        help="per_process_gpu_memory_fraction instead of allow_growth.")
    parser.add_argument("--allow-remote", action="store_true",
                        help="Allow non-loopback addresses, and the host network (outside the "
                             "launcher's private network), where TF listens on every interface. "
                             "The TF server is unauthenticated gRPC: use only on a trusted "
                             "network.")
    add_config_arguments(parser)
    return parser


def _gpu_id(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected one GPU id like 0 or 1, got {text!r}")
    return int(text)


def parse_args(argv):
    return build_parser().parse_args(argv)


# --------------------------------------------------------------------------- stop signals

class TaskStopSignals(StopSignals):
    """SIGTERM/SIGINT of a task: in its loop (in_loop), the loop finishes its step and stops
    cleanly; before it (connecting, initializing), there is nothing to save and the task
    leaves at once."""

    def __init__(self):
        super().__init__((signal.SIGTERM, signal.SIGINT))
        self.in_loop = False

    def _handle(self, signum, frame):
        super()._handle(signum, frame)
        if not self.in_loop:
            raise SystemExit(0)


def main(argv=None) -> int:
    stop = TaskStopSignals()
    stop.install()
    try:
        args = parse_args(argv)
        task = _validated_task(args)
    except UsageError as error:
        return fail(PROG, error)
    spec, config, run, device = task
    process_env.graph_mode_tensorflow()
    # The modules that use TF, once every flag is checked (docs/architecture.md, "Where the
    # heavy imports load"); a test stands in for a task by replacing run_ps or run_worker
    # there.
    from a3c_graph.distributed import ps_task, sessions, worker_task

    try:
        try:
            if spec.job == "ps":
                return ps_task.run_ps(spec, config, device, stop,
                                      released_by_workers=releases_ps(args))
            return worker_task.run_worker(spec, run, args, stop, device)
        except (ClusterError, UsageError) as error:  # e.g. lost a race for the port
            return fail(PROG, error)
        except sessions.GaveUp as error:
            return fail(PROG, error, EXIT_GAVE_UP)
        except sessions.lost_ps_errors() as error:
            sessions.report_lost_ps(spec, error)
            # Actor threads may still be blocked in a call to the dead ps: do not wait.
            os._exit(EXIT_LOST_PS)
    except Exception as error:  # noqa: BLE001 - any write may be the first to fail
        fault = storage.storage_fault(error, args.logdir)
        if fault is None:
            raise
        leave_on_storage_fault(spec, args.logdir, fault)


def leave_on_storage_fault(spec, logdir: str | None, fault: str) -> NoReturn:
    """Exit EXIT_STORAGE, the chief after removing what its failed writes left (storage.py).
    The error line may not reach the log, which is on the same disk: the status says it."""
    if spec.job == "worker" and spec.is_chief and logdir:
        storage.remove_partial_checkpoint(logdir)
    with contextlib.suppress(OSError):
        print(f"{PROG}: error: "
              + storage.fault_line(logdir, fault, f"{spec.job} {spec.task}"),
              file=sys.stderr, flush=True)
    os._exit(EXIT_STORAGE)


def _validated_task(args):
    """(spec, config, run (core/run_spec.py; None for a ps), device), or UsageError for
    anything a user got wrong.

    Every check a user can fail runs here, before TF is imported (its C++ log lines would
    break the one-line error; --cluster slurm imports it quietly, see cluster_from_slurm) and
    before the log dir is created, and so before any TF server starts.
    """
    try:
        config = config_from_args(args)
        spec = resolve_task(args.ps_hosts, args.worker_hosts, args.cluster, args.job, args.task,
                            num_ps=args.ps, port=args.port)
        config = for_workers(config, spec.num_workers, args)  # a task started alone
        check_loopback(spec.cluster, args.allow_remote)
        if spec.job == "ps":
            device = _task_device(args, spec)
            _check_private_network(args)
            check_port_free(spec.address)  # in the network the server will listen in
            return spec, config, None, device
        if not args.logdir:
            raise UsageError("--logdir is required for a worker")
        run = resolve_run(config)  # the launcher's checks, the same code
        device = _task_device(args, spec)
        _check_private_network(args)
        check_port_free(spec.address)
        _check_logdir(args.logdir)
        check_logdir_config(args.logdir, config, run.info.obs_shape)  # another run's logdir
        return spec, config, run, device
    except (ClusterError, ValueError) as error:
        raise UsageError(str(error)) from None


def _check_private_network(args) -> None:
    """UsageError unless this task runs in a private network (a namespace with only
    loopback) or --allow-remote says the host network is trusted.

    TF's server listens on every interface whatever host the cluster names, so a task "on
    127.0.0.1" started on the host network is reachable from every network the machine is
    on. The launcher's tasks run in its private network (a3c_graph/system/netns.py) and pass.
    """
    if not args.allow_remote and not netns.is_isolated():
        raise UsageError("TF's server would listen on every interface of this machine, whatever "
                         "host the cluster names; start the cluster with "
                         "scripts/launch_cluster.sh, which runs its tasks in a private network, "
                         "or pass --allow-remote on a trusted network")


def _task_device(args, spec):
    """This task's devices.TaskDevice; DeviceError (one line) for a GPU it cannot have.

    Checked before TF starts: TF reports a wrong id amid its own start-up log lines, or
    (without a GPU) quietly runs on CPU.
    """
    return process_task_device(spec.job, spec.task, args.gpu, args.gpu_memory_fraction)


def _check_logdir(logdir: str) -> None:
    try:
        os.makedirs(logdir, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create log dir {logdir}: {error.strerror}") from None
    if not os.access(logdir, os.W_OK | os.X_OK):
        raise UsageError(f"log dir {logdir} is not writable")


def run_command() -> NoReturn:
    """`python -m a3c_graph.worker`: main, then leave at once with its status. Everything is
    written and closed by then; left to the interpreter, TF's teardown can take more than the
    launcher's 10 s stop limit on a loaded machine (seen in the chief)."""
    exit_code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a log on a full disk: the status still counts
            stream.flush()
    os._exit(exit_code)


if __name__ == "__main__":
    run_command()

"""Local launcher and supervisor of an a3c_graph cluster (behind scripts/launch_cluster.sh).

    launch_cluster.sh [start] [--workers N] [--ps N] [--logdir D] [--dry-run] [--background]
                      [--cluster FILE [--tasks worker:0,ps:0]] [--allow-remote] [A3C flags]
    srun launch_cluster.sh --cluster slurm [--ps N] [--port P] --allow-remote [A3C flags]
    launch_cluster.sh status --logdir D
    launch_cluster.sh stop --logdir D

`start` runs one process per task (`python -m a3c_graph.worker --job ... --task ...`), each
in its own session so a Ctrl-C in the terminal reaches only the launcher, which then stops
the tasks in order: workers first (the chief writes its final checkpoint to the ps), then
the ps. Every process it starts is recorded in <logdir>/pids/ and is only ever signalled by
that pid, after checking that the pid still belongs to this run: never by name, so other
people's jobs on the same machine are safe.

TF's server listens on every interface whatever host the cluster names, so the tasks of a
loopback cluster run in a private network: a network namespace with only loopback, which the
launcher enters right before starting them (a3c_graph/netns.py). Anything else, a cluster
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
import dataclasses
import json
import math
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from a3c_graph import checkpoints, memory
from a3c_graph import cluster as cluster_lib
from a3c_graph import devices as devices_lib
from a3c_graph.config import (
    A3CConfig,
    add_config_arguments,
    config_from_args,
    config_to_argv,
    resolve_policy,
)
from a3c_graph.progress import (
    Totals,
    json_number,
    read_progress,
    run_totals,
    summary_fields,
    write_atomic,
)

PROG = "launch_cluster"
LOCAL_SOURCE = "local cluster"
SLURM_SOURCE = "Slurm step"
WORKER_MODULE = "a3c_graph.worker"
LAUNCH_MODULE = "a3c_graph.launch"
WORKER_ERROR_PREFIX = "a3c_graph.worker: error:"

# The repository root, so tasks import this very copy of a3c_graph wherever they run from.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
WRAPPER_SCRIPT = PACKAGE_ROOT / "scripts" / "launch_cluster.sh"

PROGRESS_LINE_SECS = 5.0
POLL_SECS = 0.2
# SIGTERM -> SIGKILL: long enough for the chief's final checkpoint of a small model.
STOP_TIMEOUT_SECS = 10.0
# The ps must outlive the workers' final checkpoint, and gets at least this after them.
PS_STOP_MIN_SECS = 2.0
# `stop` waits this long for the launcher to wind everything down before killing.
STOP_COMMAND_TIMEOUT_SECS = 20.0
# Workers enforce --max-seconds themselves; this backstop only catches a stuck run.
DEADLINE_GRACE_SECS = 60.0
BACKGROUND_START_TIMEOUT_SECS = 30.0
# A pid file is written right after its process starts; a process that started later than
# this after the file was written reuses the pid and is not ours.
PID_CLOCK_SLACK_SECS = 2.0

# A task's restarts: after its n-th crash in a row it waits RESTART_BACKOFF_SECS[n-1] (the
# last entry from then on); a task that ran HEALTHY_SECS before crashing starts counting
# again. The default number of restarts in a row before the run gives up is --max-restarts.
RESTART_BACKOFF_SECS = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
HEALTHY_SECS = 60.0
# A training worker whose progress file is older than this (or 10 x --progress-secs) is
# reported as stalled.
STALL_SECS = 30.0
DEFAULT_MAX_RESTARTS = 5

EXIT_USAGE = 2
EXIT_CRASH = 1
EXIT_NOT_LIVE = 3
# The worker's own exit statuses (a3c_graph/worker.py): it gave up for a reason a restart
# would not cure, or it lost the ps and wants to be started again at once.
TASK_EXIT_GAVE_UP = 3
TASK_EXIT_LOST_PS = 75
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


class LaunchError(Exception):
    """Bad input from the user: shown as one line on stderr, exit status 2."""


# --------------------------------------------------------------------------- command line

class _OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (the usage block would break the contract)."""

    def error(self, message: str) -> NoReturn:
        raise LaunchError(f"{message} (see {self.prog} --help)")


def build_start_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
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


def build_logdir_parser(command: str, description: str) -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=f"{PROG} {command}", allow_abbrev=False, description=description)
    parser.add_argument("--logdir", required=True, help="The run's log directory.")
    return parser


# --------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class TaskPlan:
    """One task to start on this machine, with its exact command."""

    job: str
    index: int
    address: str
    argv: tuple[str, ...]
    # Environment entries that differ from the launcher's own (shown in --dry-run).
    env_overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.job}_{self.index}"

    @property
    def label(self) -> str:
        return f"{self.job} task {self.index}"


@dataclass(frozen=True)
class LaunchPlan:
    """Everything `start` decided before touching the machine."""

    config: A3CConfig  # with target_return resolved
    cluster: Mapping[str, list]
    tasks: tuple[TaskPlan, ...]  # ps tasks first: workers connect to them
    logdir: Path
    allow_remote: bool
    source: str  # LOCAL_SOURCE, "cluster file F", "TF_CONFIG cluster" or SLURM_SOURCE
    cluster_file: str | None = None
    tasks_flag: str | None = None
    # Which device each task uses (by CUDA_VISIBLE_DEVICES in its env_overrides).
    devices: devices_lib.DevicePlan | None = None
    max_restarts: int = DEFAULT_MAX_RESTARTS
    # The tasks run in a network namespace with only loopback (see private_network_wanted).
    private_network: bool = False
    # What a dry run warns about and a start refuses: e.g. too little memory on this machine,
    # which need not be the one the commands are for.
    dry_run_warnings: tuple[str, ...] = ()

    @property
    def workers(self) -> list[TaskPlan]:
        return [t for t in self.tasks if t.job == "worker"]


def plan_start(args: argparse.Namespace, environ: Mapping[str, str]) -> LaunchPlan:
    """Validate every input and decide every command; raises LaunchError, starts nothing."""
    try:
        config = config_from_args(args)
    except ValueError as error:
        raise LaunchError(str(error)) from None
    for flag in ("workers", "ps"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise LaunchError(f"--{flag} must be at least 1, got {value}")
    if args.max_restarts < 0:
        raise LaunchError(f"--max-restarts must be 0 or more, got {args.max_restarts}")
    try:
        devices_lib.parse_gpus(args.gpus)
        devices_lib.check_memory_fraction(args.gpu_memory_fraction)
    except devices_lib.DeviceError as error:
        raise LaunchError(str(error)) from None
    config = dataclasses.replace(config, target_return=resolve_target_return(config))

    cluster, local_keys, source, tf_config = resolve_cluster(args, environ)
    private_network = private_network_wanted(cluster, local_keys, source, args.allow_remote)
    dry_run_warnings = []
    try:
        check_memory(config, cluster, local_keys, source)
    except LaunchError as error:
        if not args.dry_run:
            raise
        dry_run_warnings.append(str(error))
    # Local mode picked free ports just now; a cluster file's ports must be checked, on the
    # host network (in a private network, a new namespace, every port is free).
    if source != LOCAL_SOURCE and not private_network:
        for job, index in local_keys:
            try:
                cluster_lib.check_port_free(cluster[job][index])
            except cluster_lib.ClusterError as error:
                raise LaunchError(f"{job} task {index}: {error}") from None

    if source == SLURM_SOURCE:
        logdir = Path(os.path.abspath(slurm_logdir(args.logdir, config.env, local_keys[0],
                                                   environ)))
    else:
        logdir = Path(os.path.abspath(args.logdir or default_logdir(config.env)))
    check_logdir_writable(logdir)
    check_no_live_run(logdir)
    check_logdir_checkpoints(logdir, config)

    keys = sorted(local_keys, key=lambda key: (key[0] != "ps", key[1]))
    try:
        # One mechanism per child: CUDA_VISIBLE_DEVICES, set before its TF starts.
        device_plan = devices_lib.plan_devices(
            keys, args.gpus, args.gpu_memory_fraction, devices_lib.ENV_MECHANISM,
            devices_lib.detect_gpus(environ))
    except devices_lib.DeviceError as error:
        raise LaunchError(str(error)) from None
    env_overrides = child_env_overrides(environ)
    if tf_config is not None:
        env_overrides["TF_CONFIG"] = tf_config
    tasks = tuple(
        TaskPlan(job=job, index=index, address=cluster[job][index],
                 argv=tuple(task_argv(job, index, cluster, logdir, config, args.allow_remote,
                                      hosts_in_flags=tf_config is None)
                            + list(device_plan.for_task(job, index).flags)),
                 env_overrides={**env_overrides, **device_plan.for_task(job, index).env})
        for job, index in keys)
    return LaunchPlan(config=config, cluster=cluster, tasks=tasks, logdir=logdir,
                      allow_remote=args.allow_remote, source=source,
                      cluster_file=os.path.abspath(args.cluster) if args.cluster else None,
                      tasks_flag=args.tasks, devices=device_plan,
                      max_restarts=args.max_restarts, private_network=private_network,
                      dry_run_warnings=tuple(dry_run_warnings))


def resolve_target_return(config: A3CConfig) -> float:
    """--target-return, else the env spec's reward_threshold, so every worker agrees."""
    from a3c_graph import envs  # imports gymnasium: only when a start is planned

    try:
        info = envs.env_info(config.env, **envs.env_options(config))
    except envs.EnvError as error:
        raise LaunchError(str(error)) from None
    except Exception as error:  # noqa: BLE001 - any env id a user types must end in one line
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise LaunchError(f"env {config.env!r} cannot be made: {first}") from None
    try:  # the network must fit the observations, e.g. no --policy cnn on CartPole
        resolve_policy(config.policy, info.obs_shape)
    except ValueError as error:
        raise LaunchError(str(error)) from None
    if config.target_return is not None:
        return config.target_return
    if info.reward_threshold is None:
        raise LaunchError(f"env {config.env!r} has no reward_threshold; give --target-return")
    return float(info.reward_threshold)


def describe_target(target_return: float) -> str:
    return f"{target_return:g}" if math.isfinite(target_return) else "none (runs to its budget)"


def default_logdir(env_id: str) -> str:
    return os.path.join("runs", f"{env_id.replace('/', '-')}-{time.strftime('%Y%m%d-%H%M%S')}")


def slurm_logdir(logdir: str | None, env_id: str, key: tuple[str, int],
                 environ: Mapping[str, str]) -> str:
    """The run directory of this launcher's task of a Slurm step: <logdir>/<job>_<index>.

    srun gives every launcher the same command line, and they often share a filesystem:
    each keeps its pids, logs and summary apart. The default <logdir> is named after the
    Slurm job, which every task agrees on (their clocks may not: default_logdir)."""
    job_id = environ.get("SLURM_JOB_ID", "job")
    base = logdir or os.path.join("runs", f"{env_id.replace('/', '-')}-slurm-{job_id}")
    return os.path.join(base, f"{key[0]}_{key[1]}")


def resolve_cluster(args: argparse.Namespace, environ: Mapping[str, str]
                    ) -> tuple[dict, list[tuple[str, int]], str, str | None]:
    """(cluster, the (job, index) tasks to start here, source, TF_CONFIG text or None)."""
    slurm = args.cluster == cluster_lib.SLURM
    if args.port is not None and not slurm:
        raise LaunchError("--port goes with --cluster slurm; the other cluster sources list "
                          "every task's address")
    tf_config = environ.get("TF_CONFIG") if not args.cluster else None
    if not args.cluster and not tf_config:
        if args.tasks:
            raise LaunchError("--tasks needs --cluster FILE or TF_CONFIG")
        return local_cluster(args.ps or 1, args.workers or 2)

    try:
        if slurm:  # names this launcher's task by its Slurm rank
            cluster, named_job, named_index = cluster_lib.cluster_from_slurm(args.ps, args.port)
            source = SLURM_SOURCE
        elif args.cluster:
            cluster = cluster_lib.cluster_from_file(args.cluster)
            named_job, named_index, source = None, None, f"cluster file {args.cluster}"
        else:
            cluster, named_job, named_index = cluster_lib.cluster_from_tf_config(tf_config)
            source = "TF_CONFIG cluster"
    except cluster_lib.ClusterError as error:
        raise LaunchError(str(error)) from None
    remote = cluster_lib.non_loopback_hosts(cluster)
    if remote and not args.allow_remote:
        raise LaunchError(f"address {remote[0]} is not loopback; the TF server is unauthenticated "
                          "gRPC, so pass --allow-remote only if the network is trusted")
    for flag, job in (("workers", "worker"), ("ps", "ps")):
        given = getattr(args, flag)
        if given is not None and given != len(cluster[job]):  # a Slurm step: --ps made it
            raise LaunchError(f"--{flag} {given} disagrees with the {source}, which has "
                              f"{len(cluster[job])} {job} task(s); drop --{flag}")

    if slurm and args.tasks:
        raise LaunchError("--cluster slurm starts the task of this launcher's Slurm rank; "
                          "drop --tasks")
    if named_job is not None:
        if args.tasks:
            raise LaunchError("TF_CONFIG names its task; drop --tasks (or unset task in TF_CONFIG)")
        index = 0 if named_index is None else named_index
        if not 0 <= index < len(cluster[named_job]):
            raise LaunchError(f"TF_CONFIG task index {index} is outside job {named_job!r} "
                              f"({len(cluster[named_job])} task(s))")
        keys = [(named_job, index)]
    elif args.tasks:
        keys = parse_tasks_flag(args.tasks, cluster)
    else:
        keys = [(job, i) for job in cluster_lib.JOBS for i, address in enumerate(cluster[job])
                if is_local_host(cluster_lib.split_host_port(address)[0])]
        if not keys:
            raise LaunchError(f"no task of the {source} is on this machine; "
                              "name the ones to start here with --tasks worker:0,ps:0")
    return cluster, keys, source, tf_config


def local_cluster(num_ps: int, num_workers: int) -> tuple[dict, list, str, None]:
    """A cluster on 127.0.0.1 with free ports (loopback: no other machine can connect)."""
    import portpicker

    ports: list[int] = []
    while len(ports) < num_ps + num_workers:
        try:
            port = portpicker.pick_unused_port()
        except portpicker.NoFreePortFoundError:
            raise LaunchError(f"found {len(ports)} free ports on this machine for the "
                              f"{num_ps + num_workers} tasks of a local cluster: use fewer "
                              "workers") from None
        if port not in ports:  # portpicker may hand the same free port out twice
            ports.append(port)
    addresses = [f"127.0.0.1:{port}" for port in ports]
    cluster = {"ps": addresses[:num_ps], "worker": addresses[num_ps:]}
    keys = [("ps", i) for i in range(num_ps)] + [("worker", i) for i in range(num_workers)]
    return cluster, keys, LOCAL_SOURCE, None


def parse_tasks_flag(text: str, cluster: Mapping[str, list]) -> list[tuple[str, int]]:
    keys: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        job, _, index_text = part.partition(":")
        if job not in cluster_lib.JOBS or not index_text.isdigit():
            raise LaunchError(f"--tasks entry {part!r} is not of the form worker:I or ps:I")
        index = int(index_text)
        if index >= len(cluster[job]):
            raise LaunchError(f"--tasks entry {part!r} is outside the cluster: job {job!r} has "
                              f"{len(cluster[job])} task(s)")
        if (job, index) not in keys:
            keys.append((job, index))
    return keys


def private_network_wanted(cluster: Mapping[str, list], local_keys: Sequence[tuple[str, int]],
                           source: str, allow_remote: bool) -> bool:
    """Whether the tasks started here run in a private network: a namespace with only lo.

    TF's server listens on every interface whatever host the cluster names, so a loopback
    cluster is only loopback for real inside such a namespace (a3c_graph/netns.py), and its
    tasks can only meet there if this one launcher starts them all. Tasks of a loopback
    cluster split over several launchers would meet on the host network: LaunchError unless
    --allow-remote says that network is trusted. With --allow-remote (or a non-loopback
    cluster, which resolve_cluster already let through only with it) the host network it is.
    """
    if allow_remote or cluster_lib.non_loopback_hosts(cluster):
        return False
    total = sum(len(cluster[job]) for job in cluster_lib.JOBS)
    if len(local_keys) < total:
        raise LaunchError(
            f"this launcher would start {len(local_keys)} of the {total} tasks of the {source}, "
            "and tasks split over several launchers meet on the host network, where TF "
            "listens on every interface: start them all with one launcher (its private "
            "network keeps them on loopback), or pass --allow-remote on a trusted network")
    return True


def is_local_host(host: str) -> bool:
    """True for loopback and for any name or address of this machine's interfaces."""
    if cluster_lib.is_loopback(host):
        return True
    import psutil

    mine = {addr.address.split("%")[0] for nic in psutil.net_if_addrs().values() for addr in nic
            if addr.family in (socket.AF_INET, socket.AF_INET6)}
    if host in mine or host in (socket.gethostname(), socket.getfqdn()):
        return True
    try:
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return any(cluster_lib.is_loopback(ip) or ip in mine for ip in resolved)


def task_argv(job: str, index: int, cluster: Mapping[str, list], logdir: Path,
              config: A3CConfig, allow_remote: bool, hosts_in_flags: bool) -> list[str]:
    """The worker module's command line for one task (the contract in a3c_graph/worker.py)."""
    argv = [sys.executable, "-m", WORKER_MODULE, "--job", job, "--task", str(index)]
    if hosts_in_flags:  # else TF_CONFIG in the task's environment names the cluster
        argv += ["--ps-hosts", ",".join(cluster["ps"]),
                 "--worker-hosts", ",".join(cluster["worker"])]
    argv += ["--logdir", str(logdir)]
    if allow_remote:
        argv.append("--allow-remote")
    return argv + config_to_argv(config)


def child_env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """PYTHONPATH with this repository first, unless it is already on it."""
    parts = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(PACKAGE_ROOT) in (os.path.abspath(p) for p in parts):
        return {}
    return {"PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), *parts])}


def check_logdir_writable(logdir: Path) -> None:
    """LaunchError unless `logdir` exists as a writable directory or could be created.

    The deepest directory of `logdir` that exists must take a new directory: one is made
    there and removed at once, as only mkdir itself can tell (permission bits say yes to
    root, and /proc refuses whatever they say), and a refused run leaves nothing behind.
    """
    probe = logdir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise LaunchError(f"--logdir {logdir} cannot be created: {probe} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".launch_cluster-", dir=probe))
    except OSError as error:
        verb = "written" if probe == logdir else "created"
        raise LaunchError(f"--logdir {logdir} cannot be {verb}: no directory can be made in "
                          f"{probe} ({error.strerror or error})") from None
    for sub in ("logs", "pids", "progress", "summary.json"):
        path = logdir / sub
        if path.exists() and not os.access(path, os.W_OK):
            raise LaunchError(f"--logdir {logdir} cannot be written: {path} is not writable")


def check_no_live_run(logdir: Path) -> None:
    for record in read_pid_files(logdir).values():
        if record.proc is not None:
            raise LaunchError(f"a run is still live in {logdir} ({record.name} pid {record.pid}); "
                              f"stop it first: {PROG} stop --logdir {logdir}")


def check_logdir_checkpoints(logdir: Path, config: A3CConfig) -> None:
    """LaunchError if `logdir` holds checkpoints of a network this config would not build
    (the chief would fail to restore them, or a different run's files would be mixed in)."""
    from a3c_graph import envs  # imports gymnasium; env_info is cached from the target check

    try:
        info = envs.env_info(config.env, **envs.env_options(config))
        checkpoints.check_logdir_config(str(logdir), config, info.obs_shape)
    except checkpoints.CheckpointError as error:
        raise LaunchError(str(error)) from None


def check_memory(config: A3CConfig, cluster: Mapping[str, list],
                 local_keys: Sequence[tuple[str, int]], source: str) -> None:
    """LaunchError when the tasks started here need more memory than this machine has.

    Compared with the memory available now, not the total: what other processes hold is not
    ours to take, and with no swap the kernel makes room by killing a process, maybe
    another user's job.
    """
    import psutil

    from a3c_graph import envs  # imports gymnasium; env_info is cached from the target check

    jobs = [job for job, _ in local_keys]
    need = memory.estimate(config, envs.env_info(config.env, **envs.env_options(config)),
                           jobs.count("ps"), jobs.count("worker"), len(cluster["ps"]))
    problem = memory_problem(need, psutil.virtual_memory().available, source)
    if problem:
        raise LaunchError(problem)


# How to need less memory, by the part of the estimate that is largest.
MEMORY_ADVICE = {
    "network copies": "use smaller --hidden-sizes, --conv-filters or --lstm-size",
    "rollouts": "use fewer --envs-per-worker, a shorter --rollout-length or a smaller "
                "--queue-capacity",
    "envs": "use fewer --envs-per-worker or --actor-threads",
}


def memory_problem(need: memory.MemoryEstimate, available: int, source: str) -> str | None:
    """The one line that refuses a start needing more than `available` bytes, or None."""
    if need.total <= available:
        return None
    largest = need.largest_part()
    advice = MEMORY_ADVICE.get(largest)
    if advice is None:  # the TF processes themselves: too many of them
        fit = need.workers_that_fit(available)
        fewer = (f"use fewer workers (no more than {fit} can fit here)"
                 if source == LOCAL_SOURCE and fit else "start fewer tasks here")
        advice = (f"{fewer}, or spread the cluster over several machines (--cluster FILE, or "
                  "--cluster slurm)")
    parts = ", ".join(f"{name} {memory.describe_bytes(size)}"
                      for name, size in need.parts().items() if size >= memory.MB)
    return (f"the {need.ps + need.workers} task(s) to start here need at least "
            f"{memory.describe_bytes(need.total)} of memory ({parts}; the network has "
            f"{need.parameters:,} parameters), more than the "
            f"{memory.describe_bytes(available)} this machine has available: {advice}")


# --------------------------------------------------------------------------- dry run

def command_line(task: TaskPlan) -> str:
    """The task's command as one copy-pasteable shell line, env assignments first."""
    prefix = [f"{key}={shlex.quote(value)}" for key, value in sorted(task.env_overrides.items())]
    return " ".join([*prefix, shlex.join(task.argv)])


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


# --------------------------------------------------------------------------- private network

PRIVATE_NETWORK_LINE = ("the tasks {verb} in a private network (a network namespace with only "
                        "loopback: no other machine can reach them)")


def enter_private_network(plan: LaunchPlan) -> None:
    """Move this launcher, and so every task it will start, into a private network.

    Called right before the tasks start, so a --background launcher does it too; the pid
    namespace stays the host's, so pid files, `status` and `stop` work as before. An
    unprivileged user gets the namespace through a user namespace of its own, which the
    kernel makes only for a single-threaded process, and numpy (imported while planning)
    has started BLAS threads by now: then this launcher is executed again through
    a3c_graph.netns (same pid and command line, with the logdir it chose), plans again and
    comes back here in the private network. LaunchError when the kernel refuses, before
    anything is written or started.
    """
    from a3c_graph import netns

    try:
        netns.enter_or_reexecute([*sys.orig_argv[1:], "--logdir", str(plan.logdir)])
    except netns.NamespaceError as error:
        raise LaunchError(private_network_refused(error)) from None
    print(f"{PROG}: {PRIVATE_NETWORK_LINE.format(verb='run')}", flush=True)


def private_network_refused(error: Exception) -> str:
    return (f"cannot run the tasks in a private network: {error}; --allow-remote runs them on "
            "the host network instead, where TF listens on every interface (trusted networks "
            "only)")


# --------------------------------------------------------------------------- files

def pid_dir(logdir: Path) -> Path:
    return logdir / "pids"


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    return f"{minutes:3d}:{secs:02d}"


def progress_line(elapsed: float, totals: Totals | None, steps_per_sec: float | None) -> str:
    head = f"[{clock(elapsed)}]"
    if totals is None:
        return f"{head} waiting for the workers' first progress (connecting to the ps)"
    mean = "-" if totals.mean_return_100 is None else f"{totals.mean_return_100:.1f}"
    rate = "-" if steps_per_sec is None else f"{steps_per_sec:,.0f}"
    return (f"{head} step {totals.global_step:,}  env steps {totals.env_steps:,}  "
            f"{rate} steps/s  episodes {totals.episodes:,}  mean return(100) {mean}")


# --------------------------------------------------------------------------- processes

@dataclass(frozen=True)
class PidRecord:
    """What a pid file of a run names now."""

    name: str  # "launcher", "ps_0", "worker_1", ...
    pid: int | None
    proc: object | None  # a psutil.Process, only while the pid is alive and ours
    state: str  # "alive", "exited", "pid reused by another program", "unreadable pid file"


def read_pid_file(pid_file: Path, logdir: Path) -> PidRecord:
    """Trust a pid file only while its pid is still the process we started.

    A pid is ours when its command line runs our module (the launcher, or a worker of this
    logdir) and the process started no later than the pid file was written: a recycled pid
    fails one of the two.
    """
    import psutil

    name = pid_file.stem
    try:
        pid = int(pid_file.read_text(encoding="utf-8").strip())
        written = pid_file.stat().st_mtime
    except (OSError, ValueError):
        return PidRecord(name, None, None, "unreadable pid file")
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return PidRecord(name, pid, None, "exited")
        cmdline = proc.cmdline()
        started = proc.create_time()
    except psutil.NoSuchProcess:
        return PidRecord(name, pid, None, "exited")
    except psutil.Error:  # AccessDenied: someone else's process
        return PidRecord(name, pid, None, "pid reused by another program")
    if name == "launcher":
        ours = LAUNCH_MODULE in cmdline
    else:
        ours = WORKER_MODULE in cmdline and str(logdir) in cmdline
    if not ours or started > written + PID_CLOCK_SLACK_SECS:
        return PidRecord(name, pid, None, "pid reused by another program")
    return PidRecord(name, pid, proc, "alive")


def read_pid_files(logdir: Path) -> dict[str, PidRecord]:
    """Every pid file of `logdir` by name, the launcher first."""
    files = sorted(pid_dir(logdir).glob("*.pid"), key=lambda p: (p.stem != "launcher", p.stem))
    return {path.stem: read_pid_file(path, logdir) for path in files}


def is_gone(proc) -> bool:
    import psutil

    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def wait_until(done: Callable[[], bool], timeout: float,
               hurry: Callable[[], bool] = lambda: False) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline or hurry():
            return False
        time.sleep(0.1)
    return True


class Signals:
    """Turns SIGINT/SIGTERM/SIGHUP into a flag the supervisor loop checks.

    The tasks run in their own sessions, so a terminal's Ctrl-C or hang-up reaches only
    the launcher; it must outlive the signal to stop them in order.
    """

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: int | None = None
        self.repeated = False  # a second signal: stop waiting politely, kill now

    def install(self) -> None:
        for signum in self.HANDLED:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame) -> None:
        if self.received is None:
            self.received = signum
        else:
            self.repeated = True


@dataclass
class RunningTask:
    plan: TaskPlan
    popen: subprocess.Popen
    log_path: Path
    returncode: int | None = None
    started: float = field(default_factory=time.monotonic)
    crashes_in_a_row: int = 0  # crashes of the processes before this one, healthy runs reset

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.popen.poll()
        return self.returncode


@dataclass
class Outcome:
    """How a run ended, as the summary and the exit status tell it."""

    exit_code: int
    stop_reason: str | None = None  # overrides the workers' own reason
    error: str | None = None  # one line for stderr


class Supervisor:
    """Starts the planned tasks, watches them, and stops them, always by their own pids."""

    def __init__(self, plan: LaunchPlan, signals: Signals) -> None:
        self.plan = plan
        self.signals = signals
        self.tasks: list[RunningTask] = []  # the newest process of each task
        self.started = time.time()
        self._descendants: dict[int, object] = {}
        # Restarts due: (when, the task that exited); and how many each task had.
        self.pending: list[tuple[float, RunningTask]] = []
        self.restarts: dict[str, int] = {}
        # When the first worker began to train: a restarted worker's own progress file
        # only knows when *it* began.
        self.first_training: float | None = None
        self._stalled: set[int] = set()  # workers already warned about
        # The latest crash or lost ps of any task: what a run that never trained relays.
        self.last_failure: str | None = None

    # ---- start

    def prepare_logdir(self) -> None:
        for sub in ("logs", "pids", "progress"):
            (self.plan.logdir / sub).mkdir(parents=True, exist_ok=True)
        # Leftovers of an earlier run in the same logdir would be read as this run's.
        for stale in [*pid_dir(self.plan.logdir).glob("*.pid"),
                      *(self.plan.logdir / "progress").glob("worker_*.json*"),
                      self.plan.logdir / "summary.json"]:
            stale.unlink(missing_ok=True)
        write_atomic(pid_dir(self.plan.logdir) / "launcher.pid", f"{os.getpid()}\n")

    def start_tasks(self) -> None:
        for task in self.plan.tasks:
            if self.signals.received is not None:
                return
            self.tasks.append(self._start(task, task.argv))

    def _start(self, task: TaskPlan, argv: Sequence[str]) -> RunningTask:
        """Start one process of `task`; its log is appended to, its pid file rewritten."""
        log_path = self.plan.logdir / "logs" / f"{task.name}.log"
        shown = dataclasses.replace(task, argv=tuple(argv))
        with open(log_path, "ab") as log:
            log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {PROG}: "
                      f"{command_line(shown)}\n".encode())
            log.flush()
            popen = subprocess.Popen(list(argv), env={**os.environ, **task.env_overrides},
                                     stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        write_atomic(pid_dir(self.plan.logdir) / f"{task.name}.pid", f"{popen.pid}\n")
        return RunningTask(task, popen, log_path)

    # ---- watch

    def watch(self) -> Outcome:
        deadline = time.monotonic() + self.plan.config.max_seconds + DEADLINE_GRACE_SECS
        next_line = time.monotonic() + PROGRESS_LINE_SECS
        last: Totals | None = None
        while True:
            if self.signals.received is not None:
                return Outcome(SIGNAL_EXIT.get(self.signals.received, 130), "interrupted")
            for task in self.tasks:
                if task.returncode is None and task.poll() is not None:
                    outcome = self.on_task_exit(task)
                    if outcome is not None:
                        return outcome
            self._restart_due()
            # A machine with only ps tasks of a bigger cluster has no worker to wait for: it
            # serves until a signal or the backstop deadline.
            workers = [t for t in self.tasks if t.plan.job == "worker"]
            waiting = any(t.plan.job == "worker" for _, t in self.pending)
            if workers and not waiting and all(t.returncode is not None for t in workers):
                return self.run_over()
            if time.monotonic() >= deadline:
                return self.run_over(at_deadline=True)
            if time.monotonic() >= next_line:
                next_line += PROGRESS_LINE_SECS
                self._remember_descendants()
                progress = read_progress(self.plan.logdir)
                self._warn_about_stalls(progress)
                totals = run_totals(progress)
                self._note_training(totals)
                rate = None
                # No rate across a restart: a restarted task's counters start from zero, and
                # a restored checkpoint can step back.
                if (totals is not None and last is not None and totals.time > last.time
                        and last.global_step > 0 and totals.env_steps >= last.env_steps):
                    rate = (totals.env_steps - last.env_steps) / (totals.time - last.time)
                last = totals or last
                print(progress_line(time.time() - self.started, totals, rate), flush=True)
            time.sleep(POLL_SECS)

    def on_task_exit(self, task: RunningTask) -> Outcome | None:
        """What one task's exit means for the run; None lets the run go on.

        A worker that ends with 0 has stopped on its own (solved or budget). One that lost
        the ps is started again at once: it waits for the ps, the chief restores the latest
        checkpoint. A crash (any task, ps included) is restarted after a back-off, up to
        --max-restarts times in a row. Bad input and giving up end the run.
        """
        code = task.returncode
        if task.plan.job == "worker" and code == 0:
            return None
        error = task_error(newest_output(task.log_path))
        if code == EXIT_USAGE:
            return Outcome(EXIT_USAGE, "error", f"{task.plan.label}: " + (
                error or f"rejected its arguments (exit 2); see {task.log_path}"))
        if code == TASK_EXIT_GAVE_UP:
            reason = f": {error}" if error else ""
            return Outcome(EXIT_CRASH, "crash", f"{task.plan.label} gave up{reason}; its log is "
                           f"{task.log_path}")
        how = f"exited with status {code}" if code >= 0 else f"was killed by signal {-code}"
        if task.plan.job == "ps" and code == 0:
            how = "exited although a ps serves until it is stopped"
        if error:
            how += f" ({error})"
        self.last_failure = f"{task.plan.label} {how}; its log is {task.log_path}"
        if code == TASK_EXIT_LOST_PS:
            print(f"{PROG}: {task.plan.label} lost the ps; restarting it", file=sys.stderr,
                  flush=True)
            self.pending.append((time.monotonic() + RESTART_BACKOFF_SECS[0], task))
            return None
        healthy = time.monotonic() - task.started >= HEALTHY_SECS
        crashes = 1 if healthy else task.crashes_in_a_row + 1
        if crashes > self.plan.max_restarts:
            tries = (f" after {crashes - 1} restart(s) in a row" if self.plan.max_restarts
                     else "")
            return Outcome(EXIT_CRASH, "crash",
                           f"{task.plan.label} {how}{tries}; its log is {task.log_path}")
        delay = RESTART_BACKOFF_SECS[min(crashes, len(RESTART_BACKOFF_SECS)) - 1]
        print(f"{PROG}: warning: {task.plan.label} {how}; restarting it in {delay:g} s "
              f"(crash {crashes} in a row, at most {self.plan.max_restarts}); its log is "
              f"{task.log_path}", file=sys.stderr, flush=True)
        task.crashes_in_a_row = crashes
        self.pending.append((time.monotonic() + delay, task))
        return None

    def _note_training(self, totals: Totals | None) -> None:
        if totals is not None and totals.training_started:
            self.first_training = min(self.first_training or math.inf, totals.training_started)

    def _warn_about_stalls(self, progress: Mapping[int, dict]) -> None:
        """One warning per stall of a training worker that stopped reporting (e.g. a network
        cut: its step waits on the ps until --connect-timeout turns it into a restart)."""
        limit = max(STALL_SECS, 10 * self.plan.config.progress_secs)
        live = {t.plan.index: t.popen.pid for t in self.tasks
                if t.plan.job == "worker" and t.returncode is None}
        for task, data in progress.items():
            # A file written by an earlier process of a restarted task is not a stall: the
            # new process is still starting (TF import can take a minute on a busy machine).
            stalled = (data.get("state") == "running" and time.time() - data["time"] > limit
                       and task in live and data.get("pid", live[task]) == live[task])
            if stalled and task not in self._stalled:
                print(f"{PROG}: warning: worker task {task} has not reported for "
                      f"{time.time() - data['time']:.0f} s (cannot reach the ps?)",
                      file=sys.stderr, flush=True)
                self._stalled.add(task)
            elif not stalled:
                self._stalled.discard(task)

    def _restart_due(self) -> None:
        """Start again the tasks whose back-off is over, with the budget they have left."""
        now = time.monotonic()
        due = [task for when, task in self.pending if when <= now]
        self.pending = [(when, task) for when, task in self.pending if when > now]
        for old in due:
            argv = list(old.plan.argv)
            if old.plan.job == "worker":
                left = self.plan.config.max_seconds - (time.time() - self.started)
                if left <= 0:
                    continue  # its budget is spent: it stays stopped
                argv.append(f"--max-seconds={left:.1f}")
            new = self._start(old.plan, argv)
            new.crashes_in_a_row = old.crashes_in_a_row
            self.tasks[self.tasks.index(old)] = new
            self.restarts[old.plan.name] = self.restarts.get(old.plan.name, 0) + 1
            print(f"{PROG}: restarted {old.plan.label} (pid {new.popen.pid}, restart "
                  f"{self.restarts[old.plan.name]})", flush=True)

    def run_over(self, at_deadline: bool = False) -> Outcome:
        """How a run ends whose workers all stopped, or that reached the backstop deadline
        (--max-seconds + DEADLINE_GRACE_SECS: the workers stop at --max-seconds themselves,
        so something is stuck; a launcher of only ps tasks serves until then).

        A run whose workers never trained has failed, however it got here: each crashed, or
        hung, before its first update (a crashed worker whose budget is spent is not started
        again). Exit 1, with the last task failure, or where a worker is stuck, relayed.
        """
        waited = (f" within --max-seconds {self.plan.config.max_seconds:g} + "
                  f"{DEADLINE_GRACE_SECS:.0f} s" if at_deadline else "")
        stop_reason = "deadline" if at_deadline else None
        workers = [t for t in self.tasks if t.plan.job == "worker"]
        self._note_training(run_totals(read_progress(self.plan.logdir)))
        if workers and self.first_training is None:
            first = workers[0]
            last_words = ([line.strip() for line in newest_output(first.log_path)
                           if line.strip()] or ["(nothing)"])[-1]
            why = self.last_failure or (f"{first.plan.label} has not trained yet; its log "
                                        f"{first.log_path} ends: {last_words}")
            return Outcome(EXIT_CRASH, stop_reason or "crash",
                           f"no worker trained{waited}: {why}")
        if at_deadline:
            print(f"{PROG}: warning: the workers did not stop{waited}; stopping them",
                  file=sys.stderr, flush=True)
        return Outcome(0, stop_reason)

    # ---- stop

    def _remember_descendants(self) -> None:
        """Children of tasks, so none is left behind once its parent is gone."""
        import psutil

        for task in self.tasks:
            if task.returncode is None:
                try:
                    for child in psutil.Process(task.popen.pid).children(recursive=True):
                        self._descendants[child.pid] = child
                except psutil.Error:
                    pass

    def stop_tasks(self) -> list[str]:
        """SIGTERM workers, then the ps; SIGKILL what is left; returns the killed names."""
        self._remember_descendants()
        began = time.monotonic()
        hurry = lambda: self.signals.repeated  # noqa: E731
        for job in ("worker", "ps"):
            group = [t for t in self.tasks if t.plan.job == job and t.poll() is None]
            for task in group:
                task.popen.send_signal(signal.SIGTERM)
            budget = max(STOP_TIMEOUT_SECS - (time.monotonic() - began),
                         PS_STOP_MIN_SECS if job == "ps" else 0.0)
            wait_until(lambda group=group: all(t.poll() is not None for t in group), budget, hurry)
        killed = []
        for task in self.tasks:
            if task.poll() is None:
                task.popen.kill()
                killed.append(task.plan.name)
        for task in self.tasks:
            try:
                task.returncode = task.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass  # stuck in the kernel; status/stop will still see it
        for child in self._descendants.values():
            if not is_gone(child):
                _quietly(child.kill)  # psutil checks the pid still names this very process
        return killed


def newest_output(log_path: Path) -> list[str]:
    """The lines of a task's log that its newest process wrote: those after the last
    "# <time> launch_cluster: <command>" line, which the supervisor writes at each start."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    starts = [i for i, line in enumerate(lines) if line.startswith("# ") and f" {PROG}: " in line]
    return lines[starts[-1] + 1:] if starts else lines


def task_error(lines: Sequence[str]) -> str | None:
    """The error a task's output tells of: the worker's own one-line error (its prefix cut),
    else the exception of the last Python traceback, else None (e.g. a process killed by a
    signal says nothing)."""
    for line in reversed(lines):
        if line.startswith(WORKER_ERROR_PREFIX):
            return line[len(WORKER_ERROR_PREFIX):].strip()
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent")]
    if tracebacks:
        # The frames are indented; the first line that is not names the exception.
        for line in lines[tracebacks[-1] + 1:]:
            if line.strip() and not line[0].isspace():
                return line.strip()
    return None


# --------------------------------------------------------------------------- summary

def build_summary(plan: LaunchPlan, started: float, outcome: Outcome,
                  tasks: Sequence[RunningTask], restarts: Mapping[str, int],
                  first_training: float | None = None) -> dict:
    summary, totals = summary_fields(plan.logdir, started)
    from a3c_graph.envs import ATARI_FRAME_SKIP, is_atari  # gymnasium is imported by now

    # Emulator frames, the unit Atari results are reported in (4 per agent step on ALE ids).
    frame_skip = ATARI_FRAME_SKIP if is_atari(plan.config.env) else 1
    summary.update({
        "env": plan.config.env,
        "frames": summary["env_steps"] * frame_skip,
        "workers": len(plan.cluster["worker"]),
        "ps": len(plan.cluster["ps"]),
        "target_return": json_number(plan.config.target_return),
        "stop_reason": outcome.stop_reason or (totals.stop_reason if totals else None),
        "logdir": str(plan.logdir),
        "exit_code": outcome.exit_code,
        "task_exit_codes": {t.plan.name: t.returncode for t in tasks},
        "restarts": dict(restarts),
    })
    if first_training is not None and summary["startup_seconds"] is not None:
        summary["startup_seconds"] = round(min(first_training - started,
                                               summary["startup_seconds"]), 1)
    return summary

# --------------------------------------------------------------------------- commands

def run_foreground(plan: LaunchPlan) -> int:
    if plan.private_network:
        enter_private_network(plan)  # LaunchError if refused: nothing written or started yet
    signals = Signals()
    signals.install()  # before any task exists: a signal must never orphan one
    warn_if_remote(plan)
    supervisor = Supervisor(plan, signals)
    outcome = Outcome(EXIT_CRASH, "crash")
    try:
        supervisor.prepare_logdir()
        supervisor.start_tasks()
        print(f"{PROG}: started {len(supervisor.tasks)} task(s) of the {plan.source} "
              f"({len(plan.cluster['ps'])} ps, {len(plan.cluster['worker'])} workers), target "
              f"return {describe_target(plan.config.target_return)}; logs in "
              f"{plan.logdir / 'logs'}", flush=True)
        outcome = supervisor.watch()
    finally:
        # Runs on every path, including a bug in the code above: nothing is left running.
        killed = supervisor.stop_tasks()
    if killed:
        print(f"{PROG}: warning: killed {', '.join(killed)} after {STOP_TIMEOUT_SECS:.0f} s",
              file=sys.stderr, flush=True)
    if outcome.error:
        print(f"{PROG}: error: {outcome.error}", file=sys.stderr, flush=True)
    summary = build_summary(plan, supervisor.started, outcome, supervisor.tasks,
                            supervisor.restarts, supervisor.first_training)
    write_atomic(plan.logdir / "summary.json", json.dumps(summary, sort_keys=True, indent=2) + "\n")
    print(json.dumps(summary, sort_keys=True), flush=True)  # always the last line
    return outcome.exit_code


def start_background(plan: LaunchPlan) -> int:
    """Re-run this launcher detached, with every decision of `plan` spelled out."""
    argv = ["start", "--logdir", str(plan.logdir)]
    if plan.source == LOCAL_SOURCE:
        argv += ["--ps", str(len(plan.cluster["ps"])), "--workers", str(len(plan.workers))]
    if plan.cluster_file:
        argv += ["--cluster", plan.cluster_file]
    if plan.tasks_flag:
        argv += ["--tasks", plan.tasks_flag]
    if plan.allow_remote:
        argv.append("--allow-remote")
    argv.append(f"--max-restarts={plan.max_restarts}")
    if plan.devices is not None:
        argv.append(f"--gpus={plan.devices.request.text}")
        if plan.devices.memory_fraction is not None:
            argv.append(f"--gpu-memory-fraction={plan.devices.memory_fraction!r}")
    argv += config_to_argv(plan.config)
    created = not plan.logdir.exists()
    plan.logdir.mkdir(parents=True, exist_ok=True)
    log_path = plan.logdir / "launcher.log"
    with open(log_path, "ab") as log:
        popen = subprocess.Popen([sys.executable, "-m", LAUNCH_MODULE, *argv],
                                 env={**os.environ, **child_env_overrides(os.environ)},
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    pid_file = pid_dir(plan.logdir) / "launcher.pid"
    # Return once `status` can see the run: its launcher has written its pid file.
    wait_until(lambda: (popen.poll() is not None
                        or read_pid_file(pid_file, plan.logdir).proc is not None),
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
          else f"python -m {LAUNCH_MODULE}")
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
        raise LaunchError("--dry-run and --background do not go together")
    if args.background and args.cluster == cluster_lib.SLURM:
        raise LaunchError("--background does not go with --cluster slurm: Slurm ends a step's "
                          "processes once srun's tasks exit; run the launcher in the foreground")
    plan = plan_start(args, os.environ)
    for note in plan.devices.notes if plan.devices else ():  # e.g. --gpus auto found no GPU
        print(f"{PROG}: note: {note}", file=sys.stderr, flush=True)
    if args.dry_run:
        # A dry run may plan for another machine: what this one lacks is only a warning.
        missing = plan.devices.missing_warning() if plan.devices else None
        for warning in ([missing] if missing else []) + list(plan.dry_run_warnings):
            print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
        warn_if_remote(plan)
        if plan.private_network:  # stdout holds only the commands
            print(f"{PROG}: note: {PRIVATE_NETWORK_LINE.format(verb='would run')}",
                  file=sys.stderr, flush=True)
        for task in plan.tasks:
            print(command_line(task))
        return 0
    if plan.devices is not None:
        try:
            plan.devices.check_visible()
        except devices_lib.DeviceError as error:
            raise LaunchError(str(error)) from None
        if plan.devices.gpus:
            print(f"{PROG}: {plan.devices.summary_line()}", flush=True)
    if args.background:
        warn_if_remote(plan)
        return start_background(plan)
    return run_foreground(plan)


def _find_run(logdir: Path) -> dict[str, PidRecord] | None:
    """The run's pid records by name, or None (with one line on stderr) if there is no run."""
    records = read_pid_files(logdir)
    if "launcher" not in records:
        print(f"{PROG}: no run in {logdir} (no pids/launcher.pid)", file=sys.stderr)
        return None
    return records


def _describe(record: PidRecord) -> str:
    pid = "?" if record.pid is None else str(record.pid)
    return f"{record.name.replace('_', ' '):<10} pid {pid:>7}  {record.state}"


def cmd_status(argv: Sequence[str]) -> int:
    args = build_logdir_parser("status", "Show a run's tasks and progress.").parse_args(argv)
    logdir = Path(os.path.abspath(args.logdir))
    records = _find_run(logdir)
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
        return time.time() - (pid_dir(logdir) / "launcher.pid").stat().st_mtime
    except OSError:
        return 0.0


def cmd_stop(argv: Sequence[str]) -> int:
    args = build_logdir_parser("stop", "Stop a run and every task it started.").parse_args(argv)
    logdir = Path(os.path.abspath(args.logdir))
    records = _find_run(logdir)
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
    descendants = [child for proc in alive.values() for child in _children(proc)]
    if "launcher" in alive:
        _quietly(alive["launcher"].terminate)  # it stops its tasks in order, writes summary.json
    else:
        # Nobody supervises these tasks any more: stop them ourselves, workers first.
        for job in ("worker", "ps"):
            group = [proc for name, proc in alive.items() if name.startswith(job + "_")]
            for proc in group:
                _quietly(proc.terminate)
            wait_until(lambda group=group: all(is_gone(p) for p in group), STOP_TIMEOUT_SECS / 2)
    wait_until(lambda: all(is_gone(p) for p in alive.values()), STOP_COMMAND_TIMEOUT_SECS)
    left = [name for name, proc in alive.items() if not is_gone(proc)]
    for proc in [*alive.values(), *descendants]:
        if not is_gone(proc):
            _quietly(proc.kill)  # psutil checks the pid still names this very process
    if left:
        print(f"{PROG}: warning: killed {', '.join(left)} after {STOP_COMMAND_TIMEOUT_SECS:.0f} s",
              file=sys.stderr)
    print(f"stopped run {logdir}: {', '.join(alive)} gone in {time.monotonic() - began:.1f} s")
    return 0


def _children(proc) -> list:
    import psutil

    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def _quietly(action: Callable[[], object]) -> None:
    import psutil

    try:
        action()
    except psutil.Error:
        pass


COMMANDS = {"start": cmd_start, "status": cmd_status, "stop": cmd_stop}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = "start"
    if argv and not argv[0].startswith("-"):
        command = argv.pop(0)
    try:
        if command not in COMMANDS:
            raise LaunchError(f"unknown command {command!r}; use start, status or stop")
        return COMMANDS[command](argv)
    except LaunchError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C before anything was started
        return SIGNAL_EXIT[signal.SIGINT]


if __name__ == "__main__":
    sys.exit(main())

"""The launch plan: every check and decision `start` makes before it touches the machine.

plan_start turns the command line into a LaunchPlan: the config (its target return resolved
from the env, so every worker agrees), the cluster and which of its tasks start here, the
log dir, each task's exact command and environment, and its device. Every input a user can
get wrong is checked here and refused with a UsageError, one line, before a file is written
or a process started: bad flags, a cluster file or TF_CONFIG that does not parse, a taken
port, a log dir that cannot be written, has no room for a checkpoint or holds another
network's checkpoints or a live run, and a cluster whose memory or threads would not fit
this machine (resources.py: every size flag counts). A dry run prints the plan's commands;
the supervisor runs them.

Where the cluster comes from: a local cluster on 127.0.0.1 with free ports (the default),
a cluster file (--cluster FILE) or TF_CONFIG, of which this launcher starts the tasks on
this machine (or those --tasks names), or a Slurm step (--cluster slurm), of which it
starts the task of its own rank.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import portpicker
import psutil

from a3c_graph.core.config import A3CConfig, config_from_args, config_to_argv, for_workers
from a3c_graph.core.run_spec import RunSpec, resolve_run
from a3c_graph.distributed import cluster as cluster_lib
from a3c_graph.launcher import resources
from a3c_graph.launcher.device_plan import DevicePlan, plan_devices
from a3c_graph.launcher.options import LaunchOptions
from a3c_graph.rundir import run_config
from a3c_graph.system import devices as devices_lib
from a3c_graph.system import processes
from a3c_graph.system.cli import UsageError

PROG = "launch_cluster"
LOCAL_SOURCE = "local cluster"
SLURM_SOURCE = cluster_lib.SLURM_SOURCE
# The repository root, so tasks import this very copy of a3c_graph wherever they run from.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
# Crashes in a row after which the supervisor gives a task up (--max-restarts).
DEFAULT_MAX_RESTARTS = 5


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

    run: RunSpec  # the config with its target return resolved, and the env's facts
    cluster: Mapping[str, list]
    tasks: tuple[TaskPlan, ...]  # ps tasks first: workers connect to them
    logdir: Path
    allow_remote: bool
    source: str  # LOCAL_SOURCE, "cluster file F", "TF_CONFIG cluster" or SLURM_SOURCE
    cluster_file: str | None = None
    tasks_flag: str | None = None
    # Which device each task uses (by CUDA_VISIBLE_DEVICES in its env_overrides).
    devices: DevicePlan | None = None
    max_restarts: int = DEFAULT_MAX_RESTARTS
    # The tasks run in a network namespace with only loopback (see private_network_wanted).
    private_network: bool = False
    # What a dry run warns about and a start refuses: e.g. too little memory on this machine,
    # which need not be the one the commands are for.
    dry_run_warnings: tuple[str, ...] = ()

    @property
    def config(self) -> A3CConfig:
        return self.run.config

    @property
    def workers(self) -> list[TaskPlan]:
        return [t for t in self.tasks if t.job == "worker"]


def plan_start(args: argparse.Namespace, environ: Mapping[str, str]) -> LaunchPlan:
    """Validate every input and decide every command; raises UsageError, starts nothing.
    A dry run turns the checks of this machine's room (memory, threads, disk) into
    warnings: its commands may be meant for another machine."""
    run = _checked_run(args)
    options = LaunchOptions.from_args(args)  # the launcher's own options, as the API's
    cluster, local_keys, source, tf_config = resolve_cluster(options, environ)
    run = dataclasses.replace(run, config=for_workers(run.config, len(cluster["worker"]), args))
    private_network = private_network_wanted(cluster, local_keys, source, options.allow_remote)
    warnings: list[str] = []
    _room_check(args.dry_run, warnings, check_resources, run, cluster, local_keys, source)
    # Local mode picked free ports just now; a cluster file's ports must be checked, on the
    # host network (in a private network, a new namespace, every port is free).
    if source != LOCAL_SOURCE and not private_network:
        for job, index in local_keys:
            try:
                cluster_lib.check_port_free(cluster[job][index])
            except cluster_lib.ClusterError as error:
                raise UsageError(f"{job} task {index}: {error}") from None
    logdir = _run_logdir(options.logdir, run.config.env, source, local_keys, environ)
    check_logdir_writable(logdir)
    _room_check(args.dry_run, warnings, check_logdir_space, logdir, run)
    check_no_live_run(logdir)
    check_logdir_checkpoints(logdir, run)
    keys = sorted(local_keys, key=lambda key: (key[0] != "ps", key[1]))  # ps tasks first
    try:
        # One mechanism per child: CUDA_VISIBLE_DEVICES, set before its TF starts.
        device_plan = plan_devices(keys, options.gpus, options.gpu_memory_fraction,
                                   devices_lib.detect_gpus(environ))
    except devices_lib.DeviceError as error:
        raise UsageError(str(error)) from None
    env_overrides = {"TF_CONFIG": tf_config} if tf_config is not None else {}
    tasks = tuple(
        TaskPlan(job=job, index=index, address=cluster[job][index],
                 argv=tuple(task_argv(job, index, cluster, logdir, run.config, options.allow_remote,
                                      hosts_in_flags=tf_config is None)
                            + list(device_plan.for_task(job, index).flags)),
                 env_overrides={**env_overrides, **device_plan.for_task(job, index).env})
        for job, index in keys)
    return LaunchPlan(run=run, cluster=cluster, tasks=tasks, logdir=logdir,
                      allow_remote=options.allow_remote, source=source,
                      cluster_file=os.path.abspath(options.cluster) if options.cluster else None,
                      tasks_flag=options.tasks, devices=device_plan,
                      max_restarts=options.max_restarts, private_network=private_network,
                      dry_run_warnings=tuple(warnings))


def _checked_run(args: argparse.Namespace) -> RunSpec:
    """The run of the command line's config (core/run_spec.py: the env, the network it
    needs, the target), and the launcher's own numbers checked; UsageError if not."""
    for flag in ("workers", "ps"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag} must be at least 1, got {value}")
    if args.max_restarts < 0:
        raise UsageError(f"--max-restarts must be 0 or more, got {args.max_restarts}")
    try:
        config = config_from_args(args)
        devices_lib.parse_gpus(args.gpus)
        devices_lib.check_memory_fraction(args.gpu_memory_fraction)
        return resolve_run(config)
    except (ValueError, devices_lib.DeviceError) as error:
        raise UsageError(str(error)) from None


def _room_check(dry_run: bool, warnings: list[str], check, *check_args) -> None:
    """check(*check_args); for a dry run, its UsageError is a warning in `warnings`."""
    try:
        check(*check_args)
    except UsageError as error:
        if not dry_run:
            raise
        warnings.append(str(error))


def _run_logdir(given: str | None, env_id: str, source: str,
                local_keys: Sequence[tuple[str, int]], environ: Mapping[str, str]) -> Path:
    if source == SLURM_SOURCE:
        return Path(os.path.abspath(slurm_logdir(given, env_id, local_keys[0], environ)))
    return Path(os.path.abspath(given or default_logdir(env_id)))


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


def resolve_cluster(args: LaunchOptions, environ: Mapping[str, str]
                    ) -> tuple[dict, list[tuple[str, int]], str, str | None]:
    """(cluster, the (job, index) tasks to start here, source, TF_CONFIG text or None) of
    the launcher's options (or the parsed command line, which has the same names)."""
    tf_config = environ.get("TF_CONFIG") if not args.cluster else None
    try:
        cluster_lib.check_slurm_flags(args.cluster, {"--port": args.port})
        if not args.cluster and not tf_config:
            if args.tasks:
                raise UsageError("--tasks needs --cluster FILE or TF_CONFIG")
            return local_cluster(args.ps or 1, args.workers or 2)
        # A Slurm step's source names this launcher's task by its Slurm rank.
        source = cluster_lib.read_cluster_source(args.cluster, tf_config, args.ps, args.port)
        cluster = source.cluster
        cluster_lib.check_loopback(cluster, args.allow_remote)
        for flag, job in (("workers", "worker"), ("ps", "ps")):
            given = getattr(args, flag)
            if given is not None and given != len(cluster[job]):  # a Slurm step: --ps made it
                raise UsageError(f"--{flag} {given} disagrees with the {source.description}, "
                                 f"which has {len(cluster[job])} {job} task(s); drop --{flag}")
        if source.named_job is not None:
            if args.tasks:
                raise UsageError(
                    "--cluster slurm starts the task of this launcher's Slurm rank; drop --tasks"
                    if args.cluster == cluster_lib.SLURM else
                    "TF_CONFIG names its task; drop --tasks (or unset task in TF_CONFIG)")
            index = source.named_task or 0
            cluster_lib.check_task_index(cluster, source.named_job, index,
                                         f"TF_CONFIG task {source.named_job}:{index}")
            keys = [(source.named_job, index)]
        elif args.tasks:
            keys = parse_tasks_flag(args.tasks, cluster)
        else:
            keys = [(job, i) for job in cluster_lib.JOBS for i, address in enumerate(cluster[job])
                    if is_local_host(cluster_lib.split_host_port(address)[0])]
            if not keys:
                raise UsageError(f"no task of the {source.description} is on this machine; "
                                 "name the ones to start here with --tasks worker:0,ps:0")
    except cluster_lib.ClusterError as error:
        raise UsageError(str(error)) from None
    return cluster, keys, source.description, tf_config


def local_cluster(num_ps: int, num_workers: int) -> tuple[dict, list, str, None]:
    """A cluster on 127.0.0.1 with free ports (loopback: no other machine can connect)."""

    ports: list[int] = []
    while len(ports) < num_ps + num_workers:
        try:
            port = portpicker.pick_unused_port()
        except portpicker.NoFreePortFoundError:
            raise UsageError(f"found {len(ports)} free ports on this machine for the "
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
            raise UsageError(f"--tasks entry {part!r} is not of the form worker:I or ps:I")
        index = int(index_text)
        if index >= len(cluster[job]):
            raise UsageError(f"--tasks entry {part!r} is outside the cluster: job {job!r} has "
                              f"{len(cluster[job])} task(s)")
        if (job, index) not in keys:
            keys.append((job, index))
    return keys


def private_network_wanted(cluster: Mapping[str, list], local_keys: Sequence[tuple[str, int]],
                           source: str, allow_remote: bool) -> bool:
    """Whether the tasks started here run in a private network: a namespace with only lo.

    TF's server listens on every interface whatever host the cluster names, so a loopback
    cluster is only loopback for real inside such a namespace (a3c_graph/system/netns.py), and its
    tasks can only meet there if this one launcher starts them all. Tasks of a loopback
    cluster split over several launchers would meet on the host network: UsageError unless
    --allow-remote says that network is trusted. With --allow-remote (or a non-loopback
    cluster, which resolve_cluster already let through only with it) the host network it is.
    """
    if allow_remote or cluster_lib.non_loopback_hosts(cluster):
        return False
    total = sum(len(cluster[job]) for job in cluster_lib.JOBS)
    if len(local_keys) < total:
        raise UsageError(
            f"this launcher would start {len(local_keys)} of the {total} tasks of the {source}, "
            "and tasks split over several launchers meet on the host network, where TF "
            "listens on every interface: start them all with one launcher (its private "
            "network keeps them on loopback), or pass --allow-remote on a trusted network")
    return True


def is_local_host(host: str) -> bool:
    """True for loopback and for any name or address of this machine's interfaces."""
    if cluster_lib.is_loopback(host):
        return True

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
    """The worker command line for one task (its contract: a3c_graph/worker.py)."""
    argv = [sys.executable, "-m", processes.WORKER_MODULE, "--job", job, "--task", str(index)]
    if hosts_in_flags:  # else TF_CONFIG in the task's environment names the cluster
        argv += ["--ps-hosts", ",".join(cluster["ps"]),
                 "--worker-hosts", ",".join(cluster["worker"])]
    argv += ["--logdir", str(logdir)]
    if allow_remote:
        argv.append("--allow-remote")
    return argv + config_to_argv(config, say_envs=True)


def check_logdir_writable(logdir: Path) -> None:
    """UsageError unless `logdir` exists as a writable directory or could be created.

    The deepest directory of `logdir` that exists must take a new directory: one is made
    there and removed at once, as only mkdir itself can tell (permission bits say yes to
    root, and /proc refuses whatever they say), and a refused run leaves nothing behind.
    """
    probe = logdir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"--logdir {logdir} cannot be created: {probe} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".launch_cluster-", dir=probe))
    except OSError as error:
        verb = "written" if probe == logdir else "created"
        raise UsageError(f"--logdir {logdir} cannot be {verb}: no directory can be made in "
                          f"{probe} ({error.strerror or error})") from None
    for sub in ("logs", "pids", "progress", "summary.json"):
        path = logdir / sub
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"--logdir {logdir} cannot be written: {path} is not writable")


def check_no_live_run(logdir: Path) -> None:
    for record in processes.read_pid_files(logdir).values():
        if record.proc is not None:
            raise UsageError(f"a run is still live in {logdir} ({record.name} pid {record.pid}); "
                              f"stop it first: {PROG} stop --logdir {logdir}")


def check_logdir_checkpoints(logdir: Path, run: RunSpec) -> None:
    """UsageError if `logdir` holds checkpoints of a network this run would not build
    (the chief would fail to restore them, or a different run's files would be mixed in)."""
    try:
        run_config.check_logdir_config(str(logdir), run.config, run.info.obs_shape)
    except run_config.CheckpointError as error:
        raise UsageError(str(error)) from None


def check_resources(run: RunSpec, cluster: Mapping[str, list],
                    local_keys: Sequence[tuple[str, int]], source: str) -> None:
    """UsageError when the tasks started here need more memory, or more threads, than this
    machine has (resources.py: every size flag counts in the estimate).

    Compared with what is available now, not the total: what other processes hold is not
    ours to take, and with no swap the kernel makes room by killing a process, maybe
    another user's job.
    """

    jobs = [job for job, _ in local_keys]
    need = resources.estimate(run.config, run.info, jobs.count("ps"), jobs.count("worker"),
                              len(cluster["ps"]))
    problem = (memory_problem(need, psutil.virtual_memory().available, source)
               or resources.thread_problem(need, resources.threads_available(),
                                        source == LOCAL_SOURCE))
    if problem:
        raise UsageError(problem)


def check_logdir_space(logdir: Path, run: RunSpec) -> None:
    """UsageError when the log dir's file system has less room than one checkpoint of this
    network takes (storage.py: a disk that fills up later stops the run cleanly)."""
    probe = logdir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    need = resources.checkpoint_bytes(run.config, run.info)
    free = shutil.disk_usage(probe).free
    if free < need:
        raise UsageError(f"--logdir {logdir} has {resources.describe_bytes(free)} free, less than "
                         f"the {resources.describe_bytes(need)} one checkpoint of this network "
                         "takes: free some space there or give another --logdir")


# How to need less memory, by the part of the estimate that is largest.
MEMORY_ADVICE = {
    "network copies": "use smaller --hidden-sizes, --conv-filters or --lstm-size",
    "rollouts": "use fewer --envs-per-worker, a shorter --rollout-length, a smaller "
                "--queue-capacity or smaller observations (--frame-stack, --screen-size)",
    "envs": "use fewer --envs-per-worker or --actor-threads (or a smaller --frame-stack)",
    "activations": "use smaller --hidden-sizes, --conv-filters or --lstm-size, fewer "
                   "--envs-per-worker, a shorter --rollout-length or smaller observations "
                   "(--frame-stack, --screen-size)",
}


def memory_problem(need: resources.MemoryEstimate, available: int, source: str) -> str | None:
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
    parts = ", ".join(f"{name} {resources.describe_bytes(size)}"
                      for name, size in need.parts().items() if size >= resources.MB)
    return (f"the {need.ps + need.workers} task(s) to start here need at least "
            f"{resources.describe_bytes(need.total)} of memory ({parts}; the network has "
            f"{need.parameters:,} parameters), more than the "
            f"{resources.describe_bytes(available)} this machine has available: {advice}")


def command_line(task: TaskPlan) -> str:
    """The task's command as one copy-pasteable shell line, env assignments first."""
    prefix = [f"{key}={shlex.quote(value)}" for key, value in sorted(task.env_overrides.items())]
    return " ".join([*prefix, shlex.join(task.argv)])

"""Where the tasks are: ClusterSpec sources, and the checks a task's address must pass.

Nothing here knows about A3C. A cluster is a dict {"ps": [host:port, ...],
"worker": [host:port, ...]}; it comes from exactly one of

  * ``--ps-hosts`` / ``--worker-hosts`` (comma-separated host:port lists),
  * ``--cluster FILE.json`` holding that dict (or a TF_CONFIG-style {"cluster": {...}}),
  * the ``TF_CONFIG`` environment variable in the format Kubeflow's TFJob sets:
    {"cluster": {"ps": [...], "worker": [...]}, "task": {"type": "worker", "index": 3}},
  * ``--cluster slurm``: the Slurm job step this task runs in (``srun ...``), named by
    TensorFlow's own SlurmClusterResolver (see cluster_from_slurm).

Every user mistake is raised as ClusterError with one sentence that says what to fix.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from a3c_graph.system import process_env
from a3c_graph.system.cli import first_line

JOBS = ("ps", "worker")
# `--cluster slurm` names the Slurm job step, not a file (a file called slurm: ./slurm).
SLURM = "slurm"
SLURM_DEFAULT_PORT = 2222
SLURM_SOURCE = "Slurm step"
# What SlurmClusterResolver reads (given the jobs, as cluster_from_slurm gives them); srun
# sets them for every task of a job step.
SLURM_STEP_VARS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
                   "SLURM_STEP_TASKS_PER_NODE")


def releases_ps(args) -> bool:
    """Whether a task's workers end the ps (its parsed flags, `args`): under Slurm, where
    nobody stops it (ps_release.py)."""
    return args.cluster == SLURM


class ClusterError(ValueError):
    """A cluster description a run cannot use; the message is shown to the user as is."""


@dataclass(frozen=True)
class TaskSpec:
    """One task of one cluster: the full address book plus who we are in it."""

    cluster: Mapping[str, list]
    job: str
    task: int

    @property
    def address(self) -> str:
        return self.cluster[self.job][self.task]

    @property
    def is_chief(self) -> bool:
        return self.job == "worker" and self.task == 0

    @property
    def num_ps(self) -> int:
        return len(self.cluster["ps"])

    @property
    def num_workers(self) -> int:
        return len(self.cluster["worker"])


def split_host_port(address: str) -> tuple[str, int]:
    """("host", port) of "host:port" or "[v6]:port"; ClusterError if it is not one."""
    if not isinstance(address, str) or ":" not in address:
        raise ClusterError(f"address {address!r} is not of the form host:port")
    host, _, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ClusterError(f"address {address!r} has no host")
    try:
        port = int(port_text)
    except ValueError:
        raise ClusterError(f"address {address!r} has a port that is not a number") from None
    if not 1 <= port <= 65535:
        raise ClusterError(f"address {address!r} has port {port}, outside 1-65535")
    return host, port


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (addresses no other machine can reach)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_host_list(text: str, flag: str) -> list[str]:
    hosts = [part.strip() for part in text.split(",") if part.strip()]
    if not hosts:
        raise ClusterError(f"{flag} is empty; give host:port[,host:port...]")
    for host in hosts:
        split_host_port(host)
    return hosts


def validate_cluster(cluster: object, source: str) -> dict:
    """The cluster as a clean {"ps": [...], "worker": [...]}; ClusterError names `source`."""
    if not isinstance(cluster, dict):
        raise ClusterError(f"{source}: the cluster must be a JSON object with "
                           "'ps' and 'worker' lists")
    unknown = sorted(set(cluster) - set(JOBS))
    if unknown:
        raise ClusterError(f"{source}: unknown job {unknown[0]!r}; jobs are 'ps' and 'worker'")
    clean: dict = {}
    for job in JOBS:
        hosts = cluster.get(job)
        if not isinstance(hosts, list) or not hosts:
            raise ClusterError(f"{source}: needs a non-empty list of host:port for {job!r}")
        for host in hosts:
            try:
                split_host_port(host)
            except ClusterError as error:
                raise ClusterError(f"{source}: {job}: {error}") from None
        clean[job] = list(hosts)
    addresses = clean["ps"] + clean["worker"]
    seen: set = set()
    for address in addresses:
        if address in seen:
            raise ClusterError(f"{source}: address {address} is given to two tasks")
        seen.add(address)
    return clean


def cluster_from_flags(ps_hosts: str, worker_hosts: str) -> dict:
    cluster = {"ps": parse_host_list(ps_hosts, "--ps-hosts"),
               "worker": parse_host_list(worker_hosts, "--worker-hosts")}
    return validate_cluster(cluster, "--ps-hosts/--worker-hosts")


def cluster_from_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ClusterError(f"cluster file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ClusterError(f"cluster file {path} cannot be read: {error}") from None
    except json.JSONDecodeError as error:
        raise ClusterError(f"cluster file {path} is not valid JSON: {error.msg} "
                           f"(line {error.lineno}, column {error.colno})") from None
    if isinstance(data, dict) and "cluster" in data:
        data = data["cluster"]
    return validate_cluster(data, f"cluster file {path}")


def cluster_from_tf_config(text: str) -> tuple[dict, str | None, int | None]:
    """(cluster, task type or None, task index or None) from TF_CONFIG's JSON text."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ClusterError(f"TF_CONFIG is not valid JSON: {error.msg}") from None
    if not isinstance(data, dict) or "cluster" not in data:
        raise ClusterError("TF_CONFIG has no 'cluster' entry")
    cluster = validate_cluster(data["cluster"], "TF_CONFIG")
    task = data.get("task") or {}
    if not isinstance(task, dict):
        raise ClusterError("TF_CONFIG 'task' must be an object with 'type' and 'index'")
    job = task.get("type")
    index = task.get("index")
    if job is not None and job not in JOBS:
        raise ClusterError(f"TF_CONFIG task type {job!r} is not 'ps' or 'worker'")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
        raise ClusterError(f"TF_CONFIG task index {index!r} is not an integer")
    return cluster, job, index


def cluster_from_slurm(num_ps: int | None = None, port: int | None = None
                       ) -> tuple[dict, str, int]:
    """(cluster, this task's job, its index) of the Slurm job step this process is a task of.

    TensorFlow's SlurmClusterResolver does the work, from the variables srun sets for every
    task (SLURM_STEP_VARS; read from os.environ, as the resolver reads them): it lists the
    step's nodes in name order, gives the tasks on one node the ports `port`, `port`+1, ...,
    and deals the tasks out to the jobs in name order, so the first `num_ps` (default 1) are
    the ps and the rest the workers; SLURM_PROCID, this task's rank, picks its job and index.
    Every task of the step gets the same cluster. Under srun's block distribution, on nodes
    whose names sort in Slurm's order, that is where Slurm starts each task; SLURMD_NODENAME
    and SLURM_LOCALID check it.

    What a user can get wrong (no job step, too few tasks for `num_ps`) is checked before
    TF, slow to import, is imported: only this source needs it.
    """
    num_ps = 1 if num_ps is None else num_ps
    port = SLURM_DEFAULT_PORT if port is None else port
    total, rank = _checked_slurm_step(num_ps, port)
    tf = process_env.import_tensorflow_quietly()
    try:
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs={"ps": num_ps, "worker": total - num_ps}, port_base=port,
            # The resolver pairs each task on a node with a slice of that node's GPUs and
            # lists no more tasks on a node than it has slices (it asks nvidia-smi when not
            # told). GPUs are placed here by --gpu and CUDA_VISIBLE_DEVICES (devices.py):
            # every task gets a nominal slice of one, and CUDA_VISIBLE_DEVICES is left alone.
            gpus_per_node=total, gpus_per_task=1, auto_set_gpu=False)
        cluster = resolver.cluster_spec().as_dict()
    except (RuntimeError, ValueError) as error:  # e.g. a step's variables that disagree
        raise ClusterError(f"--cluster slurm: {first_line(error)}") from None
    job, index = resolver.get_task_info()
    cluster = validate_cluster(cluster, "--cluster slurm")
    address = cluster[job][index]
    host, task_port = split_host_port(address)
    node, local_id = os.environ.get("SLURMD_NODENAME"), os.environ.get("SLURM_LOCALID", "")
    if node and (host != node or (local_id.isdigit() and task_port != port + int(local_id))):
        raise ClusterError(
            f"--cluster slurm: TF's SlurmClusterResolver puts task {rank} at {address}, but "
            f"Slurm started it on {node} (local task {local_id or '?'}): the resolver assumes "
            "srun's block distribution over nodes taken in name order, so use "
            "--distribution=block and nodes whose names sort in Slurm's order (zero-padded)")
    return cluster, job, index


def _checked_slurm_step(num_ps: int, port: int) -> tuple[int, int]:
    """(tasks in the step, this task's rank), once --ps, --port and srun's variables are
    known to make a step with a worker; ClusterError (one line) if not."""
    if num_ps < 1:
        raise ClusterError(f"--ps must be at least 1, got {num_ps}")
    if not 1 <= port <= 65535:
        raise ClusterError(f"--port {port} is outside 1-65535")
    missing = [name for name in SLURM_STEP_VARS if not os.environ.get(name)]
    if missing and not any(name.startswith("SLURM_") for name in os.environ):
        raise ClusterError("--cluster slurm: no Slurm job here (no SLURM_ variables); start "
                           "the tasks with srun inside an allocation (sbatch or salloc)")
    if missing:
        raise ClusterError(f"--cluster slurm: {missing[0]} is not set, so this process is not "
                           "a task of a Slurm job step; start the tasks with srun")
    total, rank = _slurm_int("SLURM_STEP_NUM_TASKS"), _slurm_int("SLURM_PROCID")
    if not 0 <= rank < total:
        raise ClusterError(f"--cluster slurm: SLURM_PROCID {rank} is outside the step's "
                           f"{total} task(s); start the tasks with srun")
    if num_ps >= total:
        raise ClusterError(f"--ps {num_ps} leaves no worker in a Slurm step of {total} "
                           "task(s); give srun more tasks (--ntasks) or pass a smaller --ps")
    return total, rank


def _slurm_int(name: str) -> int:
    text = os.environ[name].strip()
    if not text.isdigit():
        raise ClusterError(f"--cluster slurm: {name}={text!r} is not a number; start the "
                           "tasks with srun")
    return int(text)


class ClusterSource(NamedTuple):
    """A cluster read from where the user put it, and the task that source names for this
    process (the Slurm rank, TF_CONFIG's task), if it names one."""

    cluster: dict
    named_job: str | None
    named_task: int | None
    description: str  # "cluster file F", "TF_CONFIG cluster", SLURM_SOURCE


def check_slurm_flags(cluster_file: str | None, flags: Mapping[str, object]) -> None:
    """ClusterError when a flag that means something for a Slurm step only (`flags`: its
    name and value, None if not given) is given without --cluster slurm."""
    if cluster_file != SLURM and any(value is not None for value in flags.values()):
        raise ClusterError(f"{' and '.join(flags)} go{'es' if len(flags) == 1 else ''} with "
                           "--cluster slurm; the other cluster sources list every task's "
                           "address")


def read_cluster_source(cluster_file: str | None, tf_config: str | None,
                        num_ps: int | None = None, port: int | None = None
                        ) -> ClusterSource | None:
    """The cluster of --cluster FILE, of the Slurm step (--cluster slurm, with --ps and
    --port) or of TF_CONFIG, in that order; None when none is given. The worker task and
    the launcher read their cluster here alike."""
    if cluster_file == SLURM:
        cluster, job, index = cluster_from_slurm(num_ps, port)
        return ClusterSource(cluster, job, index, SLURM_SOURCE)
    if cluster_file:
        return ClusterSource(cluster_from_file(cluster_file), None, None,
                             f"cluster file {cluster_file}")
    if tf_config:
        return ClusterSource(*cluster_from_tf_config(tf_config), "TF_CONFIG cluster")
    return None


def check_task_index(cluster: Mapping[str, list], job: str, index: int, named_by: str) -> None:
    """ClusterError unless `job` has a task `index` (`named_by`: what named it, e.g.
    "--task 5")."""
    if not 0 <= index < len(cluster[job]):
        raise ClusterError(f"{named_by} is outside the cluster: job {job!r} has "
                           f"{len(cluster[job])} task(s), indices 0-{len(cluster[job]) - 1}")


def resolve_task(ps_hosts: str | None, worker_hosts: str | None, cluster_file: str | None,
                 job: str | None, task: int | None,
                 environ: Mapping[str, str] = os.environ, *, num_ps: int | None = None,
                 port: int | None = None) -> TaskSpec:
    """The TaskSpec named by the flags, a cluster file, the Slurm step (cluster_file "slurm")
    or TF_CONFIG, in that order. num_ps and port (--ps, --port) are for the Slurm step only,
    whose variables come from os.environ, where TF's resolver reads them, not `environ`."""
    check_slurm_flags(cluster_file, {"--ps": num_ps, "--port": port})
    if ps_hosts or worker_hosts:
        if cluster_file:
            raise ClusterError("give either --ps-hosts/--worker-hosts or --cluster, not both")
        if not (ps_hosts and worker_hosts):
            raise ClusterError("--ps-hosts and --worker-hosts go together")
        source = ClusterSource(cluster_from_flags(ps_hosts, worker_hosts), None, None,
                               "--ps-hosts/--worker-hosts")
    else:
        if cluster_file == SLURM and (job is not None or task is not None):
            raise ClusterError("--cluster slurm gives every task its job and index by its "
                               "Slurm rank (SLURM_PROCID); drop --job and --task")
        source = read_cluster_source(cluster_file, environ.get("TF_CONFIG"), num_ps, port)
        if source is None:
            raise ClusterError("no cluster given: use --ps-hosts/--worker-hosts, --cluster "
                               "FILE, --cluster slurm or the TF_CONFIG environment variable")
    job = job or source.named_job
    task = task if task is not None else source.named_task
    if job is None:
        raise ClusterError("no job given: use --job ps|worker (or TF_CONFIG's task.type)")
    if job not in JOBS:
        raise ClusterError(f"--job {job!r} is not 'ps' or 'worker'")
    task = task or 0
    check_task_index(source.cluster, job, task, f"--task {task}")
    return TaskSpec(cluster=source.cluster, job=job, task=task)


def non_loopback_hosts(cluster: Mapping[str, list]) -> list[str]:
    return [a for job in JOBS for a in cluster[job] if not is_loopback(split_host_port(a)[0])]


def check_loopback(cluster: Mapping[str, list], allow_remote: bool) -> None:
    """ClusterError unless every address of `cluster` is loopback or `allow_remote` (the
    user's --allow-remote) says the network between them is trusted: the launcher and a task
    started by hand refuse a remote cluster alike."""
    remote = non_loopback_hosts(cluster)
    if remote and not allow_remote:
        raise ClusterError(f"{remote[0]} is not a loopback address; the TF server is "
                           "unauthenticated gRPC, so pass --allow-remote only if the network "
                           "is trusted")


def check_port_free(address: str) -> None:
    """ClusterError if this task's port is taken.

    TF's gRPC server listens on the port of every interface (it binds 0.0.0.0 / [::],
    whatever host the cluster names), so the wildcard address is what we probe; where the
    port is taken, TF itself would say only "Could not start gRPC server".
    """
    _, port = split_host_port(address)
    for family, wildcard in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this machine
        try:
            # As gRPC does: connections of a task that just died (TIME_WAIT) do not block a
            # restart on its port, a live listener still does.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((wildcard, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                reason = "already in use" if error.errno == errno.EADDRINUSE else "not allowed"
                raise ClusterError(f"port {port} for {address} is {reason}") from None
            if error.errno != errno.EADDRNOTAVAIL:
                raise
        finally:
            probe.close()

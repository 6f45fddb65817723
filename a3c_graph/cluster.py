"""Where the tasks are and how they talk: ClusterSpec sources, servers, session configs.

Nothing here knows about A3C. A cluster is a dict {"ps": [host:port, ...],
"worker": [host:port, ...]}; it comes from exactly one of

  * ``--ps-hosts`` / ``--worker-hosts`` (comma-separated host:port lists),
  * ``--cluster FILE.json`` holding that dict (or a TF_CONFIG-style {"cluster": {...}}),
  * the ``TF_CONFIG`` environment variable in the format Kubeflow's TFJob sets:
    {"cluster": {"ps": [...], "worker": [...]}, "task": {"type": "worker", "index": 3}}.

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

JOBS = ("ps", "worker")


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


def resolve_task(ps_hosts: str | None, worker_hosts: str | None, cluster_file: str | None,
                 job: str | None, task: int | None,
                 environ: Mapping[str, str] = os.environ) -> TaskSpec:
    """The TaskSpec named by the flags, a cluster file, or TF_CONFIG (in that order)."""
    tf_job = tf_task = None
    if ps_hosts or worker_hosts:
        if cluster_file:
            raise ClusterError("give either --ps-hosts/--worker-hosts or --cluster, not both")
        if not (ps_hosts and worker_hosts):
            raise ClusterError("--ps-hosts and --worker-hosts go together")
        cluster = cluster_from_flags(ps_hosts, worker_hosts)
    elif cluster_file:
        cluster = cluster_from_file(cluster_file)
    elif environ.get("TF_CONFIG"):
        cluster, tf_job, tf_task = cluster_from_tf_config(environ["TF_CONFIG"])
    else:
        raise ClusterError("no cluster given: use --ps-hosts/--worker-hosts, --cluster FILE "
                           "or the TF_CONFIG environment variable")
    job = job or tf_job
    task = task if task is not None else tf_task
    if job is None:
        raise ClusterError("no job given: use --job ps|worker (or TF_CONFIG's task.type)")
    if job not in JOBS:
        raise ClusterError(f"--job {job!r} is not 'ps' or 'worker'")
    if task is None:
        task = 0
    if not 0 <= task < len(cluster[job]):
        raise ClusterError(f"--task {task} is outside the cluster: job {job!r} has "
                           f"{len(cluster[job])} task(s), indices 0-{len(cluster[job]) - 1}")
    return TaskSpec(cluster=cluster, job=job, task=task)


def non_loopback_hosts(cluster: Mapping[str, list]) -> list[str]:
    return [a for job in JOBS for a in cluster[job] if not is_loopback(split_host_port(a)[0])]


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


def session_config(spec: TaskSpec, intra_op_threads: int = 1, inter_op_threads: int = 2,
                   visible_device_list: str = ""):
    """The ConfigProto of this task's server and sessions.

    device_filters keep a worker talking to the ps and to itself only, so a dead worker
    never blocks the others (without them a session waits for every task in the cluster).
    """
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra_op_threads,
        inter_op_parallelism_threads=inter_op_threads,
    )
    config.gpu_options.allow_growth = True
    config.gpu_options.visible_device_list = visible_device_list
    if spec.job == "worker":
        config.device_filters.extend(["/job:ps", f"/job:worker/task:{spec.task}"])
    else:
        config.device_filters.append("/job:ps")
    return config


def start_server(spec: TaskSpec, config):
    """A started tf.compat.v1.train.Server for this task."""
    import tensorflow as tf

    check_port_free(spec.address)
    cluster = tf.compat.v1.train.ClusterSpec(dict(spec.cluster))
    try:
        return tf.compat.v1.train.Server(cluster, job_name=spec.job, task_index=spec.task,
                                         config=config, start=True)
    except tf.errors.UnknownError as error:
        # Lost a race for the port after the check above, or the host cannot be bound.
        raise ClusterError(f"cannot start the TF server for {spec.job} task {spec.task} "
                           f"at {spec.address}: {error.message}") from None

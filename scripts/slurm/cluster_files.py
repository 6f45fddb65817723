"""The files of the local Slurm (scripts/slurm/local_cluster.py): its state, slurm.conf,
slurmdbd.conf and the hosts file, every path under the cluster's one directory.

Pure: nothing here starts or changes anything; a test reads what the cluster would be given.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.ps_capacity.netlab import Lab

LOGIN = "ctl"
NODES = ("node1", "node2")
# Each node offers 4 CPUs whatever the machine has (config_overrides): the example's
# allocation, 2 tasks x 2 CPUs per node, fits as it would on a real cluster.
CPUS_PER_NODE = 4
CLUSTER_NAME = "a3clocal"
PARTITION = "main"
# Slurm's job credentials' lifetime, which is also how long a requeued job waits before it
# may start again (default 120 s).
CRED_EXPIRE_SECS = 20
MARKER = "state.json"


class ClusterError(Exception):
    """What went wrong, in one line for the user."""


@dataclass
class Daemon:
    name: str
    host: str
    pid: int
    started: float  # the process's create time: a reused pid is not ours


@dataclass
class State:
    mode: str  # "namespaces" or "single"
    login: str  # the hostname of the host of slurmctld, where `run` runs client commands
    nodes: list[str]
    addresses: dict[str, str]  # hostname -> address
    ports: dict[str, int]
    lab: dict | None = None  # netlab.Lab's names, suffix, prefix, namespaces
    daemons: list[Daemon] = field(default_factory=list)

    def save(self, root: Path) -> None:
        tmp = root / f".{MARKER}.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
        os.replace(tmp, root / MARKER)

    @classmethod
    def load(cls, root: Path) -> State:
        try:
            data = json.loads((root / MARKER).read_text(encoding="utf-8"))
            data["daemons"] = [Daemon(**d) for d in data["daemons"]]
            return cls(**data)
        except FileNotFoundError:
            raise ClusterError(f"no local Slurm cluster in {root} (start one first)") from None
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise ClusterError(f"{root / MARKER} is unreadable: {error}") from None

    def rebuilt_lab(self) -> Lab | None:
        return Lab(**self.lab) if self.lab else None


def slurm_conf(root: Path, state: State) -> str:
    """slurm.conf: every path under `root`, plugins that need no cgroups or systemd."""
    ctl = state.addresses[state.login]
    lines = [
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={state.login}({ctl})",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        # cred_expire: also how long a requeued job waits before it may start again
        # (default 120 s).
        f"AuthInfo=socket={root}/munge/munge.socket,cred_expire={CRED_EXPIRE_SECS}",
        f"SlurmctldPort={state.ports['slurmctld']}", f"SlurmdPort={state.ports['slurmd']}",
        f"StateSaveLocation={root}/ctld", f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/run/slurmctld.pid", f"SlurmdPidFile={root}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/linux", "JobAcctGatherFrequency=30",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides", "ReturnToService=2",
        "MpiDefault=none", "SwitchType=switch/none", "SchedulerType=sched/backfill",
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={ctl}", f"AccountingStoragePort={state.ports['slurmdbd']}",
        # What connections to slurmdbd take for munge's socket (AuthInfo's is not used).
        f"AccountingStoragePass={root}/munge/munge.socket",
        "JobCompType=jobcomp/none",
        # KillWait: SIGTERM, then SIGKILL this long after (Slurm's default).
        "KillWait=30", "MinJobAge=600", "InactiveLimit=0",
        "SlurmctldTimeout=30", "SlurmdTimeout=60",
    ]
    for node in state.nodes:
        lines.append(f"NodeName={node} NodeAddr={state.addresses[node]} "
                     f"CPUs={CPUS_PER_NODE} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(state.nodes)} Default=YES "
                 "MaxTime=INFINITE State=UP")
    return "\n".join(line for line in lines if line) + "\n"


def slurmdbd_conf(root: Path, state: State) -> str:
    return "\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={root}/munge/munge.socket",
        f"DbdHost={state.login}", f"DbdAddr={state.addresses[state.login]}",
        f"DbdPort={state.ports['slurmdbd']}",
        "SlurmUser=root", f"PidFile={root}/run/slurmdbd.pid",
        f"LogFile={root}/log/slurmdbd.log",
        "StorageType=accounting_storage/mysql", "StorageHost=localhost",
        "StorageUser=root", "StorageLoc=slurm_acct_db", ""])


def hosts_file(state: State) -> str:
    lines = ["127.0.0.1 localhost"]
    lines += [f"{address} {name}" for name, address in state.addresses.items()]
    return "\n".join(lines) + "\n"



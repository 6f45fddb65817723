"""A real Slurm on one machine: munge, slurmctld with accounting, and two slurmd nodes.

    scripts/slurm/local_cluster.sh start [--dir DIR] [--nodes 1|2]
    scripts/slurm/local_cluster.sh run sbatch scripts/slurm/a3c.sbatch    (any client command)
    scripts/slurm/local_cluster.sh status | stop

Why: what breaks on Slurm (srun's task layout, the nodes' names and addresses, signals at
the time limit, scancel, requeue) cannot be seen with SLURM_* variables set by hand. So the
daemons are Debian's (slurm-wlm 22.05, munge), installed here with apt-get when missing.

Hosts: with two nodes each node is a host of its own, as on a real cluster: a network
namespace with one link to a private bridge (benchmarks/ps_capacity/netlab.py, the project's network
lab) and a UTS namespace with its own hostname (node1, node2), so a job spans two hosts with
two addresses and its tasks are reachable on that bridge only. A third host, ctl, runs
munged, slurmctld, slurmdbd and MariaDB (slurmdbd's database: in Slurm 22.05 sacct reads
jobs from slurmdbd alone) and is the login node: `run` executes a client command there, as
one would after ssh to a login node. Names resolve through a hosts file bind-mounted over
/etc/hosts in each host's own mount namespace. Where namespaces cannot be made (or with
--nodes 1), one node runs on this machine's own network, named by its hostname.

Everything lives under one directory (--dir): configs, keys, logs, spool, the database and
state.json, which names every daemon's pid and every namespace; `stop` cancels the jobs,
ends every process in the cluster's namespaces (daemons, slurmstepd and the jobs' tasks),
deletes the namespaces (and with them the links and the bridge) and removes the directory.
Needs root: apt-get, namespaces, and Slurm's daemons run as root here.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

from cluster_files import (  # noqa: E402
    LOGIN,
    MARKER,
    NODES,
    ClusterError,
    Daemon,
    State,
    hosts_file,
    slurm_conf,
    slurmdbd_conf,
)

from benchmarks.ps_capacity.netlab import Lab, NetworkError  # noqa: E402

PROG = "local_cluster"
DEFAULT_DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"), "a3c_graph-slurm")
PREFIX = "a3cslurm"  # of the namespaces: a leftover says whose it is
PACKAGES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
            "munged": "munge", "slurmdbd": "slurmdbd", "mariadbd": "mariadb-server-core",
            "my_print_defaults": "mariadb-client-core"}  # mariadb-install-db runs it
START_TIMEOUT_SECS = 40.0
STOP_GRACE_SECS = 10.0


# --------------------------------------------------------------------------- install

def missing_packages() -> list[str]:
    return sorted({pkg for binary, pkg in PACKAGES.items() if not shutil.which(binary)
                   and not os.path.exists(f"/usr/sbin/{binary}")})


def install() -> None:
    """apt-get the missing packages, niced: the daemons are Debian's, not the project's."""
    missing = missing_packages()
    if not missing:
        return
    if not shutil.which("apt-get"):
        raise ClusterError(f"missing {', '.join(missing)} and no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["nice", "-n", "19", "apt-get"]
    print(f"{PROG}: installing {' '.join(missing)} (apt-get)", flush=True)
    # An empty package list (a new machine) knows no candidate: update it once first.
    policy = subprocess.run(["apt-cache", "policy", missing[0]], capture_output=True, text=True)
    if "Candidate: (none)" in policy.stdout or not policy.stdout.strip():
        subprocess.run([*apt, "update", "-qq"], env=env, capture_output=True)
    result = subprocess.run([*apt, "install", "-y", "-qq", "--no-install-recommends", *missing],
                            env=env, capture_output=True, text=True)
    if result.returncode != 0 or missing_packages():
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClusterError(f"apt-get install {' '.join(missing)} failed: {tail}")


# --------------------------------------------------------------------------- processes

def host_argv(state: State, root: Path, host: str, argv: list[str]) -> list[str]:
    """`argv` as run on `host`: in its network namespace, under its own hostname (a UTS
    namespace), with the cluster's hosts file as /etc/hosts. Each step execs the next, so
    the pid the caller gets is argv's own."""
    if state.mode == "single":
        return list(argv)
    # nsenter rather than `ip netns exec`, which remounts /sys and so hides the cgroup
    # hierarchies slurmd's cgroup plugin needs; a mount namespace of its own for the hosts
    # file.
    script = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
    namespace = state.rebuilt_lab().namespace_of(host)
    return ["nsenter", f"--net=/run/netns/{namespace}", "--", "unshare", "--uts", "--mount",
            "--", "sh", "-c", script, "sh", host, str(root / "etc" / "hosts"), *argv]


def login_argv(state: State, argv: list[str], cwd: str | None = None) -> list[str]:
    """`argv` as run on the login host: in the namespaces of its first daemon (munged)."""
    if state.mode == "single":
        return list(argv)
    first = next(d for d in state.daemons if d.host == state.login)
    return ["nsenter", "-t", str(first.pid), "--net", "--uts", "--mount",
            f"--wd={cwd or os.getcwd()}", "--", *argv]


def client_env(root: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(root / "etc" / "slurm.conf")}


def login_run(state: State, root: Path, argv: list[str], timeout: float = 20.0
              ) -> subprocess.CompletedProcess:
    return subprocess.run(login_argv(state, argv, str(root)), capture_output=True, text=True,
                          env=client_env(root), timeout=timeout)


def alive(daemon: Daemon) -> bool:
    import psutil

    try:
        proc = psutil.Process(daemon.pid)
        return (abs(proc.create_time() - daemon.started) < 0.05
                and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def start_daemon(state: State, root: Path, name: str, host: str, argv: list[str],
                 env: dict[str, str] | None = None) -> Daemon:
    import psutil

    with open(root / "log" / f"{name}.out", "ab") as out:
        proc = subprocess.Popen(host_argv(state, root, host, argv), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**client_env(root), **(env or {})}, cwd=root)
    daemon = Daemon(name, host, proc.pid, psutil.Process(proc.pid).create_time())
    state.daemons.append(daemon)
    state.save(root)
    return daemon


def wait_for(what: str, ready, root: Path, daemons: list[Daemon],
             timeout: float = START_TIMEOUT_SECS) -> None:
    """Poll `ready()` until true; ClusterError if a daemon of `daemons` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while not ready():
        for daemon in daemons:
            if not alive(daemon):
                raise ClusterError(f"{daemon.name} on {daemon.host} exited while starting: "
                                   f"{last_line(root, daemon.name)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{what} not ready after {timeout:.0f} s; its log: "
                               f"{last_line(root, daemons[0].name)}")
        time.sleep(0.2)


def last_line(root: Path, name: str) -> str:
    """What a daemon's log says went wrong: its first error line, else its last line."""
    for path in (root / "log" / f"{name}.log", root / "log" / f"{name}.out"):
        try:
            lines = [line.strip() for line in path.read_text(errors="replace").splitlines()
                     if line.strip()]
        except OSError:
            continue
        if lines:
            return next((line for line in lines if "error" in line.lower()
                         or "fatal" in line.lower()), lines[-1])
    return "no output"


def unix_socket_accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
            return True
        except OSError:
            return False


# --------------------------------------------------------------------------- start

def layout(nodes: int) -> tuple[State, Lab | None]:
    """The hosts: namespaces on a bridge, or (nodes 1, or no namespaces) this machine."""
    if nodes == 2:
        lab = Lab([LOGIN, *NODES], suffix=secrets.token_hex(3), prefix=PREFIX)
        try:
            lab.build()
        except NetworkError as error:
            lab.destroy()
            print(f"{PROG}: warning: no network namespaces here ({error}); "
                  "one node on this machine's network instead", file=sys.stderr, flush=True)
        else:
            addresses = {name: lab.hosts[name].address for name in lab.names}
            state = State("namespaces", LOGIN, list(NODES), addresses,
                          {"slurmctld": 6817, "slurmd": 6818, "slurmdbd": 6819},
                          lab={"names": lab.names, "suffix": lab.suffix, "prefix": lab.prefix,
                               "namespaces": lab.namespaces})
            return state, lab
    import portpicker

    name = socket.gethostname().split(".")[0]
    ports = {key: portpicker.pick_unused_port() for key in ("slurmctld", "slurmd", "slurmdbd")}
    return State("single", name, [name], {name: "127.0.0.1"}, ports), None


def start(root: Path, nodes: int) -> State:
    if os.geteuid() != 0:
        raise ClusterError("needs root (apt-get, network namespaces, Slurm's daemons)")
    if (root / MARKER).exists():
        raise ClusterError(f"a local Slurm cluster is already in {root}: stop it first")
    if root.exists() and any(root.iterdir()):
        raise ClusterError(f"{root} exists and is not empty; give --dir a new directory")
    install()
    began = time.monotonic()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    state, _ = layout(nodes)
    state.save(root)
    try:
        start_daemons(root, state)
    except BaseException as error:
        teardown(root, state, cancel=False)
        if isinstance(error, ClusterError | NetworkError | subprocess.SubprocessError):
            raise ClusterError(str(error)) from None
        raise
    print(f"{PROG}: started in {time.monotonic() - began:.1f} s: {describe(state)}", flush=True)
    return state


def start_daemons(root: Path, state: State) -> None:
    for sub in ("etc", "munge", "ctld", "spool", "run", "log", "db",
                *(f"spool/{node}" for node in state.nodes)):
        (root / sub).mkdir(mode=0o700, exist_ok=True)
    (root / "etc" / "hosts").write_text(hosts_file(state))
    (root / "etc" / "slurm.conf").write_text(slurm_conf(root, state))
    dbd_conf = root / "etc" / "slurmdbd.conf"  # slurmdbd wants it private
    dbd_conf.write_text(slurmdbd_conf(root, state))
    dbd_conf.chmod(0o600)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = root / "munge" / "munge.socket"
    login = state.login

    munged = start_daemon(state, root, "munged", login, [
        "munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
        f"--pid-file={root}/run/munged.pid", f"--log-file={root}/log/munged.log",
        f"--seed-file={root}/munge/munged.seed"])
    wait_for("munged", lambda: unix_socket_accepts(sock), root, [munged])

    db_sock = root / "db" / "mysqld.sock"
    init = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={root}/db/data",
                           "--user=root", "--auth-root-authentication-method=socket",
                           "--skip-test-db"], capture_output=True, text=True, timeout=120)
    if init.returncode != 0:
        lines = (init.stderr + init.stdout).strip().splitlines()
        raise ClusterError("mariadb-install-db failed: "
                           + next((line for line in lines if "ERROR" in line), "no output"))
    mariadbd = start_daemon(state, root, "mariadbd", login, [
        "mariadbd", "--no-defaults", f"--datadir={root}/db/data", f"--socket={db_sock}",
        f"--pid-file={root}/run/mariadbd.pid", f"--log-error={root}/log/mariadbd.log",
        "--user=root", "--skip-networking", "--innodb-buffer-pool-size=32M"])
    wait_for("MariaDB", lambda: unix_socket_accepts(db_sock), root, [mariadbd])

    # slurmdbd reaches MariaDB on its socket: the client library reads MYSQL_UNIX_PORT.
    slurmdbd = start_daemon(state, root, "slurmdbd", login, ["slurmdbd", "-D"],
                            env={"MYSQL_UNIX_PORT": str(db_sock)})
    wait_for("slurmdbd", lambda: login_run(state, root, ["sacctmgr", "-n", "list", "cluster"]
                                           ).returncode == 0, root, [slurmdbd, mariadbd])

    conf = str(root / "etc" / "slurm.conf")
    slurmctld = start_daemon(state, root, "slurmctld", login, ["slurmctld", "-D", "-i", "-f", conf])
    wait_for("slurmctld", lambda: "UP" in login_run(state, root, ["scontrol", "ping"]).stdout,
             root, [slurmctld])
    slurmds = [start_daemon(state, root, f"slurmd-{node}", node,
                            ["slurmd", "-D", "-f", conf, "-N", node]) for node in state.nodes]

    def idle() -> bool:
        out = login_run(state, root, ["sinfo", "-h", "-N", "-o", "%N %t"]).stdout.split()
        return out.count("idle") == len(state.nodes)

    wait_for("the slurmd nodes", idle, root, [slurmctld, *slurmds])


def describe(state: State) -> str:
    if state.mode == "single":
        return (f"1 node ({state.nodes[0]}, on this machine's network); "
                f"slurmctld on port {state.ports['slurmctld']}")
    hosts = ", ".join(f"{n} {state.addresses[n]}" for n in state.nodes)
    return (f"{len(state.nodes)} nodes ({hosts}) and the login host {state.login} "
            f"{state.addresses[state.login]} on a private bridge")


# --------------------------------------------------------------------------- stop, status

def cluster_pids(state: State) -> set[int]:
    """Every process of the cluster: in its namespaces (daemons, slurmstepd, the jobs'
    tasks, shells of `run`), and its daemons by their recorded pids."""
    pids = {d.pid for d in state.daemons if alive(d)}
    lab = state.rebuilt_lab()
    for namespace in lab.left_behind() if lab else []:
        listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                                text=True, timeout=30).stdout
        pids |= {int(word) for word in listed.split() if word.isdigit()}
    pids.discard(os.getpid())
    return pids


def end_processes(pids: set[int], grace: float = STOP_GRACE_SECS) -> list[str]:
    """SIGTERM, then SIGKILL what is left after `grace`; the pids that outlive both."""
    import psutil

    def running() -> list[psutil.Process]:
        procs = []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    procs.append(proc)
            except psutil.Error:
                pass
        return procs

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for proc in running():
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        deadline = time.monotonic() + wait
        while running() and time.monotonic() < deadline:
            time.sleep(0.1)
    return [f"pid {proc.pid} ({proc.name()}) outlived SIGKILL" for proc in running()]


def cancel_jobs(state: State, root: Path, timeout: float = 40.0) -> None:
    """scancel every job, as a user would, and wait for the nodes to let them go (past
    KillWait their tasks are killed)."""
    if not any(d.name == "slurmctld" and alive(d) for d in state.daemons):
        return
    jobs = login_run(state, root, ["squeue", "-h", "-o", "%i"]).stdout.split()
    if not jobs:
        return
    login_run(state, root, ["scancel", *jobs])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not login_run(state, root, ["squeue", "-h", "-o", "%i"]).stdout.split():
            return
        time.sleep(0.5)


def teardown(root: Path, state: State, cancel: bool = True) -> list[str]:
    """Stop everything of the cluster in `root` and remove it; the errors, one line each.
    The directory stays when something could not be removed, so stop can be run again."""
    if cancel:
        try:
            cancel_jobs(state, root)
        except (OSError, subprocess.SubprocessError, StopIteration):
            pass  # the daemons are ended below all the same
    errors = end_processes(cluster_pids(state))
    lab = state.rebuilt_lab()
    if lab:
        errors += lab.destroy()
    if not errors:
        shutil.rmtree(root, ignore_errors=True)
        if root.exists():
            errors.append(f"could not remove {root}")
    return errors


def stop(root: Path) -> None:
    state = State.load(root)
    errors = teardown(root, state)
    if errors:
        raise ClusterError("; ".join(errors))
    print(f"{PROG}: stopped; removed {root}", flush=True)


def status(root: Path) -> int:
    state = State.load(root)
    print(f"{PROG}: {describe(state)}; state in {root}")
    down = [d for d in state.daemons if not alive(d)]
    for daemon in state.daemons:
        print(f"  {daemon.name:<14} on {daemon.host:<6} pid {daemon.pid:<8} "
              f"{'running' if alive(daemon) else 'not running'}")
    if any(d.name == "slurmctld" for d in state.daemons if d not in down):
        for command in (["sinfo"], ["squeue"]):
            print(login_run(state, root, command).stdout.rstrip())
    return 0 if state.daemons and not down else 3


def run(root: Path, command: list[str]) -> None:
    """exec `command` on the login host with the cluster's SLURM_CONF."""
    state = State.load(root)
    if not command:
        raise ClusterError("run needs a command, e.g. run sinfo")
    argv = login_argv(state, command)
    try:
        os.execvpe(argv[0], argv, client_env(root))
    except OSError as error:
        raise ClusterError(f"cannot run {command[0]}: {error.strerror}") from None


# --------------------------------------------------------------------------- command line

def build_parser() -> argparse.ArgumentParser:
    from a3c_graph.system.cli import OneLineParser

    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("start", "install what is missing, start the daemons"),
                       ("stop", "cancel the jobs, end every process, delete the namespaces "
                                "and the directory"),
                       ("status", "the daemons, sinfo and squeue (exit 3 if one is down)"),
                       ("run", "run a client command (sbatch, srun, squeue, sacct, scancel, "
                               "...) on the login host")):
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument("--dir", default=os.environ.get("A3C_SLURM_DIR", DEFAULT_DIR),
                         help="the cluster's directory (default: $A3C_SLURM_DIR or "
                              f"{DEFAULT_DIR})")
        if name == "start":
            sub.add_argument("--nodes", type=int, choices=(1, 2), default=2,
                             help="2: nodes in network namespaces (one node on this "
                                  "machine's network where namespaces cannot be made); "
                                  "1: one node on this machine's network")
        if name == "run":
            sub.add_argument("cmd", nargs=argparse.REMAINDER, help="the command")
    return parser


def main(argv: list[str] | None = None) -> int:
    from a3c_graph.system.cli import UsageError, fail

    try:
        args = build_parser().parse_args(argv)
        root = Path(os.path.abspath(args.dir))
        if args.command == "start":
            start(root, args.nodes)
        elif args.command == "stop":
            stop(root)
        elif args.command == "status":
            return status(root)
        else:
            run(root, args.cmd)
    except (UsageError, ClusterError) as error:
        return fail(PROG, error)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A real Slurm (scripts/slurm/local_cluster.sh): two nodes, each a host of its own on a
private bridge, jobs across both, accounting, scancel and requeue; and the sbatch example
training CartPole on it under scancel, the time limit, requeue and a task killed on a node.

Needs root (apt-get installs Slurm when missing; namespaces; Slurm's daemons): skipped in
one line otherwise. The cluster is started once for the module and stopped at its end, and
the stop must leave no daemon, namespace or file. The jobs of the tests that are not slow
run sleep, hostname or env; marked slow are the ones that train (minutes each) and the
requeue of a sleeping job, which waits out Slurm's hold of a requeued job (about 30 s):

    .venv/bin/pytest tests/e2e/test_slurm_cluster.py -m slow
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, checkpoint_step, child_env

from a3c_graph.distributed.cluster import resolve_task
from a3c_graph.rundir.progress import read_history, read_progress

pytestmark = pytest.mark.e2e

SCRIPT = REPO / "scripts" / "slurm" / "local_cluster.sh"
SBATCH = REPO / "scripts" / "slurm" / "a3c.sbatch"
NODES = ("node1", "node2")
EXAMPLE_CLUSTER = {"ps": ["node1:2222"],
                   "worker": ["node1:2223", "node2:2222", "node2:2223"]}
# Training flags of the slow tests that must not end by themselves: a target never reached
# and a step budget never spent (CartPole's default of 2M steps takes about 70 s on 2 idle
# cores), so only Slurm or --max-seconds ends them.
NEVER_SOLVED = ["--target-return", "100000", "--max-steps", "1000000000", "--max-seconds", "1200"]
JOB_TIMEOUT_SECS = 900.0


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip(f"a real Slurm needs root (running as uid {os.geteuid()})")


def local_cluster(*args: str, timeout: float = 600.0, cwd: Path = REPO,
                  env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env or child_env())


class Cluster:
    """A started local Slurm in `root`, used as a user would, through the script."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = json.loads((root / "state.json").read_text())

    def run(self, *command: str, cwd: Path = REPO, env: dict | None = None,
            check: bool = True) -> str:
        result = local_cluster("run", "--dir", str(self.root), *command, cwd=cwd, env=env,
                               timeout=60)
        if check and result.returncode != 0:
            raise AssertionError(f"{shlex.join(command)} failed: {result.stderr.strip()}")
        return result.stdout

    def submit(self, *args: str, cwd: Path = REPO, env: dict | None = None) -> str:
        return self.run("sbatch", "--parsable", *args, cwd=cwd, env=env).strip().split(";")[0]

    def job_state(self, job: str) -> str:
        """The job's state: squeue's while it is queued or running, then sacct's."""
        queued = self.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip()
        if queued:
            return queued
        return self.run("sacct", "-X", "-n", "-j", job, "-o", "State%30",
                        check=False).strip().split(" ")[0]

    def wait_for_state(self, job: str, states: set[str],
                       timeout: float = JOB_TIMEOUT_SECS) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if state in states:
                return state
            time.sleep(1.0)
        raise AssertionError(f"job {job} still {self.job_state(job)!r} after {timeout:.0f} s, "
                             f"not one of {sorted(states)}")

    def namespace(self, host: str) -> str:
        lab = self.state["lab"]
        return f"{lab['prefix']}-{lab['suffix']}-{host}"

    def tasks(self, host: str) -> dict[int, psutil.Process]:
        """The a3c_graph.worker processes on `host`, by their Slurm rank."""
        listed = subprocess.run(["ip", "netns", "pids", self.namespace(host)],
                                capture_output=True, text=True, timeout=30).stdout.split()
        found = {}
        for pid in map(int, listed):
            try:
                proc = psutil.Process(pid)
                if "a3c_graph.worker" in proc.cmdline():
                    found[int(proc.environ()["SLURM_PROCID"])] = proc
            except (psutil.Error, KeyError, ValueError):
                continue
        return found

    def all_tasks(self) -> dict[int, psutil.Process]:
        return {rank: proc for host in NODES for rank, proc in self.tasks(host).items()}


def left_behind(state: dict, root: Path) -> list[str]:
    """What a stopped cluster left: namespaces, daemons, its directory."""
    left = []
    if state.get("lab"):
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                timeout=30).stdout
        names = {line.split()[0] for line in listed.splitlines() if line.strip()}
        left += sorted(names & set(state["lab"]["namespaces"]))
    for daemon in state["daemons"]:
        try:
            proc = psutil.Process(daemon["pid"])
            if (abs(proc.create_time() - daemon["started"]) < 0.05
                    and proc.status() != psutil.STATUS_ZOMBIE):
                left.append(f"{daemon['name']} (pid {daemon['pid']})")
        except psutil.Error:
            pass
    if root.exists():
        left.append(str(root))
    return left


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    needs_root()
    root = tmp_path_factory.mktemp("slurm") / "cluster"
    started = local_cluster("start", "--dir", str(root))
    if started.returncode != 0:
        pytest.fail(f"local_cluster.sh start failed: {started.stderr.strip()}")
    assert "2 nodes (node1 10.231.0.3, node2 10.231.0.4)" in started.stdout, started.stdout
    cluster = Cluster(root)
    try:
        yield cluster
    finally:
        stopped = local_cluster("stop", "--dir", str(root), timeout=120)
        assert stopped.returncode == 0, stopped.stderr
        assert left_behind(cluster.state, root) == []


# --------------------------------------------------------------------------- the cluster

def test_a_job_spans_two_hosts_each_with_its_own_name_and_address(cluster):
    out = cluster.run("srun", "--nodes=2", "--ntasks-per-node=1", "sh", "-c",
                      'echo "$(hostname) $SLURMD_NODENAME $(ip -o link | wc -l) '
                      '$(ip -o -4 addr show scope global | awk \'{print $4}\') '
                      '$(getent hosts node1 node2 | awk \'{print $1}\' | xargs)"')
    rows = sorted(line.split() for line in out.strip().splitlines())
    # Two interfaces each, lo and the link to the bridge: a task listening on every
    # interface is reachable on the cluster's network only.
    assert rows == [["node1", "node1", "2", "10.231.0.3/24", "10.231.0.3", "10.231.0.4"],
                    ["node2", "node2", "2", "10.231.0.4/24", "10.231.0.3", "10.231.0.4"]]
    assert cluster.run("hostname").strip() == "ctl"  # client commands run on the login host


def test_the_examples_step_gives_every_task_its_place(cluster, monkeypatch, tmp_path):
    """The variables a real srun sets, read by TF's resolver as the example's tasks read them."""
    cluster.run("srun", "--nodes=2", "--ntasks-per-node=2", "--distribution=block",
                sys.executable, "-c",
                "import json, os; open(f'env-{os.environ[\"SLURM_PROCID\"]}.json', 'w').write("
                "json.dumps({k: v for k, v in os.environ.items() if k.startswith('SLURM')}))",
                cwd=tmp_path)
    tasks = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in range(4)]
    assert [(t["SLURMD_NODENAME"], t["SLURM_LOCALID"]) for t in tasks] == \
        [("node1", "0"), ("node1", "1"), ("node2", "0"), ("node2", "1")]
    roles = []
    for env in tasks:
        for name in [n for n in os.environ if n.startswith("SLURM")]:
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        spec = resolve_task(None, None, "slurm", None, None, environ={}, num_ps=1, port=2222)
        assert spec.cluster == EXAMPLE_CLUSTER
        roles.append((spec.job, spec.task))
    assert roles == [("ps", 0), ("worker", 0), ("worker", 1), ("worker", 2)]


def test_a_batch_job_is_completed_in_the_accounting(cluster, tmp_path):
    job = cluster.submit("--nodes=2", "--ntasks-per-node=1", "--output=job-%j.out",
                         "--wrap", "srun hostname", cwd=tmp_path)
    assert cluster.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 120) == "COMPLETED"
    assert sorted((tmp_path / f"job-{job}.out").read_text().split()) == ["node1", "node2"]
    # In sacct, with its step (slurmctld tells slurmdbd a moment after the job ends).
    expected = {f"{job}|COMPLETED|node[1-2]", f"{job}.0|COMPLETED|node[1-2]"}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = cluster.run("sacct", "-n", "-P", "-j", job, "-o", "JobID,State,NodeList")
        if expected <= set(rows.split()):
            break
        time.sleep(1)
    assert expected <= set(rows.split()), rows


# A job step's task: says when it started (and in which run of its job), and when SIGTERM came.
SIGTERM_TASK = """
import os, signal, sys, time
rank = os.environ["SLURM_PROCID"]

def on_term(signum, frame):
    with open(f"term-{rank}", "w") as out:
        out.write(repr(time.time()))
    os._exit(0)

signal.signal(signal.SIGTERM, on_term)
with open(f"started-{rank}", "w") as out:
    out.write(os.environ.get("SLURM_RESTART_COUNT", "0"))
time.sleep(300)
"""


def sigterm_task(directory: Path) -> str:
    script = directory / "task.py"
    script.write_text(SIGTERM_TASK)
    return f"srun {sys.executable} {script}"


def test_scancel_sends_every_task_sigterm(cluster, tmp_path):
    job = cluster.submit("--nodes=2", "--ntasks-per-node=2", "--output=job-%j.out",
                         "--wrap", sigterm_task(tmp_path), cwd=tmp_path)
    wait_for_files(tmp_path, "started-*", 4)
    cancelled = time.time()
    cluster.run("scancel", job)
    try:
        wait_for_files(tmp_path, "term-*", 4, timeout=10)
    except AssertionError:
        print((tmp_path / f"job-{job}.out").read_text())
        print(cluster.run("sacct", "-j", job, "-o", "JobID,State,ExitCode,NodeList"))
        raise
    assert all(float(path.read_text()) - cancelled < 10 for path in tmp_path.glob("term-*"))
    assert cluster.wait_for_state(job, {"CANCELLED", "COMPLETED", "FAILED"}, 60) == "CANCELLED"


@pytest.mark.slow
def test_a_requeued_job_runs_again(cluster, tmp_path):
    job = cluster.submit("--nodes=2", "--ntasks-per-node=1", "--requeue",
                         "--output=job-%j.out", "--wrap", sigterm_task(tmp_path), cwd=tmp_path)
    wait_for_files(tmp_path, "started-*", 2)
    for path in tmp_path.glob("started-*"):
        path.unlink()
    cluster.run("scontrol", "requeue", job)
    wait_for_files(tmp_path, "term-*", 2, timeout=10)  # the first run was told to stop
    wait_for_files(tmp_path, "started-*", 2, timeout=120)  # and the job ran again
    assert {p.read_text().strip() for p in tmp_path.glob("started-*")} == {"1"}
    cluster.run("scancel", job)
    cluster.wait_for_state(job, {"CANCELLED", "COMPLETED", "FAILED"}, 60)


def wait_for_files(directory: Path, pattern: str, count: int, timeout: float = 60.0) -> None:
    """Wait for `count` files matching `pattern` that have their content: a task's file
    exists from its open(), a moment before its write, which a loaded machine can stretch."""
    deadline = time.monotonic() + timeout
    while len([p for p in directory.glob(pattern) if p.stat().st_size > 0]) < count:
        if time.monotonic() > deadline:
            found = sorted(p.name for p in directory.glob(pattern))
            raise AssertionError(f"{count} files {pattern} expected in {timeout:.0f} s, "
                                 f"found {found}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- one node, bad input

def test_every_file_the_daemons_are_given_is_under_the_clusters_directory(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import cluster_files
    finally:
        sys.path.remove(str(SCRIPT.parent))
    state = cluster_files.State(
        "namespaces", "ctl", ["node1", "node2"],
        {"ctl": "10.231.0.2", "node1": "10.231.0.3", "node2": "10.231.0.4"},
        {"slurmctld": 6817, "slurmd": 6818, "slurmdbd": 6819})
    conf = cluster_files.slurm_conf(tmp_path, state)
    dbd = cluster_files.slurmdbd_conf(tmp_path, state)
    paths = [word for line in (conf + dbd).splitlines() for part in line.split("=")[1:]
             for word in part.split(",") if word.startswith("/")]
    assert paths and all(path.startswith(f"{tmp_path}/") for path in paths), paths
    assert "SlurmctldHost=ctl(10.231.0.2)" in conf.splitlines()
    assert "NodeName=node2 NodeAddr=10.231.0.4 CPUs=4 State=UNKNOWN" in conf.splitlines()
    # Connections to slurmdbd take munge's socket from here, not from AuthInfo.
    assert f"AccountingStoragePass={tmp_path}/munge/munge.socket" in conf.splitlines()
    assert cluster_files.hosts_file(state).splitlines() == [
        "127.0.0.1 localhost", "10.231.0.2 ctl", "10.231.0.3 node1", "10.231.0.4 node2"]


def test_one_node_on_this_machines_network_and_nothing_left_after_stop(tmp_path):
    needs_root()
    root = tmp_path / "single"
    started = local_cluster("start", "--dir", str(root), "--nodes", "1")
    assert started.returncode == 0, started.stderr
    state = json.loads((root / "state.json").read_text())
    try:
        assert "1 node" in started.stdout
        single = Cluster(root)
        assert single.run("srun", "hostname").strip() == socket.gethostname().split(".")[0]
    finally:
        stopped = local_cluster("stop", "--dir", str(root), timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert left_behind(state, root) == []


@pytest.mark.parametrize("args, words", [
    (["stop"], "no local Slurm cluster in {root} (start one first)"),
    (["status"], "no local Slurm cluster in {root} (start one first)"),
    (["run", "sinfo"], "no local Slurm cluster in {root} (start one first)"),
    (["start", "--nodes", "3"], "argument --nodes: invalid choice: 3"),
])
def test_bad_input_is_one_line(tmp_path, args, words):
    root = tmp_path / "none"
    result = local_cluster(args[0], "--dir", str(root), *args[1:])
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("local_cluster: error: ") and words.format(root=root) in line
    assert not root.exists()


def test_start_refuses_a_directory_that_is_not_its_own(tmp_path):
    needs_root()
    (tmp_path / "notes.txt").write_text("mine")
    result = local_cluster("start", "--dir", str(tmp_path))
    assert result.returncode == 2
    assert f"{tmp_path} exists and is not empty" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


# --------------------------------------------------------------------------- training (slow)

def submit_example(cluster: Cluster, run_dir: Path, *args: str, flags=(),
                   env: dict | None = None) -> tuple[str, Path]:
    """sbatch the example from `run_dir` ([sbatch options] script [A3C flags]); (job id,
    its log dir)."""
    job = cluster.submit(*args, str(SBATCH), *flags, cwd=run_dir,
                         env=child_env(PYTHON=sys.executable, **(env or {})))
    return job, run_dir / "runs" / f"a3c-slurm-{job}"


def wait_until(what: str, condition, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def global_step(logdir: Path) -> int:
    return max((int(p.get("global_step") or 0) for p in read_progress(logdir).values()),
               default=0)


def resumed_steps(logdir: Path, since: float) -> int:
    """The lowest global step the workers reported after `since` (a later run of the job)."""
    rows = [row for row in read_history(logdir)
            if row["time"] > since and row.get("state") != "starting"]
    assert rows, "no progress after the job started again"
    return min(int(row["global_step"]) for row in rows)


def job_output(run_dir: Path, job: str) -> str:
    return (run_dir / f"a3c-{job}.out").read_text(errors="replace")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_sbatch_example_trains_cartpole_across_both_nodes(cluster, tmp_path):
    job, logdir = submit_example(cluster, tmp_path)
    wait_until("the example's four tasks run", lambda: len(cluster.all_tasks()) == 4)
    ranks = {host: sorted(cluster.tasks(host)) for host in NODES}
    assert ranks == {"node1": [0, 1], "node2": [2, 3]}  # ps and worker 0, workers 1 and 2
    assert cluster.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}) \
        == "COMPLETED", job_output(tmp_path, job)
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["solved"] is True and summary["stop_reason"] == "solved"
    assert summary["workers"] == 3 and summary["slurm_restart_count"] == 0
    out = job_output(tmp_path, job)
    assert "ps task 0 serving at node1:2222" in out
    assert "ps task 0 stopping (every worker is done)" in out


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_scancel_stops_every_task_within_10_s_after_a_final_checkpoint(cluster, tmp_path):
    job, logdir = submit_example(cluster, tmp_path,
                                 flags=[*NEVER_SOLVED, "--checkpoint-secs", "600"])
    wait_until("training past step 200", lambda: global_step(logdir) > 200)
    tasks = cluster.all_tasks()
    assert sorted(tasks) == [0, 1, 2, 3]
    before = global_step(logdir)
    cluster.run("scancel", job)
    psutil.wait_procs(list(tasks.values()), timeout=10)
    assert [rank for rank, proc in tasks.items() if proc.is_running()
            and proc.status() != psutil.STATUS_ZOMBIE] == [], "tasks alive 10 s after scancel"
    # Checkpoints every 600 s: past step 200 only the chief's last one, at the stop.
    assert checkpoint_step(logdir) >= before
    out = job_output(tmp_path, job)
    assert "worker 0 done (signal)" in out and "ps task 0 stopping (every worker is done)" in out
    assert cluster.wait_for_state(job, {"CANCELLED", "COMPLETED", "FAILED"}, 60) == "CANCELLED"


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_time_limit_signal_writes_a_checkpoint_before_the_end(cluster, tmp_path):
    # SIGTERM 60 s before a 3-minute limit (Slurm may send it up to 60 s earlier still);
    # no requeue, to see this run end.
    job, logdir = submit_example(cluster, tmp_path, "--time=3", "--signal=TERM@60",
                                 flags=[*NEVER_SOLVED, "--checkpoint-secs", "600"],
                                 env={"A3C_MAX_REQUEUES": "0"})
    state = cluster.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
    assert state == "FAILED", job_output(tmp_path, job)  # not over, and no requeue left
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["stop_reason"] == "signal" and summary["step_exit_code"] == 0
    # Checkpoints every 600 s: past step 0 only the chief's last one, at the signal; the
    # other workers may each have applied one update after it.
    assert checkpoint_step(logdir) >= summary["global_step"] - 2 > 0


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_requeued_job_resumes_from_its_checkpoint(cluster, tmp_path):
    job, logdir = submit_example(cluster, tmp_path, flags=["--checkpoint-secs", "600"])
    wait_until("training past step 100", lambda: global_step(logdir) > 100)
    cluster.run("scontrol", "requeue", job)
    wait_until("the first run's tasks end", lambda: not cluster.all_tasks(), 30)
    between = time.time()
    saved = checkpoint_step(logdir)  # the chief's last, at the requeue's SIGTERM
    assert saved > 100
    assert cluster.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED", \
        job_output(tmp_path, job)
    assert resumed_steps(logdir, between) >= saved
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["solved"] is True and summary["slurm_restart_count"] == 1


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_task_killed_on_one_node_requeues_the_job_which_resumes(cluster, tmp_path):
    job, logdir = submit_example(cluster, tmp_path, flags=["--checkpoint-secs", "5"])
    wait_until("a checkpoint past step 100", lambda: checkpoint_step(logdir) > 100)
    victim = cluster.tasks("node2")[3]  # worker 2
    victim.kill()
    wait_until("the first run's tasks end", lambda: not cluster.all_tasks(), 60)
    between = time.time()
    saved = checkpoint_step(logdir)
    assert cluster.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED", \
        job_output(tmp_path, job)
    out = job_output(tmp_path, job)
    assert "the run is not over" in out and "run 2," in out
    assert resumed_steps(logdir, between) >= saved > 100
    summary = json.loads((logdir / "summary.json").read_text())
    assert summary["solved"] is True and summary["slurm_restart_count"] == 1

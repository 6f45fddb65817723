"""Who can reach a cluster's TF servers: unauthenticated gRPC that runs any graph it is sent.

TF 2.21 listens on every interface whatever host the cluster names, so the launcher runs the
tasks of a loopback cluster in a private network (a network namespace with only lo,
a3c_graph/system/netns.py); anything else takes --allow-remote and prints a warning, and a task
started by hand on the host network refuses to start without it. The benchmarks run in the
same kind of private network: Ray's servers listen on every interface too and authenticate
no one.

Elsewhere: the namespace itself is in test_netns.py; a cluster with a non-loopback address
and no --allow-remote is refused by the launcher (test_launch_checks.py, bad input "remote without
allow-remote") and by the worker (test_worker_cli.py,
test_non_loopback_address_needs_allow_remote).

Every process a test starts is stopped by its own pid (or by the pids of a run's pid files,
after checking they are still ours).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import portpicker
import psutil
import pytest
from conftest import nsenter_command, stop_process_tree

from a3c_graph.rundir.progress import read_progress, run_totals
from a3c_graph.system.processes import read_pid_files
from tests.support.launch_helpers import processes_mentioning
from tests.unit.system.test_netns import needs_host_network, probe

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "launch_cluster.sh"
FAST = ["--rollout-length", "16", "--envs-per-worker", "4", "--progress-secs", "0.5"]
HAS_RAY = importlib.util.find_spec("ray") is not None


def env_without_tf_config(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run(argv: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Run `argv` to its end; past `timeout`, subprocess.run kills it (by its pid)."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=env_without_tf_config(**env))


def one_error_line(result: subprocess.CompletedProcess, prefix: str) -> str:
    shown = f"status {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 2, shown
    assert "Traceback" not in result.stderr, shown
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prefix}: error: "), shown
    return lines[0]


def interfaces(pid: int | str) -> list[str]:
    """The network interfaces process `pid` sees (its namespace's /proc/net/dev)."""
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines)


def without_cap_sys_admin() -> list[str]:
    """Root without CAP_SYS_ADMIN, as in many containers: no network namespace of its own,
    the user-namespace way like any user (and, unlike nobody, it may exec this Python, which
    may live under a private /root)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop CAP_SYS_ADMIN")
    return ["setpriv", "--bounding-set=-sys_admin"]


# --------------------------------------------------------------------------- launcher

@pytest.mark.e2e
@needs_host_network
def test_a_local_run_trains_in_a_private_network_no_one_outside_can_reach(tmp_path,
                                                                          run_cleanup):
    logdir = tmp_path / "run"
    run_cleanup(logdir)
    started = run([str(SCRIPT), "--background", "--max-seconds", "120", "--logdir", str(logdir),
                   *FAST])
    assert started.returncode == 0, started.stderr

    deadline = time.monotonic() + 120
    while True:  # training goes on: both workers update the globals on the ps
        progress = read_progress(logdir)
        if len(progress) == 2 and all(p["global_step"] > 0 for p in progress.values()):
            break
        assert time.monotonic() < deadline, (logdir / "launcher.log").read_text()[-3000:]
        time.sleep(0.5)

    records = read_pid_files(logdir)
    assert set(records) == {"launcher", "ps_0", "worker_0", "worker_1"}
    for record in records.values():
        assert record.proc is not None, record
        assert interfaces(record.pid) == ["lo"], record.name
    assert interfaces("self") != ["lo"]
    cmdline = records["worker_0"].proc.cmdline()
    addresses = [address for flag in ("--ps-hosts", "--worker-hosts")
                 for address in cmdline[cmdline.index(flag) + 1].split(",")]
    assert len(addresses) == 3
    for address in addresses:
        host, port = address.rsplit(":", 1)
        with pytest.raises(OSError):  # nothing listens there on the host network
            socket.create_connection((host, int(port)), timeout=5).close()
        # ...while inside the tasks' network the server is there.
        inside = run(nsenter_command(records["ps_0"].pid, [
            sys.executable, "-c", f"import socket; socket.create_connection(('{host}', {port}), "
                                  "timeout=5).close()"]), timeout=30)
        assert inside.returncode == 0, inside.stderr
    assert "in a private network" in (logdir / "launcher.log").read_text()

    stopped = run([str(SCRIPT), "stop", "--logdir", str(logdir)], timeout=90)
    assert stopped.returncode == 0, stopped.stderr
    for record in records.values():
        assert not record.proc.is_running() or record.proc.status() == psutil.STATUS_ZOMBIE


def test_a_dry_run_says_the_tasks_would_run_in_a_private_network(tmp_path):
    result = run([str(SCRIPT), "--dry-run", "--logdir", str(tmp_path / "run")])
    assert result.returncode == 0, result.stderr
    [note] = result.stderr.splitlines()
    assert "would run in a private network" in note and "only loopback" in note
    assert "--allow-remote" not in result.stdout


def test_allow_remote_on_a_loopback_cluster_runs_on_the_host_network_with_the_warning(tmp_path):
    result = run([str(SCRIPT), "--dry-run", "--allow-remote", "--logdir", str(tmp_path / "run")])
    assert result.returncode == 0, result.stderr
    [warning] = result.stderr.splitlines()
    assert warning.startswith("launch_cluster: warning: the tasks run on the host network")
    for words in ("every interface", "unauthenticated gRPC", "trusted network"):
        assert words in warning
    commands = result.stdout.splitlines()
    assert len(commands) == 3 and all("--allow-remote" in line for line in commands)


def test_a_port_taken_on_the_host_does_not_matter_to_a_private_network(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as holder:
        taken = holder.getsockname()[1]
        cluster_file = tmp_path / "cluster.json"
        cluster_file.write_text(json.dumps({"ps": [f"127.0.0.1:{taken}"],
                                            "worker": ["127.0.0.1:1"]}))
        result = run([str(SCRIPT), "--dry-run", "--cluster", str(cluster_file),
                      "--logdir", str(tmp_path / "run")])
    assert result.returncode == 0, result.stderr
    assert "private network" in result.stderr


def _loopback_cluster(tmp_path: Path) -> str:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"ps": ["127.0.0.1:2222"],
                                "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}))
    return str(path)


@pytest.mark.parametrize("how", ["--tasks", "TF_CONFIG"])
def test_a_loopback_cluster_split_over_launchers_needs_allow_remote(tmp_path, how):
    logdir = tmp_path / "run"
    if how == "--tasks":
        flags, env = ["--cluster", _loopback_cluster(tmp_path), "--tasks", "worker:0,ps:0"], {}
    else:
        flags, env = [], {"TF_CONFIG": json.dumps({
            "cluster": {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]},
            "task": {"type": "worker", "index": 0}})}
    # Not a dry run: were the check missing, tasks would start.
    result = run([str(SCRIPT), *flags, "--logdir", str(logdir)], **env)
    line = one_error_line(result, "launch_cluster")
    assert "tasks split over several launchers meet on the host network" in line
    assert "--allow-remote" in line
    assert not logdir.exists() and processes_mentioning(logdir) == []

    allowed = run([str(SCRIPT), "--dry-run", "--allow-remote", *flags, "--logdir", str(logdir)],
                  **env)
    assert allowed.returncode == 0, allowed.stderr
    assert "host network" in allowed.stderr


def in_user_namespace_without_namespaces() -> list[str]:
    """A command prefix whose process may make no new namespace: the kernel refuses (ENOSPC)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare")
    prefix = ["unshare", "--user", "--map-root-user", "sh", "-c",
              "echo 0 > /proc/sys/user/max_net_namespaces && "
              "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"", "sh"]
    if subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("cannot make a user namespace here to limit namespaces in")
    return prefix


@pytest.mark.parametrize("background", [False, True])
def test_when_the_kernel_refuses_a_namespace_the_launcher_says_so_and_starts_nothing(
        tmp_path, background):
    logdir = tmp_path / "run"
    flags = ["--background"] if background else []
    result = run([*in_user_namespace_without_namespaces(), str(SCRIPT), *flags,
                  "--logdir", str(logdir)])
    line = one_error_line(result, "launch_cluster")
    assert "cannot run the tasks in a private network: the kernel refused" in line
    assert "--allow-remote runs them on the host network" in line
    assert result.stdout == ""
    assert not logdir.exists() and processes_mentioning(logdir) == []


FAKE_WORKER = textwrap.dedent("""
    # Tells what network, user namespace and uid it got, then exits like a worker that
    # trained and stopped (its last progress file says so) / a ps that was stopped.
    import argparse, json, os, signal, sys, time
    parser = argparse.ArgumentParser()
    parser.add_argument("--job")
    parser.add_argument("--task", type=int)
    parser.add_argument("--logdir")
    args, _ = parser.parse_known_args()
    lines = open("/proc/self/net/dev").read().splitlines()[2:]
    seen = {"interfaces": sorted(line.split(":")[0].strip() for line in lines),
            "uid": os.getuid(), "user_ns": os.readlink("/proc/self/ns/user")}
    with open(os.path.join(args.logdir, f"seen_{args.job}_{args.task}.json"), "w") as handle:
        json.dump(seen, handle)
    if args.job == "worker":
        progress = {"task": args.task, "time": time.time(), "state": "done",
                    "stop_reason": "max_seconds", "training_started": time.time()}
        with open(os.path.join(args.logdir, "progress", f"worker_{args.task}.json"), "w") as f:
            json.dump(progress, f)
    if args.job == "ps":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(0.05)
""")


def test_an_unprivileged_launcher_runs_its_tasks_in_a_private_network_as_the_user(tmp_path):
    """The user-namespace way: the launcher has numpy's threads by the time it starts tasks,
    so it re-executes itself (same pid) and enters before any thread starts. The tasks are
    a fake worker module (as in test_launch_supervision.py), started by the launcher's own code."""
    prefix = without_cap_sys_admin()
    if "error" in probe(prefix):
        pytest.skip("no user namespaces for a process without CAP_SYS_ADMIN here")
    (tmp_path / "fake_worker.py").write_text(FAKE_WORKER)
    logdir = tmp_path / "run"
    code = ("import sys, a3c_graph.launch as launch, a3c_graph.system.processes as pids; "
            "pids.WORKER_MODULE = 'fake_worker'; sys.exit(launch.main())")
    process = subprocess.Popen(
        [*prefix, sys.executable, "-c", code, "--logdir", str(logdir), "--max-restarts=0"],
        cwd=tmp_path, env=env_without_tf_config(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the launcher did not finish in 60 s")
    finally:
        if process.poll() is None:
            stop_process_tree(process)  # the launcher and its fake tasks, by their pids
    assert process.returncode == 0, stderr
    assert "in a private network" in stdout
    # setpriv execs: the pid we started is the launcher's, before and after it re-executed.
    assert (logdir / "pids" / "launcher.pid").read_text().strip() == str(process.pid)
    for name in ("ps_0", "worker_0", "worker_1"):
        seen = json.loads((logdir / f"seen_{name}.json").read_text())
        assert seen["interfaces"] == ["lo"] and seen["uid"] == os.getuid(), name
        assert seen["user_ns"] != os.readlink("/proc/self/ns/user"), name
        assert (logdir / f"seen_{name}.json").stat().st_uid == os.getuid()


# --------------------------------------------------------------------------- benchmarks

# The pids that listen on a TCP port in the network of the process that runs it.
LISTENING = ("import json, psutil; print(json.dumps(sorted({c.pid for c in "
             "psutil.net_connections('tcp') if c.status == psutil.CONN_LISTEN and c.pid})))")


def listening_pids() -> set[int]:
    """The pids that listen on a TCP port of this machine's own network (what `ss -ltnp`
    shows), any address."""
    return set(json.loads(run([sys.executable, "-c", LISTENING], timeout=60).stdout))


@pytest.mark.e2e
@needs_host_network
@pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install -e '.[bench]')")
def test_a_ray_benchmark_runs_in_a_private_network_no_one_outside_can_reach(tmp_path):
    """Ray's gcs_server, raylet, actors and driver listen on every interface: every process
    of the run sits in a network with only lo, and none listens on the host's network.
    Stopped, the run leaves no process, and no file in the temp dir (the autograph sources
    of actors Ray ends without their exit handlers)."""
    logdir, temp_dir = tmp_path / "run", tmp_path / "tmp"
    temp_dir.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.variants.tf2_ray", "--workers", "1",
         "--max-seconds", "120", "--logdir", str(logdir), *FAST], cwd=REPO,
        # Ray's own sessions where they go by default: a socket's path must fit 107 bytes.
        env={**env_without_tf_config(), "TMPDIR": str(temp_dir),
             "RAY_TMPDIR": os.environ.get("RAY_TMPDIR", "/tmp")},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:  # the worker actor trains: Ray is up, with every server it starts
            totals = run_totals(read_progress(logdir))
            if totals is not None and totals.global_step > 0:
                break
            assert process.poll() is None and time.monotonic() < deadline, "not training"
            time.sleep(0.5)
        pids = {process.pid, *(child.pid for child
                               in psutil.Process(process.pid).children(recursive=True))}
        tree = [proc for proc in psutil.process_iter(["name"]) if proc.pid in pids]
        names = {proc.pid: proc.info["name"] for proc in tree}
        assert {"gcs_server", "raylet"} <= set(names.values()), names
        for proc in tree:
            try:
                seen = interfaces(proc.pid)
            except FileNotFoundError:  # ended since it was listed (Ray retires idle workers)
                continue
            assert seen == ["lo"], names[proc.pid]
        assert interfaces("self") != ["lo"]
        assert listening_pids().isdisjoint(names), "a process of the run listens on the host"
        # ...while in the run's own network Ray's servers are there, on loopback.
        inside = run(nsenter_command(process.pid, [sys.executable, "-c", LISTENING]))
        assert inside.returncode == 0, inside.stderr
        servers = {names.get(pid) for pid in json.loads(inside.stdout)}
        assert {"gcs_server", "raylet"} <= servers, servers

        process.send_signal(signal.SIGTERM)  # the run stops its actors and Ray in order
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            stop_process_tree(process)
    assert process.returncode == 143, stderr[-3000:]
    assert "running in a private network" in stdout
    assert all(not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
               for proc in tree)
    assert list(temp_dir.iterdir()) == []


@pytest.mark.parametrize("module, flags", [
    ("benchmarks.variants.tf2_ray", ["--logdir"]),
    ("benchmarks.variants.tf2_multiprocessing", ["--logdir"]),
    ("benchmarks.run", ["--out"]),
    ("benchmarks.soak", ["--out"]),
    ("benchmarks.step_cost", []),
])
def test_when_the_kernel_refuses_a_namespace_a_benchmark_says_so_and_starts_nothing(
        tmp_path, module, flags):
    if module == "benchmarks.variants.tf2_ray" and not HAS_RAY:
        pytest.skip("ray is not installed")
    out = tmp_path / "out"
    result = run([*in_user_namespace_without_namespaces(), sys.executable, "-m", module,
                  *(f"{flag}={out}" for flag in flags)])
    line = one_error_line(result, module)
    assert "cannot run in a private network: the kernel refused" in line
    assert "--allow-remote runs on the host network" in line
    assert result.stdout == "" and not out.exists()


# --------------------------------------------------------------------------- worker

@needs_host_network
def test_a_worker_started_by_hand_on_the_host_network_needs_allow_remote(tmp_path):
    ports = [portpicker.pick_unused_port() for _ in range(2)]
    hosts = ["--ps-hosts", f"127.0.0.1:{ports[0]}", "--worker-hosts", f"127.0.0.1:{ports[1]}"]
    logdir = tmp_path / "run"
    for job in ("ps", "worker"):
        result = run([sys.executable, "-m", "a3c_graph.worker", "--job", job, "--task", "0",
                      *hosts, "--logdir", str(logdir)], timeout=60)
        line = one_error_line(result, "a3c_graph.worker")
        assert "TF's server would listen on every interface" in line
        assert "scripts/launch_cluster.sh" in line and "--allow-remote" in line
    assert not logdir.exists()


# --------------------------------------------------------------------------- checkpoints

def test_no_module_unpickles_anything():
    """Checkpoints are read only through TF's checkpoint reader: no pickle, no
    np.load(allow_pickle=True), which would run code a logdir's files name."""
    unpicklers = {"pickle", "cPickle", "_pickle", "dill", "joblib", "shelve", "cloudpickle"}
    found = []
    for path in sorted((REPO / "a3c_graph").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                names = []
            found += [f"{path.name}: import {n}" for n in names if n.split(".")[0] in unpicklers]
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "allow_pickle" and not (
                            isinstance(keyword.value, ast.Constant) and not keyword.value.value):
                        found.append(f"{path.name}:{node.lineno}: allow_pickle")
    assert found == []

"""Three machines on one switch: a ps and two workers, each in its own network namespace.

Needs root on Linux (network namespaces and veth pairs need CAP_NET_ADMIN) and iproute2's
`ip`; without them the test is skipped with the reason. Each "machine" is a host of
benchmarks/ps_capacity/netlab.py's lab: a network namespace with one veth link to a bridge
that lives in a fourth, "switch" namespace. Every `ip` command names its namespace
(`ip -n NS ...`): the host's own namespace, interfaces and routes are never touched. Names
carry a random suffix so parallel runs and leftovers never collide.

Each machine runs the real launcher with its own logdir, as a user on three computers would:

    python -m a3c_graph.launch start --cluster cluster.json --tasks worker:1 --allow-remote ...

After a few hundred global steps worker 1's link goes down for a few seconds and comes back
up: worker 1 must train again and the global step go on. Then the launchers are stopped
(SIGTERM, workers first, as the launcher itself stops its tasks); each writes its summary and
nothing is left running. The fixtures stop every process by its own pid and delete the
namespaces (and with them the veth pairs and the bridge) whatever the outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from conftest import alive, checkpoint_step

from a3c_graph.rundir.progress import read_progress
from a3c_graph.system.processes import read_pid_files
from benchmarks.ps_capacity.netlab import Lab, NetworkError

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
# Every machine has its own network stack, so all use the same port, as real hosts would.
PORT = 2222
TRAINING = ["--rollout-length", "16", "--envs-per-worker", "4", "--progress-secs", "0.5",
            "--checkpoint-secs", "5", "--connect-timeout", "60", "--max-seconds", "300",
            "--target-return", "100000"]
STEPS_BEFORE_CUT = 300
LINK_DOWN_SECS = 5.0
# Updates worker 1 must make after its link is back (env steps = updates x 16 x 4).
UPDATES_AFTER_RECONNECT = 20
ENV_STEPS_PER_UPDATE = 16 * 4
START_TIMEOUT_SECS = 120.0
RECONNECT_TIMEOUT_SECS = 60.0
STOP_TIMEOUT_SECS = 60.0


# --------------------------------------------------------------------------- the network

# The machines: a host of the lab each, named for the task it runs.
ROLES = (("ps", 0), ("worker", 0), ("worker", 1))


@dataclass(frozen=True)
class Machine:
    name: str  # "ps0", "worker0", ...: its host's name in the lab
    job: str
    task: int
    address: str  # IPv4, on the lab's switch

    @property
    def host_port(self) -> str:
        return f"{self.address}:{PORT}"


def machines_of(lab: Lab) -> dict[str, Machine]:
    return {f"{job}{task}": Machine(f"{job}{task}", job, task,
                                    lab.hosts[f"{job}{task}"].address)
            for job, task in ROLES}


@pytest.fixture
def lab():
    if not sys.platform.startswith("linux"):
        pytest.skip(f"network namespaces are Linux only (this is {sys.platform})")
    if os.geteuid() != 0:
        pytest.skip(f"needs root to make network namespaces (running as uid {os.geteuid()})")
    if shutil.which("ip") is None:
        pytest.skip("needs the `ip` command of iproute2, which is not installed")
    lab = Lab([f"{job}{task}" for job, task in ROLES], prefix="a3c")
    try:
        lab.build()
    except (NetworkError, OSError, subprocess.SubprocessError) as error:
        lab.destroy()
        pytest.skip(f"cannot build the test network: {error}")
    yield lab
    errors = lab.destroy()
    assert not errors, errors


# --------------------------------------------------------------------------- the launchers

def launcher_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.pop("TF_CONFIG", None)
    # gRPC would send the cluster's traffic to a proxy, which the switch cannot reach.
    for key in list(env):
        if key.lower() in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy"):
            del env[key]
    return env


@dataclass
class Run:
    """The launcher of one machine, started inside its namespace."""

    machine: Machine
    logdir: Path
    process: subprocess.Popen
    out: Path
    err: Path
    pids: set[int] = field(default_factory=set)  # every pid its pid files ever named

    def remember_pids(self) -> None:
        for record in read_pid_files(self.logdir).values():
            if record.proc is not None:
                self.pids.add(record.pid)

    def progress(self) -> dict | None:
        return read_progress(self.logdir).get(self.machine.task)

    def report(self) -> str:
        parts = [f"== {self.machine.name} ({self.machine.host_port}), launcher "
                 f"pid {self.process.pid}, exit {self.process.poll()}"]
        for path in [self.out, self.err, *sorted((self.logdir / "logs").glob("*.log"))]:
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            parts.append(f"-- {path.name} (last 15 lines)\n" + "\n".join(lines[-15:]))
        return "\n".join(parts)


class Launchers:
    def __init__(self, lab: Lab, tmp_path: Path):
        self.lab, self.tmp_path = lab, tmp_path
        self.machines = machines_of(lab)
        self.runs: dict[str, Run] = {}
        self.cluster_file = tmp_path / "cluster.json"
        machines = list(self.machines.values())
        self.cluster_file.write_text(json.dumps({
            "ps": [m.host_port for m in machines if m.job == "ps"],
            "worker": [m.host_port for m in machines if m.job == "worker"]}))

    def start(self, machine: Machine) -> Run:
        logdir = self.tmp_path / machine.name / "run"
        logdir.parent.mkdir(parents=True)
        out, err = logdir.parent / "launcher.out", logdir.parent / "launcher.err"
        with open(out, "w") as stdout, open(err, "w") as stderr:
            process = subprocess.Popen(
                self.lab.exec_command(machine.name, [  # ip netns exec: the same pid
                    sys.executable, "-m", "a3c_graph.launch", "start",
                    "--cluster", str(self.cluster_file), "--tasks",
                    f"{machine.job}:{machine.task}", "--allow-remote", "--logdir", str(logdir),
                    *TRAINING]),
                cwd=self.tmp_path, env=launcher_env(), stdout=stdout, stderr=stderr,
                start_new_session=True)
        run = Run(machine, logdir, process, out, err)
        self.runs[machine.name] = run
        return run

    def report(self) -> str:
        return "\n".join(run.report() for run in self.runs.values())

    def poll(self) -> None:
        for run in self.runs.values():
            run.remember_pids()
            if run.process.poll() is not None:
                pytest.fail(f"the launcher of {run.machine.name} exited "
                            f"({run.process.returncode})\n{self.report()}")

    def until(self, what: str, done, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            result = done()
            if result:
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout:g} s waiting for {what}\n{self.report()}")
            time.sleep(0.2)

    def stop_all(self) -> None:
        """Cleanup by our own pids: the launchers (workers first), then what they left."""
        order = sorted(self.runs.values(), key=lambda run: run.machine.job == "ps")
        for run in order:
            if run.process.poll() is None:
                run.process.terminate()
        for run in order:
            try:
                run.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                run.process.kill()
                run.process.wait(timeout=10)
        for run in order:
            for record in read_pid_files(run.logdir).values():
                if record.proc is not None:  # still ours: read_pid_file checked it
                    try:
                        record.proc.kill()
                    except psutil.NoSuchProcess:
                        pass


@pytest.fixture
def launchers(lab, tmp_path):
    started = Launchers(lab, tmp_path)
    yield started
    started.stop_all()




# --------------------------------------------------------------------------- the test

def test_a_worker_whose_link_goes_down_reconnects_and_training_goes_on(lab, launchers):
    ps, chief, worker = (launchers.machines[name] for name in ("ps0", "worker0", "worker1"))
    runs = {m.name: launchers.start(m) for m in (ps, chief, worker)}
    ps_run, chief_run, worker_run = runs["ps0"], runs["worker0"], runs["worker1"]

    def global_step() -> int:
        return max((p["global_step"] for p in (chief_run.progress(), worker_run.progress())
                    if p is not None), default=0)

    def training(run: Run) -> bool:
        p = run.progress()
        return p is not None and p["state"] == "running" and p["local_env_steps"] > 0

    launchers.until(f"both workers to train past global step {STEPS_BEFORE_CUT}", lambda: (
        training(chief_run) and training(worker_run) and global_step() > STEPS_BEFORE_CUT),
        START_TIMEOUT_SECS)

    # Worker 1's machine loses its network for a while.
    at_cut = worker_run.progress()
    step_at_cut = global_step()
    lab.set_link(worker.name, up=False)
    # A rollout in flight at the cut may still finish; after that worker 1 is stuck.
    time.sleep(LINK_DOWN_SECS / 2)
    cut_off = worker_run.progress()
    time.sleep(LINK_DOWN_SECS / 2)
    launchers.poll()
    # The chief talks to the ps only (device filters): it trains on without worker 1.
    chief_step_at_up = chief_run.progress()["global_step"]
    assert chief_step_at_up > step_at_cut, launchers.report()
    # Else the cut missed: worker 1 would have had another way to the ps.
    still = worker_run.progress()
    assert not (still["pid"] == cut_off["pid"]
                and still["local_env_steps"] > cut_off["local_env_steps"]), (
        "worker 1 kept training while its link was down", cut_off, still)
    lab.set_link(worker.name, up=True)
    up = time.time()

    def trains_again() -> dict | None:
        p = worker_run.progress()
        if p is None or p["time"] <= up or p["state"] != "running":
            return None
        # The same process carries on, or a new one (restarted by its launcher) trains.
        before = at_cut["local_env_steps"] if p["pid"] == at_cut["pid"] else 0
        made = p["local_env_steps"] - before
        return p if (made >= UPDATES_AFTER_RECONNECT * ENV_STEPS_PER_UPDATE
                     and p["global_step"] > chief_step_at_up) else None

    after = launchers.until("worker 1 to train again after its link came back", trains_again,
                            RECONNECT_TIMEOUT_SECS)
    resumed = time.time() - up
    launchers.until("the global step to go on", lambda: global_step() > after["global_step"],
                    RECONNECT_TIMEOUT_SECS)
    restarted = after["pid"] != at_cut["pid"]
    print(f"worker 1: link down {LINK_DOWN_SECS:g} s at global step {step_at_cut}; chief at "
          f"{chief_step_at_up} when it came back; worker 1 "
          f"{'was restarted' if restarted else 'carried on in the same process'} and made "
          f"{UPDATES_AFTER_RECONNECT} updates within {resumed:.1f} s")

    # A user stops each machine's launcher: workers first, so the chief's final checkpoint
    # reaches a live ps.
    launchers.poll()
    pids = {name: set(run.pids) | {run.process.pid} for name, run in runs.items()}
    for run in (chief_run, worker_run, ps_run):
        run.process.send_signal(signal.SIGTERM)
        try:
            run.process.wait(timeout=STOP_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launcher of {run.machine.name} did not stop within "
                        f"{STOP_TIMEOUT_SECS:g} s of SIGTERM\n{launchers.report()}")
    for name, run in runs.items():
        assert run.process.returncode == 143, run.report()
        summary = json.loads((run.logdir / "summary.json").read_text())
        assert summary["stop_reason"] == "interrupted", summary
        # Every task left on its own SIGTERM: none had to be killed (-9: the launcher's stop
        # budget ran out before the task's process was gone).
        task = f"{run.machine.job}_{run.machine.task}"
        assert summary["task_exit_codes"] == {task: 0}, (
            f"{name}: {summary['task_exit_codes']} after SIGTERM\n{run.report()}")
        assert not [pid for pid in pids[name] if alive(pid)], (name, pids[name])
    final = chief_run.progress()
    assert final["state"] == "done" and final["stop_reason"] == "signal"
    # The chief's final checkpoint is in its own logdir, on its own machine.
    assert checkpoint_step(chief_run.logdir) >= final["global_step"] > after["global_step"]

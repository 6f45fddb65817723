"""Shared test helpers: the repo root, and running real tasks as processes we own.

Every process a test starts is stopped by the test on every path (a failed assertion, a
timeout, pytest-timeout, Ctrl-C), by its own pid or, for a launcher's run, through the
launcher's own `stop` (the pid files of the run, trusted only while they name our
processes): run_to_end, stop_run and the run_cleanup fixture.

Tasks started one at a time (not by the launcher) run in a private network, as the launcher's
tasks do: a network namespace with only loopback, held open by a small process of ours and
joined with nsenter. On the host network a task refuses to start without --allow-remote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import json
import math
import os
import pickle
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import portpicker
import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]

# The variables the project's own code sets in a process's environment. A test that leaves
# one of them changed would hand it to every later test and the processes they start.
WATCHED_ENVIRONMENT = ("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS", "SDL_VIDEODRIVER",
                       "CUDA_VISIBLE_DEVICES", "A3C_GRAPH_PRIVATE_NETWORK_REFUSED",
                       "PYTHONPATH", "RAY_USAGE_STATS_ENABLED", "TF_CONFIG")


def pytest_terminal_summary(terminalreporter, config):
    """The random order's seed again at the end, where a failure is read (-q hides the
    header that also shows it)."""
    seed = getattr(config.option, "random_order_seed", None)
    if seed and getattr(config.option, "random_order_enabled", False):
        seed = seed.removeprefix("default:")
        terminalreporter.write_line(f"random order seed {seed}: replay this order with "
                                    f"--random-order-seed={seed}")


@pytest.fixture(scope="session", autouse=True)
def autograph_sources_in_the_sessions_tmp(tmp_path_factory) -> Iterator[None]:
    """TF's autograph writes each function it converts to a temp file that it deletes at
    exit; a pytest-xdist worker leaves without running atexit, so a test process's files
    go to the session's temp dir (which pytest prunes) instead of staying in /tmp."""
    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path_factory.mktemp("autograph-sources"))
    yield
    tempfile.tempdir = before


@pytest.fixture(autouse=True)
def environment_left_as_found():
    """Fails the test (at its teardown, after monkeypatch's undo) that changed one of
    WATCHED_ENVIRONMENT in os.environ: the leak is fixed where it happens, not here."""
    before = {name: os.environ.get(name) for name in WATCHED_ENVIRONMENT}
    yield
    changed = {name: (before[name], os.environ.get(name)) for name in WATCHED_ENVIRONMENT
               if os.environ.get(name) != before[name]}
    assert not changed, f"the test changed os.environ (before, after): {changed}"


def child_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def stop_process_tree(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM a process we started and its children (by pid), SIGKILL what remains."""
    try:
        parent = psutil.Process(process.pid)
        family = [parent] + parent.children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for proc in family:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass


SCRIPT = REPO / "scripts" / "launch_cluster.sh"


def stop_run(logdir: Path) -> None:
    """Stop whatever of the run in `logdir` is still up, with the launcher's own `stop`: it
    signals only the processes its pid files name while they are ours (the launcher, which
    stops its tasks in order; without it, the tasks, workers first) and kills what is left."""
    if not (logdir / "pids" / "launcher.pid").exists():
        return
    from a3c_graph.launcher import commands

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        commands.main(["stop", "--logdir", str(logdir)])


def run_to_end(argv: Sequence, *, timeout: float | None, logdir: Path | None = None,
               **popen_kwargs) -> subprocess.CompletedProcess:
    """`argv` run to its end in its own session, its output captured, like subprocess.run.

    On every way out (past `timeout`, or a test interrupted by pytest-timeout or Ctrl-C), what
    it started is stopped: the run in `logdir`, if it is a launcher's (stop_run), then the
    process and its descendants by pid (subprocess.run would kill only the one process and
    leave a launcher's tasks, or a harness's runs, behind).
    """
    argv = [str(arg) for arg in argv]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, **popen_kwargs)
    stdout = stderr = ""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{shlex.join(argv)} did not finish in {timeout} s")
    finally:
        if logdir is not None:
            stop_run(logdir)
        if process.poll() is None:
            stop_process_tree(process)
            stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def run_launcher(*args, logdir: Path, timeout: float | None, cwd: Path = REPO,
                 **env: str) -> subprocess.CompletedProcess:
    """scripts/launch_cluster.sh ARGS --logdir LOGDIR to its end (run_to_end: whatever of the
    run is still up afterwards, on every path, is stopped). The environment is ours, less
    TF_CONFIG, plus `env`."""
    environ = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    environ.update(env)
    return run_to_end([SCRIPT, *args, "--logdir", logdir], timeout=timeout, logdir=logdir,
                      cwd=cwd, env=environ)


def last_json_line(stdout: str) -> dict:
    """The JSON object a command printed as its last line (its summary)."""
    return json.loads(stdout.strip().splitlines()[-1])


class FinishedRun(NamedTuple):
    summary: dict  # the line the launcher printed last, which is summary.json
    stdout: str
    logdir: Path


def needs_minatar() -> None:
    """Skip the calling test unless MinAtar is installed (make installs it)."""
    pytest.importorskip("minatar", reason="minatar is not installed: "
                                          "pip install --no-deps minatar==1.0.15")


def train_to_end(tmp_path: Path, *flags: str, timeout: float = 300, **env: str) -> FinishedRun:
    """scripts/launch_cluster.sh FLAGS run to its end in tmp_path (log dir tmp_path/run, through
    run_launcher: nothing left running on any path). It must succeed, and its last line must be
    the summary.json it left."""
    logdir = tmp_path / "run"
    result = run_launcher(*flags, logdir=logdir, timeout=timeout, cwd=tmp_path, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = last_json_line(result.stdout)
    assert summary == json.loads((logdir / "summary.json").read_text())
    return FinishedRun(summary, result.stdout, logdir)


def assert_one_update_per_rollout(summary: dict, rollout_length: int, envs: int) -> None:
    """Every rollout of `rollout_length` steps of `envs` envs made one update (give or take the
    other worker's update, half applied when the last counters were read)."""
    samples = rollout_length * envs
    assert abs(summary["global_step"] * samples - summary["env_steps"]) <= samples, summary


def evaluate_run(logdir: Path, episodes: int, *flags: str, timeout: float = 300) -> dict:
    """`python -m a3c_graph.evaluate --logdir LOGDIR --episodes N FLAGS` as a user runs it
    (run_to_end: nothing left running on any path); it must succeed and play `episodes`.
    Returns its last line, the summary's JSON."""
    result = run_to_end([sys.executable, "-m", "a3c_graph.evaluate", "--logdir", logdir,
                         "--episodes", episodes, *flags], timeout=timeout, cwd=REPO,
                        env=child_env())
    assert result.returncode == 0, result.stderr[-2000:]
    summary = last_json_line(result.stdout)
    assert summary["episodes"] == episodes, summary
    return summary


@pytest.fixture
def run_cleanup():
    """Register log dirs whose runs are stopped (stop_run) after the test, however it ends."""
    logdirs: list[Path] = []
    yield logdirs.append
    for logdir in logdirs:
        stop_run(logdir)


# The observation statistics an untrained run with --normalize-observations holds: 50
# observations of mean 0.3 and standard deviation 2 in every entry.
UNTRAINED_STATISTICS = {"count": 50, "mean": 0.3, "std": 2.0}


def untrained_run(logdir: Path, **given) -> None:
    """A run dir a3c_graph.evaluate can play: config.json and a checkpoint of an untrained
    network (8 hidden units) of CartPole, or of the config `given` (A3CConfig fields; the
    preset fills in the rest); with --normalize-observations, the observation statistics
    of UNTRAINED_STATISTICS."""
    import tensorflow as tf

    from a3c_graph.core.config import resolve_config
    from a3c_graph.core.envs import env_info, env_options
    from a3c_graph.core.model import build_network
    from a3c_graph.core.normalization import RunningStatistics

    config = resolve_config({"hidden_sizes": (8,), **given})
    info = env_info(config.env, **env_options(config))
    logdir.mkdir()
    (logdir / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    with tf.Graph().as_default():
        network = build_network(info.obs_shape, info.actions, config, "global")
        variables, assigned = network.variables, []
        if config.normalize_observations:
            dim = math.prod(info.obs_shape)
            statistics = RunningStatistics(dim)
            n, mean, std = (UNTRAINED_STATISTICS[key] for key in ("count", "mean", "std"))
            assigned = [statistics.count.assign(n), statistics.sum.assign([n * mean] * dim),
                        statistics.sum_of_squares.assign([n * (std ** 2 + mean ** 2)] * dim)]
            variables = variables + statistics.variables
        saver = tf.compat.v1.train.Saver(var_list=variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(assigned)
            saver.save(session, str(logdir / "model.ckpt"), global_step=0)


def colored_pixels(png: Path) -> int:
    """The pixels of a PNG in colour: the lines, points and bars a matplotlib plot draws in
    its colour cycle, not its white background nor its black and gray axes, text and grid."""
    import matplotlib.image

    rgb = matplotlib.image.imread(png)[..., :3]
    return int((rgb.max(axis=-1) - rgb.min(axis=-1) > 0.25).sum())


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting to be reaped does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def checkpoint_step(logdir: Path) -> int:
    """Global step of the newest checkpoint the chief wrote (0 if none yet)."""
    try:
        text = (logdir / "checkpoint").read_text()
    except FileNotFoundError:
        return 0
    return int(re.search(r'model_checkpoint_path: ".*-(\d+)"', text).group(1))


def nsenter_command(pid: int, argv: Sequence[str]) -> list[str]:
    """`argv` run in the network namespace of process `pid` (ours), by nsenter, which execs it:
    the Popen's pid is the command's own. Its user namespace too when it has one of its own
    (an unprivileged holder), keeping our uid and gid."""
    command = ["nsenter", f"--target={pid}", "--net"]
    if os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user"):
        command += ["--user", "--preserve-credentials"]
    return [*command, *argv]


# Waits on stdin: the holder lives until we stop it (by its pid) or our end of the pipe closes.
HOLDER = ("import sys; from a3c_graph.system import netns; netns.enter_private_network(); "
          "print('ready', flush=True); sys.stdin.read()")
LISTENER = ("import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); sys.stdin.read()")


class PrivateNetwork:
    """A network namespace with only lo (system.netns), held open by a process we own."""

    def __init__(self) -> None:
        if shutil.which("nsenter") is None:
            pytest.skip("nsenter (util-linux) is needed to start tasks in a private network")
        self.holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=child_env(), cwd=REPO, text=True)
        if self.holder.stdout.readline().strip() != "ready":
            error = self.holder.communicate(timeout=30)[1].strip().splitlines()
            pytest.skip(f"no private network here: {error[-1] if error else 'holder died'}")

    def command(self, argv: Sequence[str]) -> list[str]:
        return nsenter_command(self.holder.pid, argv)

    @contextlib.contextmanager
    def taken_port(self) -> Iterator[int]:
        """A port that a process inside this network listens on while the block runs."""
        listener = subprocess.Popen(self.command([sys.executable, "-c", LISTENER]),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            yield int(listener.stdout.readline())
        finally:
            listener.kill()  # by its pid
            listener.communicate()

    def stop(self) -> None:
        self.holder.kill()  # by its pid; it holds nothing worth a clean exit
        self.holder.communicate()


@pytest.fixture(scope="session")
def private_network() -> Iterator[PrivateNetwork]:
    network = PrivateNetwork()
    yield network
    network.stop()


class LocalCluster:
    """ps and worker tasks started one by one with `python -m a3c_graph.worker`, in a private
    network."""

    def __init__(self, tmp_path: Path, network: PrivateNetwork, workers: int = 2, ps: int = 1):
        # Free on the host, and so in the network too (a new namespace has every port free).
        ports = [portpicker.pick_unused_port() for _ in range(ps + workers)]
        self.ps_hosts = ",".join(f"127.0.0.1:{p}" for p in ports[:ps])
        self.worker_hosts = ",".join(f"127.0.0.1:{p}" for p in ports[ps:])
        self.num_ps, self.num_workers = ps, workers
        self.tmp_path = tmp_path
        self.network = network
        self.processes: list[subprocess.Popen] = []

    def start(self, job: str, task: int, *flags: str) -> subprocess.Popen:
        log = open(self.tmp_path / f"{job}_{task}_{len(self.processes)}.log", "w")
        cmd = [sys.executable, "-m", "a3c_graph.worker", "--job", job, "--task", str(task),
               "--ps-hosts", self.ps_hosts, "--worker-hosts", self.worker_hosts, *flags]
        process = subprocess.Popen(self.network.command(cmd), stdout=log,
                                   stderr=subprocess.STDOUT, env=child_env(), cwd=REPO,
                                   start_new_session=True)
        process.log_path = log.name  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                stop_process_tree(process)


@pytest.fixture
def local_cluster(tmp_path, private_network):
    clusters: list[LocalCluster] = []

    def make(**kwargs) -> LocalCluster:
        cluster = LocalCluster(tmp_path, private_network, **kwargs)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop_all()


_child_runs = itertools.count()


def run_in_cluster(network: PrivateNetwork, tmp_path: Path, function: str, num_ps: int = 1,
                   timeout: float = 240, **kwargs):
    """What `function` ("module:name") returns, called with keyword arguments `kwargs` in a
    child process that hosts a cluster of real TF servers (tests/support/cluster_child.py) in
    `network`. The child is stopped by its pid on every path: no server outlives the test."""
    workdir = tmp_path / f"cluster_child_{next(_child_runs)}"
    workdir.mkdir()
    (workdir / "in.pickle").write_bytes(pickle.dumps(kwargs))
    argv = [sys.executable, "-m", "tests.support.cluster_child", function, str(num_ps),
            str(workdir)]
    process = subprocess.Popen(network.command(argv), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=child_env(), cwd=REPO, text=True,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{function} in a cluster child did not finish in {timeout} s")
    finally:
        if process.poll() is None:
            stop_process_tree(process)
    assert process.returncode == 0, f"{function} failed in its cluster child:\n{output[-4000:]}"
    return pickle.loads((workdir / "out.pickle").read_bytes())


@pytest.fixture
def in_cluster(private_network, tmp_path):
    """run_in_cluster(function, num_ps=1, **kwargs) in this test's private network."""
    return lambda function, **kwargs: run_in_cluster(private_network, tmp_path, function,
                                                     **kwargs)

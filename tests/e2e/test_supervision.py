"""Crashes a long run survives: real clusters started by the launcher, tasks killed with -9.

Each test starts its own run (training, with a first checkpoint) and kills one task of it,
or asks the launcher to stop: a worker, the chief, the ps. The contract: a dead task comes
back and rejoins; the global step never goes back further than the last checkpoint (only a
ps's death needs the checkpoint at all); a stop leaves a final checkpoint, a summary and no
process behind. Each passes alone and in any order; every process is stopped by its pid.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import alive, checkpoint_step, stop_process_tree, stop_run

from a3c_graph.rundir.progress import read_progress

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--rollout-length", "16", "--envs-per-worker", "4", "--progress-secs", "0.5"]

pytestmark = pytest.mark.e2e


def launcher_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.pop("TF_CONFIG", None)
    return env


def start_launcher(logdir: Path, *flags: str) -> subprocess.Popen:
    out = open(logdir.parent / f"{logdir.name}.out", "w")
    err = open(logdir.parent / f"{logdir.name}.err", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "a3c_graph.launch", "--logdir", str(logdir), *flags],
        cwd=REPO, env=launcher_env(), stdout=out, stderr=err, start_new_session=True)


def stop_everything(process: subprocess.Popen, logdir: Path) -> None:
    """Cleanup by the run's own, checked pids (the launcher's `stop`: the launcher first,
    then what it left), then our launcher process by its pid if it still runs."""
    stop_run(logdir)
    if process.poll() is None:
        stop_process_tree(process)


def pid_of(logdir: Path, name: str) -> int:
    return int((logdir / "pids" / f"{name}.pid").read_text())




class Watch:
    """Polls the run: the newest global step any worker reported, and the lowest since a mark."""

    def __init__(self, process: subprocess.Popen, logdir: Path):
        self.process, self.logdir = process, logdir
        self.lowest_since_mark: int | None = None
        self.mark_time = 0.0
        self.ignored_pids: set[int] = set()

    def poll(self) -> dict[int, dict]:
        progress = read_progress(self.logdir)
        for data in progress.values():
            if (data["time"] > self.mark_time and data["state"] == "running"
                    and data["pid"] not in self.ignored_pids):
                step = data["global_step"]
                if self.lowest_since_mark is None or step < self.lowest_since_mark:
                    self.lowest_since_mark = step
        return progress

    def mark(self, ignore_pids=()) -> None:
        """From now on, note the lowest global step reported, except by `ignore_pids`."""
        self.mark_time, self.lowest_since_mark = time.time(), None
        self.ignored_pids = set(ignore_pids)

    def until(self, what: str, done, timeout: float = 120.0):
        deadline = time.monotonic() + timeout
        while True:
            result = done(self.poll())
            if result:
                return result
            if self.process.poll() is not None:
                pytest.fail(f"the launcher exited ({self.process.returncode}) while waiting for "
                            f"{what}: {self.logdir.parent / (self.logdir.name + '.err')}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}; logs in {self.logdir / 'logs'}")
            time.sleep(0.2)

    def training_again(self, task: int, old_pid: int, beyond_step: int):
        """Wait until a new process of worker `task` trains and the global step passed a value."""
        def done(progress):
            data = progress.get(task)
            return (data is not None and data["pid"] != old_pid and data["state"] == "running"
                    and data["local_env_steps"] > 0 and data["global_step"] > beyond_step)
        self.until(f"worker {task} to train again past global step {beyond_step}", done)

    def new_pid(self, name: str, old_pid: int) -> int:
        return self.until(f"a new {name}", lambda _: (
            (pid := pid_of(self.logdir, name)) != old_pid and alive(pid) and pid))


@pytest.fixture
def run(tmp_path):
    logdir = tmp_path / "run"
    process = start_launcher(logdir, "--workers", "2", "--max-seconds", "600",
                             "--target-return", "100000", "--checkpoint-secs", "2", *SMALL)
    watch = Watch(process, logdir)
    try:
        watch.until("training and a first checkpoint", lambda progress: (
            len(progress) == 2 and all(d["global_step"] > 30 for d in progress.values())
            and checkpoint_step(logdir) > 0))
        yield watch
    finally:
        stop_everything(process, logdir)


def test_a_killed_worker_is_restarted_and_rejoins_training(run):
    old = pid_of(run.logdir, "worker_1")
    step = run.poll()[1]["global_step"]
    os.kill(old, signal.SIGKILL)
    run.new_pid("worker_1", old)
    run.training_again(1, old, beyond_step=step)


def test_a_killed_chief_is_restarted_and_carries_on_from_the_live_globals(run):
    old = pid_of(run.logdir, "worker_0")
    step = run.poll()[1]["global_step"]
    run.mark()
    os.kill(old, signal.SIGKILL)
    run.new_pid("worker_0", old)
    run.training_again(0, old, beyond_step=step)
    # The ps kept the globals (newer than any checkpoint): nothing is rolled back, and the
    # new chief checkpoints again.
    assert run.lowest_since_mark is not None and run.lowest_since_mark >= step
    run.until("a checkpoint from the new chief", lambda _: checkpoint_step(run.logdir) > step)
    assert "carries on from the variables on the ps" in (
        run.logdir / "logs" / "worker_0.log").read_text()


def test_a_killed_ps_is_restarted_and_the_cluster_recovers_from_the_checkpoint(run):
    old_ps = pid_of(run.logdir, "ps_0")
    workers = [pid_of(run.logdir, f"worker_{i}") for i in range(2)]
    saved = checkpoint_step(run.logdir)
    assert saved > 0
    # Until they are restarted, the old workers may still report their own last view of the
    # global step, which can be behind the newest checkpoint (the other worker's update
    # reached it): only the new processes must carry on from the checkpoint.
    run.mark(ignore_pids=workers)
    os.kill(old_ps, signal.SIGKILL)
    run.new_pid("ps_0", old_ps)
    # A new ps has empty variables: the workers notice, are restarted, and the chief
    # restores the globals from the checkpoint before anyone trains again.
    for task, old in enumerate(workers):
        run.training_again(task, old, beyond_step=saved)
    # The global step carries on from the checkpoint (the newest: one may have been written
    # after `saved` was read), never from 0.
    assert run.lowest_since_mark is not None and run.lowest_since_mark >= saved
    restored = re.findall(r"restores \S+-(\d+)$", (run.logdir / "logs" / "worker_0.log")
                          .read_text(), re.MULTILINE)
    assert restored and int(restored[-1]) >= saved
    # The run still ends as a run does, its summary counting the ps's one restart.
    run.process.send_signal(signal.SIGTERM)
    assert run.process.wait(timeout=60) == 143
    summary = json.loads((run.logdir / "summary.json").read_text())
    assert summary["restarts"]["ps_0"] == 1
    assert summary["global_step"] > int(restored[-1])


def test_sigterm_stops_every_task_with_a_final_checkpoint_and_a_summary(run):
    pids = [pid_of(run.logdir, name) for name in ("ps_0", "worker_0", "worker_1")]
    run.process.send_signal(signal.SIGTERM)
    assert run.process.wait(timeout=60) == 143
    summary = json.loads((run.logdir / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    # Every task left on its SIGTERM: none had to be killed, none was restarted.
    assert summary["task_exit_codes"] == {"ps_0": 0, "worker_0": 0, "worker_1": 0}
    assert summary["restarts"] == {}
    assert not [pid for pid in pids if alive(pid)]
    final = read_progress(run.logdir)[0]
    assert final["state"] == "done" and final["stop_reason"] == "signal"
    assert checkpoint_step(run.logdir) >= final["global_step"]


def test_updates_that_stay_nan_are_skipped_and_the_run_stops_with_the_reason(tmp_path):
    logdir = tmp_path / "nan"
    process = start_launcher(logdir, "--workers", "1", "--max-seconds", "300",
                             "--env", "tests.support.faulty_env:NaNCartPole-v0", *SMALL)
    try:
        assert process.wait(timeout=240) == 1
    finally:
        stop_everything(process, logdir)
    errors = (tmp_path / "nan.err").read_text().splitlines()
    assert errors[-1].startswith("launch_cluster: error: worker task 0 gave up: worker 0: 20 "
                                 "updates in a row had a NaN/inf loss or gradients"), errors
    assert "skipped an update" in (logdir / "logs" / "worker_0.log").read_text()
    assert json.loads((logdir / "summary.json").read_text())["restarts"] == {}
    # The NaNs never reached the weights: the final checkpoint is finite.
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(logdir))
    weights = [name for name in reader.get_variable_to_shape_map() if name.startswith("global/")]
    assert weights
    for name in weights:
        assert all(math.isfinite(x) for x in reader.get_tensor(name).ravel()), name


def test_a_worker_without_a_ps_says_so_and_gives_up_after_the_connect_timeout(local_cluster,
                                                                              tmp_path):
    cluster = local_cluster(workers=1)  # its ps is never started
    worker = cluster.start("worker", 0, "--logdir", str(tmp_path / "run"),
                           "--connect-timeout", "3")
    assert worker.wait(timeout=120) == 69
    log = Path(worker.log_path).read_text()
    assert "waiting for ps task 0 at " + cluster.ps_hosts in log
    assert log.rstrip().splitlines()[-1] == (
        f"a3c_graph.worker: error: ps task 0 at {cluster.ps_hosts} did not answer within "
        "--connect-timeout 3 s; is it running and reachable?")

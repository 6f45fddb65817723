"""TF2 A3C on Ray actors: N worker actors and one parameter actor on a local Ray instance.

    python -m benchmarks.variants.tf2_ray --workers 2 --logdir D [A3C flags] [--gpus 0,1]
        [--allow-remote]

Process design (what Ray's documentation recommends for a parameter server: one actor
method call per update, arguments by value, numpy arrays zero-copy):

    WorkerActor i:   benchmarks.variants.tf2_worker inside one long-running `train` call:
                     --actor-threads actor threads put whole rollouts (one tf.function call
                     each) on a queue.Queue(maxsize=--queue-capacity); the learner takes the
                     next one and makes one call, ParameterActor.update, with the clipped
                     gradients as one flat numpy array passed by value (Ray inlines small
                     arguments and moves large ones through its object store itself; a
                     ray.put of an object used once only adds a round trip), and sets its
                     local copy from the flat weights that call returns, with one
                     tf.function call, while the actors go on acting.
    ParameterActor:  applies each update with the shared Adam and returns the weights after
                     it in the same call (Ray runs one actor's calls one at a time, so no
                     update races another), counts steps/episodes, and decides when each
                     worker stops (tf2_common.ParameterHolder). It runs on the CPU.

The driver (this module's main) never imports TF: each actor imports it in its own process
after choosing its device, and only numpy weights and gradients cross process boundaries.
Ray is started locally (`address="local"`: never someone else's cluster) with num_cpus set,
no dashboard and quiet logs, in a private network (benchmarks.common.enter_private_network:
Ray's servers listen on every interface and authenticate no one); at the end
`ray.shutdown()` and every process Ray started (gcs_server, raylet, workers, agents: all
descendants of the driver) is checked by pid and ended if still there. The actors' TMPDIR
is a directory of the run's own, removed at the end: Ray ends its actors without their exit
handlers, where TF would delete the source its autograph writes for every tf.function (Ray's
own session logs stay where Ray keeps them: ray/ in $RAY_TMPDIR, else $TMPDIR, else /tmp).
Files and exit status as benchmarks.variants.tf2_multiprocessing.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import ray

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.run_spec import describe_target
from a3c_graph.rundir.progress import ProgressFile
from a3c_graph.system.cli import EXIT_CRASH, StopSignals, first_line
from a3c_graph.system.processes import descendants
from benchmarks import common
from benchmarks.variants import tf2_run

VARIANT = "tf2_ray"
PROG = "benchmarks.variants.tf2_ray"
POLL_SECS = 0.2
# After a stop request, how long the workers get to finish their rollout and return.
STOP_TIMEOUT_SECS = 15.0
# ray.shutdown() signals its processes; this is how long they get to exit before we do.
RAY_EXIT_TIMEOUT_SECS = 10.0
# The object store holds only weights and gradients of a small network.
OBJECT_STORE_BYTES = 128 * 1024**2


@ray.remote(num_cpus=1)
class ParameterActor:
    """The network every worker trains, the shared Adam, and the run's global counters."""

    def __init__(self, config: A3CConfig):
        tf2_run.pin_visible_gpus((), 0)  # the ps runs on the CPU, as the graph variant's
        from benchmarks.variants import tf2_common  # TF is imported in the actor, never the driver

        self.holder = tf2_common.ParameterHolder(config, tf2_common.configure_tensorflow(config))

    def initial(self):
        return self.holder.initial()

    def update(self, result):
        """Apply one worker's update (tf2_common.RolloutResult); its Reply."""
        return self.holder.update(result)

    def request_stop(self, reason: str) -> None:
        """From the driver (a signal, the deadline): workers learn it from their next reply."""
        self.holder.request_stop(reason)


@ray.remote(num_cpus=1)
class WorkerActor:
    """One worker: envs, a local copy of the network, and its progress file."""

    def __init__(self, task: int, config: A3CConfig, gpus: Sequence[str], logdir: str):
        tf2_run.pin_visible_gpus(gpus, task)
        self.progress = ProgressFile(Path(logdir), task, float(config.target_return),
                                     config.progress_secs)
        self.progress.write("starting")
        from benchmarks.variants import (
            tf2_common,
            tf2_worker,  # TF is imported in the actor
        )

        self.worker = tf2_worker.TF2Worker(config, task, tf2_common.configure_tensorflow(config))

    def train(self, parameters) -> str:
        """Rollouts until the parameter actor says stop; returns its stop reason."""
        from benchmarks.variants import tf2_worker  # imported by __init__ already

        initial = ray.get(parameters.initial.remote())
        self.worker.adopt(initial)
        # One call per update: the gradients go by value, the weights after it come back.
        return tf2_worker.train(self.worker, self.progress,
                                lambda result: ray.get(parameters.update.remote(result)),
                                lambda: False)


class RayDidNotStart(ray.exceptions.RayError):
    pass


def start_ray(num_cpus: int, actors_temp_dir: str) -> None:
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage report over the network
    try:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                 logging_level=logging.ERROR, log_to_driver=False,
                 object_store_memory=OBJECT_STORE_BYTES,
                 runtime_env={"env_vars": {"TMPDIR": actors_temp_dir}})
    except Exception as error:  # ray.init's own are plain Exceptions (a start-up timed out)
        raise RayDidNotStart(error) from error


def wait_for_workers(pending: list, parameters, signals: StopSignals,
                     run: tf2_run.VariantRun, started: float) -> tuple[int, str | None]:
    """Wait for every worker's `train` call; (exit code, stop reason that overrides theirs)."""
    stop_by: float | None = None
    exit_code, reason = 0, None
    while pending:
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_SECS)
        ray.get(done)  # re-raises a worker's exception here
        if stop_by is None and (signals.received is not None
                                or tf2_run.past_backstop(run, started)):
            if signals.received is not None:
                exit_code, reason = signals.exit_code, "interrupted"
            else:
                reason = "deadline"
            parameters.request_stop.remote("signal")
            stop_by = time.monotonic() + STOP_TIMEOUT_SECS
        if stop_by is not None and time.monotonic() >= stop_by:
            break  # ray.shutdown() ends the workers still in a rollout
    return exit_code, reason


def main(argv: Sequence[str] | None = None) -> int:
    return tf2_run.run_variant(PROG, VARIANT, __doc__, argv, train)


def train(run: tf2_run.VariantRun, signals: StopSignals, started: float) -> tuple[int, str]:
    """The run on Ray, its actors' temporary files removed after: (exit code, reason)."""
    with tempfile.TemporaryDirectory(prefix=f"{VARIANT}-",
                                     ignore_cleanup_errors=True) as actors_temp_dir:
        return run_on_ray(run, signals, started, actors_temp_dir)


def run_on_ray(run: tf2_run.VariantRun, signals: StopSignals, started: float,
               actors_temp_dir: str) -> tuple[int, str]:
    """Ray started, the actors trained, Ray and all it started ended: (exit code, reason)."""
    exit_code, reason = EXIT_CRASH, "crash"
    try:
        start_ray(run.workers + 1, actors_temp_dir)
        # Ray's core worker installs a crash handler for SIGTERM in the driver that kills it
        # on the spot; ours stops the actors in order and still writes the summary.
        signals.install()
        parameters = ParameterActor.remote(run.config)
        workers = [WorkerActor.remote(task, run.config, run.gpus, str(run.logdir))
                   for task in range(run.workers)]
        pending = [worker.train.remote(parameters) for worker in workers]
        print(f"{PROG}: started Ray with 1 parameter actor + {run.workers} worker actor(s), "
              f"target return {describe_target(run.config.target_return)}", flush=True)
        exit_code, reason = wait_for_workers(pending, parameters, signals, run, started)
    except ray.exceptions.RayError as error:
        what = "Ray did not start" if isinstance(error, RayDidNotStart) else "an actor failed"
        print(f"{PROG}: error: {what}: {first_line(error)}", file=sys.stderr, flush=True)
    finally:
        # Everything Ray started is a descendant of this process: remember them all before
        # shutdown, then make sure each is gone (by pid, never by name).
        ray_processes = descendants(psutil.Process())
        if ray.is_initialized():
            ray.shutdown()
        left = common.end_leftovers(ray_processes, RAY_EXIT_TIMEOUT_SECS)
        if left:
            print(f"{PROG}: warning: ended Ray process(es) left after shutdown: "
                  f"{', '.join(left)}", file=sys.stderr, flush=True)
    return exit_code, reason


if __name__ == "__main__":
    sys.exit(main())

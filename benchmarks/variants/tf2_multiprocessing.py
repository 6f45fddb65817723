"""TF2 A3C over multiprocessing: N worker processes and one parameter-server process.

    python -m benchmarks.variants.tf2_multiprocessing --workers 2 --logdir D [A3C flags]
        [--gpus 0,1] [--allow-remote]

Process design (all children use the `spawn` start method: forking a process that has
imported TF hangs, so this main process never imports TF; each child imports it itself,
after choosing its device with CUDA_VISIBLE_DEVICES):

    worker i:  benchmarks.variants.tf2_worker: --actor-threads actor threads put whole rollouts (one
               tf.function call each) on a queue.Queue(maxsize=--queue-capacity); the
               learner takes the next one, puts its clipped gradients (one flat numpy
               array) on the shared gradient queue, and sets its local copy from the flat
               weights that come back on its own queue, while the actors go on acting.
    ps:        take gradients in arrival order from every worker, apply each with the
               shared Adam and send the applying worker the weights after it with the
               global counters, on that worker's queue (tf2_common.ParameterHolder: one
               tf.function call); once the run is solved, or the worker's budget is spent,
               the reply tells the worker to stop instead. The ps runs on the CPU.

Like the graph variant, each worker writes progress/worker_<i>.json with the global
counters it was last sent, and this main process writes summary.json and prints it as the
last stdout line. Every process runs in a private network, as every benchmark's does
(benchmarks.common.enter_private_network; --allow-remote: the host network). Exit status:
0 after a normal stop, 2 for bad flags or a private network the kernel refused, 1 if a
child crashed, 130/143 after SIGINT/SIGTERM.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.run_spec import describe_target
from a3c_graph.rundir.progress import ProgressFile
from a3c_graph.system.cli import EXIT_CRASH, StopSignals
from a3c_graph.system.processes import stop_in_order
from benchmarks.variants import tf2_run

VARIANT = "tf2_mp"
PROG = "benchmarks.variants.tf2_multiprocessing"
# Every blocking get wakes up this often to check the stop event: no child can hang on a
# queue whose other end is gone.
GET_TIMEOUT_SECS = 0.5
POLL_SECS = 0.2
# After the workers stop, how long the ps and the workers get to exit on their own.
JOIN_TIMEOUT_SECS = 15.0
# Then, for a child that hangs: SIGTERM -> SIGKILL, and SIGKILL -> reaped.
KILL_AFTER_SECS = 3.0


# --------------------------------------------------------------------------- children

def parameter_server_main(config: A3CConfig, num_workers: int, gradient_queue,
                          weight_queues, stop_event) -> None:
    """Process target of the ps: apply gradients until every worker was told to stop."""
    tf2_run.pin_visible_gpus((), 0)  # the ps runs on the CPU, as the graph variant's
    from benchmarks.variants import tf2_common  # TF is imported here, in the child, never in main

    holder = tf2_common.ParameterHolder(config, tf2_common.configure_tensorflow(config))
    first = holder.initial()
    for weight_queue in weight_queues:
        weight_queue.put(first)
    told_to_stop: set[int] = set()
    while len(told_to_stop) < num_workers and not stop_event.is_set():
        try:
            result = gradient_queue.get(timeout=GET_TIMEOUT_SECS)
        except queue.Empty:
            continue
        reply = holder.update(result)
        if reply.stop_reason is not None:
            told_to_stop.add(result.task)
        weight_queues[result.task].put(reply)


def _next_reply(weight_queue, stop_event):
    """The ps's next reply, or None once the run is being stopped from outside."""
    while not stop_event.is_set():
        try:
            return weight_queue.get(timeout=GET_TIMEOUT_SECS)
        except queue.Empty:
            continue
    return None


def worker_main(task: int, config: A3CConfig, gpus: Sequence[str], logdir: str,
                gradient_queue, weight_queue, stop_event) -> None:
    """Process target of worker `task`: rollouts and gradients until the ps says stop."""
    tf2_run.pin_visible_gpus(gpus, task)
    progress = ProgressFile(logdir, task, float(config.target_return), config.progress_secs)
    progress.write("starting")
    # TF is imported here, in the child, never in main
    from benchmarks.variants import tf2_common, tf2_worker

    worker = tf2_worker.TF2Worker(config, task, tf2_common.configure_tensorflow(config))
    first = _next_reply(weight_queue, stop_event)
    if first is None:
        worker.stop()
        progress.write("done", stop_reason="signal")
        return
    worker.adopt(first)

    def exchange(result):
        gradient_queue.put(result)
        return _next_reply(weight_queue, stop_event)

    reason = tf2_worker.train(worker, progress, exchange, stop_event.is_set)
    if reason == "signal":
        # The ps may be gone and never read our last message: don't wait to flush it.
        gradient_queue.cancel_join_thread()


# --------------------------------------------------------------------------- main

@dataclass
class Channels:
    """The queues and the stop event, shared by every child.

    Main keeps this object alive until the children are gone: a queue collected in the
    parent unlinks its semaphore, and a spawned child that unpickles it later would fail.
    """

    gradient_queue: Any
    weight_queues: list
    stop_event: Any


def start_processes(run: tf2_run.VariantRun, ctx) -> tuple[list, Channels]:
    """The ps (first) and the workers, started, and the channels between them."""
    channels = Channels(ctx.Queue(), [ctx.Queue() for _ in range(run.workers)], ctx.Event())
    processes = [ctx.Process(
        target=parameter_server_main, name="ps", daemon=True,
        args=(run.config, run.workers, channels.gradient_queue, channels.weight_queues,
              channels.stop_event))]
    for task in range(run.workers):
        processes.append(ctx.Process(
            target=worker_main, name=f"worker_{task}", daemon=True,
            args=(task, run.config, run.gpus, str(run.logdir), channels.gradient_queue,
                  channels.weight_queues[task], channels.stop_event)))
    for process in processes:
        process.start()
    return processes, channels


def supervise(processes: list, stop_event, signals: StopSignals, run: tf2_run.VariantRun,
              started: float) -> tuple[int, str | None]:
    """Wait for the workers to stop; (exit code, stop reason that overrides theirs)."""
    ps, workers = processes[0], processes[1:]
    while True:
        if signals.received is not None:
            stop_event.set()
            return signals.exit_code, "interrupted"
        crashed = [p for p in processes if p.exitcode not in (None, 0)]
        if crashed:
            stop_event.set()
            print(f"{PROG}: error: {crashed[0].name} exited with status {crashed[0].exitcode}",
                  file=sys.stderr, flush=True)
            return EXIT_CRASH, "crash"
        if all(p.exitcode == 0 for p in workers):
            return 0, None
        if ps.exitcode == 0:
            # The ps only ends after telling every worker to stop; they are on their way.
            stop_event.set()
        if tf2_run.past_backstop(run, started):
            stop_event.set()
            return 0, "deadline"
        time.sleep(POLL_SECS)


def shut_down(processes: list, stop_event) -> None:
    """Let every child exit on its own (the stop event is set); stop what hangs
    (stop_in_order: SIGTERM, KILL_AFTER_SECS, SIGKILL) and reap them all."""
    stop_event.set()
    end = time.monotonic() + JOIN_TIMEOUT_SECS
    for process in processes:
        process.join(timeout=max(0.0, end - time.monotonic()))
    hanging = []
    for process in processes:
        if process.is_alive():
            with contextlib.suppress(psutil.Error):  # it ended meanwhile
                hanging.append(psutil.Process(process.pid))
    stop_in_order([hanging], KILL_AFTER_SECS)
    for process in processes:
        process.join(timeout=KILL_AFTER_SECS)


def main(argv: Sequence[str] | None = None) -> int:
    return tf2_run.run_variant(PROG, VARIANT, __doc__, argv, train)


def train(run: tf2_run.VariantRun, signals: StopSignals, started: float) -> tuple[int, str]:
    """The ps and worker processes started, supervised to the run's end, and every one of
    them ended: (exit code, stop reason)."""
    ctx = mp.get_context("spawn")
    processes: list = []
    channels: Channels | None = None
    exit_code, reason = EXIT_CRASH, "crash"
    try:
        processes, channels = start_processes(run, ctx)
        print(f"{PROG}: started 1 ps + {run.workers} worker process(es), target return "
              f"{describe_target(run.config.target_return)}", flush=True)
        exit_code, reason = supervise(processes, channels.stop_event, signals, run, started)
    finally:
        # Every path, including a bug above, ends with no child left running.
        if channels is not None:
            shut_down(processes, channels.stop_event)
    return exit_code, reason


if __name__ == "__main__":
    sys.exit(main())

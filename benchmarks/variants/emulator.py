"""The env alone: the machine's limit for an env setup, the denominator of every speed figure.

    python -m benchmarks.variants.emulator --workers 2 --logdir D [A3C flags]

One process per worker (spawned, no TensorFlow anywhere), each stepping the batch of envs a
worker's actor steps (a3c_graph.core.envs.EnvBatch with the run's env id, --envs-per-worker
and env options: for ALE ids ale-py's vector env with the frame skip, sticky actions,
resize and frame stack) with uniformly random actions, as fast as it can, until
--max-seconds are spent. With --workers equal to the number of cores, that is what the
machine's emulator can give an agent that spends nothing on acting or learning.

It writes what every variant writes (progress/worker_0.json and its history, summary.json),
so benchmarks.run measures it on the one clock: start-up ends once every process has built
its envs, and steps/s counts the env steps between the first report and the final one.
Exit status: 0 after --max-seconds, 2 for bad flags, 1 if a child crashed, 130/143 after
SIGINT/SIGTERM.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys
import time
from collections.abc import Sequence

import numpy as np

from a3c_graph.system.cli import EXIT_CRASH, StopSignals
from benchmarks.variants import tf2_run
from benchmarks.variants.tf2_multiprocessing import shut_down

VARIANT = "emulator"
PROG = "benchmarks.variants.emulator"
POLL_SECS = 0.1


def env_process_main(index: int, config, steps, ready, start, stop) -> None:
    """Process target: build the envs, say so, then step them with random actions until
    `stop`, adding each step's B env steps to steps[index] (only this process writes it)."""
    # A Ctrl-C reaches the whole process group: the main process stops this one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from a3c_graph.core.envs import EnvBatch, env_options

    batch = EnvBatch(config.env, config.envs_per_worker, seed=config.seed + 1000 * index,
                     **env_options(config))
    rng = np.random.default_rng(config.seed + index)
    B, num_actions = batch.num_envs, batch.info.actions.n
    ready.release()
    start.wait()
    while not stop.is_set():
        batch.step(rng.integers(0, num_actions, size=B, dtype=np.int32))
        steps[index] += B
    batch.close()


def measure(run: tf2_run.VariantRun, signals: StopSignals) -> tuple[int, str]:
    """Start the env processes, time them for --max-seconds; (exit code, stop reason)."""
    from a3c_graph.rundir.progress import ProgressFile

    ctx = mp.get_context("spawn")
    # One int64 per process, written by it alone and read here without a lock: a reading
    # a step behind changes nothing in a count of millions.
    steps = ctx.Array("q", run.workers, lock=False)
    ready, start, stop = ctx.Semaphore(0), ctx.Event(), ctx.Event()
    processes = [ctx.Process(target=env_process_main, name=f"env_{i}", daemon=True,
                             args=(i, run.config, steps, ready, start, stop))
                 for i in range(run.workers)]
    progress = ProgressFile(run.logdir, 0, float(run.config.target_return),
                            run.config.progress_secs)
    progress.write("starting")
    try:
        for process in processes:
            process.start()
        waiting = run.workers
        while waiting:
            if signals.received is not None:
                return signals.exit_code, "signal"
            if any(p.exitcode not in (None, 0) for p in processes):
                return _crashed(processes)
            waiting -= ready.acquire(timeout=POLL_SECS)
        start.set()
        counted = 0

        def report(state: str, stop_reason: str | None = None) -> None:
            nonlocal counted
            total = sum(steps)
            progress.update({"global_step": total, "env_steps": total, "episodes": 0},
                            total - counted)
            counted = total
            progress.write(state, stop_reason)

        report("running")  # start-up ends here, as at a learner's first update
        deadline = time.time() + run.config.max_seconds
        while time.time() < deadline:
            if signals.received is not None:
                report("done", "signal")
                return signals.exit_code, "signal"
            if any(p.exitcode is not None for p in processes):
                return _crashed(processes)
            if progress.due():
                report("running")
            time.sleep(POLL_SECS)
        report("done", "max_seconds")
        return 0, "max_seconds"
    finally:
        shut_down(processes, stop)


def _crashed(processes) -> tuple[int, str]:
    crashed = next(p for p in processes if p.exitcode is not None)
    print(f"{PROG}: error: {crashed.name} exited with status {crashed.exitcode}",
          file=sys.stderr, flush=True)
    return EXIT_CRASH, "crash"


def main(argv: Sequence[str] | None = None) -> int:
    # No server here, so no private network (--allow-remote is taken, and changes nothing).
    run = tf2_run.parse_variant_args(PROG, __doc__.split("\n\n")[0], argv, tf2=False)
    signals = StopSignals()
    signals.install()
    started = time.time()
    tf2_run.prepare_logdir(run.logdir)
    print(f"{PROG}: {run.workers} process(es) of {run.config.envs_per_worker} "
          f"{run.config.env} envs, random actions, {run.config.max_seconds:g} s", flush=True)
    exit_code, reason = measure(run, signals)
    tf2_run.write_summary(VARIANT, run, started, exit_code, reason)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())

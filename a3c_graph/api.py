"""The Python API: ``a3c_graph.train(...)`` returns a run's summary, ``a3c_graph.evaluate(...)``
the returns of the episodes a trained agent played.

Both go the commands' own way: keyword arguments become the command's flags and are read by
the command's parser, so a value the command would refuse is refused here with the same one
line (as a ValueError), before anything starts, and what runs is the code that runs behind
``launch_cluster.sh start`` (launcher/commands.supervise) and ``python -m a3c_graph.evaluate``
(evaluation.evaluate_runs).

They may run inside someone else's process: a notebook, a sweep script, a thread. Nothing here
calls sys.exit or leaves os.environ changed; signal handlers are installed only on the main
thread, and the caller's are back when the call returns. Progress goes to the logger
"a3c_graph" (and to an optional callback); the launcher's own lines still go to stdout and
stderr, as on the command line.

A private network is entered by one thread, not the caller's process: the run's tasks are
started from a thread of their own, which the kernel alone moves into a network namespace
with only loopback (netns.py). That takes the privilege to make one (root); without it, the
kernel makes the namespace only for a single-threaded process, which a library cannot
promise, so train() refuses with the command's line, and allow_remote=True runs the tasks on
the host network (a trusted one only: TF's server is unauthenticated gRPC).

Only the standard library and the TF-free config are imported here: `import a3c_graph` must
stay cheap, and a worker task sets its TF environment before TF loads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from a3c_graph.core.config import A3CConfig, config_to_argv
from a3c_graph.system.cli import StopSignals, UsageError, as_flags

if TYPE_CHECKING:
    from a3c_graph.rundir.progress import Totals
    from a3c_graph.trained.evaluation import Evaluation

logger = logging.getLogger("a3c_graph")


class RunFailed(RuntimeError):
    """A run that started and did not end well (a task crashed or gave up, no worker trained,
    the log dir could not be written). The message is the command's error line; `summary` is
    the run's summary.json, whose exit_code is the command's status."""

    def __init__(self, message: str, summary: dict) -> None:
        super().__init__(message)
        self.summary = summary


def train(config: A3CConfig | None = None, *, workers: int | None = None,
          ps: int | None = None, logdir: str | os.PathLike | None = None,
          allow_remote: bool = False, max_restarts: int | None = None,
          gpus: str | None = None, gpu_memory_fraction: float | None = None,
          cluster: str | None = None, tasks: str | None = None, port: int | None = None,
          on_progress: Callable[[Totals], None] | None = None, **config_fields: Any) -> dict:
    """Train: start a cluster, supervise it until the workers stop, return the run's summary.

    config: an A3CConfig; config_fields: any of its fields by name (hidden_sizes=(32,),
    max_steps=20_000, env="ALE/Pong-v5", ...), laid over `config`; fields given by neither
    come from the preset, as on the command line. The rest are the launcher's options
    (`launch_cluster.sh start --help`): workers, ps, logdir (default runs/<env>-<time>),
    allow_remote, max_restarts, gpus, gpu_memory_fraction, cluster (a cluster file, or
    "slurm"), tasks, port.

    on_progress: called about every 5 s and once at the end, in the calling thread, with the
    run's progress reading (a3c_graph.rundir.progress.Totals: global_step, env_steps, episodes,
    mean_return_100, ...); the same reading is logged to the "a3c_graph" logger at INFO. If
    it raises, the run is stopped in order and the exception goes on to the caller.

    Returns the summary that <logdir>/summary.json holds (env_steps, episodes,
    mean_return_100, solved, stop_reason, wall_seconds, logdir, exit_code 0, ...) once every
    worker stopped by itself: solved, or its budget spent.

    Raises ValueError, with the command's one line, for bad input (nothing is started or
    written); RunFailed, with the summary, for a run that failed. A SIGINT, SIGTERM or SIGHUP
    that reaches the main thread while it waits here stops the run in order, then goes on to
    the caller's own handler (a KeyboardInterrupt for SIGINT, by default).
    """
    from a3c_graph.launcher import commands
    from a3c_graph.launcher.options import LaunchOptions
    from a3c_graph.launcher.plan import plan_start

    options = LaunchOptions(workers=workers, ps=ps, logdir=logdir, cluster=cluster, tasks=tasks,
                            port=port, allow_remote=allow_remote, max_restarts=max_restarts,
                            gpus=gpus, gpu_memory_fraction=gpu_memory_fraction)
    if config is not None and not isinstance(config, A3CConfig):
        raise TypeError(f"config must be an A3CConfig, got {type(config).__name__}")
    argv = [*options.to_argv(), *(config_to_argv(config) if config is not None else []),
            *as_flags(config_fields)]
    with usage_as_value_error(), environment_as_found():
        args = commands.build_start_parser().parse_args(argv)
        plan = plan_start(args, os.environ)
        for note in plan.devices.notes if plan.devices else ():
            logger.info("note: %s", note)
        commands.check_devices_visible(plan)
        with stop_signals() as signals:
            summary, error = _supervise_in_own_thread(plan, signals, on_progress)
    if signals.received is not None:
        signal.raise_signal(signals.received)  # the caller's handler, now back in place
        error = f"interrupted by {signal.Signals(signals.received).name}"
    if summary["exit_code"] != 0:
        raise RunFailed(error or f"the run ended with exit status {summary['exit_code']}",
                        summary)
    return summary


def evaluate(logdir: str | os.PathLike | Sequence[str | os.PathLike], *,
             episodes: int | None = None, **options: Any) -> Evaluation:
    """Play `episodes` episodes (default 10) with the newest checkpoint of the run in
    `logdir` (or several runs' at once, each in its own graph and thread).

    options, as `python -m a3c_graph.evaluate --help` tells them: checkpoint, env, seed,
    sample, copies, devices, gpu_memory_fraction, record, gif, gif_speed, min_agent_steps.

    Returns an a3c_graph.trained.evaluation.Evaluation: .returns (every episode's return),
    .mean_return, .models (each model's ModelReturns) and .summary() (the command's JSON).
    Each episode's line is logged to the "a3c_graph" logger at INFO. Raises ValueError, with
    the command's one line, for bad input: a log dir with no run or no checkpoint, a
    checkpoint of another network, a bad option.
    """
    from a3c_graph.trained import evaluation

    logdirs = [logdir] if isinstance(logdir, (str, os.PathLike)) else list(logdir)
    argv = [flag for path in logdirs for flag in ("--logdir", os.fspath(path))]
    argv += as_flags({"episodes": episodes, **options}, switches=["sample", "record"])
    with usage_as_value_error(), environment_as_found():
        args = evaluation.build_parser().parse_args(argv)
        return evaluation.evaluate_runs(args, say=logger.info,
                                        warn=lambda line: logger.warning("%s", line))


def export(logdir: str | os.PathLike, out: str | os.PathLike, *,
           checkpoint: str | None = None, force: bool = False) -> str:
    """Write the policy of the run in `logdir` (its newest checkpoint, or `checkpoint`) as a
    SavedModel at `out`, loadable by tf.saved_model.load with no a3c_graph import; returns
    `out`. Its "act" signature and policy.json: a3c_graph/trained/exporting.py. Raises ValueError,
    with the command's one line, for a log dir without a run or a checkpoint, or an `out`
    that exists (unless force)."""
    from a3c_graph.trained import exporting

    with usage_as_value_error(), environment_as_found():
        return str(exporting.export_policy(os.fspath(logdir), os.fspath(out), checkpoint,
                                           force))


@contextlib.contextmanager
def usage_as_value_error() -> Iterator[None]:
    """A command's UsageError as the ValueError the API raises, with the same message."""
    try:
        yield
    except UsageError as error:
        raise ValueError(str(error)) from None


@contextlib.contextmanager
def environment_as_found() -> Iterator[None]:
    """os.environ as the caller had it once the block ends. The libraries a call imports set
    variables for good (gymnasium PYGAME_HIDE_SUPPORT_PROMPT, TensorFlow TF2_BEHAVIOR,
    TPU_ML_PLATFORM, ...), read when they load; a name another thread of the caller sets
    meanwhile is taken out too."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            os.environ.pop(name, None)
        for name, value in before.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


@contextlib.contextmanager
def stop_signals() -> Iterator[Any]:
    """The launcher's StopSignals, installed only on the main thread (the only one Python
    delivers signals to), with the caller's handlers back afterwards."""
    from a3c_graph.launcher.supervisor import LAUNCHER_SIGNALS

    signals = StopSignals(LAUNCHER_SIGNALS)
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return
    previous = {signum: signal.getsignal(signum) for signum in signals.signums}
    if None in previous.values():  # a handler set outside Python could not be put back
        yield signals
        return
    signals.install()
    try:
        yield signals
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _supervise_in_own_thread(plan, signals, on_progress) -> tuple[dict, str | None]:
    """commands.supervise(plan) in a thread of its own (which alone enters the private
    network), while this one reports the supervisor's progress readings (its on_progress
    hook) to the logger and to `on_progress`; (the summary, the run's error line)."""
    from a3c_graph.launcher import commands
    from a3c_graph.launcher.supervisor import PROGRESS_LINE_SECS

    result: dict[str, Any] = {}
    readings: queue.SimpleQueue = queue.SimpleQueue()

    def run() -> None:
        try:
            if plan.private_network:
                commands.enter_private_network(None, say=logger.info)
            result["value"] = commands.supervise(
                plan, signals, on_progress=lambda line, totals: readings.put((line, totals)))
        except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
            result["error"] = error

    def report() -> None:
        while not readings.empty():
            line, totals = readings.get()
            logger.info(line)
            if totals is not None and on_progress is not None:
                on_progress(totals)

    runner = threading.Thread(target=run, name="a3c_graph-launcher", daemon=True)
    runner.start()
    try:
        while runner.is_alive():
            runner.join(PROGRESS_LINE_SECS)
            report()
    except BaseException:
        signals.received = signals.received or signal.SIGINT  # the tasks stop in order
        runner.join()
        raise
    report()  # the last reading, even of a short run
    if "error" in result:
        raise result["error"]
    return result["value"]

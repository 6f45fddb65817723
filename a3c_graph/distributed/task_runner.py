"""One task of the cluster: ``python -m a3c_graph.worker --job worker --task 3 ...``.

A ps task starts its server and serves until it is told to stop. A worker task starts
its server, builds its A3C graph (worker_graph.py), and trains: actor threads fill the rollout
queue while the main thread dequeues rollouts and applies gradients to the globals on
the ps. Worker 0 is the chief: it initializes the globals or restores them from the
latest checkpoint in --logdir, and writes checkpoints every --checkpoint-secs.

Every worker writes TensorBoard summaries to <logdir>/tb/worker_<i> and its progress to
<logdir>/progress/worker_<i>.json, which the launcher reads.

A task never tries to recover in place (but for a step the ps refused as a duplicate
request, which it runs again: sessions.py): a worker that loses the ps exits with status 75
and its supervisor (the launcher) starts it again; the new process waits for the ps, and
the chief restores the globals from the latest checkpoint (sessions.py: the session
creators, the wait for the ps, what a lost ps means). Exit status (cli.py): 0 after a
normal stop (solved, budget spent, SIGTERM/SIGINT), 2 for bad input, 1 for a crash, 3 when
it gave up (no ps within --connect-timeout, or losses that stay NaN/inf), 74 when the log dir
cannot be written (full, read-only, not permitted: storage.py), 75 after losing the ps.

This module is the task itself: parse and check its flags (before TF is imported, so a bad
input is one line), build its graph, run its loop.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import signal
import sys
import time
from collections import deque
from typing import NoReturn

from a3c_graph import process_env, storage
from a3c_graph.cli import (
    EXIT_GAVE_UP,
    EXIT_LOST_PS,
    EXIT_STORAGE,
    WORKER_PROG,
    OneLineParser,
    StopSignals,
    UsageError,
    fail,
)
from a3c_graph.core.stats import RECENT_EPISODES, solved, target_return
from a3c_graph.distributed.cluster import (  # stdlib only at import: cheap
    SLURM_DEFAULT_PORT,
    ClusterError,
)
from a3c_graph.distributed.sessions import (
    WAIT_MESSAGE_SECS,
    GaveUp,
    describe_duplicate,
    lost_ps_errors,
    report_lost_ps,
    run_step,
    session_creator,
)
from a3c_graph.progress import ProgressFile, write_json_atomic

PROG = WORKER_PROG

# Updates in a row whose loss or gradients are NaN/inf before a worker stops.
NONFINITE_PATIENCE = 20


def build_parser() -> argparse.ArgumentParser:
    from a3c_graph.core.config import add_config_arguments

    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0], help_hint=False)
    parser.add_argument("--job", choices=["ps", "worker"],
                        help="This task's job (or TF_CONFIG; with --cluster slurm, its rank).")
    parser.add_argument("--task", type=int, help="This task's index within its job.")
    parser.add_argument("--ps-hosts", help="Comma-separated host:port of the ps tasks.")
    parser.add_argument("--worker-hosts", help="Comma-separated host:port of the worker tasks.")
    parser.add_argument("--cluster", metavar="FILE|slurm",
                        help='JSON {"ps": [...], "worker": [...]}; or slurm: the Slurm job step '
                             "this task is one of (start every task with srun), named by TF's "
                             "SlurmClusterResolver, the task's job and index by its rank.")
    parser.add_argument("--ps", type=int, default=None, metavar="N",
                        help="With --cluster slurm: the first N tasks of the step are the ps, "
                             "the rest the workers (default: 1).")
    parser.add_argument("--port", type=int, default=None, metavar="P",
                        help="With --cluster slurm: the tasks on one node listen on ports P, "
                             f"P+1, ... (default: {SLURM_DEFAULT_PORT}).")
    parser.add_argument("--logdir", help="Checkpoints, summaries and progress go here.")
    parser.add_argument("--gpu", type=_gpu_id, default=None,
                        metavar="ID",
                        help="Run this worker on GPU ID, chosen by gpu_options.visible_device_list "
                             "(ids count within CUDA_VISIBLE_DEVICES). Default: GPU:0 of the "
                             "GPUs CUDA_VISIBLE_DEVICES shows it (how the launcher places "
                             "workers), else the CPU. A ps always runs on CPU.")
    parser.add_argument("--gpu-memory-fraction", type=float, default=None, metavar="F",
                        help="per_process_gpu_memory_fraction instead of allow_growth.")
    parser.add_argument("--allow-remote", action="store_true",
                        help="Allow non-loopback addresses, and the host network (outside the "
                             "launcher's private network), where TF listens on every interface. "
                             "The TF server is unauthenticated gRPC: use only on a trusted "
                             "network.")
    add_config_arguments(parser)
    return parser


def _gpu_id(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected one GPU id like 0 or 1, got {text!r}")
    return int(text)


def parse_args(argv):
    return build_parser().parse_args(argv)


# --------------------------------------------------------------------------- stop signals

class StopFlag(StopSignals):
    """Set by SIGTERM/SIGINT; the training loop finishes its step and stops cleanly."""

    def __init__(self):
        super().__init__((signal.SIGTERM, signal.SIGINT))
        self.in_loop = False

    def _handle(self, signum, frame):
        super()._handle(signum, frame)
        if not self.in_loop:
            # Still connecting or initializing: nothing to save yet, leave at once.
            raise SystemExit(0)


# --------------------------------------------------------------------------- progress

class Progress:
    """This worker's progress file (a3c_graph.progress) and its TensorBoard summaries."""

    def __init__(self, logdir: str, task: int, target_return: float, config):
        import tensorflow as tf

        self.config = config
        self.file = ProgressFile(logdir, task, target_return, config.progress_secs)
        self.writer = tf.compat.v1.summary.FileWriter(os.path.join(logdir, "tb", f"worker_{task}"))
        # This worker's own recent episodes, as TensorBoard's episode/return and length.
        self.returns: deque = deque(maxlen=RECENT_EPISODES)
        self.lengths: deque = deque(maxlen=RECENT_EPISODES)
        self.losses: dict = {}
        self.fetched: dict = {}

    def update(self, fetched: dict) -> None:
        self.fetched = fetched
        learned = self.config.learn and not fetched["update_skipped"]
        self.file.update(fetched, int(fetched["rollout_steps"]),
                         float(fetched["entropy"]) if learned else None)
        self.returns.extend(float(r) for r in fetched["finished_returns"])
        self.lengths.extend(int(n) for n in fetched["finished_lengths"])
        for key in ("loss", "policy_loss", "value_loss", "entropy", "grad_norm", "queue_size"):
            self.losses.setdefault(key, []).append(float(fetched[key]))

    def due(self) -> bool:
        return self.file.due()

    def write(self, state: str, stop_reason: str | None = None) -> None:
        self.file.write(state, stop_reason)
        if self.fetched:
            self._summaries(int(self.fetched["global_step"]), self.file.mean_return_100)

    def _summaries(self, global_step: int, mean_100: float) -> None:
        import tensorflow as tf

        values = {"perf/env_steps_per_sec": self.file.steps_per_sec,
                  "train/learning_rate": self.config.learning_rate_at(
                      int(self.fetched["env_steps"]))}
        if self.returns:
            values["episode/return"] = sum(self.returns) / len(self.returns)
            values["episode/length"] = sum(self.lengths) / len(self.lengths)
        if not math.isnan(mean_100):
            values["episode/cluster_mean_return_100"] = mean_100
        for key, series in self.losses.items():
            prefix = "perf" if key == "queue_size" else "loss"
            values[f"{prefix}/{key}"] = sum(series) / len(series)
        self.losses = {}
        Value = tf.compat.v1.Summary.Value
        summary = tf.compat.v1.Summary(
            value=[Value(tag=tag, simple_value=value) for tag, value in values.items()])
        self.writer.add_summary(summary, global_step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()



# --------------------------------------------------------------------------- tasks

def run_ps(spec, config, device, stop: StopFlag, released_by_workers: bool = False) -> int:
    """Serve until a stop signal; or, released_by_workers (under Slurm, where no supervisor
    stops the ps after the workers), until every worker is done (ps_release.py)."""
    from a3c_graph.devices import apply_to_config, describe_task
    from a3c_graph.distributed import ps_release
    from a3c_graph.distributed.cluster import session_config, start_server

    server_config = apply_to_config(
        session_config(spec, config.intra_op_threads, config.inter_op_threads), device)
    server = start_server(spec, server_config)
    print(f"{PROG}: {describe_task(device)}", flush=True)
    print(f"{PROG}: ps task {spec.task} serving at {spec.address}", flush=True)
    stop.in_loop = True
    if released_by_workers:
        own = type(server_config)()
        own.CopyFrom(server_config)
        del own.device_filters[:]
        own.device_filters.append(f"/job:ps/task:{spec.task}")  # its own queue only
        why = ps_release.serve_until_released(server.target, spec.task, spec.num_workers, own,
                                              lambda: stop.received is not None)
    else:
        why = "stop signal"
        while stop.received is None:  # server.join() would block signals forever
            time.sleep(0.2)
    print(f"{PROG}: ps task {spec.task} stopping ({why})", flush=True)
    # A ps holds no state of its own to flush (the chief checkpoints the variables), and
    # tearing down a gRPC server with live peers can take a while: leave at once.
    os._exit(0)


def stop_reason_for(fetched: dict, config, target_return: float, started: float) -> str | None:
    """Why a worker stops after an update that read the cluster's counters `fetched`, or
    None: solved (stats.solved), the env steps or the seconds of its budget spent, counted
    from `started`: its first applied update (progress.py: one clock for every variant)."""
    if solved(int(fetched["recent_count"]), float(fetched["mean_return_100"]), target_return):
        return "solved"
    if int(fetched["env_steps"]) >= config.max_steps:
        return "max_steps"
    if time.time() - started >= config.max_seconds:
        return "max_seconds"
    return None


def run_worker(spec, config, args, info, target_return: float, stop: StopFlag,
               device) -> int:
    import tensorflow as tf

    from a3c_graph.checkpoints import CheckpointError, restorable_checkpoint
    from a3c_graph.core.envs import EnvBatch, env_options
    from a3c_graph.devices import apply_to_config, describe_task
    from a3c_graph.distributed import ps_release
    from a3c_graph.distributed.cluster import session_config, start_server
    from a3c_graph.distributed.worker_graph import build_worker_graph

    tf1 = tf.compat.v1
    progress = Progress(args.logdir, spec.task, target_return, config)
    progress.write("starting")
    sess_config = apply_to_config(
        session_config(spec, config.intra_op_threads, config.inter_op_threads), device)
    server = start_server(spec, sess_config)
    print(f"{PROG}: {describe_task(device)}", flush=True)

    graph = tf.Graph()
    env_batches = []
    with graph.as_default():
        tf1.set_random_seed(config.seed + 1000 * spec.task)
        for actor in range(config.actor_threads):
            env_batches.append(EnvBatch(config.env, config.envs_per_worker,
                                        seed=config.seed + 1000 * spec.task + 100 * actor,
                                        **env_options(config)))
        worker_graph = build_worker_graph(config, spec, info, env_batches,
                                          worker_device=device.device)
        # Under Slurm the ps ends once every worker has left its token (ps_release.py).
        tokens = ps_release.token_ops(spec.num_ps, spec.task) if releases_ps(args) else []
        scaffold = tf1.train.Scaffold(saver=worker_graph.saver,
                                      local_init_op=worker_graph.local_init_op)
        hooks = []
        if spec.is_chief:
            try:
                checkpoint = restorable_checkpoint(
                    args.logdir, worker_graph.saver,
                    warn=lambda message: print(f"{PROG}: warning: {message}", flush=True))
            except CheckpointError as error:
                raise UsageError(str(error)) from None
            # What evaluate.py needs to rebuild the network of this run's checkpoints;
            # written once the checkpoints are known to fit it.
            write_json_atomic(os.path.join(args.logdir, "config.json"),
                              dataclasses.asdict(config))
            hooks.append(tf1.train.CheckpointSaverHook(
                args.logdir, save_secs=config.checkpoint_secs, scaffold=scaffold))
        else:
            checkpoint = None
        creator = session_creator(spec, scaffold, server.target, sess_config,
                                  config.connect_timeout, checkpoint)
        print(f"{PROG}: worker {spec.task} connecting to the ps at {','.join(spec.cluster['ps'])} "
              "(if this hangs, the ps is not reachable)", flush=True)
        reason, error = train(creator, hooks, worker_graph, config, spec, progress, stop,
                              target_return)
        if tokens:  # after the session closed: the chief's last checkpoint is written
            stop.in_loop = True  # a second SIGTERM (Slurm may send two) must not cut this
            problem = ps_release.leave_token(server.target, graph, sess_config, tokens)
            if problem:
                print(f"{PROG}: warning: worker {spec.task} could not tell the ps it is done: "
                      f"{problem}", flush=True)
    progress.close()
    for batch in env_batches:
        batch.close()
    f = progress.fetched
    print(f"{PROG}: worker {spec.task} done ({reason}): "
          f"global step {int(f.get('global_step', 0))}, "
          f"env steps {int(f.get('env_steps', 0))}, mean return(100) "
          f"{float(f.get('mean_return_100', float('nan'))):.1f}", flush=True)
    if error:
        raise GaveUp(error)
    return 0


def train(creator, hooks, worker_graph, config, spec, progress: Progress, stop: StopFlag,
          target_return: float) -> tuple[str | None, str | None]:
    """The learner loop: (stop reason, error to give up with or None).

    Its budget counts from its first applied update, and the final report is written as
    soon as it decides to stop (progress.py: one clock for every variant). Leaving the
    MonitoredSession afterwards runs the hooks' end (the chief's final checkpoint), stops
    the actor threads and closes the queue.
    """
    import tensorflow as tf

    reason = error = None
    # A step that takes this long is stuck on an unreachable ps (a network cut can leave a
    # connection that neither side closes): DeadlineExceeded, handled like a lost ps.
    options = tf.compat.v1.RunOptions(timeout_in_ms=int(config.connect_timeout * 1000))
    skipped_in_a_row = 0
    last_skip_message = 0.0
    with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=hooks,
                                             stop_grace_period_secs=5) as session:
        stop.in_loop = True
        print(f"{PROG}: worker {spec.task} training "
              f"({config.actor_threads} actor thread(s) x {config.envs_per_worker} envs)",
              flush=True)
        while not session.should_stop():
            fetched = run_step(session, worker_graph.train_fetches, options,
                               on_duplicate=lambda error, count: print(
                                   f"{PROG}: warning: worker {spec.task}: "
                                   f"{describe_duplicate(error)}; running the step again "
                                   f"({count} in a row)", flush=True))
            progress.update(fetched)
            if fetched["update_skipped"]:
                skipped_in_a_row += 1
                if time.monotonic() - last_skip_message >= WAIT_MESSAGE_SECS:
                    last_skip_message = time.monotonic()
                    print(f"{PROG}: warning: worker {spec.task} skipped an update at global step "
                          f"{int(fetched['global_step'])}: loss {float(fetched['loss']):g}, "
                          f"gradient norm {float(fetched['grad_norm']):g} "
                          f"({skipped_in_a_row} in a row)", flush=True)
                if skipped_in_a_row >= NONFINITE_PATIENCE:
                    reason = "non_finite"
                    error = (f"worker {spec.task}: {skipped_in_a_row} updates in a row had a "
                             "NaN/inf loss or gradients (NaN/inf observations or rewards, or a "
                             "diverged network); stopped without applying them")
                    break
            else:
                skipped_in_a_row = 0
            reason = stop_reason_for(fetched, config, target_return,
                                     progress.file.training_started)
            if stop.received is not None:
                reason = "signal"
            if reason:
                break
            if progress.due():
                progress.write("running")
        progress.write("done", stop_reason=reason)
    stop.in_loop = False
    return reason, error


def releases_ps(args) -> bool:
    """Whether the workers end the ps (ps_release.py): under Slurm, where nobody stops it."""
    from a3c_graph.distributed.cluster import SLURM

    return args.cluster == SLURM


def _graph_mode_tensorflow():
    """Import TF for a graph-mode process (process_env: quiet C++ logs, no Keras load)."""
    process_env.before_tf_import()
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    return tf


def main(argv=None) -> int:
    stop = StopFlag()
    stop.install()
    try:
        args = parse_args(argv)
        task = _validated_task(args)
    except UsageError as error:
        return fail(PROG, error)
    spec, config, info, target, device = task
    _graph_mode_tensorflow()
    try:
        try:
            if spec.job == "ps":
                return run_ps(spec, config, device, stop,
                              released_by_workers=releases_ps(args))
            return run_worker(spec, config, args, info, target, stop, device)
        except (ClusterError, UsageError) as error:  # e.g. lost a race for the port
            return fail(PROG, error)
        except GaveUp as error:
            return fail(PROG, error, EXIT_GAVE_UP)
        except lost_ps_errors() as error:
            report_lost_ps(spec, error)
            # Actor threads may still be blocked in a call to the dead ps: do not wait.
            os._exit(EXIT_LOST_PS)
    except Exception as error:  # noqa: BLE001 - any write may be the first to fail
        fault = storage.storage_fault(error, args.logdir)
        if fault is None:
            raise
        leave_on_storage_fault(spec, args.logdir, fault)


def leave_on_storage_fault(spec, logdir: str | None, fault: str) -> NoReturn:
    """Exit EXIT_STORAGE, the chief after removing what its failed writes left (storage.py).
    The error line may not reach the log, which is on the same disk: the status says it."""
    if spec.job == "worker" and spec.is_chief and logdir:
        storage.remove_partial_checkpoint(logdir)
    with contextlib.suppress(OSError):
        print(f"{PROG}: error: "
              + storage.fault_line(logdir, fault, f"{spec.job} {spec.task}"),
              file=sys.stderr, flush=True)
    os._exit(EXIT_STORAGE)


def _validated_task(args):
    """(spec, config, env info, target return, device), or UsageError for anything a user
    got wrong.

    Every check a user can fail runs here, before TF is imported (its C++ log lines would
    break the one-line error; --cluster slurm imports it quietly, see cluster_from_slurm) and
    before the log dir is created, and so before any TF server starts.
    """
    from a3c_graph.checkpoints import check_logdir_config
    from a3c_graph.core.config import config_from_args, resolve_policy
    from a3c_graph.core.envs import EnvError, env_info, env_options
    from a3c_graph.distributed.cluster import check_port_free, non_loopback_hosts, resolve_task

    try:
        config = config_from_args(args)
        spec = resolve_task(args.ps_hosts, args.worker_hosts, args.cluster, args.job, args.task,
                            num_ps=args.ps, port=args.port)
        remote = non_loopback_hosts(spec.cluster)
        if remote and not args.allow_remote:
            raise UsageError(f"{remote[0]} is not a loopback address; the TF server is "
                             "unauthenticated, pass --allow-remote only on a trusted network")
        if spec.job == "ps":
            device = _task_device(args, spec)
            _check_private_network(args)
            check_port_free(spec.address)  # in the network the server will listen in
            return spec, config, None, None, device
        if not args.logdir:
            raise UsageError("--logdir is required for a worker")
        info = env_info(config.env, **env_options(config))
        resolve_policy(config.policy, info.obs_shape)  # ValueError: --policy cnn on vectors
        target = target_return(config, info)  # ValueError: the env has no threshold
        device = _task_device(args, spec)
        _check_private_network(args)
        check_port_free(spec.address)
        _check_logdir(args.logdir)
        check_logdir_config(args.logdir, config, info.obs_shape)  # a different run's logdir
        return spec, config, info, target, device
    except (ClusterError, EnvError, ValueError) as error:
        raise UsageError(str(error)) from None


def _check_private_network(args) -> None:
    """UsageError unless this task runs in a private network (a namespace with only
    loopback) or --allow-remote says the host network is trusted.

    TF's server listens on every interface whatever host the cluster names, so a task "on
    127.0.0.1" started on the host network is reachable from every network the machine is
    on. The launcher's tasks run in its private network (a3c_graph/launcher/netns.py) and pass.
    """
    from a3c_graph.launcher import netns

    if not args.allow_remote and not netns.is_isolated():
        raise UsageError("TF's server would listen on every interface of this machine, whatever "
                         "host the cluster names; start the cluster with "
                         "scripts/launch_cluster.sh, which runs its tasks in a private network, "
                         "or pass --allow-remote on a trusted network")


def _task_device(args, spec):
    """This task's devices.TaskDevice; DeviceError (one line) for a GPU it cannot have.

    Checked before TF starts: TF reports a wrong id amid its own start-up log lines, or
    (without a GPU) quietly runs on CPU.
    """
    from a3c_graph.devices import process_task_device

    return process_task_device(spec.job, spec.task, args.gpu, args.gpu_memory_fraction)


def _check_logdir(logdir: str) -> None:
    try:
        os.makedirs(logdir, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create log dir {logdir}: {error.strerror}") from None
    if not os.access(logdir, os.W_OK | os.X_OK):
        raise UsageError(f"log dir {logdir} is not writable")


if __name__ == "__main__":
    exit_code = main()
    # Everything is written and closed by now. Left to the interpreter, TF's teardown can take
    # more than the launcher's 10 s stop limit on a loaded machine (seen in the chief).
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a log on a full disk: the status still counts
            stream.flush()
    os._exit(exit_code)

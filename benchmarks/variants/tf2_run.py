"""One TF2 variant run, without TensorFlow: what the main process of tf2_multiprocessing and
tf2_ray does around its workers, and what their children share.

  the command line     VariantRun, parse_variant_args, which A3C flags the TF2 variants
                       honour and which they refuse (TF2_HONOURED, TF2_REFUSED,
                       check_tf2_config: the harness checks them too, before any run)
  devices              visible_device_entries (--gpus), pin_visible_gpus (each child's)
  the run's counters   RunStats: global steps, episodes, the 100-episode window, and the
                       graph worker's stop rule on its clock (the parameter holder's)
  the end              past_backstop, write_summary
  the main process     run_variant: all of the above around a variant's own training

Nothing here imports TensorFlow: a variant's processes import this module before they
choose their device (CUDA_VISIBLE_DEVICES must be set before TF is imported). What every
benchmark shares (the private network, ending leftover processes) is benchmarks.common.

The files a TF2 variant writes under --logdir are the graph variant's:
progress/worker_<i>.json with the keys a3c_graph.worker writes, and summary.json whose JSON
is also the last stdout line, both through a3c_graph.rundir.progress, so the launcher's readers
read every variant's run the same way.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a3c_graph.core.config import (
    A3CConfig,
    add_config_arguments,
    config_from_args,
    preset_values,
    resolve_policy,
)
from a3c_graph.core.envs import env_info, env_options
from a3c_graph.core.run_spec import resolve_run
from a3c_graph.core.stop_rule import RECENT_EPISODES, training_stop_reason
from a3c_graph.rundir.progress import (
    json_number,
    read_progress,
    run_totals,
    summary_fields,
    write_atomic,
)
from a3c_graph.system import devices, process_env
from a3c_graph.system.cli import OneLineParser, StopSignals, UsageError, fail
from benchmarks.common import add_allow_remote_argument, enter_private_network

# A variant enforces --max-seconds itself; this backstop only catches a stuck run.
DEADLINE_GRACE_SECS = 60.0


# --------------------------------------------------------------------------- command line

@dataclass(frozen=True)
class VariantRun:
    """What one TF2 variant run was asked to do."""

    config: A3CConfig  # target_return resolved, as the graph launcher resolves it
    workers: int
    logdir: Path
    gpus: tuple[str, ...]  # CUDA_VISIBLE_DEVICES entries, the workers' round-robin; empty: CPU
    allow_remote: bool = False  # on the host network (common.enter_private_network)


def parse_variant_args(prog: str, description: str, argv: Sequence[str] | None = None,
                       tf2: bool = True) -> VariantRun:
    """The variant's flags: --workers, --logdir, --gpus and every A3CConfig flag; with
    `tf2`, those the TF2 variants refuse fail here (check_tf2_config).

    A bad flag ends in one line on stderr and exit status 2, as with launch_cluster.sh.
    """
    parser = OneLineParser(prog=prog, description=description, allow_abbrev=False)
    parser.add_argument("--workers", type=int, default=2, help="Worker processes (default: 2).")
    parser.add_argument("--logdir", required=True, help="Progress files and summary.json.")
    parser.add_argument("--gpus", default="none", metavar="SPEC",
                        help=f"GPUs given round-robin to the workers, as the launcher's "
                             f"--gpus: {devices.GPUS_FORMS} (ids as this process sees them; "
                             "default: none, CPU only). The parameter holder runs on the "
                             "CPU, as the graph variant's ps.")
    add_allow_remote_argument(parser)
    add_config_arguments(parser)
    try:
        args = parser.parse_args(argv)
        if args.workers < 1:
            raise ValueError(f"--workers must be at least 1, got {args.workers}")
        config = config_from_args(args, workers=args.workers)  # the graph launcher's envs rule
        config = resolve_run(config).config
        if tf2:
            check_tf2_config(config)
        gpus = visible_device_entries(prog, args.gpus)
    except (ValueError, UsageError) as error:  # devices.DeviceError is a ValueError
        sys.exit(fail(prog, error))
    return VariantRun(config, args.workers, Path(os.path.abspath(args.logdir)), gpus,
                      args.allow_remote)


# What the TF2 variants do with each A3CConfig flag. They honour every flag as the graph
# variant does but these, which they refuse with one line (exit status 2) when set to
# anything but the preset's value, because what they mean needs a part only the graph
# variant has; --policy lstm is refused too (check_tf2_config). A new flag must be put on
# one side: tests/e2e/test_tf2_variants.py checks that every flag is.
TF2_REFUSED = {
    "checkpoint_secs": "--checkpoint-secs: the TF2 variants write no checkpoints; run it "
                       "with the graph variant",
    "keep_checkpoint_every_minutes": "--keep-checkpoint-every-minutes: the TF2 variants "
                                     "write no checkpoints; run it with the graph variant",
    "connect_timeout": "--connect-timeout: the TF2 variants wait for no ps over the network; "
                       "run it with the graph variant",
}
TF2_HONOURED = frozenset({
    "env", "seed", "preset", "protocol", "repeat_action_probability", "full_action_space",
    "screen_size",
    "frame_stack", "envs_per_worker", "actor_threads", "rollout_length", "queue_capacity",
    "gamma", "gae_lambda", "learning_rate", "anneal_learning_rate", "adam_epsilon", "adam_beta1",
    "lag_tolerance", "rollouts_per_update",
    "optimizer", "rmsprop_epsilon",
    "entropy_coef", "anneal_entropy", "value_coef", "grad_clip_norm", "policy", "hidden_sizes",
    "conv_filters",
    "conv_kernel", "conv_stride", "conv_padding", "activation", "normalize_advantages",
    "log_std_init", "sde", "ortho_init", "normalize_observations", "normalize_rewards",
    "clip_rewards", "max_steps", "max_seconds",
    "target_return", "progress_secs", "intra_op_threads", "inter_op_threads", "learn",
    # The LSTM's size: it means nothing without --policy lstm, in the graph variant too.
    "lstm_size",
})


def check_tf2_config(config: A3CConfig) -> None:
    """ValueError unless the TF2 variants can run `config`: no flag of TF2_REFUSED set to
    anything but the preset's value, and a network they implement: the MLP (vector
    observations) or the CNN (images, e.g. Atari), not the LSTM. Also the ValueError of
    --policy cnn on vector observations, as the graph worker's."""
    preset = preset_values(config.preset, config.env, config.repeat_action_probability,
                           config.protocol)
    for name, why in TF2_REFUSED.items():
        if getattr(config, name) != preset[name]:
            raise ValueError(why)
    obs_shape = env_info(config.env, **env_options(config)).obs_shape
    _torso, recurrent = resolve_policy(config.policy, obs_shape)
    if recurrent:
        raise ValueError(f"the TF2 variants implement the mlp and cnn networks, not the lstm "
                         f"(--policy {config.policy}); run it with the graph variant")


def prepare_logdir(logdir: Path) -> None:
    """Create <logdir>/progress and drop an earlier run's files, which would read as ours."""
    (logdir / "progress").mkdir(parents=True, exist_ok=True)
    for stale in [*(logdir / "progress").glob("worker_*.json*"), logdir / "summary.json"]:
        stale.unlink(missing_ok=True)


# --------------------------------------------------------------------------- devices

def visible_device_entries(prog: str, spec: str) -> tuple[str, ...]:
    """The CUDA_VISIBLE_DEVICES entry of each GPU a --gpus SPEC names (the launcher's forms
    and meaning, a3c_graph.system.devices); a GPU this machine does not show is kept, and its
    process then runs on the CPU (configure_tensorflow)."""
    inventory = devices.detect_gpus()
    ids, notes = devices.requested_ids(devices.parse_gpus(spec), inventory)
    for note in notes:
        print(f"{prog}: note: {note}", file=sys.stderr, flush=True)
    return tuple(inventory.physical_id(gpu) for gpu in ids)


def pin_visible_gpus(gpus: Sequence[str], process_index: int,
                     environ: MutableMapping[str, str] = os.environ) -> None:
    """Choose this process's GPU before TF is imported (TF's GPU options are process-wide):
    set in `environ`, this process's own environment unless told otherwise.

    Worker k (process_index k) sees GPU gpus[k % len(gpus)] only, as the launcher spreads
    its workers; with no ids (the parameter holder's: it runs on the CPU) it sees none and
    TF runs on the CPU. Call it first thing in a child process, before anything imports TF.
    """
    environ["CUDA_VISIBLE_DEVICES"] = gpus[process_index % len(gpus)] if gpus else ""
    process_env.before_tf_import(environ)  # the same import settings as the graph agent's tasks


# --------------------------------------------------------------------------- statistics

class RunStats:
    """The run's global counters, kept by the parameter holder (EpisodeStats' TF2 twin).

    Returns from every worker land in one window in the order they arrive, so its mean is
    the mean return of the 100 newest episodes across workers, as in the graph variant.

    Stopping follows the graph worker's rule (stop_rule.training_stop_reason) with its
    clock (a3c_graph.rundir.progress): solved and max_steps stop the whole run, while each worker's
    --max-seconds count from that worker's own first applied update, as a graph worker's do.
    """

    def __init__(self, config: A3CConfig):
        self.config = config
        self.first_update: dict[int, float] = {}  # task -> its first record() (unix time)
        self.global_step = 0
        self.env_steps = 0
        self.episodes = 0
        self.recent: deque[float] = deque(maxlen=RECENT_EPISODES)
        self.stop_reason: str | None = None  # the whole run's, once decided

    def record(self, task: int, env_steps: int, finished_returns: Iterable[float],
               started: float | None = None, applied: bool = True) -> None:
        """Count one rollout of worker `task`: its env steps and the episodes that ended in
        it, and (`applied`: unless it was pooled for a later update) the global step.
        `started`: the worker's own first applied update as its progress file has it (None
        on its first); until then the holder's own time stands in for it."""
        returns = [float(r) for r in finished_returns]
        if started is not None:
            # The worker marks its start when the first reply reaches it, after this
            # process did: its budget runs on its own clock, or it would stop short of it.
            self.first_update[task] = started
        self.first_update.setdefault(task, time.time())
        self.global_step += int(applied)
        self.env_steps += int(env_steps)
        self.episodes += len(returns)
        self.recent.extend(returns)

    def snapshot(self) -> dict[str, Any]:
        """The counters under the names the graph worker fetches (NaN mean when empty)."""
        mean = sum(self.recent) / len(self.recent) if self.recent else float("nan")
        return {"global_step": self.global_step, "env_steps": self.env_steps,
                "episodes": self.episodes, "recent_count": len(self.recent),
                "mean_return_100": mean}

    def worker_stop_reason(self, task: int) -> str | None:
        """Why worker `task` stops after its update just recorded, or None: the run's
        reason once there is one (solved, max_steps, or set from outside), else its own
        budget spent (max_seconds, on its own clock)."""
        if self.stop_reason is None and task in self.first_update:
            reason = training_stop_reason(self.snapshot(), self.config,
                                          float(self.config.target_return),
                                          self.first_update[task])
            if reason != "max_seconds":
                self.stop_reason = reason
            return reason
        return self.stop_reason


def past_backstop(run: VariantRun, launched: float) -> bool:
    """Whether a run whose workers have not all stopped is stuck: DEADLINE_GRACE_SECS past
    its --max-seconds, which count from the first applied update (the progress files say
    when), or from `launched` while no worker has trained, as the graph launcher's
    backstop."""
    totals = run_totals(read_progress(run.logdir))
    start = totals.training_started if totals and totals.training_started else launched
    return time.time() >= start + run.config.max_seconds + DEADLINE_GRACE_SECS


def write_summary(variant: str, run: VariantRun, started: float, exit_code: int,
                  stop_reason: str | None = None) -> dict[str, Any]:
    """summary.json with the graph launcher's keys, also printed as the last stdout line."""
    summary, totals = summary_fields(run.logdir, started)
    summary.update({
        "variant": variant,
        "env": run.config.env,
        "workers": run.workers,
        "target_return": json_number(run.config.target_return),
        "stop_reason": stop_reason or (totals.stop_reason if totals else None),
        "logdir": str(run.logdir),
        "exit_code": exit_code,
    })
    write_atomic(run.logdir / "summary.json", json.dumps(summary, sort_keys=True, indent=2) + "\n")
    print(json.dumps(summary, sort_keys=True), flush=True)
    return summary


# A variant's training: (run, its stop signals, its start time) -> (exit code, stop reason).
Train = Callable[[VariantRun, StopSignals, float], tuple[int, str]]


def run_variant(prog: str, variant: str, doc: str, argv: Sequence[str] | None,
                train: Train) -> int:
    """A TF2 variant's main process: its command line read (the first paragraph of `doc`
    its description), the private network entered, stop signals caught, the log dir made
    ready, `train` run, and summary.json written when it returns; the exit code."""
    run = parse_variant_args(prog, doc.split("\n\n")[0], argv)
    enter_private_network(prog, run.allow_remote)
    signals = StopSignals()
    signals.install()
    started = time.time()
    prepare_logdir(run.logdir)
    exit_code, reason = train(run, signals, started)
    write_summary(variant, run, started, exit_code, reason)
    return exit_code

"""Playing episodes with a trained agent, for ``python -m a3c_graph.evaluate`` and
a3c_graph.evaluate(...).

Loads the latest checkpoint of a run (or --checkpoint) into a fresh graph holding only
the global network, and plays N episodes, greedy by default. Reads the network's shape
from <logdir>/config.json, which the chief writes when a run starts. Atari episodes are
whole games on the run's protocol, played at once as one batch of envs (play_games);
with --record, and for every other env, one after the other (play_episodes).

Several models at once (several --logdir, and/or --copies N of each) each get a tf.Graph
of their own, pinned with graph.device() to the next of --devices (e.g. cpu:0,cpu:1 or
gpu:0,gpu:1), and play concurrently in one process; all their sessions share one
ConfigProto, since GPU options are process-wide. Each model's result says which devices
its ops actually ran on (traced on its first step).

evaluate_runs is the evaluation, for the command (main) and for a3c_graph.evaluate(...)
(api.py) alike: it raises UsageError for bad input and reports each episode through `say`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from a3c_graph.rundir.run_config import CheckpointError, read_run_config
from a3c_graph.system import process_env
from a3c_graph.system.cli import OneLineParser, UsageError, fail
from a3c_graph.system.devices import (
    DeviceError,
    check_devices_visible,
    check_memory_fraction,
    parse_device_list,
)

PROG = "a3c_graph.evaluate"
DESCRIPTION = ("Play episodes with a trained agent: ``python -m a3c_graph.evaluate --logdir D "
               "--episodes N``.")
# While evaluate runs (main may run inside a caller's process: set only meanwhile): TF's import
# settings, and no screen for SDL (pygame draws CartPole), since rgb_array frames need none.
PLAY_ENVIRONMENT = {**process_env.DEFAULTS, "SDL_VIDEODRIVER": "dummy"}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=DESCRIPTION, help_hint=False)
    parser.add_argument("--logdir", required=True, action="append",
                        help="The run's log dir; repeat it to play several models at once.")
    parser.add_argument("--copies", type=int, default=1,
                        help="Play N copies of each model at once, each in its own graph and "
                             "session; copy k plays seeds --seed + 1000 k (default: 1).")
    parser.add_argument("--devices", default=None, metavar="DEV[,DEV..]",
                        help="Devices the models' graphs are pinned to, round-robin, e.g. "
                             "cpu:0,cpu:1 or gpu:0,gpu:1 (default: TF's own placement).")
    parser.add_argument("--gpu-memory-fraction", type=float, default=None, metavar="F",
                        help="per_process_gpu_memory_fraction shared by every session "
                             "(default: allow_growth).")
    parser.add_argument("--checkpoint",
                        help="A checkpoint prefix (default: the latest in --logdir).")
    parser.add_argument("--episodes", type=int, default=10,
                        help="Episodes to play; Atari: whole games, played at once as one "
                             "batch, each cut at ALE's 108,000 frames (default: 10).")
    parser.add_argument("--min-agent-steps", type=int, default=0, metavar="N",
                        help="Go on playing until the episodes hold at least N agent steps "
                             "in all; Atari: further batches of --episodes whole games, "
                             "so every game counts once, e.g. --episodes 100 "
                             "--min-agent-steps 150000 plays at least 100 games and 150,000 "
                             "agent steps (default: 0, just --episodes).")
    parser.add_argument("--env", help="Env id (default: the run's).")
    parser.add_argument("--seed", type=int, default=12345,
                        help="Seed of the evaluation: episode i's env is seeded SEED + i and "
                             "--sample's actions come from a stream seeded by it, so the same "
                             "seed plays the same episodes on the same machine and version "
                             "(default: 12345).")
    parser.add_argument("--sample", action="store_true",
                        help="Sample actions from the policy instead of taking the most likely.")
    parser.add_argument("--record", action="store_true",
                        help="Write a video of the first episode to <logdir>/videos/ "
                             "(Gymnasium's RecordVideo; needs the atari extra).")
    parser.add_argument("--gif", type=float, default=None, metavar="SECONDS",
                        help="Also write the first SECONDS of that video as an animated GIF "
                             "beside it, for a README or an issue (implies --record).")
    parser.add_argument("--gif-speed", type=float, default=1.0, metavar="FACTOR",
                        help="Play the GIF FACTOR times as fast, at the video's frame rate "
                             "(frames dropped, not shortened delays), e.g. a whole Pong game "
                             "with --gif 300 --gif-speed 3 (default: 1).")
    return parser


def load_run_config(logdir: str):

    try:
        config = read_run_config(logdir)
    except CheckpointError as error:
        raise UsageError(str(error)) from None
    if config is None:
        path = os.path.join(logdir, "config.json")
        raise UsageError(f"{path} not found: is {logdir} the log dir of a training run?")
    return config


@dataclass(frozen=True)
class ModelReturns:
    """The episodes one model played: a --logdir's checkpoint, copy `copy` of it."""

    logdir: str
    checkpoint: str
    copy: int
    device: str | None  # what its graph was pinned to (None: TF's own placement)
    ran_on: list[str]  # the devices its first step ran on
    returns: list[float]
    lengths: list[int]  # agent steps of each episode
    frame_skip: int = 1  # emulator frames per agent step

    def summary(self) -> dict:
        """The model's line of the command's JSON: the returns' mean and spread, and each
        episode's return and frames."""
        n = len(self.returns)
        mean = sum(self.returns) / n
        return {"logdir": self.logdir, "checkpoint": self.checkpoint, "copy": self.copy,
                "device": self.device, "ran_on": self.ran_on, "episodes": n,
                "mean_return": mean, "min_return": min(self.returns),
                "max_return": max(self.returns),
                "std_return": (sum((r - mean) ** 2 for r in self.returns) / n) ** 0.5,
                "returns": self.returns,
                "frames": [length * self.frame_skip for length in self.lengths]}


@dataclass(frozen=True)
class Evaluation:
    """Every model's episodes, in the order of --logdir, then copy."""

    models: list[ModelReturns]

    @property
    def returns(self) -> list[float]:
        """Every episode's return, model after model."""
        return [value for model in self.models for value in model.returns]

    @property
    def mean_return(self) -> float:
        return self.summary()["mean_return"]

    def summary(self) -> dict:
        """The command's JSON: one model's summary, or every model's and their mean."""
        results = [model.summary() for model in self.models]
        if len(results) == 1:
            return results[0]
        returns = sum(r["episodes"] * r["mean_return"] for r in results)
        episodes = sum(r["episodes"] for r in results)
        return {"models": results, "episodes": episodes, "mean_return": returns / episodes}


def evaluate_runs(args: argparse.Namespace, say: Callable[[str], None],
                  warn: Callable[[str], None]) -> Evaluation:
    """Play what `args` (build_parser's) names; UsageError (one line) for bad input.

    say takes each episode's line, warn each warning (e.g. the newest checkpoint is damaged
    and an older one is played). TF's import settings are set only while this runs.
    """
    if args.episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {args.episodes}")
    if args.min_agent_steps < 0:
        raise UsageError(f"--min-agent-steps must be 0 or more, got {args.min_agent_steps}")
    if args.copies < 1:
        raise UsageError(f"--copies must be at least 1, got {args.copies}")
    record = args.record
    if args.gif is not None:
        if not args.gif > 0:
            raise UsageError(f"--gif must be a number of seconds above 0, got {args.gif}")
        record = True
    if not args.gif_speed > 0:
        raise UsageError(f"--gif-speed must be a factor above 0, got {args.gif_speed}")
    if args.checkpoint and len(args.logdir) > 1:
        raise UsageError("--checkpoint names one model: give a single --logdir with it")
    args = argparse.Namespace(**{**vars(args), "record": record})
    devices = _checked_devices(args)
    configs = []
    for logdir in args.logdir:
        config = load_run_config(logdir)
        if args.env:
            config = dataclasses.replace(config, env=args.env)
        configs.append(config)
    with process_env.set_while_running(PLAY_ENVIRONMENT):
        # TF loads here, once every flag is checked, with its C++ start-up lines off the
        # command's stderr (docs/architecture.md, "Where the heavy imports load").
        process_env.import_tensorflow_quietly()
        from a3c_graph.trained import playing

        return Evaluation([ModelReturns(**model)
                           for model in playing.play_models(args, configs, devices, say, warn)])


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        evaluation = evaluate_runs(
            args, say=lambda line: print(line, flush=True),
            warn=lambda line: print(f"{PROG}: warning: {line}", file=sys.stderr, flush=True))
    except UsageError as error:
        return fail(PROG, error)
    print(json.dumps(evaluation.summary(), sort_keys=True))
    return 0


def _checked_devices(args) -> list:
    """--devices as canonical names ([None]: no pinning), checked before TF starts (TF would
    only log an invalid GPU among its start-up lines and carry on)."""

    try:
        check_memory_fraction(args.gpu_memory_fraction)
        if not args.devices:
            return [None]
        devices = parse_device_list(args.devices)
        check_devices_visible(devices)
        return devices
    except DeviceError as error:
        raise UsageError(str(error)) from None


if __name__ == "__main__":
    sys.exit(main())

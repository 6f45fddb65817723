"""Playing episodes with a trained agent, for ``python -m a3c_graph.evaluate`` and
a3c_graph.evaluate(...).

Loads the latest checkpoint of a run (or --checkpoint) into a fresh graph holding only
the global network, and plays N episodes, greedy by default. Reads the network's shape
from <logdir>/config.json, which the chief writes when a run starts.

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
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from a3c_graph import process_env
from a3c_graph.cli import OneLineParser, UsageError, fail

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
    parser.add_argument("--episodes", type=int, default=10, help="Episodes to play (default: 10).")
    parser.add_argument("--env", help="Env id (default: the run's).")
    parser.add_argument("--seed", type=int, default=12345, help="Seed of the evaluation envs.")
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
    from a3c_graph.checkpoints import CheckpointError, read_run_config

    try:
        config = read_run_config(logdir)
    except CheckpointError as error:
        raise UsageError(str(error)) from None
    if config is None:
        path = os.path.join(logdir, "config.json")
        raise UsageError(f"{path} not found: is {logdir} the log dir of a training run?")
    return config


def checked_checkpoint(logdir: str, config, checkpoint: str | None, env_overridden: bool,
                       warn: Callable[[str], None]) -> str:
    """The checkpoint to play from `logdir` (the newest intact one unless `checkpoint` names
    one), checked against the network `config` builds: UsageError (one line) for no
    checkpoint, a damaged one, or one of a different network. Played models restore only
    the global network, so the checkpoint's optimizer slots and counters are ignored.
    """
    import tensorflow as tf

    from a3c_graph import checkpoints
    from a3c_graph.core.envs import env_info, env_options
    from a3c_graph.core.model import build_network

    advice = (f"--env {config.env} needs another network than the run's env" if env_overridden
              else f"{os.path.join(logdir, 'config.json')} describes another network")
    info = env_info(config.env, **env_options(config))
    with tf.Graph().as_default():
        network = build_network(info.obs_shape, info.num_actions, config, "global")
        saver = tf.compat.v1.train.Saver(var_list=network.variables)
        try:
            if checkpoint:
                checkpoints.check_checkpoint(checkpoint, saver, advice=advice)
                return checkpoint
            found = checkpoints.restorable_checkpoint(
                logdir, saver, strict=False, advice=advice, restart_advice=False, warn=warn)
        except checkpoints.CheckpointError as error:
            raise UsageError(str(error)) from None
    if found is None:
        raise UsageError(f"no checkpoint in {logdir} (the chief writes the first one "
                         "--checkpoint-secs after training starts)")
    return found


def _recording_env(config, video_dir: str, name_prefix: str):
    """The run's env, rendering rgb frames, with the first episode recorded as an mp4."""
    import gymnasium as gym

    from a3c_graph.core.config import is_atari
    from a3c_graph.core.envs import ATARI_FRAME_SKIP, env_options, make_env

    env = make_env(config.env, render_mode="rgb_array", **env_options(config))
    # One frame per agent step: an Atari step is 4 frames of the 60 Hz console.
    fps = 60 / ATARI_FRAME_SKIP if is_atari(config.env) else env.metadata.get("render_fps", 30)
    try:
        return gym.wrappers.RecordVideo(env, video_dir, episode_trigger=lambda e: e == 0,
                                        name_prefix=name_prefix, fps=fps)
    except gym.error.DependencyNotInstalled as error:
        env.close()
        raise UsageError(f"--record needs the atari extra (pip install -e '.[atari]'): "
                         f"{error}") from None


def play_episodes(config, checkpoint: str, episodes: int, seed: int, sample: bool,
                  device: str | None = None, session_config=None, label: str = "",
                  placement: dict | None = None, video_dir: str | None = None,
                  gif_seconds: float | None = None, gif_speed: float = 1.0,
                  say: Callable[[str], None] = print) -> list[float]:
    """Returns of `episodes` episodes played by the checkpoint's global network.

    device: the graph's ops are pinned there with graph.device() (None: TF chooses).
    session_config: the process's one shared ConfigProto. say: takes a line per episode,
    `label` its prefix.
    placement: if given, placement["ran_on"] gets the devices the first step ran on.
    video_dir: if given, the first episode is recorded there as an mp4, and with
      gif_seconds its first seconds as a GIF too, gif_speed times as fast.
    """
    import gymnasium as gym
    import numpy as np
    import tensorflow as tf

    from a3c_graph.core.envs import env_options, make_env
    from a3c_graph.core.model import build_network

    tf1 = tf.compat.v1
    if video_dir:
        name_prefix = f"{os.path.basename(checkpoint)}-seed{seed}"
        env = _recording_env(config, video_dir, name_prefix)
    else:
        env = make_env(config.env, **env_options(config))
    graph = tf.Graph()
    with graph.as_default(), graph.device(device):
        obs_ph = tf1.placeholder(tf.as_dtype(env.observation_space.dtype),
                                 [None, *env.observation_space.shape], name="obs")
        network = build_network(env.observation_space.shape, int(env.action_space.n), config,
                                "global")
        if network.recurrent:  # the state is carried from step to step, zero at an episode start
            state_ph = tf1.placeholder(tf.float32, [None, *network.state_shape], name="state")
            logits, _, next_state = network.step(obs_ph, state_ph)
        else:
            logits, _ = network(obs_ph)
        action = (tf.random.categorical(logits, 1)[:, 0] if sample
                  else tf.argmax(logits, axis=-1))
        saver = tf1.train.Saver(var_list=network.variables)
    returns = []
    with tf1.Session(graph=graph, config=session_config) as session:
        try:
            saver.restore(session, checkpoint)
        except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
                tf.errors.DataLossError) as error:
            first = str(error.message).strip().splitlines()[0]
            raise UsageError(
                f"checkpoint {checkpoint} does not fit this network: {first}") from None
        session = _FirstRunTraced(session, graph, placement)
        for episode in range(episodes):
            try:
                obs, _ = env.reset(seed=seed + episode)
            except gym.error.DependencyNotInstalled as error:  # rendering, e.g. pygame
                raise UsageError(f"--record cannot render {config.env}: {error}") from None
            total, steps, done = 0.0, 0, False
            if network.recurrent:
                state = np.zeros([1, *network.state_shape], np.float32)
            while not done:
                if network.recurrent:
                    a, state = session.run([action, next_state],
                                           {obs_ph: np.asarray(obs)[None], state_ph: state})
                    a = a[0]
                else:
                    a = session.run(action, {obs_ph: np.asarray(obs)[None]})[0]
                obs, reward, terminated, truncated, _ = env.step(int(a))
                total += float(reward)
                steps += 1
                done = terminated or truncated
            returns.append(total)
            # A greedy policy in a deterministic env can repeat one rally until the time limit.
            cut_off = ", cut off by the env's time limit" if truncated and not terminated else ""
            say(f"{label}episode {episode + 1}/{episodes}: return {total:.1f} in {steps:,} "
                f"steps{cut_off}")
    env.close()
    if video_dir and gif_seconds:
        mp4 = os.path.join(video_dir, f"{name_prefix}-episode-0.mp4")
        say(f"{label}wrote {write_gif(mp4, gif_seconds, speed=gif_speed)}")
    return returns


def write_gif(mp4: str, seconds: float, width: int = 160, speed: float = 1.0) -> str:
    """The first `seconds` of the video `mp4` as an animated GIF beside it, `width` pixels
    wide, played `speed` times as fast (moviepy, which RecordVideo wrote the mp4 with).
    Returns the GIF's path."""
    from moviepy import VideoFileClip

    gif = os.path.splitext(mp4)[0] + ".gif"
    with VideoFileClip(mp4) as clip:
        part = clip.subclipped(0, min(seconds, clip.duration))
        if clip.w > width:
            part = part.resized(width=width)
        if speed != 1.0:
            # Same frame rate, fewer frames: browsers slow down GIF delays under 20 ms.
            part = part.with_speed_scaled(speed)
        part.write_gif(gif, fps=clip.fps, logger=None)
    return gif


@dataclass(frozen=True)
class ModelReturns:
    """The episodes one model played: a --logdir's checkpoint, copy `copy` of it."""

    logdir: str
    checkpoint: str
    copy: int
    device: str | None  # what its graph was pinned to (None: TF's own placement)
    ran_on: list[str]  # the devices its first step ran on
    returns: list[float]

    def summary(self) -> dict:
        """The model's line of the command's JSON."""
        return {"logdir": self.logdir, "checkpoint": self.checkpoint, "copy": self.copy,
                "device": self.device, "ran_on": self.ran_on, "episodes": len(self.returns),
                "mean_return": sum(self.returns) / len(self.returns),
                "min_return": min(self.returns), "max_return": max(self.returns)}


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
        return Evaluation(_play(args, configs, devices, say, warn))


def _play(args, configs, devices, say, warn) -> list[ModelReturns]:
    """Every model's results: each --logdir's checkpoint, --copies times."""
    from a3c_graph.core.envs import EnvError
    from a3c_graph.devices import shared_session_config

    models = []
    try:
        for logdir, config in zip(args.logdir, configs):
            checkpoint = checked_checkpoint(logdir, config, args.checkpoint, bool(args.env),
                                            warn)
            models += [(logdir, config, checkpoint, copy) for copy in range(args.copies)]
        # One ConfigProto for every session: GPU options are process-wide.
        session_config = shared_session_config([d for d in devices if d],
                                               args.gpu_memory_fraction)
        return _play_concurrently(models, devices, session_config, args, say)
    except EnvError as error:
        raise UsageError(str(error)) from None


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
    from a3c_graph.devices import (
        DeviceError,
        check_devices_visible,
        check_memory_fraction,
        parse_device_list,
    )

    try:
        check_memory_fraction(args.gpu_memory_fraction)
        if not args.devices:
            return [None]
        devices = parse_device_list(args.devices)
        check_devices_visible(devices)
        return devices
    except DeviceError as error:
        raise UsageError(str(error)) from None


def _play_concurrently(models, devices, session_config, args, say) -> list[ModelReturns]:
    """Each model in a thread of its own (session.run releases the GIL), graph k pinned to
    devices[k % len(devices)]; their results in order."""

    def play(k: int, model) -> ModelReturns:
        logdir, config, checkpoint, copy = model
        device = devices[k % len(devices)]
        label = f"model {k} ({device or 'any device'}): " if len(models) > 1 else ""
        placement: dict = {}
        returns = play_episodes(
            config, checkpoint, args.episodes, args.seed + 1000 * copy, args.sample,
            device=device, session_config=session_config, label=label, placement=placement,
            video_dir=os.path.join(logdir, "videos") if args.record else None,
            gif_seconds=args.gif, gif_speed=args.gif_speed, say=say)
        return ModelReturns(logdir=logdir, checkpoint=checkpoint, copy=copy, device=device,
                            ran_on=placement.get("ran_on", []), returns=returns)

    with ThreadPoolExecutor(max_workers=len(models)) as pool:
        futures = [pool.submit(play, k, model) for k, model in enumerate(models)]
        return [future.result() for future in futures]


# A traced run is a process-wide profiling session: a second one at the same time fails
# with "Another profiling session active" (TF 2.21), so the models take turns.
_TRACE_LOCK = threading.Lock()


class _FirstRunTraced:
    """A session whose first run is traced, to report the devices the graph's ops ran on."""

    def __init__(self, session, graph, placement: dict | None):
        self._session, self._graph, self._placement = session, graph, placement

    def run(self, fetches, feed_dict=None, **kwargs):
        if self._placement is None or "ran_on" in self._placement or kwargs:
            return self._session.run(fetches, feed_dict, **kwargs)
        import tensorflow as tf

        from a3c_graph.devices import devices_that_ran

        tf1 = tf.compat.v1
        metadata = tf1.RunMetadata()
        with _TRACE_LOCK:
            result = self._session.run(
                fetches, feed_dict, run_metadata=metadata,
                options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE))
        self._placement["ran_on"] = devices_that_ran(metadata, self._graph)
        return result

    def __getattr__(self, name):
        return getattr(self._session, name)


if __name__ == "__main__":
    sys.exit(main())

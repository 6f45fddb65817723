"""Playing a checkpoint's policy: the checkpoint checked against the network
(checked_checkpoint), every model evaluate asks for in a thread of its own (play_models),
each playing episodes one after the other (any env, and the recorded video) or whole Atari
games at once as one batch (play_games); the GIF of a recording; and a checkpoint played on
training's own env batches, its games counted as they end (play_stream, a diagnostic).

evaluation.py (the command and a3c_graph.evaluate) checks the flags and calls play_models
once TensorFlow may load.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import tensorflow as tf

from a3c_graph.core.config import is_atari
from a3c_graph.core.envs import (
    ATARI_FRAME_SKIP,
    EnvBatch,
    EnvError,
    action_space,
    env_info,
    env_options,
    make_env,
)
from a3c_graph.core.model import build_network, reset_state
from a3c_graph.core.normalization import checkpointed_scale
from a3c_graph.core.rollout import episode_ended
from a3c_graph.rundir import checkpoints
from a3c_graph.system import process_env
from a3c_graph.system.cli import UsageError, first_line
from a3c_graph.system.devices import devices_that_ran
from a3c_graph.trained.recording import record_replay, renders_apart


def checked_checkpoint(logdir: str, config, checkpoint: str | None, env_overridden: bool,
                       warn: Callable[[str], None]) -> str:
    """The checkpoint to play from `logdir` (the newest intact one unless `checkpoint` names
    one), checked against the network `config` builds: UsageError (one line) for no
    checkpoint, a damaged one, or one of a different network. Played models restore only
    the global network, so the checkpoint's optimizer slots and counters are ignored.
    """
    advice = (f"--env {config.env} needs another network than the run's env" if env_overridden
              else f"{os.path.join(logdir, 'config.json')} describes another network")
    info = env_info(config.env, **env_options(config))
    with tf.Graph().as_default():
        _, saver = checkpointed_network(config, info.obs_shape, info.actions)
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


def checkpointed_network(config, obs_shape, actions):
    """The global network as a checkpoint holds it, in the default graph: (the network, its
    observations standardized by the checkpoint's frozen statistics if the run normalized
    them; the Saver that restores both, and nothing else of the checkpoint)."""
    scale, statistics = checkpointed_scale(config, obs_shape)
    network = build_network(obs_shape, actions, config, "global", observation_scale=scale)
    return network, tf.compat.v1.train.Saver(var_list=network.variables + statistics)


def play_models(args, configs, devices, say, warn) -> list[dict]:
    """Every model's results (evaluation.ModelReturns' fields): each --logdir's checkpoint,
    --copies times, as evaluate's `args` ask."""
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


def _play_concurrently(models, devices, session_config, args, say) -> list[dict]:
    """Each model in a thread of its own (session.run releases the GIL), graph k pinned to
    devices[k % len(devices)]; their results in order."""

    def play(k: int, model) -> dict:
        logdir, config, checkpoint, copy = model
        device = devices[k % len(devices)]
        label = f"model {k} ({device or 'any device'}): " if len(models) > 1 else ""
        placement: dict = {}
        seed = args.seed + 1000 * copy
        atari = is_atari(config.env)
        if atari and not args.record:  # whole games, stepped as one batch
            returns, lengths = play_games(
                config, checkpoint, args.episodes, seed, args.sample, device=device,
                session_config=session_config, label=label, placement=placement, say=say,
                min_agent_steps=args.min_agent_steps)
        else:
            returns, lengths = play_episodes(
                config, checkpoint, args.episodes, seed, args.sample, device=device,
                session_config=session_config, label=label, placement=placement,
                video_dir=os.path.join(logdir, "videos") if args.record else None,
                gif_seconds=args.gif, gif_speed=args.gif_speed, say=say,
                min_agent_steps=args.min_agent_steps)
        return dict(logdir=logdir, checkpoint=checkpoint, copy=copy, device=device,
                    ran_on=placement.get("ran_on", []), returns=returns, lengths=lengths,
                    frame_skip=ATARI_FRAME_SKIP if atari else 1)

    with ThreadPoolExecutor(max_workers=len(models)) as pool:
        futures = [pool.submit(play, k, model) for k, model in enumerate(models)]
        return [future.result() for future in futures]


def shared_session_config(devices: Sequence[str], memory_fraction: float | None = None):
    """One ConfigProto for every session of a process that runs graphs on `devices`.

    GPU options are process-wide, so all sessions get this same object. It asks for as many
    logical CPU devices as the highest cpu:N needs (so cpu:1 is a device of its own, not
    silently cpu:0), and soft placement for ops without a kernel on their device.
    """
    cpus = 1 + max([int(d.rsplit(":", 1)[1]) for d in devices if ":CPU:" in d] or [0])
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True, device_count={"CPU": cpus})
    if memory_fraction is None:
        config.gpu_options.allow_growth = True
    else:
        config.gpu_options.per_process_gpu_memory_fraction = memory_fraction
    return config


def _recording_env(env, config, video_dir: str, name_prefix: str):
    """`env` (the run's, made rendering rgb frames) with its first episode recorded as an
    mp4."""
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
                  say: Callable[[str], None] = print,
                  min_agent_steps: int = 0) -> tuple[list[float], list[int]]:
    """Returns and lengths (agent steps) of the episodes played one after the other by the
    checkpoint's global network: `episodes`, and more until they hold `min_agent_steps`.

    device: the graph's ops are pinned there with graph.device() (None: TF chooses).
    session_config: the process's one shared ConfigProto. say: takes a line per episode,
    `label` its prefix.
    placement: if given, placement["ran_on"] gets the devices the first step ran on.
    video_dir: if given, the first episode is recorded there as an mp4, and with
      gif_seconds its first seconds as a GIF too, gif_speed times as fast.
    """
    env = make_env(config.env, render_mode="rgb_array" if video_dir else None,
                   **env_options(config))
    name_prefix = f"{os.path.basename(checkpoint)}-seed{seed}"
    # MuJoCo renders in a process without TensorFlow: the first episode's actions are kept,
    # then replayed there (recording.py), and no frame is rendered here. Other envs record
    # here as they play.
    replayed = bool(video_dir) and renders_apart(env)
    if video_dir and not replayed:
        env = _recording_env(env, config, video_dir, name_prefix)
    policy = _one_env_policy(config, env, sample, device, seed)
    returns, lengths = [], []
    with _quiet_session(policy.graph, session_config) as session:
        _restore(policy.saver, session, checkpoint)
        session = _FirstRunTraced(session, policy.graph, placement)
        episode = 0
        while episode < episodes or sum(lengths) < min_agent_steps:
            try:
                obs, _ = env.reset(seed=seed + episode)
            except gym.error.DependencyNotInstalled as error:  # rendering, e.g. pygame
                raise UsageError(f"--record cannot render {config.env}: {error}") from None
            sent = [] if replayed and episode == 0 else None
            total, steps, truncated = _play_to_the_end(session, policy, env, obs, sent)
            returns.append(total)
            lengths.append(steps)
            # A greedy policy in a deterministic env can repeat one rally until the time limit.
            cut_off = ", cut off by the env's time limit" if truncated else ""
            of = f"/{episodes}" if episode < episodes else f" (to {min_agent_steps:,} steps)"
            say(f"{label}episode {episode + 1}{of}: return {total:.1f} in {steps:,} "
                f"steps{cut_off}")
            if sent is not None:
                again, again_steps = record_replay(config.env, env_options(config), seed, sent,
                                                   video_dir, name_prefix)
                if (again_steps, round(again, 6)) != (steps, round(total, 6)):
                    raise UsageError(
                        f"--record replayed a different episode of {config.env}: return "
                        f"{again:.3f} in {again_steps} steps, played {total:.3f} in {steps}")
                say(f"{label}recorded episode 1 in a process of its own (MuJoCo renders "
                    f"apart from TensorFlow): replayed return {again:.1f}, as played")
            episode += 1
    env.close()
    if video_dir and gif_seconds:
        mp4 = os.path.join(video_dir, f"{name_prefix}-episode-0.mp4")
        say(f"{label}wrote {write_gif(mp4, gif_seconds, speed=gif_speed)}")
    return returns, lengths


class _Policy(NamedTuple):
    """The checkpoint's global network acting on one observation at a time."""

    graph: object
    network: object
    obs: object         # placeholder [1, *obs_shape]
    state: object       # placeholder [1, 2, H] of a recurrent network, else None
    action: object      # [1]: greedy or sampled
    next_state: object  # the state after the step, else None
    saver: object


def _one_env_policy(config, env, sample: bool, device: str | None, seed: int) -> _Policy:
    """The acting graph of `config`'s network for `env`'s observations, its ops pinned to
    `device` (None: TF chooses), its sampled actions drawn from `seed`'s stream."""
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), graph.device(device):
        tf1.set_random_seed(seed)
        obs = tf1.placeholder(tf.as_dtype(env.observation_space.dtype),
                              [None, *env.observation_space.shape], name="obs")
        network, saver = checkpointed_network(config, env.observation_space.shape,
                                              action_space(env))
        state = next_state = None
        if network.recurrent:  # the state is carried from step to step, zero at an episode start
            state = tf1.placeholder(tf.float32, [None, *network.state_shape], name="state")
            policy, _, next_state = network.step(obs, state)
        else:
            policy, _ = network(obs)
        action = _action(network, policy, sample)
    return _Policy(graph, network, obs, state, action, next_state, saver)


def _action(network, policy, sample: bool):
    """The action a network's `policy` [N, P] takes: sampled from its distribution, or the
    greedy one (the most likely action; a Gaussian's mean)."""
    distribution = network.distribution
    return distribution.sample(policy) if sample else distribution.mode(policy)


def _play_to_the_end(session, policy: _Policy, env, obs,
                     sent: list | None = None) -> tuple[float, int, bool]:
    """(return, steps, cut off by the time limit) of the episode `env` has just begun;
    `sent`, if given, gets each action as it was sent to env.step."""

    total, steps, terminated, truncated = 0.0, 0, False, False
    if policy.network.recurrent:
        state = np.zeros([1, *policy.network.state_shape], np.float32)
    while not (terminated or truncated):
        if policy.network.recurrent:
            action, state = session.run([policy.action, policy.next_state],
                                        {policy.obs: np.asarray(obs)[None], policy.state: state})
        else:
            action = session.run(policy.action, {policy.obs: np.asarray(obs)[None]})
        # A discrete action as the int Gymnasium expects; a Box's as its float32 vector.
        action = action[0] if action.ndim > 1 else int(action[0])
        if sent is not None:
            sent.append(action)
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        steps += 1
    return total, steps, truncated and not terminated


def play_games(config, checkpoint: str, games: int, seed: int, sample: bool,
               device: str | None = None, session_config=None, label: str = "",
               placement: dict | None = None,
               say: Callable[[str], None] = print,
               min_agent_steps: int = 0) -> tuple[list[float], list[int]]:
    """Atari: the returns and lengths (agent steps) of whole games played `games` at once,
    one per env of an EnvBatch (ale-py's vector env with the run's protocol: random no-op
    starts of up to 30, game i seeded seed + i, each game cut at ALE's 108,000 frames),
    the policy acting on all of them as one batch. A finished env's next game is played on
    but not counted, so every game counts once whatever its length. Batch after batch (game
    numbers and seeds going on) until the games hold `min_agent_steps` agent steps in all:
    whole batches, so no game is cut short by the count and short games are not favoured.
    """

    returns: list[float] = []
    lengths: list[int] = []
    while not returns or sum(lengths) < min_agent_steps:
        first = len(returns)
        batch = EnvBatch(config.env, games, seed=seed + first, **env_options(config))
        try:
            more = _play_batch(batch, config, checkpoint, games, sample, device,
                               session_config, label, placement, say, first, seed + first)
        finally:
            batch.close()
        returns += more[0]
        lengths += more[1]
    return returns, lengths


def _play_batch(batch, config, checkpoint, games, sample, device, session_config, label,
                placement, say, first: int, seed: int) -> tuple[list[float], list[int]]:
    """One batch of play_games on the EnvBatch `batch` of `games` envs, its games numbered
    from first + 1, its sampled actions drawn from `seed`'s stream."""
    returns: list[float | None] = [None] * games
    lengths = [0] * games
    with _batch_policy(config, checkpoint, batch.info, games, sample, device, session_config,
                       placement, seed) as act:
        done = np.zeros(games, bool)
        left = games
        while left:
            step = batch.step(act(batch.observe(), done))
            done = np.logical_or(step.terminated, step.truncated)
            for i in np.flatnonzero(episode_ended(step.episode_length)):
                if returns[i] is not None:
                    continue
                returns[i], lengths[i] = float(step.episode_return[i]), int(step.episode_length[i])
                left -= 1
                say(f"{label}game {first + i + 1}/{first + games}: "
                    f"{_game_line(returns[i], lengths[i], step.truncated[i], batch.info)}")
    return [float(r) for r in returns], lengths


def play_stream(config, checkpoint: str, games: int, sample: bool, seeds: Sequence[int],
                device: str | None = None, session_config=None,
                say: Callable[[str], None] = print) -> tuple[list[float], list[int]]:
    """The returns and lengths of the first `games` episodes (Atari: whole games) to end when
    the checkpoint plays as training's actors do: an EnvBatch of config.envs_per_worker envs
    per seed of `seeds` (envs.actor_seed: the workers' own), every env going on through its
    auto-resets, episodes counted in the order they end, as the training curve's mean
    return(100) counts them (short ones first). play_games is the evaluation's way: fresh
    envs, one game each."""
    batches = [EnvBatch(config.env, config.envs_per_worker, seed=seed, **env_options(config))
               for seed in seeds]
    size = config.envs_per_worker * len(batches)
    returns: list[float] = []
    lengths: list[int] = []
    try:
        with _batch_policy(config, checkpoint, batches[0].info, size, sample, device,
                           session_config, None, seeds[0]) as act:
            done = np.zeros(size, bool)
            while len(returns) < games:
                actions = np.split(act(np.concatenate([b.observe() for b in batches]), done),
                                   len(batches))
                steps = [b.step(a) for b, a in zip(batches, actions)]
                done = np.concatenate([s.terminated | s.truncated for s in steps])
                ended = np.concatenate([s.episode_length for s in steps])
                played = np.concatenate([s.episode_return for s in steps])
                cut = np.concatenate([s.truncated for s in steps])
                for i in np.flatnonzero(episode_ended(ended))[:games - len(returns)]:
                    returns.append(float(played[i]))
                    lengths.append(int(ended[i]))
                    say(f"game {len(returns)}/{games} (env {i}): "
                        f"{_game_line(returns[-1], lengths[-1], cut[i], batches[0].info)}")
    finally:
        for batch in batches:
            batch.close()
    return returns, lengths


def _game_line(played: float, length: int, cut_off: bool, info) -> str:
    """"return R in N steps (F frames)", and where the episode was cut off."""
    frames = f" ({length * info.frame_skip:,} frames)" if info.frame_skip > 1 else ""
    limit = "at ALE's frame cap" if is_atari(info.env_id) else "by the env's time limit"
    return f"return {played:.1f} in {length:,} steps{frames}" + (
        f", cut off {limit}" if cut_off else "")


@contextlib.contextmanager
def _batch_policy(config, checkpoint, info, size: int, sample: bool, device, session_config,
                  placement, seed: int):
    """act(observations [size, ...], done [size]) -> the checkpoint's actions for `size` envs
    stepped together, in a session open while the context lasts; a recurrent network's state
    is carried from step to step and zeroed where `done` (the previous step ended an
    episode). Sampled actions come from `seed`'s stream."""
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), graph.device(device):
        tf1.set_random_seed(seed)
        obs_ph = tf1.placeholder(tf.as_dtype(info.obs_dtype), [size, *info.obs_shape],
                                 name="obs")
        network, saver = checkpointed_network(config, info.obs_shape, info.actions)
        if network.recurrent:
            state_ph = tf1.placeholder(tf.float32, [size, *network.state_shape], name="state")
            done_ph = tf1.placeholder(tf.bool, [size], name="done")
            policy, _, next_state = network.step(obs_ph, reset_state(state_ph, done_ph))
        else:
            policy, _ = network(obs_ph)
        action = _action(network, policy, sample)
    with _quiet_session(graph, session_config) as session:
        _restore(saver, session, checkpoint)
        session = _FirstRunTraced(session, graph, placement)
        state = (np.zeros([size, *network.state_shape], np.float32) if network.recurrent
                 else None)

        def act(observations, done):
            nonlocal state
            if not network.recurrent:
                return session.run(action, {obs_ph: observations})
            actions, state = session.run([action, next_state], {
                obs_ph: observations, state_ph: state, done_ph: done})
            return actions

        yield act


def _quiet_session(graph, session_config):
    """A session of `graph` started without TF's C++ start-up lines on stderr (process_env)."""
    with process_env.stderr_to_devnull():
        return tf.compat.v1.Session(graph=graph, config=session_config)


def _restore(saver, session, checkpoint: str) -> None:

    try:
        saver.restore(session, checkpoint)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
            tf.errors.DataLossError) as error:
        raise UsageError(f"checkpoint {checkpoint} does not fit this network: "
                         f"{first_line(error)}") from None


def write_gif(mp4: str, seconds: float, width: int = 160, speed: float = 1.0) -> str:
    """The first `seconds` of the video `mp4` as an animated GIF beside it, `width` pixels
    wide, played `speed` times as fast (moviepy, which RecordVideo wrote the mp4 with).
    Returns the GIF's path."""
    from moviepy import VideoFileClip  # the atari extra's (setup.py), needed only here

    gif = os.path.splitext(mp4)[0] + ".gif"
    with VideoFileClip(mp4) as clip:
        part = clip.subclipped(0, min(seconds, clip.duration))
        if clip.w > width:
            part = part.resized(width=width)
        if speed != 1.0:
            # Same frame rate, fewer frames: browsers slow down GIF delays under 20 ms.
            part = part.with_speed_scaled(speed)
        # At most 50 frames a second (MuJoCo's Hopper renders 125): browsers slow down GIF
        # delays under 20 ms, so more frames would play the GIF slower, not smoother.
        part.write_gif(gif, fps=min(clip.fps, 50), logger=None)
    return gif


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

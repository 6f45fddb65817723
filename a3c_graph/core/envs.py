"""Gymnasium environments: the factory, what an env id offers, and the batch an actor steps.

An actor thread owns one EnvBatch of B envs and steps them together, so one policy
inference serves B observations. Episodes auto-reset in the same step (Gymnasium's
SAME_STEP mode), and the true final observation of an ended episode is kept, because a
truncated episode is bootstrapped from the value of exactly that observation.

Atari (``ALE/`` ids, e.g. ALE/Pong-v5): an actor's batch is ale-py's own vector env
(Gymnasium's make_vec through the id's registered vector entry point), whose preprocessing
runs in C++; a single env (evaluation, recording) goes through Gymnasium's own wrappers,
the ALE env made with frameskip=1 so that AtariPreprocessing does the frame skip. Both give
the same frames: frame skip 4 with max-pooling of the last two frames, up to 30 no-op
actions at reset, grayscale, the resize to --screen-size (42x42 by default), and a stack of
the last --frame-stack (4) frames, zeros before the first. Observations are uint8
[4, 42, 42] (frames first; the CNN moves them to channels-last inside the graph), and stay
uint8 through the rollout queue. Sticky actions (repeat_action_probability 0.25), the
minimal action set and the episode limit of 108,000 emulator frames (27,000 agent steps)
are ALE v5's defaults. One agent step is 4 frames.

The classic protocol (--protocol classic: the one rl-baselines3-zoo's, cleanrl's and OpenAI
baselines' Atari scores are measured on) differs in three things: no sticky actions (the
preset's repeat_action_probability 0), FIRE after a reset (ale-py's use_fire_reset), and a
lost life: the step that loses it is terminated for learning (no bootstrapping across a
death) while the game goes on (ale-py's life_loss_info), the env's next step is FIRE,
whatever the agent chose, in games that have it (Breakout's ball waits for it), and the new
life starts a new stack: frames from before the loss are zeros until pushed out, as the
anchors' stack restarts at every end of a learning episode. The transition records the
action the emulator executed. Episode returns, lengths and the episode statistics are always
whole games: EnvBatch reports a return only when the game is over (the vector env reset it)
or was cut at the 108,000-frame cap.

MinAtar (``MinAtar/`` ids, e.g. MinAtar/Breakout-v1; Young and Tian 2019) comes from the
`minatar` package, whose envs Gymnasium 1.x only knows after minatar.gym.register_envs()
(it loads no env plugins by itself). Its protocol is the package's: sticky actions with
probability 0.1, difficulty ramping, the -v1 ids' minimal action set, one frame per step.
Observations are bool [10, 10, C] channels-last; they are transposed here to [C, 10, 10]
so that every image reaches the CNN in the same layout as Atari's stacked frames.
"""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass
from typing import NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from a3c_graph.core.action_space import ActionSpace
from a3c_graph.core.config import A3CConfig, is_atari, is_minatar
from a3c_graph.system.cli import first_line

ATARI_FRAME_SKIP = 4
ATARI_NOOP_MAX = 30


class EnvError(ValueError):
    """An env id a run cannot use; the message is shown to the user as is."""


@dataclass(frozen=True)
class EnvInfo:
    """What the model and the launcher need to know about an env id."""

    env_id: str
    obs_shape: tuple
    obs_dtype: np.dtype
    actions: ActionSpace  # one of n, or (a Box of one axis) n reals within bounds
    reward_threshold: float | None
    max_episode_steps: int | None
    frame_skip: int = 1  # emulator frames per agent step (4 for Atari)


def env_options(config) -> dict:
    """The make_env keyword arguments an A3CConfig sets (they matter for ALE ids only)."""
    return {"protocol": config.protocol,
            "repeat_action_probability": config.repeat_action_probability,
            "full_action_space": config.full_action_space,
            "screen_size": config.screen_size, "frame_stack": config.frame_stack}


def atari_options(**given) -> dict:
    """make_env's and make_atari_vector_env's ALE options: `given` over A3CConfig's defaults,
    the one place they are written (ALE v5's sticky actions, 42x42 frames, 4 stacked), and
    up to ATARI_NOOP_MAX no-ops at reset. TypeError for an option no ALE env takes."""
    defaults = {**env_options(A3CConfig()), "noop_max": ATARI_NOOP_MAX}
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(f"unknown ALE option(s): {', '.join(unknown)}")
    return {**defaults, **given}


def fire_action(action_set) -> int | None:
    """The index of FIRE in an ALE action set (a list of ale_py.Action), None without it."""
    names = [action.name for action in action_set]
    return names.index("FIRE") if "FIRE" in names else None


def _register_extras(env_id: str) -> None:
    """Gymnasium told of the optional envs `env_id` needs: ALE's or MinAtar's. Their packages
    are imported here, when an id first needs them, and nowhere else (minatar's import alone
    takes seconds; ale-py is the Atari extra): docs/architecture.md, "Where the heavy
    imports load"."""
    if is_atari(env_id):
        try:
            import ale_py
        except ImportError:
            raise EnvError(
                f"env {env_id!r} needs the Atari extra: pip install -e '.[atari]'") from None
        # ALE's banner on stderr would break the one-line error contract of a bad flag.
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
        gym.register_envs(ale_py)
    elif is_minatar(env_id):
        _register_minatar()


def _register_minatar() -> None:
    if "MinAtar/Breakout-v1" in gym.registry:
        return
    # minatar's own modules log a warning when seaborn (needed only to render) is missing;
    # the warning on stderr would break the one-line error contract of a bad flag.
    logging.disable(logging.WARNING)
    try:
        import minatar.gym
    except ImportError:
        raise EnvError("MinAtar envs need the minatar package: pip install --no-deps "
                       "minatar==1.0.15 (make train and make test install it)") from None
    finally:
        logging.disable(logging.NOTSET)
    minatar.gym.register_envs()


def _spec(env_id: str):
    """The registered spec of `env_id`; "package.module:EnvId" imports the module first,
    as gym.make does, so envs registered by a user's own package work too."""
    _register_extras(env_id)
    if ":" in env_id:
        module, _, env_id = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise EnvError(f"cannot import module {module!r} of env id "
                           f"'{module}:{env_id}': {error}") from None
    try:
        return gym.spec(env_id)
    except gym.error.Error as error:
        raise EnvError(f"unknown env id {env_id!r}: {first_line(error)}") from None


def make_env(env_id: str, render_mode: str | None = None, **options) -> gym.Env:
    """One env of `env_id`, with the observation and action spaces checked.

    For ALE ids: Gymnasium's Atari preprocessing and frame stack (see the module docstring),
    and for the classic protocol ClassicLives; an episode is a whole game. `options`
    are ALE's (atari_options) and are ignored for other envs.
    """
    _spec(env_id)
    if is_atari(env_id):
        ale = atari_options(**options)
        env = gym.make(env_id, render_mode=render_mode, frameskip=1,
                       repeat_action_probability=ale["repeat_action_probability"],
                       full_action_space=ale["full_action_space"])
        env = AtariPreprocessing(env, noop_max=ale["noop_max"], frame_skip=ATARI_FRAME_SKIP,
                                 screen_size=ale["screen_size"], terminal_on_life_loss=False,
                                 grayscale_obs=True, scale_obs=False)
        # Zero frames before the first, as ale-py's vector env pads (make_atari_vector_env).
        env = FrameStackObservation(env, ale["frame_stack"], padding_type="zero")
        if ale["protocol"] == "classic":
            env = ClassicLives(env)
    elif is_minatar(env_id):
        # minatar renders rgb frames through seaborn, which it does not install: MinAtarFrames.
        env = gym.make(env_id)
        height, width, channels = env.observation_space.shape
        env = gym.wrappers.TransformObservation(
            env, lambda obs: np.ascontiguousarray(np.moveaxis(obs, -1, 0)),
            gym.spaces.Box(0, 1, (channels, height, width), bool))
        if render_mode == "rgb_array":
            env = MinAtarFrames(env)
    else:
        env = gym.make(env_id, render_mode=render_mode)
    _check_spaces(env_id, env)
    if isinstance(env.action_space, gym.spaces.Box):
        # The policy's Gaussian samples are unbounded; the env gets them clipped to its Box
        # (the log-probability stays the sampled action's: distributions.py).
        env = gym.wrappers.ClipAction(env)
    return env


def action_space(env: gym.Env) -> ActionSpace:
    """The ActionSpace of an env of make_env: its Discrete space, or its Box as it was
    before ClipAction (which widens the space it declares to the whole real line)."""
    space = env.env.action_space if isinstance(env, gym.wrappers.ClipAction) else env.action_space
    if isinstance(space, gym.spaces.Discrete):
        return ActionSpace(int(space.n))
    return ActionSpace(int(space.shape[0]), tuple(float(x) for x in space.low),
                       tuple(float(x) for x in space.high))


def frames_of_this_life(stacks: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Stacks [B, S, H, W] with all but each one's last counts[i] frames zeroed (a copy if
    any is): the stack of a life counts[i] frames old, nothing of the life before it."""
    size = stacks.shape[1]
    stale = np.arange(size)[None, :] < (size - np.asarray(counts))[:, None]
    if not stale.any():
        return stacks
    stacks = stacks.copy()
    stacks[stale] = 0
    return stacks


class ClassicLives(gym.Wrapper):
    """The classic protocol's lives for one env of whole games (evaluation's recording),
    above its frame stack, as EnvBatch gives the vector env: FIRE after the reset's no-ops
    and on the step after a lost life (whatever action it is given; not for games without
    FIRE), and a new frame stack for each life, the frames from before it zeros."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        self._fire = meanings.index("FIRE") if "FIRE" in meanings else None
        self._size = self._count = env.observation_space.shape[0]
        self._lives = 0
        self._life_lost = False

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._count = self._size
        if self._fire is not None:
            obs, _, terminated, truncated, info = self.env.step(self._fire)
            self._count = 1
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
                self._count = self._size
        self._lives = self.env.unwrapped.ale.lives()
        self._life_lost = False
        return frames_of_this_life(obs[None], [self._count])[0], info

    def step(self, action):
        if self._life_lost and self._fire is not None:
            action = self._fire
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        self._life_lost = lives < self._lives and not (terminated or truncated)
        self._count = 1 if self._life_lost else min(self._count + 1, self._size)
        self._lives = lives
        return (frames_of_this_life(obs[None], [self._count])[0], reward, terminated,
                truncated, info)


class MinAtarFrames(gym.Wrapper):
    """rgb_array frames of a MinAtar board: each of the C object channels in its own colour
    (a later channel over an earlier one), each cell a MINATAR_CELL-pixel square."""

    MINATAR_CELL = 16

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.metadata = {**env.metadata, "render_fps": 15}
        self._obs = None
        channels = env.observation_space.shape[0]
        hues = np.linspace(0.0, 1.0, channels, endpoint=False)
        # An evenly spaced, bright colour per channel (no plotting library needed).
        self._colours = np.stack([128 + 127 * np.cos(2 * np.pi * (hues + k / 3))
                                  for k in range(3)], axis=1).astype(np.uint8)

    @property
    def render_mode(self) -> str:
        return "rgb_array"

    def reset(self, **kwargs):
        self._obs, info = self.env.reset(**kwargs)
        return self._obs, info

    def step(self, action):
        result = self.env.step(action)
        self._obs = result[0]
        return result

    def render(self):
        board = np.zeros((*self._obs.shape[1:], 3), np.uint8)
        for channel, colour in zip(self._obs, self._colours):
            board[channel] = colour
        return board.repeat(self.MINATAR_CELL, axis=0).repeat(self.MINATAR_CELL, axis=1)


def _check_spaces(env_id: str, env: gym.Env) -> None:
    problem = _action_space_problem(env.action_space)
    if problem is None and not isinstance(env.observation_space, gym.spaces.Box):
        problem = (f"has a {type(env.observation_space).__name__} observation space; a Box "
                   "is needed")
    if problem is not None:
        env.close()
        raise EnvError(f"env {env_id!r} {problem}")


def _action_space_problem(space) -> str | None:
    """Why an action space is one no policy here can act in, or None: a Discrete space, or
    a Box of one axis with finite bounds (what the Gaussian's samples are clipped to)."""
    if isinstance(space, gym.spaces.Discrete):
        return None
    if not isinstance(space, gym.spaces.Box):
        return (f"has a {type(space).__name__} action space; A3C here needs a Discrete one "
                "or a Box of one axis")
    if len(space.shape) != 1:
        return (f"has a Box action space of shape {space.shape}; A3C here needs a Box of one "
                "axis (a vector of actions)")
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        return ("has an unbounded Box action space (low and high must be finite: the "
                "Gaussian policy's actions are clipped to them)")
    return None


@functools.cache
def env_info(env_id: str, **options) -> EnvInfo:
    """Shapes and thresholds of `env_id` (made with make_env's `options`); EnvError for an
    unknown or unsuitable id."""
    spec = _spec(env_id)
    # One frame, and the stack's shape worked out: a stack of --frame-stack frames would be
    # allocated here, the launcher's own memory, before the estimate could refuse it.
    frame_stack = atari_options(**options)["frame_stack"] if is_atari(env_id) else None
    env = make_env(env_id, **{**options, "frame_stack": 1} if frame_stack else options)
    obs_shape = tuple(env.observation_space.shape)
    try:
        return EnvInfo(
            env_id=env_id,
            obs_shape=(frame_stack, *obs_shape[1:]) if frame_stack else obs_shape,
            obs_dtype=np.dtype(env.observation_space.dtype),
            actions=action_space(env),
            reward_threshold=spec.reward_threshold,
            max_episode_steps=spec.max_episode_steps,
            frame_skip=ATARI_FRAME_SKIP if is_atari(env_id) else 1,
        )
    finally:
        env.close()


class Transition(NamedTuple):
    """One step of B envs. All arrays have leading dimension B."""

    next_obs: np.ndarray        # observation to act on next (first of a new episode after done)
    reward: np.ndarray          # float32
    terminated: np.ndarray      # bool (the classic protocol: a lost life too)
    truncated: np.ndarray       # bool
    final_obs: np.ndarray       # the true s_{t+1}: the last observation where done, else next_obs
    episode_return: np.ndarray  # float32, a whole game's return where it ended, else 0
    episode_length: np.ndarray  # int32, its length in agent steps where it ended, else 0
    action: np.ndarray          # what the env executed: int32 (FIRE after a lost life), or
                                # a Box's float32 [B, n] clipped to its bounds (make_env's
                                # ClipAction); the rollout records the policy's: rollout.py


def make_atari_vector_env(env_id: str, num_envs: int, **options) -> gym.vector.VectorEnv:
    """`num_envs` envs of an ALE id as ale-py's own vector env (Gymnasium's make_vec through
    the id's registered vector entry point): the emulator, the frame skip with max-pooling,
    the no-ops, grayscale, resize and frame stack all run in C++, faster than the same
    preprocessing in Python wrappers (benchmarks/PERFORMANCE.md has the figures).

    Its frames are make_env's exactly: the same ALE v5 protocol, and its resize gives the
    same pixels as AtariPreprocessing's (tests/unit/core/test_atari.py compares them step by step);
    both pad the stack of a new episode with zero frames. No reward clipping (that is the
    learner's). On ALE v5's protocol no FIRE at reset and no end of episode on a lost life;
    on the classic protocol FIRE at reset and a lost life marked terminated while the game
    goes on (life_loss_info; episodic_life would restart the whole game at each lost life).
    """
    ale = atari_options(**options)
    classic = ale["protocol"] == "classic"
    return gym.make_vec(
        env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
        repeat_action_probability=ale["repeat_action_probability"],
        full_action_space=ale["full_action_space"], img_height=ale["screen_size"],
        img_width=ale["screen_size"], stack_num=ale["frame_stack"],
        frameskip=ATARI_FRAME_SKIP, noop_max=ale["noop_max"],
        maxpool=True, grayscale=True, episodic_life=False, life_loss_info=classic,
        reward_clipping=False, use_fire_reset=classic,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        # One emulator thread per batch: the worker's actor thread waits for it, so a batch
        # takes one core as the Python wrappers did, and two workers take two.
        num_threads=1)


def actor_seed(seed: int, task: int, actor: int) -> int:
    """The seed of the EnvBatch of a worker task's actor thread: env i of it is seeded with
    this + i (a3c_graph.worker; playing.play_stream replays training's games with them)."""
    return seed + 1000 * task + 100 * actor


class EnvBatch:
    """B envs of one id stepped together; env i is seeded with seed + i.

    options: make_env's keyword arguments (env_options(config)). ALE ids step as ale-py's
    vector env (make_atari_vector_env), every other id as Gymnasium's SyncVectorEnv of
    make_env's envs; both auto-reset in the same step.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, **options):
        info = env_info(env_id, **options)
        self.info = info
        self.num_envs = num_envs
        # The classic protocol: lives are followed, FIRE follows a lost life (docstring).
        self._life_loss = is_atari(env_id) and options.get("protocol") == "classic"
        if is_atari(env_id):
            self._envs = make_atari_vector_env(env_id, num_envs, **options)
        else:
            self._envs = gym.vector.SyncVectorEnv(
                [functools.partial(make_env, env_id, **options) for _ in range(num_envs)],
                autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            )
        self._envs.action_space.seed(seed)
        actions = info.actions
        self._bounds = ((np.asarray(actions.low, np.float32), np.asarray(actions.high, np.float32))
                        if actions.continuous else None)
        obs, infos = self._envs.reset(seed=seed)
        self._obs = obs.astype(info.obs_dtype, copy=False)
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int32)
        if self._life_loss:
            self._lives = np.asarray(infos["lives"])
            self._fire = fire_action(self._envs.ale.get_action_set())
            self._fire_next = np.zeros(num_envs, bool)
            # Frames of each env's current life in its stack (a full stack: nothing to zero).
            self._stack_size = info.obs_shape[0]
            self._life_frames = np.full(num_envs, self._stack_size)

    def observe(self) -> np.ndarray:
        """Current observations, [B, *obs_shape]."""
        return self._obs

    def step(self, actions: np.ndarray) -> Transition:
        actions = np.asarray(actions, self.info.actions.dtype)
        if self._life_loss and self._fire is not None and self._fire_next.any():
            actions = np.where(self._fire_next, np.int32(self._fire), actions)
        obs, reward, terminated, truncated, infos = self._envs.step(actions)
        obs = obs.astype(self.info.obs_dtype, copy=False)
        done = np.logical_or(terminated, truncated)
        game_over = done
        if self._life_loss:
            # A lost life: terminated while the lives went down and the game went on (at the
            # end of a game the vector env has started the next one, with all its lives).
            lives = np.asarray(infos["lives"])
            life_lost = terminated & ~truncated & (lives < self._lives)
            game_over = done & ~life_lost
            self._lives = lives
            self._fire_next = life_lost
            # A new life, a new stack (the module docstring); a new game's the env padded.
            self._life_frames = np.where(life_lost, 1, np.minimum(self._life_frames + 1,
                                                                  self._stack_size))
            self._life_frames[game_over] = self._stack_size
            obs = frames_of_this_life(obs, self._life_frames)
        final_obs = obs
        if game_over.any():
            final_obs = obs.copy()
            # SyncVectorEnv marks the envs it reset in "_final_obs"; ale-py's vector env
            # gives "final_obs" for the whole batch, meaningful where a game ended.
            for i in np.flatnonzero(infos.get("_final_obs", game_over)):
                final_obs[i] = infos["final_obs"][i]
        self._returns += reward
        self._lengths += 1
        episode_return = np.where(game_over, self._returns, 0.0).astype(np.float32)
        episode_length = np.where(game_over, self._lengths, 0).astype(np.int32)
        self._returns[game_over] = 0.0
        self._lengths[game_over] = 0
        self._obs = obs
        executed = actions if self._bounds is None else np.clip(actions, *self._bounds)
        return Transition(obs, reward.astype(np.float32), terminated.astype(bool),
                          truncated.astype(bool), final_obs, episode_return, episode_length,
                          executed)

    def close(self) -> None:
        self._envs.close()

"""Hyperparameters and run settings: one frozen dataclass that is the defaults, the docs
and the command line at once.

Every field becomes a ``--flag-name`` (underscores become dashes); the field's docstring
(the ``help`` metadata) is the flag's help text. The worker and the launcher build their
parsers from the same dataclass, so a flag given to ``launch_cluster.sh`` reaches every
task unchanged.

Presets. The dataclass defaults are the ``cartpole`` preset (classic control: they solve
CartPole-v1 in well under a minute). ``--preset atari`` (picked automatically for ``ALE/``
env ids) swaps in the hyperparameters of an Atari run, ``minatar`` those of MinAtar/ ids and
``continuous`` those of an env with Box actions (Pendulum, MuJoCo): PRESETS. A preset only fills in
the fields the user did not set: the parser leaves flags that were not given out of its
namespace (argparse.SUPPRESS), and `resolve_config` lays the given values over the
preset's. `config_to_argv` writes the flags that differ from the preset's values, plus
``--env`` and ``--preset`` themselves, so the tasks a launcher starts resolve the very same
config.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from a3c_graph.system.cli import as_flags

PRESET_CHOICES = ("auto", "cartpole", "atari", "minatar", "continuous")
POLICY_CHOICES = ("auto", "mlp", "cnn", "lstm")
# ALE protocols (docs/environments.md): ale-v5 is ALE v5's (Machado et al. 2018: sticky
# actions, whole games); classic is the one rl-baselines3-zoo, cleanrl and OpenAI baselines
# report Atari scores on (no sticky actions, a lost life ends the episode for learning, FIRE
# after a reset and after a lost life).
PROTOCOL_CHOICES = ("ale-v5", "classic")
OPTIMIZER_CHOICES = ("adam", "rmsprop", "rmsprop-pytorch")
CONV_PADDING_CHOICES = ("same", "valid")
ACTIVATION_CHOICES = ("elu", "relu")


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


# The samples per update (envs per worker x rollout length) on which --lag-tolerance is
# stated: 15 workers of 8 envs x 20 steps held Pong stable at 4 and spiked at 8; 16 workers
# of 1 env (20 samples) were unsteady at 6 x sqrt(8) = 17 (docs/learning/many-workers/runs.md).
# An update's step along the gradient's signal grows as the square root of its samples, so
# the lag it tolerates falls as that.
LAG_TOLERANCE_SAMPLES = 160

# Every preset's envs per worker were set, and its results measured, with this many workers.
PRESET_WORKERS = 2


def envs_for_workers(preset_envs: int, workers: int) -> int:
    """The envs each of `workers` workers steps when --envs-per-worker is not given: the
    preset's, spread so that the cluster steps as many envs as PRESET_WORKERS workers of the
    preset (at least 1 each, and no more than the preset's). With more workers each update
    holds fewer samples and a larger lag, and the lag rule (A3CConfig.tolerated_lag) keeps
    the learning per frame about where 2 workers have it only while the frames in flight stay
    about constant (docs/learning.md, "Many workers"): 16 workers of the atari preset step 1
    env each, as the A3C paper's 16 actor-learner threads did."""
    return max(1, min(preset_envs, round(PRESET_WORKERS * preset_envs / workers)))


def for_workers(config: A3CConfig, workers: int, args: argparse.Namespace) -> A3CConfig:
    """`config` for a cluster of `workers` workers: unless the parsed flags `args` gave
    --envs-per-worker, the preset's envs per worker spread over them (envs_for_workers),
    and unless they gave --rollouts-per-update, as many of the smaller rollouts pooled into
    an update as make the preset's (16 workers of the atari preset: 1 env each, 8 rollouts
    an update, so that an update holds the 160 samples 2 workers' do)."""
    if hasattr(args, "envs_per_worker"):  # a flag not given is not in the namespace
        return config
    envs = envs_for_workers(config.envs_per_worker, workers)
    pooled = config.rollouts_per_update
    if not hasattr(args, "rollouts_per_update"):
        pooled = max(1, round(config.envs_per_worker / envs))
    return dataclasses.replace(config, envs_per_worker=envs, rollouts_per_update=pooled)


@dataclass(frozen=True)
class A3CConfig:
    """Everything that shapes a training run. Passed explicitly; never read from globals."""

    env: str = _f("CartPole-v1", "Gymnasium environment id (a Discrete or one-axis bounded Box "
                  "action space); ALE/ ids (e.g. ALE/Pong-v5) need the atari extra.")
    seed: int = _f(0, "Base random seed; task i seeds its envs with seed + 1000 * i.")
    preset: str = _f("auto", "Hyperparameter preset for the flags not given: cartpole (classic "
                     "control), atari, minatar or continuous; auto picks atari for ALE/ env "
                     "ids, minatar for MinAtar/ ids, continuous for an env with Box actions "
                     "(Pendulum, MuJoCo), else cartpole.", choices=PRESET_CHOICES)

    # Atari (ALE/ env ids only; the defaults are ALE v5's).
    protocol: str = _f(
        "ale-v5", "ALE: ale-v5 (sticky actions 0.25, every episode a whole game) or classic "
        "(the protocol of rl-baselines3-zoo's and cleanrl's Atari scores: no sticky actions, "
        "a lost life ends the episode for learning while the game goes on, FIRE after a "
        "reset and after a lost life, a new frame stack for a new life). Returns and "
        "statistics are whole games either way.",
        choices=PROTOCOL_CHOICES)
    repeat_action_probability: float = _f(
        0.25, "ALE sticky actions: probability that the emulator repeats the previous action "
        "on each frame (0 turns them off).")
    full_action_space: bool = _f(False, "ALE: all 18 actions instead of the game's minimal set.")
    screen_size: int = _f(42, "ALE: observations are grayscale frames of screen_size x "
                          "screen_size pixels (42 as in universe-starter-agent: a quarter of "
                          "the convolutions' work of DQN's 84).")
    frame_stack: int = _f(4, "ALE: the last frame_stack frames make one observation.")

    # Acting.
    envs_per_worker: int = _f(
        8, "Envs each actor thread steps as one batch (batched policy inference). Not given, "
        "the preset's value is for 2 workers and is spread over the cluster's: "
        "round(2 x preset / workers), at least 1 and at most the preset's (16 workers of the "
        "atari preset step 1 env each).")
    actor_threads: int = _f(1, "QueueRunner actor threads per worker, each with its own envs.")
    rollout_length: int = _f(32, "T: env steps per rollout (the n in n-step returns).")
    queue_capacity: int = _f(2, "Rollouts buffered between actors and learner (adds policy lag).")

    # Learning.
    gamma: float = _f(0.99, "Discount factor.")
    gae_lambda: float = _f(0.95, "GAE(lambda); 1.0 gives plain n-step bootstrapped returns.")
    learning_rate: float = _f(3e-3, "The learning rate of --optimizer on the ps.")
    anneal_learning_rate: bool = _f(
        True, "Anneal the learning rate linearly from --learning-rate to 0 over --max-steps "
        "env steps of the cluster (Mnih et al. 2016): a policy that has learned the task "
        "is not walked away from it by full-size steps on noise.")
    adam_epsilon: float = _f(
        0.1, "Adam epsilon. Large (as the A3C paper's RMSProp epsilon of 0.1) with raw "
        "advantages, a step shrinks with the gradient once there is little left to learn; "
        "a tiny epsilon would scale gradients of noise up to full-size steps.")
    lag_tolerance: float = _f(
        4.0, "Policy lag, in global updates from the weights that acted a rollout to the "
        "globals its gradient is applied to, up to which an update of 160 samples (envs per "
        "worker x rollout length) applies at the full learning rate; an update of S samples "
        "tolerates lag_tolerance x sqrt(160 / S), since Adam's (and RMSProp's) step along the "
        "gradient's signal grows as sqrt(S); never less than the lag 2 workers make by "
        "themselves, 2 x (queue capacity + 1). A staler update applies at learning_rate x "
        "tolerated lag / lag, so the weights move no further while an update's feedback is "
        "on its way however many workers there are (docs/learning.md, 'Many workers'). 0 "
        "turns the scaling off.")
    adam_beta1: float = _f(
        0.9, "Adam's beta1, the decay of its first moment (its momentum); 0 turns the "
        "momentum off.")
    optimizer: str = _f(
        "adam", "How the ps tasks apply the gradients: adam; rmsprop (the A3C paper's shared "
        "RMSProp and rl-baselines3-zoo's A2C on Atari: decay 0.99, no momentum, the mean "
        "square started at 1 and --rmsprop-epsilon inside its square root, as TF's RMSProp); "
        "or rmsprop-pytorch (PyTorch's RMSprop, which stable-baselines3's A2C applies on "
        "MuJoCo and classic control: the mean square started at 0 and --rmsprop-epsilon "
        "added outside its square root).",
        choices=OPTIMIZER_CHOICES)
    rmsprop_epsilon: float = _f(1e-5, "RMSProp epsilon with --optimizer rmsprop or "
                                "rmsprop-pytorch (rl-baselines3-zoo's A2C: 1e-5).")
    entropy_coef: float = _f(0.01, "Weight of the entropy bonus.")
    anneal_entropy: bool = _f(
        False, "Anneal the entropy bonus's weight linearly from --entropy-coef to 0 over "
        "--max-steps env steps of the cluster, as --anneal-learning-rate the rate: a "
        "constant bonus holds a policy that has learned the task as random as its return "
        "allows, which on Pong keeps the sampled return at 16-17.5 where greedy play "
        "scores 20 (docs/learning.md, 'Many workers').")
    value_coef: float = _f(0.5, "Weight of the value loss.")
    grad_clip_norm: float = _f(
        40.0, "The global norm an update's gradient is clipped to before it is applied; a "
        "rollout pooled with others (--rollouts-per-update k) is clipped at sqrt(k) times it, "
        "the norm its noise has where the update's (k times the samples) has this.")
    rollouts_per_update: int = _f(
        1, "Rollouts whose gradients the ps pools into one update: each worker's gradient is "
        "added to its ps task's pool, and the worker whose rollout fills the pool applies "
        "their mean. Not given, the preset's update size is kept where its envs are spread "
        "over more workers (--envs-per-worker): round(preset's envs per worker / envs per "
        "worker), 8 for 16 workers of the atari preset. The global step counts updates "
        "applied, so the policy lag is counted in them (docs/learning.md, 'Many workers').")
    policy: str = _f("auto", "Network: mlp (vector observations), cnn (images), lstm (the mlp "
                     "or cnn torso, then an LSTM whose state is carried across rollouts); auto "
                     "picks cnn for image observations, else mlp.", choices=POLICY_CHOICES)
    hidden_sizes: tuple = _f((64, 64), "Hidden layer widths: of each MLP tower, or the fully "
                             "connected layers after the cnn's convolutions.", parse=int)
    conv_filters: tuple = _f((32, 32, 32, 32), "Filters of each convolution of the cnn "
                             "torso, one number per layer.", parse=int)
    conv_kernel: tuple = _f((3,), "Kernel size of the cnn torso's convolutions: one number "
                            "per layer, or one for every layer.", parse=int)
    conv_stride: tuple = _f((2,), "Stride of the cnn torso's convolutions: one number per "
                            "layer, or one for every layer.", parse=int)
    conv_padding: str = _f(
        "same", "Padding of the cnn torso's convolutions: same (universe-starter-agent's: a "
        "side shrinks to ceil(side / stride)) or valid (the Nature DQN network's, which "
        "rl-baselines3-zoo and cleanrl use: no border, (side - kernel) // stride + 1).",
        choices=CONV_PADDING_CHOICES)
    activation: str = _f(
        "elu", "Activation of the cnn torso, its convolutions and dense layers: elu "
        "(universe-starter-agent's) or relu (the Nature DQN network's).",
        choices=ACTIVATION_CHOICES)
    lstm_size: int = _f(64, "Units of the LSTM of --policy lstm.")
    log_std_init: float = _f(
        0.0, "Box action spaces: the Gaussian policy's log standard deviation at the start, "
        "the same for every dimension (stable-baselines3's log_std_init).")
    ortho_init: bool = _f(
        True, "The mlp policy's initialization: orthogonal (gain sqrt(2), 0.01 for the policy "
        "output, 1 for the value; zero biases), or with false PyTorch's default, which "
        "stable-baselines3 keeps with ortho_init=False (rl-zoo's A2C on Pendulum): weights "
        "and biases uniform within +-1/sqrt(fan in).")
    sde: bool = _f(
        False, "Box actions on the mlp policy: generalized state-dependent exploration "
        "(gSDE, Raffin et al. 2021, as rl-baselines3-zoo's A2C on Pendulum uses it): the "
        "noise is the policy tower's last hidden features times a matrix drawn from "
        "N(0, exp(log std)^2) once per env and rollout, so each rollout explores smoothly; "
        "the log std is then a matrix [features, actions] started at --log-std-init.")
    normalize_observations: bool = _f(
        False, "Vector observations: standardize each entry by the running mean and standard "
        "deviation of every observation the cluster has acted on (clipped to +-10), "
        "statistics kept on the ps, saved with the checkpoints, frozen in evaluation and "
        "carried into the SavedModel (stable-baselines3's VecNormalize, as rl-zoo's "
        "MuJoCo runs use it).")
    normalize_rewards: bool = _f(
        False, "Learn from each reward divided by the running standard deviation of the "
        "discounted return (clipped to +-10), statistics of every step the cluster has "
        "taken, kept on the ps and saved with the checkpoints; episode returns stay raw "
        "(stable-baselines3's VecNormalize norm_reward, as rl-zoo's MuJoCo runs train).")
    normalize_advantages: bool = _f(
        False, "Normalize advantages per rollout batch (scales noise up to a full-size "
        "signal once the policy is good).")
    clip_rewards: bool = _f(False, "Learn from the sign of each reward (-1, 0, 1), as in A3C's "
                            "Atari runs; episode returns, statistics and the target stay raw "
                            "game scores.")
    learn: bool = _f(True, "Learn from the rollouts; false only acts: the learner counts each "
                     "rollout and drops it (the acting ceiling benchmarks.run --ceiling "
                     "measures).")

    # Budget and stopping.
    max_steps: int = _f(2_000_000, "Stop after this many env steps across all workers.")
    max_seconds: float = _f(300.0, "Stop after this many seconds of training, counted by each "
                            "worker from its first applied update (start-up excluded).")
    target_return: float | None = _f(
        None, "Stop when the mean return of the last 100 episodes reaches this "
        "(default: the env spec's reward_threshold); inf: no target, run to the budget.")

    # Bookkeeping.
    checkpoint_secs: float = _f(30.0, "Seconds between checkpoints written by the chief.")
    keep_checkpoint_every_minutes: float = _f(
        0.0, "Besides the newest 3 checkpoints, keep one every this many minutes for good, "
        "to evaluate the policy along the run (0: only the newest 3).")
    progress_secs: float = _f(2.0, "Seconds between progress files / summaries per worker.")
    connect_timeout: float = _f(
        120.0, "Seconds a task waits for the ps (and a worker for the chief's variables) "
        "before it gives up with an error.")

    # Session.
    intra_op_threads: int = _f(1, "TF intra-op threads per task (0 lets TF choose).")
    inter_op_threads: int = _f(2, "TF inter-op threads per task (0 lets TF choose).")

    def budget_left(self, env_steps: int) -> float:
        """The share of --max-steps not yet spent after `env_steps` env steps of the
        cluster, floored at 0: what an annealed setting is multiplied by (the graph
        worker's: core/learner.budget_left)."""
        return max(0.0, 1.0 - env_steps / self.max_steps)

    def learning_rate_at(self, env_steps: int) -> float:
        """The learning rate of an update made after `env_steps` env steps of the cluster:
        the TF2 variants' (the graph worker computes the same in its graph:
        core/learner.learning_rate_now)."""
        if not self.anneal_learning_rate:
            return self.learning_rate
        return self.learning_rate * self.budget_left(env_steps)

    def entropy_coef_at(self, env_steps: int) -> float:
        """The entropy bonus's weight in an update made after `env_steps` env steps of the
        cluster: the TF2 variants' (the graph worker's: core/learner.entropy_coef_now)."""
        if not self.anneal_entropy:
            return self.entropy_coef
        return self.entropy_coef * self.budget_left(env_steps)

    def tolerated_lag(self) -> float:
        """The policy lag up to which an update applies at the full rate: --lag-tolerance,
        set on updates of LAG_TOLERANCE_SAMPLES samples, x sqrt(LAG_TOLERANCE_SAMPLES / this
        run's samples per update, pooled rollouts included), and never less than the lag of
        PRESET_WORKERS workers' own pipeline (own_pipeline_lag). 0 with --lag-tolerance 0
        (no scaling)."""
        if self.lag_tolerance <= 0:
            return 0.0
        samples = self.samples_per_update()
        return max(self.lag_tolerance * math.sqrt(LAG_TOLERANCE_SAMPLES / samples),
                   self.own_pipeline_lag())

    def samples_per_update(self) -> int:
        """Agent steps an applied update learns from: envs per worker x rollout length x the
        rollouts pooled into it."""
        return self.envs_per_worker * self.rollout_length * self.rollouts_per_update

    def rollout_clip_norm(self) -> float:
        """The global norm one rollout's gradient is clipped to: --grad-clip-norm, x sqrt(k)
        for k rollouts pooled into an update (the mean of k noisy gradients has 1/sqrt(k)
        of the norm of each)."""
        return self.grad_clip_norm * math.sqrt(self.rollouts_per_update)

    def return_discount(self) -> float | None:
        """The discount the rollouts record each env's discounted return with, for
        --normalize-rewards' statistics (core/rollout.py); None without it (none recorded)."""
        return self.gamma if self.normalize_rewards else None

    def own_pipeline_lag(self) -> int:
        """The lag PRESET_WORKERS workers make by themselves, with which every preset was set
        and measured: a rollout's gradient lands up to --queue-capacity + 1 updates of its
        own worker after the weights that acted it (the rollouts queued ahead of it, and
        its own), and each other worker makes about as many meanwhile. The lag rule is for
        what more workers add, so it leaves this alone (2 workers on CartPole, whose
        updates of 256 samples tolerated 3.16, lag 2.6-4.0 on average and took 14 % more env
        steps to solve when scaled: docs/learning/many-workers/runs.md)."""
        return PRESET_WORKERS * (self.queue_capacity + 1)

    def staleness_scale(self, policy_lag: int) -> float:
        """The factor of the learning rate of an update `policy_lag` global updates stale:
        the TF2 variants' (the graph worker computes the same: core/learner.staleness_scale)."""
        tolerated = self.tolerated_lag()
        if tolerated <= 0:
            return 1.0
        return min(1.0, tolerated / max(policy_lag, 1))

    def validate(self) -> None:
        """Raise ValueError with one clear sentence for a setting no run can use."""
        positive_ints = ("envs_per_worker", "actor_threads", "rollout_length", "queue_capacity",
                         "rollouts_per_update", "max_steps", "lstm_size", "frame_stack")
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise ValueError(f"--{_flag(name)} must be at least 1, got {getattr(self, name)}")
        for f in dataclasses.fields(self):  # --preset, --protocol, --optimizer, --policy, ...
            choices = f.metadata.get("choices")
            if choices is not None and getattr(self, f.name) not in choices:
                raise ValueError(f"--{_flag(f.name)} must be one of {', '.join(choices)}, "
                                 f"got {getattr(self, f.name)!r}")
        if self.protocol != "ale-v5" and not is_atari(self.env):
            raise ValueError(f"--protocol {self.protocol} is for ALE/ env ids, got "
                             f"--env {self.env}")
        if not 0.0 <= self.adam_beta1 < 1.0:
            raise ValueError(f"--adam-beta1 must be in [0, 1), got {self.adam_beta1}")
        for name in ("gamma", "gae_lambda", "repeat_action_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{_flag(name)} must be in [0, 1], got {getattr(self, name)}")
        for name in ("learning_rate", "grad_clip_norm", "max_seconds", "checkpoint_secs",
                     "progress_secs", "connect_timeout", "adam_epsilon", "rmsprop_epsilon"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{_flag(name)} must be a positive number, got {value}")
        for name in ("entropy_coef", "value_coef", "lag_tolerance",
                     "keep_checkpoint_every_minutes"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--{_flag(name)} must be a non-negative number, got {value}")
        if self.normalize_rewards and self.clip_rewards:
            raise ValueError("--normalize-rewards and --clip-rewards both rescale the rewards "
                             "the agent learns from: give one of them")
        if not math.isfinite(self.log_std_init):
            raise ValueError(f"--log-std-init must be a finite number, got {self.log_std_init}")
        if not 8 <= self.screen_size <= 210:
            raise ValueError(f"--screen-size must be between 8 and 210 pixels, "
                             f"got {self.screen_size}")
        if not self.hidden_sizes or any(h < 1 for h in self.hidden_sizes):
            raise ValueError(f"--hidden-sizes must be positive widths, got {self.hidden_sizes}")
        if not self.conv_filters or any(f < 1 for f in self.conv_filters):
            raise ValueError(f"--conv-filters must be positive numbers, got {self.conv_filters}")
        for name in ("conv_kernel", "conv_stride"):
            value = getattr(self, name)
            if len(value) not in (1, len(self.conv_filters)) or any(v < 1 for v in value):
                raise ValueError(f"--{_flag(name)} must be one positive number, or one per "
                                 f"layer of --conv-filters ({len(self.conv_filters)}), "
                                 f"got {_show(value)}")
        if self.target_return is not None and (math.isnan(self.target_return)
                                               or self.target_return == -math.inf):
            raise ValueError(f"--target-return must be a number (or inf: no target), got "
                             f"{self.target_return}")
        for name in ("intra_op_threads", "inter_op_threads"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{_flag(name)} must be 0 or more, got {getattr(self, name)}")


# What each preset changes from the dataclass defaults (which are the cartpole preset); why
# each value, with the runs that chose it: docs/learning.md, "Why the presets are what they are".
# cartpole: raw advantages and Adam epsilon 0.1 at lr 3e-3, annealed, keep a solved policy solved.
# atari: A3C's Atari settings (Mnih et al. 2016; universe-starter-agent), adapted to 8 envs
# per update and to losses that are means, not sums; the entropy bonus annealed with the
# rate, which lifts 2 workers' Pong off the plateau a constant bonus holds it on.
PRESETS: dict[str, dict[str, Any]] = {
    "cartpole": {},
    "atari": {
        "envs_per_worker": 8,
        "rollout_length": 20,
        "gae_lambda": 0.95,
        "learning_rate": 5.7e-4,
        "normalize_advantages": False,
        "adam_epsilon": 1e-5,
        "hidden_sizes": (256,),
        "lstm_size": 256,
        "grad_clip_norm": 0.5,
        "max_seconds": 86_400.0,
        "checkpoint_secs": 120.0,
        "clip_rewards": True,
        "anneal_entropy": True,
    },
    # minatar: the MinAtar paper's network and budget (Young and Tian 2019), no target (its
    # score is the one at the budget); the entropy bonus and envs per worker keep Breakout
    # learning (docs/learning.md).
    "minatar": {
        "envs_per_worker": 8,
        "rollout_length": 20,
        "learning_rate": 1e-3,
        "normalize_advantages": False,
        "adam_epsilon": 1e-5,
        "entropy_coef": 0.03,
        "grad_clip_norm": 40.0,
        "hidden_sizes": (128,),
        "conv_filters": (16,),
        "conv_stride": (1,),
        "max_steps": 5_000_000,
        "max_seconds": 3600.0,
        "checkpoint_secs": 60.0,
        "target_return": math.inf,
    },
    # continuous: rl-baselines3-zoo's A2C on MuJoCo (hyperparams/a2c.yml: normalize: true,
    # otherwise stable-baselines3's A2C defaults): one env per worker and 5-step rollouts
    # with 5-step returns, PyTorch's RMSprop at a constant 7e-4, no entropy bonus, the
    # value loss weighted as SB3's 0.5 x squared error (1.0 on this project's half squared
    # error), gradients clipped to 0.5, tanh towers of 64 and 64 units, the log std started
    # at 0, observations standardized and rewards scaled (VecNormalize, as rl-zoo trains);
    # 1M env steps, a budget rather than a target (docs/learning.md, "Continuous control").
    "continuous": {
        "envs_per_worker": 1,
        "rollout_length": 5,
        "queue_capacity": 1,
        "gae_lambda": 1.0,
        "optimizer": "rmsprop-pytorch",
        "value_coef": 1.0,
        "normalize_rewards": True,
        "learning_rate": 7e-4,
        "anneal_learning_rate": False,
        "entropy_coef": 0.0,
        "grad_clip_norm": 0.5,
        "normalize_observations": True,
        "max_steps": 1_000_000,
        "max_seconds": 7200.0,
        "checkpoint_secs": 60.0,
        "target_return": math.inf,
    },
}
# ALE specs have no reward_threshold: the atari preset's --target-return per game; any other
# game has none and trains to its budget (a score to compare with is a line on its curve).
ATARI_TARGET_RETURNS = {"Pong": 18.0}
# What the classic protocol changes in the atari preset: no sticky actions, and the agent of
# the anchor its games are compared with, rl-baselines3-zoo's A2C (hyperparams/a2c.yml):
# 84x84 frames, the Nature DQN network (32/64/64 filters of 8/4/3 at strides 4/2/1, valid
# padding, ReLU, 512 units), 16 envs x 5 steps per update with 5-step returns, TF's RMSProp
# at a constant 7e-4 with a constant entropy bonus of 0.01, and a queue of one rollout. On
# Breakout the A3C paper's network with Adam annealed crawled (25 at 40M frames); on these
# settings seed 0 passed the zoo's own run
# (358.6 at 40M frames against its 318.3; 287.5 sampled over 30 games, the zoo's 280)
# (docs/learning.md, "The classic games").
CLASSIC_PROTOCOL = {"repeat_action_probability": 0.0, "screen_size": 84,
                    "conv_filters": (32, 64, 64), "conv_kernel": (8, 4, 3),
                    "conv_stride": (4, 2, 1), "conv_padding": "valid", "activation": "relu",
                    "hidden_sizes": (512,), "envs_per_worker": 16, "rollout_length": 5,
                    "gae_lambda": 1.0, "queue_capacity": 1, "optimizer": "rmsprop",
                    "learning_rate": 7e-4, "anneal_learning_rate": False,
                    "anneal_entropy": False}
# The atari preset's --max-steps is its protocol's budget, over which the learning rate
# anneals: with sticky actions (ALE v5; Machado et al. 2018 report at 10M, 50M, 100M and 200M
# frames) 50M frames, about the hour of the Pong goal on two cores; without them (the A3C
# paper's protocol) 40M frames, twice what Pong takes. Why: docs/learning.md.
ATARI_MAX_STEPS = {"sticky actions": 12_500_000, "no sticky actions": 10_000_000}


def is_atari(env_id: str) -> bool:
    """An Arcade Learning Environment id (ALE/Pong-v5): the atari preset, ALE's flags, envs.py's
    Atari preprocessing. Here, not in envs.py, so that telling needs no gymnasium import."""
    return env_id.startswith("ALE/")


def is_minatar(env_id: str) -> bool:
    """A MinAtar id (MinAtar/Breakout-v1): the minatar preset and package."""
    return env_id.startswith("MinAtar/")


def resolve_preset(preset: str, env: str) -> str:
    """The preset `preset` names for `env`: "auto" becomes atari for ALE/ ids, minatar for
    MinAtar/ ids, continuous for an env with Box actions, else cartpole."""
    if preset != "auto":
        return preset
    if is_atari(env):
        return "atari"
    if is_minatar(env):
        return "minatar"
    return "continuous" if has_box_actions(env) else "cartpole"


@functools.cache
def has_box_actions(env_id: str) -> bool:
    """Whether Gymnasium makes `env_id` with a Box action space. An id it cannot make counts
    as not: the env's own error is told in one line where the run makes it (envs.py)."""
    # Here, not at the top: the config (and so the Python API) imports without gymnasium
    # and numpy (docs/architecture.md, "Where the heavy imports load").
    import gymnasium as gym

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a deprecated version's warning is envs.py's to tell
        try:
            env = gym.make(env_id)
        except Exception:  # noqa: BLE001 - any failure: envs.py reports it in one line
            return False
    try:
        return isinstance(env.action_space, gym.spaces.Box)
    finally:
        env.close()


def preset_values(preset: str, env: str, repeat_action_probability: float | None = None,
                  protocol: str | None = None) -> dict[str, Any]:
    """Every field but env and preset, as the preset (resolved for `env`) sets it. The
    atari preset's values also depend on the protocol (None: the default's): the classic
    protocol has no sticky actions; and its budget on the sticky actions
    (`repeat_action_probability`, None: the protocol's)."""
    name = resolve_preset(preset, env)
    if name not in PRESETS:
        raise ValueError(f"--preset must be one of {', '.join(PRESET_CHOICES)}, got {preset!r}")
    values = {f.name: f.default for f in dataclasses.fields(A3CConfig)
              if f.name not in ("env", "preset")}
    values.update(PRESETS[name])
    if name == "atari":
        game = env.split("/", 1)[-1].split("-", 1)[0]  # "ALE/Pong-v5" -> "Pong"
        values["target_return"] = ATARI_TARGET_RETURNS.get(game, math.inf)
        if protocol == "classic":
            values.update(CLASSIC_PROTOCOL)
        if repeat_action_probability is None:
            repeat_action_probability = values["repeat_action_probability"]
        values["max_steps"] = ATARI_MAX_STEPS[
            "sticky actions" if repeat_action_probability > 0 else "no sticky actions"]
    return values


def resolve_config(given: Mapping[str, Any]) -> A3CConfig:
    """The config of the fields in `given`, every other field from the preset; validated."""
    defaults = A3CConfig()
    preset = given.get("preset", defaults.preset)
    env = given.get("env", defaults.env)
    values = preset_values(preset, env, given.get("repeat_action_probability"),
                           given.get("protocol"))
    config = A3CConfig(**{**values, **given})
    config.validate()
    return config


def resolve_policy(policy: str, obs_shape: Sequence[int]) -> tuple[str, bool]:
    """(torso, recurrent) of --policy for observations of `obs_shape`.

    Observations of rank 2 or 3 ([H, W] or [C, H, W], e.g. Atari's stacked frames) are
    images and get the cnn torso under auto and lstm; --policy mlp flattens anything.
    """
    image = len(obs_shape) in (2, 3)
    if policy == "cnn" and not image:
        raise ValueError(f"--policy cnn needs image observations (rank 2 or 3), got shape "
                         f"{list(obs_shape)}")
    if policy == "mlp":
        return "mlp", False
    return ("cnn" if image else "mlp"), policy == "lstm"


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _str2bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per A3CConfig field, defaults and help taken from the dataclass.

    A flag that is not given stays out of the namespace (argparse.SUPPRESS), so
    config_from_args knows which fields the preset may fill in.
    """
    group = parser.add_argument_group("hyperparameters and run settings")
    for f in dataclasses.fields(A3CConfig):
        flag = "--" + _flag(f.name)
        help_text = f.metadata["help"]
        if f.default is not None:
            help_text += f" (default: {_show(f.default)})"
        elif f.name == "target_return":
            help_text += " [atari preset: " + ", ".join(
                f"{v:g} for {game}" for game, v in ATARI_TARGET_RETURNS.items()) + \
                ", none for any other game: it trains to its budget]"
        if f.name == "max_steps":
            help_text += " [atari preset: " + ", ".join(
                f"{v} with {protocol}" for protocol, v in ATARI_MAX_STEPS.items()) + "]"
        for name in ("atari", "minatar", "continuous"):
            if f.name in PRESETS[name]:
                help_text += f" [{name} preset: {_show(PRESETS[name][f.name])}]"
        kwargs: dict[str, Any] = {"default": argparse.SUPPRESS, "help": help_text}
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
        if isinstance(f.default, bool):
            group.add_argument(flag, type=_str2bool, metavar="BOOL", **kwargs)
        elif isinstance(f.default, tuple):
            parse = _tuple_of(f.metadata.get("parse", int))
            group.add_argument(flag, type=parse, metavar="A,B", **kwargs)
        elif f.name == "target_return":
            group.add_argument(flag, type=float, **kwargs)
        else:
            group.add_argument(flag, type=type(f.default), **kwargs)


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _tuple_of(parse):
    def convert(text: str) -> tuple:
        try:
            return tuple(parse(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list, got {text!r}") from None
    return convert


def config_from_args(args: argparse.Namespace, workers: int | None = None) -> A3CConfig:
    """The A3CConfig named by parsed arguments (the flags given, the preset for the rest),
    for a cluster of `workers` workers if known (for_workers, unless --envs-per-worker is
    given); raises ValueError if a setting is unusable."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(A3CConfig)
             if hasattr(args, f.name)}
    config = resolve_config(given)
    return config if workers is None else for_workers(config, workers, args)


def config_to_argv(config: A3CConfig, say_envs: bool = False) -> list[str]:
    """The flags that reproduce `config` on another command line: --env and --preset when
    not the defaults, and every other field whose value differs from the preset's. With
    say_envs, --envs-per-worker too, even when it is the preset's: for a command of a known
    cluster, whose receiver would otherwise spread the preset's over its workers
    (for_workers) where the value was decided already."""
    preset = preset_values(config.preset, config.env, config.repeat_action_probability,
                           config.protocol)
    # None (target_return: "the env's threshold") has no flag; the preset's value stands.
    changed = {f.name: getattr(config, f.name) for f in dataclasses.fields(A3CConfig)
               if getattr(config, f.name) not in (preset.get(f.name, f.default), None)
               or (say_envs and f.name == "envs_per_worker")}
    return as_flags(changed)


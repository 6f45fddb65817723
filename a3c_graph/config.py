"""Hyperparameters and run settings: one frozen dataclass that is the defaults, the docs
and the command line at once.

Every field becomes a ``--flag-name`` (underscores become dashes); the field's docstring
(the ``help`` metadata) is the flag's help text. The worker and the launcher build their
parsers from the same dataclass, so a flag given to ``launch_cluster.sh`` reaches every
task unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def _f(default: Any, help: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class A3CConfig:
    """Everything that shapes a training run. Passed explicitly; never read from globals."""

    env: str = _f("CartPole-v1", "Gymnasium environment id (Discrete action space).")
    seed: int = _f(0, "Base random seed; task i seeds its envs with seed + 1000 * i.")

    # Acting.
    envs_per_worker: int = _f(
        8, "Envs each actor thread steps as one batch (batched policy inference).")
    actor_threads: int = _f(1, "QueueRunner actor threads per worker, each with its own envs.")
    rollout_length: int = _f(32, "T: env steps per rollout (the n in n-step returns).")
    queue_capacity: int = _f(2, "Rollouts buffered between actors and learner (adds policy lag).")

    # Learning.
    gamma: float = _f(0.99, "Discount factor.")
    gae_lambda: float = _f(0.95, "GAE(lambda); 1.0 gives plain n-step bootstrapped returns.")
    learning_rate: float = _f(1e-3, "Adam learning rate of the shared optimizer on the ps.")
    adam_epsilon: float = _f(1e-5, "Adam epsilon.")
    entropy_coef: float = _f(0.01, "Weight of the entropy bonus.")
    value_coef: float = _f(0.5, "Weight of the value loss.")
    grad_clip_norm: float = _f(40.0, "Gradients are clipped to this global norm before applying.")
    hidden_sizes: tuple = _f((64, 64), "Hidden layer widths of the actor-critic MLP.", parse=int)
    normalize_advantages: bool = _f(True, "Normalize advantages per rollout batch.")

    # Budget and stopping.
    max_steps: int = _f(2_000_000, "Stop after this many env steps across all workers.")
    max_seconds: float = _f(300.0, "Stop after this many seconds of training.")
    target_return: float | None = _f(
        None, "Stop when the mean return of the last 100 episodes reaches this "
        "(default: the env spec's reward_threshold).")

    # Bookkeeping.
    checkpoint_secs: float = _f(30.0, "Seconds between checkpoints written by the chief.")
    progress_secs: float = _f(2.0, "Seconds between progress files / summaries per worker.")

    # Session.
    intra_op_threads: int = _f(1, "TF intra-op threads per task (0 lets TF choose).")
    inter_op_threads: int = _f(2, "TF inter-op threads per task (0 lets TF choose).")

    def validate(self) -> None:
        """Raise ValueError with one clear sentence for a setting no run can use."""
        positive_ints = ("envs_per_worker", "actor_threads", "rollout_length", "queue_capacity",
                         "max_steps")
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise ValueError(f"--{_flag(name)} must be at least 1, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{_flag(name)} must be in [0, 1], got {getattr(self, name)}")
        for name in ("learning_rate", "grad_clip_norm", "max_seconds", "checkpoint_secs",
                     "progress_secs", "adam_epsilon"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{_flag(name)} must be a positive number, got {value}")
        for name in ("entropy_coef", "value_coef"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--{_flag(name)} must be a non-negative number, got {value}")
        if not self.hidden_sizes or any(h < 1 for h in self.hidden_sizes):
            raise ValueError(f"--hidden-sizes must be positive widths, got {self.hidden_sizes}")
        if self.target_return is not None and not math.isfinite(self.target_return):
            raise ValueError(f"--target-return must be a finite number, got {self.target_return}")
        for name in ("intra_op_threads", "inter_op_threads"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{_flag(name)} must be 0 or more, got {getattr(self, name)}")


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
    """Add one flag per A3CConfig field, defaults and help taken from the dataclass."""
    group = parser.add_argument_group("hyperparameters and run settings")
    for f in dataclasses.fields(A3CConfig):
        flag = "--" + _flag(f.name)
        help_text = f.metadata["help"]
        if f.default is not None:
            help_text += f" (default: {_show(f.default)})"
        if isinstance(f.default, bool):
            group.add_argument(flag, type=_str2bool, default=f.default, metavar="BOOL",
                               help=help_text)
        elif isinstance(f.default, tuple):
            parse = _tuple_of(f.metadata.get("parse", int))
            group.add_argument(flag, type=parse, default=f.default, metavar="A,B",
                               help=help_text)
        elif f.name == "target_return":
            group.add_argument(flag, type=float, default=None, help=help_text)
        else:
            group.add_argument(flag, type=type(f.default), default=f.default, help=help_text)


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


def config_from_args(args: argparse.Namespace) -> A3CConfig:
    """The A3CConfig named by parsed arguments; raises ValueError if a setting is unusable."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(A3CConfig)}
    config = A3CConfig(**values)
    config.validate()
    return config


def config_to_argv(config: A3CConfig) -> list[str]:
    """The flags that reproduce `config` on another command line (only non-defaults)."""
    argv: list[str] = []
    for f in dataclasses.fields(A3CConfig):
        value = getattr(config, f.name)
        if value == f.default:
            continue
        # One "--flag=value" token: argparse would read a separate "-1e-05" as an option.
        argv.append(f"--{_flag(f.name)}={_show(value)}")
    return argv


def config_fields() -> Sequence[str]:
    return [f.name for f in dataclasses.fields(A3CConfig)]

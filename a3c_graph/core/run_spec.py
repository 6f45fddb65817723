"""A run, resolved once from its config: the env made once (its EnvInfo: observation shape
and dtype, actions, frame skip, reward threshold), the network checked against its
observations (no --policy cnn on CartPole, no valid convolutions wider than what is left of
the image), and the return the run stops at.

The launcher resolves it in its plan and hands the target to every task on its command line,
so every worker agrees; a worker started by hand resolves it the same way, and so do the TF2
variants and the benchmarks. Every error a user can cause here is a ValueError of one
sentence, whatever the env id's own code raised.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from a3c_graph.core import envs
from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvInfo
from a3c_graph.core.network_spec import network_variables
from a3c_graph.system.cli import first_line


@dataclass(frozen=True)
class RunSpec:
    config: A3CConfig  # target_return resolved: a number (inf: trains to its budget)
    info: EnvInfo

    @property
    def target_return(self) -> float:
        return self.config.target_return


def resolve_run(config: A3CConfig) -> RunSpec:
    """The RunSpec of `config`; ValueError (one sentence) for anything a user got wrong."""
    try:
        info = envs.env_info(config.env, **envs.env_options(config))
    except envs.EnvError:
        raise
    except Exception as error:  # noqa: BLE001 - any env id a user types must end in one line
        raise ValueError(f"env {config.env!r} cannot be made: {first_line(error)}") from None
    network_variables(config, info.obs_shape, info.actions)  # its ValueError, if any
    return RunSpec(dataclasses.replace(config, target_return=target_return(config, info)), info)


def target_return(config: A3CConfig, info: EnvInfo) -> float:
    """The mean return at which a run of `config` on an env of `info` is solved:
    --target-return, else the env's reward_threshold (inf for an ALE game without one: it
    trains to its budget). ValueError when neither is there."""
    target = config.target_return if config.target_return is not None else info.reward_threshold
    if target is None:
        raise ValueError(f"env {config.env!r} has no reward_threshold; give --target-return")
    return float(target)


def describe_target(target_return: float) -> str:
    return f"{target_return:g}" if math.isfinite(target_return) else "none (runs to its budget)"

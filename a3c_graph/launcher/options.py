"""The launcher's own options, as one type: what `start --help` lists under "cluster and
launcher" (the A3C flags are A3CConfig's). The command's plan reads them from its parsed
command line (from_args); the Python API builds them from train()'s keyword arguments and
the background launcher from the plan it made, and both turn them into the command's flags
the same way (to_argv), for the command's parser to read: a value the command refuses is
refused with the same line whoever gave it."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from a3c_graph.system.cli import as_flags

# The options that take no value: given when True.
SWITCHES = ("allow_remote",)


@dataclass(frozen=True)
class LaunchOptions:
    workers: int | None = None
    ps: int | None = None
    logdir: str | os.PathLike | None = None
    cluster: str | None = None  # a cluster file, or "slurm"
    tasks: str | None = None
    port: int | None = None
    allow_remote: bool = False
    max_restarts: int | None = None
    gpus: str | None = None
    gpu_memory_fraction: float | None = None

    @classmethod
    def from_args(cls, args) -> LaunchOptions:
        """The options of a parsed `start` command line (commands.build_start_parser)."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})

    def to_argv(self) -> list[str]:
        """The flags of `start` that give these options (None: the command's default)."""
        return as_flags({f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                        switches=SWITCHES)

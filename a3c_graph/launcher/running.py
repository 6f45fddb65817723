"""A task's process as the supervisor runs it: its plan, its Popen and its log, and how
often the processes before it crashed. A record only: the supervisor acts on it, the report
words it."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from a3c_graph.launcher.plan import TaskPlan


@dataclass
class RunningTask:
    plan: TaskPlan
    popen: subprocess.Popen
    log_path: Path
    returncode: int | None = None
    started: float = field(default_factory=time.monotonic)
    crashes_in_a_row: int = 0  # crashes of the processes before this one, healthy runs reset

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.popen.poll()
        return self.returncode

"""The machine a benchmark ran on, as its results record it."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]


def source_commit() -> str | None:
    """The git commit of the code that runs, "+ changes" after it when tracked files differ
    from it (None outside a git checkout): what a record's run was made on."""
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True,
                                  text=True, check=True, timeout=30).stdout.strip()

        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + (" + changes" if changed else "")


def machine_info() -> dict[str, Any]:
    """Cores, memory, the load at the start, the platform, the packages' versions and the
    code's commit."""
    versions = {}
    for package in ("tensorflow", "gymnasium", "numpy", "ray", "matplotlib", "psutil"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu_count": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        # Others may share the machine: the load when the benchmark started says how much.
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "commit": source_commit(),
    }


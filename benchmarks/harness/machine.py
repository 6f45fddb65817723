"""The machine a benchmark ran on, as its results record it."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

import psutil


def machine_info() -> dict[str, Any]:
    """Cores, memory, the load at the start, the platform and the packages' versions."""
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
    }


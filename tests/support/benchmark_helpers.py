"""What the benchmarks' tests share (test_harness.py, test_tf2_variants.py): which optional
packages are installed (ray for tf2_ray, ale-py for Atari), and the Atari env they use.
"""

from __future__ import annotations

import importlib.util

import psutil
import pytest

HAS_RAY = importlib.util.find_spec("ray") is not None
HAS_ALE = importlib.util.find_spec("ale_py") is not None
needs_ale = pytest.mark.skipif(not HAS_ALE, reason="ale_py is not installed (the atari extra: "
                               "pip install -e '.[atari]')")
PONG = "ALE/Pong-v5"


def gone(pid: int, create_time: float) -> bool:
    """The process started at `create_time` with this pid has ended (an exited child not
    yet reaped by its new parent, a zombie, counts as ended)."""
    try:
        proc = psutil.Process(pid)
        return (abs(proc.create_time() - create_time) > 0.01
                or proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True

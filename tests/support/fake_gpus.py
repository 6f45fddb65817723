"""GPUs this machine may not have: an inventory of N fake GPUs (A3C_GRAPH_FAKE_GPUS), and a
cluster's task keys, for the device plan's tests."""

from __future__ import annotations

from a3c_graph.system import devices
from a3c_graph.system.devices import CUDA_ENV, FAKE_GPUS_ENV


def fake_gpus(count: int, cuda_visible_devices: str | None = None) -> devices.GpuInventory:
    environ = {FAKE_GPUS_ENV: str(count)}
    if cuda_visible_devices is not None:
        environ[CUDA_ENV] = cuda_visible_devices
    return devices.detect_gpus(environ)


def cluster_keys(workers: int, ps: int = 1) -> list[tuple[str, int]]:
    return [("ps", i) for i in range(ps)] + [("worker", i) for i in range(workers)]

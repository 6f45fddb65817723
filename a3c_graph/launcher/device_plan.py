"""The launcher's device plan: which GPU each task of a cluster gets, decided before any starts.

ps tasks always run on CPU (they hold the globals and apply updates: no kernels worth a GPU);
workers take the planned GPUs round-robin in task order. Each child is told through
CUDA_VISIBLE_DEVICES in its environment (devices.ENV_MECHANISM), set before its TF starts,
so it sees only its GPU, as GPU:0; a CPU task gets CUDA_VISIBLE_DEVICES=-1 when there are
GPUs around to hide. `--dry-run` prints each task's command with that setting, and a note
of which task shares which GPU; docs/devices.md has examples.

What a single task's process is given (devices.TaskDevice) and how `--gpus` is read stay in
a3c_graph/system/devices.py: the worker uses them too, and never this plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from a3c_graph.system.devices import (
    ENV_MECHANISM,
    DeviceError,
    GpuInventory,
    GpuRequest,
    TaskDevice,
    check_memory_fraction,
    detect_gpus,
    gpus_are,
    parse_gpus,
    requested_ids,
    task_device,
)


@dataclass(frozen=True)
class DevicePlan:
    """Every planned task's device: ps on CPU, workers round-robin over the GPUs."""

    request: GpuRequest
    inventory: GpuInventory
    gpus: tuple[int, ...]  # GPU ids used, as the planning process sees them
    memory_fraction: float | None
    tasks: tuple[TaskDevice, ...]
    missing: tuple[int, ...] = ()  # planned GPU ids this machine does not show
    notes: tuple[str, ...] = ()  # said once, e.g. "--gpus auto found no GPU"

    def for_task(self, job: str, index: int) -> TaskDevice:
        for task in self.tasks:
            if (task.job, task.index) == (job, index):
                return task
        raise KeyError(f"{job} {index} is not in the plan")

    def check_visible(self, flag: str = "--gpus") -> None:
        """DeviceError unless every planned GPU is visible here (a real start needs them)."""
        if self.missing:
            raise DeviceError(f"{flag} {self.request.text}: {gpus_are(self.missing)} not "
                              f"visible: {self.inventory.describe()}")

    def missing_warning(self) -> str | None:
        if not self.missing:
            return None
        return (f"{gpus_are(self.missing)} not visible: {self.inventory.describe()}; the plan "
                "is for a machine that has them, a start here fails")

    def memory_text(self) -> str:
        if self.memory_fraction is None:
            return "allow_growth"
        return f"per_process_gpu_memory_fraction {self.memory_fraction:g}"

    def summary_line(self) -> str:
        """One line for the launcher: which tasks share which GPU."""
        if not self.gpus:
            return "devices: every task on CPU"
        parts = []
        cpu = [t.label for t in self.tasks if not t.on_gpu]
        if cpu:
            parts.append(f"{', '.join(cpu)} on CPU")
        for gpu in self.gpus:
            on = [t.label for t in self.tasks if t.gpu == gpu]
            if on:
                parts.append(f"{', '.join(on)} on GPU {gpu}")
        return f"devices: {'; '.join(parts)} (by {ENV_MECHANISM}; {self.memory_text()})"


def plan_devices(tasks: Sequence[tuple[str, int]], gpus: str | GpuRequest = "none",
                 memory_fraction: float | None = None,
                 inventory: GpuInventory | None = None) -> DevicePlan:
    """The device of each (job, index) in `tasks`; DeviceError for a plan that cannot work.

    Workers take the GPUs round-robin in the order given; planned GPUs this machine does not
    show are listed in `missing` (a dry run may plan for another machine; check_visible()
    before a real start).
    """
    request = parse_gpus(gpus) if isinstance(gpus, str) else gpus
    check_memory_fraction(memory_fraction)
    inventory = detect_gpus() if inventory is None else inventory
    ids, notes = requested_ids(request, inventory)
    missing = tuple(gpu for gpu in ids if gpu >= inventory.count)
    # GPUs around (used by the plan, or on this machine): hidden from the CPU tasks.
    hide = bool(ids) or inventory.count > 0
    workers = [key for key in tasks if key[0] == "worker"]
    planned = []
    for job, index in tasks:
        gpu = ids[workers.index((job, index)) % len(ids)] if ids and job == "worker" else None
        planned.append(task_device(
            job, index, gpu, ENV_MECHANISM, memory_fraction,
            physical=None if gpu is None else inventory.physical_id(gpu), hide_gpus=hide))
    plan = DevicePlan(request=request, inventory=inventory, gpus=ids,
                      memory_fraction=memory_fraction, tasks=tuple(planned), missing=missing,
                      notes=tuple(notes))
    _check_memory_shares(plan)
    return plan


def _check_memory_shares(plan: DevicePlan) -> None:
    """DeviceError if the tasks sharing a GPU would ask for more than all of its memory."""
    fraction = plan.memory_fraction
    if fraction is None:
        return
    for gpu in plan.gpus:
        sharing = [t.label for t in plan.tasks if t.gpu == gpu]
        if len(sharing) * fraction > 1.0 + 1e-9:
            raise DeviceError(
                f"--gpu-memory-fraction {fraction:g} does not fit: {len(sharing)} tasks share "
                f"GPU {gpu} ({', '.join(sharing)}) and {len(sharing)} x {fraction:g} > 1; "
                f"use at most {int(1000 / len(sharing)) / 1000:g}")

"""Devices: which GPUs this machine shows, what --gpus asks for, and what one task's process
is given to run where it should (the launcher's plan for a whole cluster, built from these,
is a3c_graph/launcher/device_plan.py; docs/devices.md has the user's view).

TensorFlow offers three ways to choose devices, and this project uses each in one place:

  * ``CUDA_VISIBLE_DEVICES`` in a process's environment, read when TF starts (so it must be
    set before TF is imported): the process sees only those GPUs, renumbered from 0. The
    launcher sets it for every task it starts; it is the only way that keeps a task from
    touching (and allocating memory on) the other GPUs at all.
  * ``gpu_options.visible_device_list`` in the task's ``ConfigProto``: the same choice made
    inside TF, counted within CUDA_VISIBLE_DEVICES. A task started by hand with ``--gpu 1``
    gets it. GPU options are process-wide: every session and server of a process must agree.
  * ``tf.device`` / ``graph.device``: where a graph's ops go among the devices the process
    sees. A worker pins its ops to ``/job:worker/task:i/device:GPU:0`` when it has a GPU
    (ops without a GPU kernel, like the env step's ``numpy_function``, fall back to its CPU
    through soft placement) and to ``.../cpu:0`` otherwise; the globals are pinned to the
    ps's CPU; evaluate.py pins each of several graphs in one process to its own device.

A process uses exactly one of the first two: the launcher's children get
CUDA_VISIBLE_DEVICES and an empty visible_device_list; a hand-started task gets
visible_device_list and its environment is left as the user set it.

Three flags, three questions, one spelling each: ``--gpus SPEC`` is which GPUs a command
spreads its processes over (the launcher, and the TF2 benchmark variants, which read it
through requested_ids): ``none``, ``auto``, ``count:N`` or ids ``0,1,3`` counted within the
process's own CUDA_VISIBLE_DEVICES; ``--gpu ID`` is the one GPU of a task started by hand
(the worker); ``--devices`` is where evaluate pins each of its graphs, CPU devices included.

Visible GPUs are found without importing TF (whose start-up prints lines of its own): from
``nvidia-smi -L``, else from ``/proc/driver/nvidia/gpus``, then narrowed by
CUDA_VISIBLE_DEVICES with CUDA's own rules. Tests set ``A3C_GRAPH_FAKE_GPUS=N`` to pretend
this machine has N GPUs (ids 0..N-1); nothing else reads it and it is never needed for real
use.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

FAKE_GPUS_ENV = "A3C_GRAPH_FAKE_GPUS"
CUDA_ENV = "CUDA_VISIBLE_DEVICES"
HIDE_ALL_GPUS = "-1"  # an invalid first entry: CUDA then shows the process no GPU at all
PROC_GPUS = Path("/proc/driver/nvidia/gpus")
NVIDIA_SMI_TIMEOUT_SECS = 10.0

ENV_MECHANISM = "CUDA_VISIBLE_DEVICES"
CONFIG_MECHANISM = "visible_device_list"


class DeviceError(ValueError):
    """A device request that cannot work; the message is one line shown to the user as is."""


# --------------------------------------------------------------------------- what is visible

@dataclass(frozen=True)
class GpuInventory:
    """The GPUs a process started with `environ` sees, in TF's order.

    physical[i] is the CUDA_VISIBLE_DEVICES entry of the GPU TF calls GPU:i there, so a
    child shown only that GPU gets CUDA_VISIBLE_DEVICES=physical[i].
    """

    physical: tuple[str, ...]
    machine_count: int  # GPUs on the machine, before CUDA_VISIBLE_DEVICES
    source: str  # how machine_count was found, for error messages
    cuda_visible_devices: str | None  # the environment's value, if set
    # Entries CUDA_VISIBLE_DEVICES names, valid or not: how an id maps to a child's
    # CUDA_VISIBLE_DEVICES when planning (--dry-run) for GPUs this machine does not have.
    named: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.physical)

    def describe(self) -> str:
        """What this process sees, as a clause: "no GPU is visible here (...)"."""
        if self.cuda_visible_devices is None:
            if not self.count:
                return f"no GPU is visible here ({self.source})"
            return f"the GPUs visible here are {_ids(range(self.count))} ({self.source})"
        setting = f"{CUDA_ENV}={self.cuda_visible_devices}"
        if not self.count:
            return (f"{setting} shows this process none of the {self.machine_count} GPU(s) "
                    f"here ({self.source})")
        shown = ("1 GPU, id 0" if self.count == 1
                 else f"{self.count} GPUs, ids {_ids(range(self.count))}")
        return f"{setting} shows this process {shown} (ids count within {CUDA_ENV})"

    def physical_id(self, gpu: int) -> str:
        """The CUDA_VISIBLE_DEVICES entry that shows a child GPU `gpu` of this process."""
        if gpu < self.count:
            return self.physical[gpu]
        if gpu < len(self.named):
            return self.named[gpu]
        return str(gpu)


def _ids(ids) -> str:
    return ", ".join(str(i) for i in ids)


def gpus_are(ids: Sequence[int]) -> str:
    return f"GPU {ids[0]} is" if len(ids) == 1 else f"GPUs {_ids(ids)} are"


def detect_gpus(environ: Mapping[str, str] | None = None,
                nvidia_smi: str | None = "") -> GpuInventory:
    """The GPUs visible to a process with `environ`, without importing TF.

    nvidia_smi: path of nvidia-smi; "" finds it on PATH, None means there is none.
    """
    environ = os.environ if environ is None else environ
    machine, source = _machine_gpus(environ, nvidia_smi)
    value = environ.get(CUDA_ENV)
    if value is None:
        return GpuInventory(tuple(str(i) for i in range(len(machine))), len(machine), source,
                            None)
    visible, named = _apply_cuda_visible_devices(machine, value)
    return GpuInventory(visible, len(machine), source, value, named)


def _machine_gpus(environ: Mapping[str, str], nvidia_smi: str | None
                  ) -> tuple[list[str | None], str]:
    """(UUID or None per GPU of the machine in index order, how they were found)."""
    fake = environ.get(FAKE_GPUS_ENV)
    if fake is not None:
        if not fake.strip().isdigit():
            raise DeviceError(f"{FAKE_GPUS_ENV}={fake!r} must be a number of GPUs")
        return [None] * int(fake), f"{FAKE_GPUS_ENV}={fake}"
    if nvidia_smi == "":
        nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi:
        try:
            listed = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True,
                                    timeout=NVIDIA_SMI_TIMEOUT_SECS)
        except (OSError, subprocess.TimeoutExpired) as error:
            return [], f"nvidia-smi -L failed: {error}"
        if listed.returncode != 0:
            first = (listed.stdout + listed.stderr).strip().splitlines() or ["no output"]
            return [], f"nvidia-smi -L failed: {first[0]}"
        gpus = re.findall(r"^GPU (\d+):.*?(?:\(UUID: ([^)]+)\))?$", listed.stdout, re.MULTILINE)
        return ([uuid or None for _, uuid in gpus],
                f"nvidia-smi found {len(gpus)} GPU(s)")
    if PROC_GPUS.is_dir():
        found = sorted(PROC_GPUS.iterdir())  # PCI bus order, as nvidia-smi numbers them
        uuids = []
        for gpu in found:
            try:
                text = (gpu / "information").read_text(errors="replace")
            except OSError:
                text = ""
            match = re.search(r"GPU UUID:\s*(\S+)", text)
            uuids.append(match.group(1) if match else None)
        return uuids, f"{PROC_GPUS} lists {len(found)} GPU(s)"
    return [], "no NVIDIA GPU found: nvidia-smi is not on PATH and there is no " \
               "/proc/driver/nvidia"


def _apply_cuda_visible_devices(machine: Sequence[str | None], value: str
                                ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(visible entries, all well-formed entries) of CUDA_VISIBLE_DEVICES=`value`.

    CUDA's rules: entries are indices or GPU-/MIG- UUID prefixes; the list ends at the first
    entry that is malformed or names no GPU (so "-1" or "" hide every GPU), and an entry
    that repeats one before it hides every GPU (CUDA_VISIBLE_DEVICES=0,0 shows none).
    """
    visible: list[str] = []
    named: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if entry.isdigit():
            exists = int(entry) < len(machine)
        elif entry.startswith(("GPU-", "MIG-")):
            uuids = [u for u in machine if u]
            # Without UUIDs (no nvidia-smi output for them) an entry cannot be checked.
            exists = bool(machine) and (not uuids or any(u.startswith(entry) for u in uuids))
        else:
            break
        if entry in named:
            # Within the list, a repeat hides every GPU; after its end it changes nothing.
            if len(visible) == len(named):
                return (), tuple(named)
            break
        named.append(entry)
        if exists and len(visible) == len(named) - 1:
            visible.append(entry)
    return tuple(visible), tuple(named)


# --------------------------------------------------------------------------- --gpus

@dataclass(frozen=True)
class GpuRequest:
    """A parsed --gpus: kind is "none", "auto", "count" or "ids"."""

    text: str
    kind: str
    count: int = 0
    ids: tuple[int, ...] = ()


GPUS_FORMS = "none, auto, count:N or GPU ids like 0 or 0,1,3"


def parse_gpus(text: str, flag: str = "--gpus") -> GpuRequest:
    spec = text.strip().lower()
    if spec in ("none", "cpu", ""):
        return GpuRequest(text, "none")
    if spec in ("auto", "all"):
        return GpuRequest(text, "auto")
    if spec.startswith("count:"):
        number = spec.split(":", 1)[1]
        if not number.isdigit() or int(number) < 1:
            raise DeviceError(f"{flag} {text!r}: count:N needs N of at least 1 (or use none)")
        return GpuRequest(text, "count", count=int(number))
    parts = [part.strip() for part in spec.split(",")]
    if not all(part.isdigit() for part in parts):
        raise DeviceError(f"{flag} {text!r} is not one of {GPUS_FORMS}")
    ids = tuple(int(part) for part in parts)
    if len(set(ids)) != len(ids):
        raise DeviceError(f"{flag} {text!r} names a GPU twice")
    return GpuRequest(text, "ids", ids=ids)


def check_memory_fraction(fraction: float | None, flag: str = "--gpu-memory-fraction") -> None:
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise DeviceError(f"{flag} must be in (0, 1], got {fraction:g}")


def requested_ids(request: GpuRequest, inventory: GpuInventory
                  ) -> tuple[tuple[int, ...], list[str]]:
    """(the GPU ids a --gpus request names, as this process sees them; notes to show once).

    Ids beyond what `inventory` shows are kept: the caller decides whether that is an error.
    """
    if request.kind == "none":
        return (), []
    if request.kind == "auto":
        ids = tuple(range(inventory.count))
        notes = [] if ids else [f"--gpus auto: {inventory.describe()}; every task runs on CPU"]
        return ids, notes
    if request.kind == "count":
        return tuple(range(request.count)), []
    return request.ids, []


# --------------------------------------------------------------------------- one task's device

@dataclass(frozen=True)
class TaskDevice:
    """Where one task runs, and what its process is given to get there."""

    job: str
    index: int
    gpu: int | None  # the GPU's id as the planning process sees it; None: CPU
    device: str  # the tf.device of the task's own ops
    mechanism: str  # ENV_MECHANISM or CONFIG_MECHANISM
    env: Mapping[str, str] = field(default_factory=dict)  # set in the task's environment
    flags: tuple[str, ...] = ()  # extra a3c_graph.worker flags
    config: Mapping[str, dict] = field(default_factory=dict)  # ConfigProto settings

    @property
    def label(self) -> str:
        return f"{self.job} {self.index}"

    @property
    def on_gpu(self) -> bool:
        return self.gpu is not None


def task_device(job: str, index: int, gpu: int | None, mechanism: str,
                memory_fraction: float | None = None, env: Mapping[str, str] | None = None,
                physical: str | None = None, hide_gpus: bool = False) -> TaskDevice:
    """One task's device, expressed through `mechanism` only.

    ENV_MECHANISM: a GPU task gets CUDA_VISIBLE_DEVICES=`physical` (so TF sees it as GPU:0)
    and an empty visible_device_list; a CPU task gets CUDA_VISIBLE_DEVICES=-1 when there are
    GPUs around to hide (`hide_gpus`). CONFIG_MECHANISM: a GPU task gets
    visible_device_list=`gpu` and the flag --gpu; the environment is left alone. Either way a
    CPU task's ConfigProto asks for no GPU device (device_count {"GPU": 0}).
    """
    env = dict(env or {})
    flags: list[str] = []
    if gpu is None:
        device = (f"/job:ps/task:{index}/device:CPU:0" if job == "ps"
                  else f"/job:{job}/task:{index}/cpu:0")
        if mechanism == ENV_MECHANISM and hide_gpus:
            env[CUDA_ENV] = HIDE_ALL_GPUS
        config: dict = {"device_count": {"GPU": 0}}
    else:
        device = f"/job:{job}/task:{index}/device:GPU:0"
        options: dict = {"visible_device_list": ""}
        if mechanism == ENV_MECHANISM:
            if physical is not None:
                env[CUDA_ENV] = physical
        else:
            options["visible_device_list"] = str(gpu)
            flags += ["--gpu", str(gpu)]
        if memory_fraction is None:
            options["allow_growth"] = True
        else:
            options["allow_growth"] = False
            options["per_process_gpu_memory_fraction"] = memory_fraction
            flags.append(f"--gpu-memory-fraction={memory_fraction:g}")
        config = {"gpu_options": options}
    return TaskDevice(job=job, index=index, gpu=gpu, device=device, mechanism=mechanism,
                      env=env, flags=tuple(flags), config=config)


def process_task_device(job: str, index: int, gpu: int | None,
                        memory_fraction: float | None = None,
                        environ: Mapping[str, str] | None = None,
                        inventory: GpuInventory | None = None) -> TaskDevice:
    """The device of the task running in this process (a3c_graph.worker), before TF starts.

    `--gpu ID` chooses by visible_device_list (ID counts within CUDA_VISIBLE_DEVICES). Without
    it a worker whose CUDA_VISIBLE_DEVICES shows it a GPU (what the launcher sets) uses
    GPU:0 of those, with an empty visible_device_list; otherwise it runs on CPU. A ps is
    always on CPU.
    """
    environ = os.environ if environ is None else environ
    check_memory_fraction(memory_fraction)
    if gpu is not None and job != "worker":
        raise DeviceError(f"--gpu is for worker tasks; a {job} task always runs on CPU")
    if gpu is not None and gpu < 0:
        raise DeviceError(f"--gpu must be a GPU id (0 or more), got {gpu}")
    needs_inventory = gpu is not None or (job == "worker" and CUDA_ENV in environ)
    if inventory is None and needs_inventory:
        inventory = detect_gpus(environ)
    if gpu is not None:
        if gpu >= inventory.count:
            raise DeviceError(f"--gpu {gpu} is not visible: {inventory.describe()}")
        return task_device(job, index, gpu, CONFIG_MECHANISM, memory_fraction)
    if needs_inventory and inventory.count:
        return task_device(job, index, 0, ENV_MECHANISM, memory_fraction,
                           env={CUDA_ENV: environ[CUDA_ENV]})
    cpu_env = {CUDA_ENV: environ[CUDA_ENV]} if CUDA_ENV in environ else {}
    return task_device(job, index, None, ENV_MECHANISM if cpu_env else CONFIG_MECHANISM,
                       env=cpu_env)


def describe_task(task: TaskDevice) -> str:
    """"worker 0 on /job:worker/task:0/device:GPU:0 (CUDA_VISIBLE_DEVICES=1, allow_growth)"."""
    how = [f"{k}={v}" for k, v in sorted(task.env.items())]
    options = task.config.get("gpu_options", {})
    if options.get("visible_device_list"):
        how.append(f"visible_device_list={options['visible_device_list']}")
    if task.on_gpu:
        how.append("allow_growth" if options.get("allow_growth") else
                   f"per_process_gpu_memory_fraction={options['per_process_gpu_memory_fraction']:g}")
    return f"{task.label} on {task.device}" + (f" ({', '.join(how)})" if how else "")


def apply_to_config(config, task: TaskDevice):
    """Write the task's device settings into a tf.compat.v1.ConfigProto; returns it."""
    for name, count in task.config.get("device_count", {}).items():
        config.device_count[name] = count
    for name, value in task.config.get("gpu_options", {}).items():
        setattr(config.gpu_options, name, value)
    return config


# --------------------------------------------------------------------------- several graphs

DEVICE_PATTERN = re.compile(r"^/?(?:device:)?(cpu|gpu):(\d+)$", re.IGNORECASE)


def parse_device_list(text: str, flag: str = "--devices") -> list[str]:
    """["/device:CPU:0", "/device:GPU:1", ...] of "cpu:0,gpu:1" (also "/device:GPU:1")."""
    devices = []
    for part in (p.strip() for p in text.split(",")):
        match = DEVICE_PATTERN.match(part)
        if not match:
            raise DeviceError(f"{flag} entry {part!r} is not a device like cpu:0 or gpu:1")
        devices.append(f"/device:{match.group(1).upper()}:{int(match.group(2))}")
    return devices


def check_devices_visible(devices: Sequence[str], inventory: GpuInventory | None = None,
                          flag: str = "--devices") -> None:
    """DeviceError if a GPU of `devices` is not visible to this process."""
    wanted = sorted({int(d.rsplit(":", 1)[1]) for d in devices if ":GPU:" in d})
    if not wanted:
        return
    inventory = detect_gpus() if inventory is None else inventory
    missing = [gpu for gpu in wanted if gpu >= inventory.count]
    if missing:
        raise DeviceError(f"{flag}: {gpus_are(missing)} not visible: {inventory.describe()}")


def devices_that_ran(run_metadata, graph) -> list[str]:
    """Devices on which ops of `graph` ran in a traced session.run (feeds, fetches and
    TF's own bookkeeping nodes are left out)."""
    names = {op.name for op in graph.get_operations()}
    return sorted({stats.device for stats in run_metadata.step_stats.dev_stats
                   if any(node.node_name in names for node in stats.node_stats)})


# --------------------------------------------------------------------------- command line

def add_gpu_arguments(parser: argparse.ArgumentParser, default: str = "none") -> None:
    """--gpus and --gpu-memory-fraction, as the launcher takes them."""
    parser.add_argument("--gpus", default=default, metavar="SPEC",
                        help=f"GPUs for the workers: {GPUS_FORMS} (ids as this process sees "
                             f"them). ps tasks always run on CPU; workers take the GPUs "
                             f"round-robin (default: {default}).")
    parser.add_argument("--gpu-memory-fraction", type=float, default=None, metavar="F",
                        help="per_process_gpu_memory_fraction of each GPU task instead of "
                             "allow_growth; the tasks sharing a GPU must fit in it.")

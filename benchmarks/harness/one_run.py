"""One run of one variant: started as its own process tree, sampled until it ends, stopped
if it must be, and turned into a record (benchmarks.run and benchmarks.learning run it).

Measured per run on one clock for every variant (a3c_graph.rundir.progress): start-up ends at
the run's first applied update, reported at once as `training_started`; each worker's
--max-seconds count from its own first applied update; the final report is written when a
worker decides to stop, before any teardown. From the progress history every worker
appends (progress/worker_<i>.jsonl) once the run is over, and from the process tree,
sampled every SAMPLE_SECS:
  startup_s           launch (the harness starts the variant's command) -> the run's first
                      applied update (the earliest training_started; a3c_graph.rundir.progress's
                      run_timing, which summary.json's figures come from too)
  steps_per_sec       agent (env) steps from the report written at that first update to the
                      newest report (the final one), over the time between them (run_timing)
  frames_per_sec      steps_per_sec x the env's frame skip (a3c_graph.core.envs.env_info with
                      the run's env options: 4 emulator frames per agent step for ALE ids,
                      1 elsewhere, so the same as steps_per_sec on CartPole)
  time_to_solve_s     launch -> the first report that the run is solved (wall clock,
                      start-up included); None if not solved
  env_steps_to_solve  the global env steps in that report
  time_to_solve_or_budget_s  time_to_solve_s, or for a run that did not solve, its
                      start-up plus --max-seconds (the budget it was given on the one
                      clock): medians over every seed count unsolved runs instead of
                      dropping them
  stopped_s           launch -> the newest final report: the end of training, teardown
                      excluded
  peak_memory_mb      peak of the summed PSS (proportional set size) of the variant's whole
                      process tree, every PSS_SAMPLE_SECS: a page shared by k processes
                      counts 1/k in each, so shared libraries, forked pages and Ray's
                      object store count once
  peak_rss_mb         the peak summed RSS, every SAMPLE_SECS, which counts a shared page
                      once per process that maps it (the figure earlier tables reported)
  cpu_us_per_step     CPU time (user + system) of the whole process tree per agent step,
                      in microseconds, over the same window as steps_per_sec: "total", and
                      the graph variant's "ps" and "workers" tasks apart ("other": the
                      launcher, and every process of the TF2 variants and the emulator).
                      Read every SAMPLE_SECS, interpolated to the reports' times (cpu_window)
  return_curve        [seconds since launch, env steps, mean return(100)] per report

After the run every process seen in its tree must be gone; leftovers are ended by pid and
listed in the record (leftover_processes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from a3c_graph.core.config import A3CConfig, config_to_argv
from a3c_graph.core.envs import env_info, env_options
from a3c_graph.rundir.progress import (
    read_history,
    read_progress,
    run_timing,
    run_totals,
    training_reports,
    training_started,
)
from a3c_graph.system.processes import stop_in_order
from benchmarks.common import end_leftovers, process_tree

PROG = "benchmarks.run"  # the name its warnings carry
REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("graph", "tf2_mp", "tf2_ray")
# The env alone (benchmarks.variants.emulator): run beside each seed's acting ceilings.
EMULATOR = "emulator"
VARIANT_MODULES = {"tf2_mp": "benchmarks.variants.tf2_multiprocessing",
                   "tf2_ray": "benchmarks.variants.tf2_ray",
                   EMULATOR: "benchmarks.variants.emulator"}
SAMPLE_SECS = 0.5
# PSS comes from /proc/<pid>/smaps_rollup, a walk of the page tables: about 6 ms per TF
# process here, 50-70 ms for a Ray run's dozen processes. Sampled this often, it costs the
# run under measurement about 1 % of a core; RSS (a counter read) every SAMPLE_SECS.
PSS_SAMPLE_SECS = 5.0
# A variant stops itself at --max-seconds (counted once it is up); the harness only
# steps in after this much more, for start-up and a stuck run.
OVERRUN_SECS = 180.0
# SIGTERM -> SIGKILL for a run that has to be stopped by the harness.
STOP_TIMEOUT_SECS = 30.0
# After a run's root exits, how long the rest of its tree gets to exit on its own.
LEFTOVER_TIMEOUT_SECS = 15.0
RECORD_KEYS = ("name", "variant", "phase", "seed", "workers", "envs_per_worker", "max_seconds",
               "command",
               "logdir", "log", "exit_code", "stop_reason", "solved", "steps_per_sec",
               "frame_skip", "frames_per_sec", "time_to_solve_s", "env_steps_to_solve",
               "time_to_solve_or_budget_s", "startup_s", "stopped_s", "peak_memory_mb",
               "peak_rss_mb", "cpu_us_per_step", "final_mean_return_100", "final_env_steps",
               "episodes", "launched", "training_started", "wall_s", "return_curve", "processes",
               "leftover_processes")


@dataclass(frozen=True)
class RunSpec:
    """One run of one variant."""

    variant: str
    seed: int
    workers: int
    max_seconds: float
    phase: str  # "main" (the seeds), "ceiling" (acting only) or "scaling"
    envs_per_worker: int | None = None  # None: the run's config's; else this many instead

    @property
    def name(self) -> str:
        envs = "" if self.envs_per_worker is None else f"-e{self.envs_per_worker}"
        return f"{self.phase}-{self.variant}{envs}-w{self.workers}-seed{self.seed}"


def variant_command(spec: RunSpec, config: A3CConfig, logdir: Path,
                    allow_remote: bool = False) -> list[str]:
    """The command of one run: the variant's own entry point with the shared A3C flags."""
    config = dataclasses.replace(config, seed=spec.seed, max_seconds=spec.max_seconds,
                                 learn=config.learn and spec.phase != "ceiling",
                                 envs_per_worker=spec.envs_per_worker or config.envs_per_worker)
    # A run's own envs per worker are said even when they are the preset's: unsaid, the
    # launcher would spread the preset's over the workers.
    flags = config_to_argv(config, say_envs=spec.envs_per_worker is not None)
    common = ["--workers", str(spec.workers), "--logdir", str(logdir),
              *(["--allow-remote"] if allow_remote else []), *flags]
    if spec.variant == "graph":
        return [str(REPO / "scripts" / "launch_cluster.sh"), "start", *common]
    return [sys.executable, "-m", VARIANT_MODULES[spec.variant], *common]


def child_env() -> dict[str, str]:
    """The harness's environment without TF_CONFIG (the launcher would read it as a cluster
    to join)."""
    return {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}


# --------------------------------------------------------------------------- sampling

@dataclass
class Sampler:
    """Samples one run's process tree: its memory (RSS, and PSS every PSS_SAMPLE_SECS),
    its CPU time by role and its pids."""

    root_pid: int
    peak_pss: int = 0
    peak_rss: int = 0
    last_pss: float = -math.inf  # time.monotonic() of the last PSS sample
    processes: dict[tuple[int, float], psutil.Process] = field(default_factory=dict)
    names: dict[tuple[int, float], str] = field(default_factory=dict)
    roles: dict[tuple[int, float], str] = field(default_factory=dict)
    # CPU seconds each process had used when last read: an ended process keeps its last.
    cpu: dict[tuple[int, float], float] = field(default_factory=dict)
    # (unix time, {role: CPU seconds of the tree's processes of that role}) per sample.
    cpu_timeline: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def sample(self) -> None:
        with_pss = time.monotonic() - self.last_pss >= PSS_SAMPLE_SECS
        if with_pss:
            self.last_pss = time.monotonic()
        pss = rss = 0
        for proc in process_tree(self.root_pid):
            try:
                key = (proc.pid, proc.create_time())
                if key not in self.processes:
                    self.processes[key] = proc
                    self.names[key] = _label(proc)  # while it is alive to tell
                    self.roles[key] = _role(proc)
                times = proc.cpu_times()
                self.cpu[key] = times.user + times.system
                rss += proc.memory_info().rss
                if with_pss:
                    pss += proc.memory_full_info().pss
            except psutil.Error:
                continue  # ended between listing and reading: nothing to count
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)
        by_role: dict[str, float] = {}
        for key, seconds in self.cpu.items():
            by_role[self.roles[key]] = by_role.get(self.roles[key], 0.0) + seconds
        self.cpu_timeline.append((time.time(), by_role))


def cpu_window(timeline: Sequence[tuple[float, Mapping[str, float]]], first: Mapping,
               last: Mapping) -> dict[str, float] | None:
    """CPU microseconds per env step between two progress reports (their "time" and
    "env_steps"), per role and in "total": each role's CPU seconds at a report's time are
    read off the sampled timeline by linear interpolation. None when the timeline does not
    cover both reports or no env step was made between them."""
    steps = last["env_steps"] - first["env_steps"]
    if steps <= 0 or len(timeline) < 2 or not (
            timeline[0][0] <= first["time"] and last["time"] <= timeline[-1][0]):
        return None
    roles = sorted({role for _, by_role in timeline for role in by_role})

    def at(moment: float) -> dict[str, float]:
        i = next(i for i in range(1, len(timeline)) if timeline[i][0] >= moment)
        (t0, a), (t1, b) = timeline[i - 1], timeline[i]
        w = 0.0 if t1 == t0 else (moment - t0) / (t1 - t0)
        return {r: a.get(r, 0.0) + w * (b.get(r, 0.0) - a.get(r, 0.0)) for r in roles}

    start, end = at(first["time"]), at(last["time"])
    used = {role: end[role] - start[role] for role in roles}
    used["total"] = sum(used.values())
    return {role: round(seconds / steps * 1e6, 1) for role, seconds in used.items()}


# --------------------------------------------------------------------------- the record's figures

def frame_skip(config: A3CConfig) -> int:
    """Emulator frames per agent step of config's env (4 for ALE ids, 1 elsewhere)."""
    return env_info(config.env, **env_options(config)).frame_skip


def stopped_at(history: Sequence[dict]) -> float | None:
    """When training ended: the newest final report ("done"), written before teardown."""
    return max((float(row["time"]) for row in history if row.get("state") == "done"),
               default=None)


def solve_report(history: Sequence[dict]) -> dict | None:
    """The earliest report that says the run is solved, if any."""
    return next((row for row in history if row.get("stop_reason") == "solved"), None)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


# --------------------------------------------------------------------------- one run

def run_one(spec: RunSpec, config: A3CConfig, out: Path, allow_remote: bool = False,
            watch: Callable[[], None] | None = None) -> dict[str, Any]:
    """Start one run, sample it until it ends (calling `watch` at every sample: a suite's
    progress line), make sure its processes are gone."""
    logdir = out / "runs" / spec.name
    log_path = out / "logs" / f"{spec.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = variant_command(spec, config, logdir, allow_remote)
    launched = time.time()
    with open(log_path, "ab") as log:  # a run resumed in its log dir adds to its log
        popen = subprocess.Popen(command, cwd=REPO, env=child_env(), stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    sampler = Sampler(popen.pid)
    stop_reason = None
    interrupted = False
    try:
        stop_reason = _sample_until_exit(popen, sampler, launched + spec.max_seconds
                                         + OVERRUN_SECS, watch)
    except KeyboardInterrupt:
        interrupted, stop_reason = True, "harness_interrupted"
    finally:
        # On every path, a Ctrl-C of the harness too: stop the run before anything else.
        if popen.poll() is None:
            _stop_run(popen, sampler)
    ended = time.time()
    # A last point of the CPU timeline after the exit, so it covers the final report; the
    # CPU used between the last sample and each process's exit is not counted.
    sampler.sample()
    leftovers = end_leftovers(sampler.processes.values(), LEFTOVER_TIMEOUT_SECS)
    record = build_record(spec, command, logdir, log_path, popen.returncode, launched, ended,
                          sampler, leftovers, stop_reason, frame_skip(config))
    if interrupted:
        raise RunInterrupted(record)
    return record


class RunInterrupted(Exception):
    """The harness was interrupted during a run; carries the (partial) record of that run."""

    def __init__(self, record: dict[str, Any]):
        super().__init__(record["name"])
        self.record = record


def _sample_until_exit(popen: subprocess.Popen, sampler: Sampler, deadline: float,
                       watch: Callable[[], None] | None = None) -> str | None:
    while popen.poll() is None:
        sampler.sample()
        if watch is not None:
            watch()
        if time.time() >= deadline:
            print(f"{PROG}: warning: run overran its budget by {OVERRUN_SECS:.0f} s; stopping it",
                  file=sys.stderr, flush=True)
            _stop_run(popen, sampler)
            return "harness_deadline"
        time.sleep(SAMPLE_SECS)
    return None


def _stop_run(popen: subprocess.Popen, sampler: Sampler) -> None:
    """SIGTERM the run's root (every variant then stops its own processes in order);
    SIGKILL it and its tree, by pid, if it does not end within STOP_TIMEOUT_SECS. What
    else of the tree was seen is end_leftovers' to end, and to list."""
    sampler.sample()
    try:
        root = psutil.Process(popen.pid)
    except psutil.Error:
        root = None  # already gone
    if root is not None:
        stop_in_order([[root]], STOP_TIMEOUT_SECS)
    popen.wait(timeout=10)


def build_record(spec: RunSpec, command: list[str], logdir: Path, log_path: Path,
                 exit_code: int | None, launched: float, ended: float, sampler: Sampler,
                 leftovers: list[str], stop_reason: str | None,
                 frame_skip: int = 1) -> dict[str, Any]:
    history = read_history(logdir)
    startup, rate = run_timing(history, launched)
    reports = training_reports([row for row in history
                                if float(row.get("time") or 0.0) >= launched])
    final = run_totals(read_progress(logdir))
    solved = solve_report(history)
    started = training_started(history)
    stopped = stopped_at(history)
    summary = _read_json(logdir / "summary.json")
    record = {
        "name": spec.name, "variant": spec.variant, "phase": spec.phase, "seed": spec.seed,
        "workers": spec.workers, "envs_per_worker": spec.envs_per_worker,
        "max_seconds": spec.max_seconds, "command": shlex.join(command),
        "logdir": str(logdir), "log": str(log_path),
        "exit_code": exit_code,
        "stop_reason": stop_reason or summary.get("stop_reason")
        or (final.stop_reason if final else None),
        "solved": solved is not None,
        "steps_per_sec": _round(rate),
        "frame_skip": frame_skip,
        "frames_per_sec": _round(None if rate is None else rate * frame_skip),
        "time_to_solve_s": _round(solved["time"] - launched, 2) if solved else None,
        "env_steps_to_solve": int(solved["env_steps"]) if solved else None,
        "time_to_solve_or_budget_s": _round(solved["time"] - launched, 2) if solved else (
            None if startup is None else _round(startup + spec.max_seconds, 2)),
        "startup_s": _round(startup, 2),
        "stopped_s": _round(None if stopped is None else stopped - launched, 2),
        "peak_memory_mb": _round(sampler.peak_pss / 2**20),
        "peak_rss_mb": _round(sampler.peak_rss / 2**20),
        "cpu_us_per_step": cpu_window(sampler.cpu_timeline, reports[0], reports[-1])
        if len(reports) >= 2 else None,
        "final_mean_return_100": final.mean_return_100 if final else None,
        "final_env_steps": final.env_steps if final else 0,
        "episodes": final.episodes if final else 0,
        "launched": round(launched, 3),
        "training_started": started,
        "wall_s": round(ended - launched, 2),
        "return_curve": [[round(row["time"] - launched, 2), row["env_steps"],
                          row.get("mean_return_100")] for row in training_reports(history)],
        "processes": [{"pid": pid, "create_time": created, "name": sampler.names[pid, created]}
                      for pid, created in sorted(sampler.processes)],
        "leftover_processes": leftovers,
    }
    return record


def _label(proc: psutil.Process) -> str:
    """The process name, or Ray's role title (ray::WorkerActor) where it set one."""
    try:
        argv0 = (proc.cmdline() or [""])[0]
        return argv0 if argv0.startswith("ray::") else proc.name()
    except psutil.Error:
        return "?"


def _role(proc: psutil.Process) -> str:
    """"ps" or "workers" for the graph variant's tasks (their --job), else "other"."""
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return "other"
    for job, role in (("ps", "ps"), ("worker", "workers")):
        if f"--job={job}" in argv or any(a == "--job" and b == job
                                         for a, b in zip(argv, argv[1:])):
            return role
    return "other"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


"""The benchmark harness: the same A3C three ways, measured side by side.

    python -m benchmarks.run --env CartPole-v1 --workers 2 --seeds 3 --max-seconds 300 \\
        [--variants graph,tf2_mp,tf2_ray] [--scaling 1,2,4] [--scaling-seconds 60] \\
        [--ceiling] [--ceiling-seconds 30] [--out DIR] [--allow-remote]
        [any A3C flag, e.g. --rollout-length 16]

Variants (each started as its own subprocess, in its own session):
  graph    scripts/launch_cluster.sh start: the ps/worker cluster, the code path a user's
           command takes
  tf2_mp   python -m benchmarks.variants.tf2_multiprocessing
  tf2_ray  python -m benchmarks.variants.tf2_ray

Runs are interleaved seed by seed (seed 0: graph, tf2_mp, tf2_ray; seed 1: ...), so a
change in the machine's load hits every variant alike. A run lasts until it is solved or
its --max-seconds are spent. With --ceiling, each seed also gets a run of each variant
with --learn false (the same processes stepping the envs and running the policy, each
rollout counted and dropped, nothing learned) for --ceiling-seconds: each variant's acting
ceiling, which its training throughput is measured against. With --scaling, each variant
then runs once per worker count with the shorter --scaling-seconds budget. Every run gets
the same A3C flags.

The harness, and so every run it starts, runs in a private network, a network namespace
with only loopback (benchmarks.variants.runtime.enter_private_network), where the launcher's tasks
run too: Ray's servers and TF's listen on every interface and authenticate no one.
--allow-remote runs the harness and every run (given --allow-remote too) on the host network.

Measured per run on one clock for every variant (a3c_graph.progress): start-up ends at
the run's first applied update, reported at once as `training_started`; each worker's
--max-seconds count from its own first applied update; the final report is written when a
worker decides to stop, before any teardown. From the progress history every worker
appends (progress/worker_<i>.jsonl) once the run is over, and from the process tree,
sampled every SAMPLE_SECS:
  startup_s           launch (the harness starts the variant's command) -> the run's first
                      applied update (the earliest training_started)
  steps_per_sec       agent (env) steps from the report written at that first update to the
                      newest report (the final one), over the time between them
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
  return_curve        [seconds since launch, env steps, mean return(100)] per report

Writes <out>/results.json (records, per-variant medians, machine info), results.md (the
table this prints at the end), PNG plots, logs/<run>.log and runs/<run>/ (each run's
--logdir). <out> defaults to benchmarks/results/<YYYYmmdd-HHMMSS>. After each run every
process seen in its tree must be gone before the next starts; leftovers are ended by pid
and listed in the record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

import psutil

from a3c_graph.cli import OneLineParser, UsageError, fail
from a3c_graph.core.config import A3CConfig, add_config_arguments, config_from_args, config_to_argv
from a3c_graph.core.envs import env_info, env_options
from a3c_graph.launcher.plan import resolve_target_return
from a3c_graph.progress import read_history, read_progress, run_totals
from benchmarks.variants import runtime

PROG = "benchmarks.run"
REPO = Path(__file__).resolve().parents[2]
VARIANTS = ("graph", "tf2_mp", "tf2_ray")
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
MEDIAN_KEYS = ("steps_per_sec", "frames_per_sec", "time_to_solve_s", "env_steps_to_solve",
               "time_to_solve_or_budget_s", "startup_s", "peak_memory_mb",
               "final_mean_return_100")
# Of the distribution-free interval of a median (median_interval).
CONFIDENCE = 0.95
RECORD_KEYS = ("name", "variant", "phase", "seed", "workers", "max_seconds", "command",
               "logdir", "log", "exit_code", "stop_reason", "solved", "steps_per_sec",
               "frame_skip", "frames_per_sec", "time_to_solve_s", "env_steps_to_solve",
               "time_to_solve_or_budget_s", "startup_s", "stopped_s", "peak_memory_mb",
               "peak_rss_mb", "final_mean_return_100", "final_env_steps", "episodes",
               "launched", "training_started", "wall_s", "return_curve", "processes",
               "leftover_processes")


# --------------------------------------------------------------------------- plan

@dataclass(frozen=True)
class RunSpec:
    """One run of one variant."""

    variant: str
    seed: int
    workers: int
    max_seconds: float
    phase: str  # "main" (the seeds), "ceiling" (acting only) or "scaling"

    @property
    def name(self) -> str:
        return f"{self.phase}-{self.variant}-w{self.workers}-seed{self.seed}"


def plan_runs(variants: Sequence[str], seeds: int, base_seed: int, workers: int,
              max_seconds: float, scaling: Sequence[int], scaling_seconds: float,
              ceiling_seconds: float | None = None) -> list[RunSpec]:
    """Main runs interleaved seed by seed (with the seed's ceiling runs last when
    ceiling_seconds is given), then one scaling run per worker count."""
    runs = []
    for s in range(seeds):
        runs += [RunSpec(v, base_seed + s, workers, max_seconds, "main") for v in variants]
        if ceiling_seconds is not None:
            runs += [RunSpec(v, base_seed + s, workers, ceiling_seconds, "ceiling")
                     for v in variants]
    runs += [RunSpec(v, base_seed, n, scaling_seconds, "scaling")
             for n in scaling for v in variants]
    return runs


def variant_command(spec: RunSpec, config: A3CConfig, logdir: Path,
                    allow_remote: bool = False) -> list[str]:
    """The command of one run: the variant's own entry point with the shared A3C flags."""
    config = dataclasses.replace(config, seed=spec.seed, max_seconds=spec.max_seconds,
                                 learn=config.learn and spec.phase != "ceiling")
    common = ["--workers", str(spec.workers), "--logdir", str(logdir),
              *(["--allow-remote"] if allow_remote else []), *config_to_argv(config)]
    if spec.variant == "graph":
        return [str(REPO / "scripts" / "launch_cluster.sh"), "start", *common]
    module = {"tf2_mp": "benchmarks.variants.tf2_multiprocessing",
              "tf2_ray": "benchmarks.variants.tf2_ray"}
    return [sys.executable, "-m", module[spec.variant], *common]


def child_env() -> dict[str, str]:
    """The harness's environment without TF_CONFIG (the launcher would read it as a cluster
    to join)."""
    return {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}


# --------------------------------------------------------------------------- sampling

@dataclass
class Sampler:
    """Samples one run's process tree: its memory (RSS, and PSS every PSS_SAMPLE_SECS)
    and its pids."""

    root_pid: int
    peak_pss: int = 0
    peak_rss: int = 0
    last_pss: float = -math.inf  # time.monotonic() of the last PSS sample
    processes: dict[tuple[int, float], psutil.Process] = field(default_factory=dict)
    names: dict[tuple[int, float], str] = field(default_factory=dict)

    def sample(self) -> None:
        with_pss = time.monotonic() - self.last_pss >= PSS_SAMPLE_SECS
        if with_pss:
            self.last_pss = time.monotonic()
        pss = rss = 0
        for proc in runtime.process_tree(self.root_pid):
            try:
                key = (proc.pid, proc.create_time())
                if key not in self.processes:
                    self.processes[key] = proc
                    self.names[key] = _label(proc)  # while it is alive to tell
                rss += proc.memory_info().rss
                if with_pss:
                    pss += proc.memory_full_info().pss
            except psutil.Error:
                continue  # ended between listing and reading: nothing to count
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)


# --------------------------------------------------------------------------- the one clock

def training_started(history: Sequence[dict]) -> float | None:
    """The run's first applied update (unix time): the earliest training_started reported."""
    return min((float(row["training_started"]) for row in history
                if row.get("training_started")), default=None)


def training_reports(history: Sequence[dict]) -> list[dict]:
    """The reports from the one written at the run's first applied update on, oldest first
    (history: a3c_graph.progress.read_history's rows)."""
    started = training_started(history)
    if started is None:
        return []
    return [row for row in history
            if row.get("training_started") and float(row["time"]) >= started]


def steps_per_sec(history: Sequence[dict]) -> float | None:
    """Agent (env) steps/s of training: from the report at the first applied update to the
    newest (the final report, once the run has stopped)."""
    reports = training_reports(history)
    if len(reports) < 2 or reports[-1]["time"] <= reports[0]["time"]:
        return None
    first, last = reports[0], reports[-1]
    return (last["env_steps"] - first["env_steps"]) / (last["time"] - first["time"])


def frame_skip(config: A3CConfig) -> int:
    """Emulator frames per agent step of config's env (4 for ALE ids, 1 elsewhere)."""
    return env_info(config.env, **env_options(config)).frame_skip


def startup_seconds(history: Sequence[dict], launched: float) -> float | None:
    """Launch -> the run's first applied update."""
    started = training_started(history)
    return None if started is None else started - launched


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

def run_one(spec: RunSpec, config: A3CConfig, out: Path,
            allow_remote: bool = False) -> dict[str, Any]:
    """Start one run, sample it until it ends, make sure its processes are gone."""
    logdir = out / "runs" / spec.name
    log_path = out / "logs" / f"{spec.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = variant_command(spec, config, logdir, allow_remote)
    launched = time.time()
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(command, cwd=REPO, env=child_env(), stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    sampler = Sampler(popen.pid)
    stop_reason = None
    interrupted = False
    try:
        stop_reason = _sample_until_exit(popen, sampler, launched + spec.max_seconds
                                         + OVERRUN_SECS)
    except KeyboardInterrupt:
        interrupted, stop_reason = True, "harness_interrupted"
    finally:
        # On every path, a Ctrl-C of the harness too: stop the run before anything else.
        if popen.poll() is None:
            _stop_run(popen, sampler)
    ended = time.time()
    leftovers = runtime.end_processes(sampler.processes.values(), LEFTOVER_TIMEOUT_SECS)
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


def _sample_until_exit(popen: subprocess.Popen, sampler: Sampler, deadline: float) -> str | None:
    while popen.poll() is None:
        sampler.sample()
        if time.time() >= deadline:
            print(f"{PROG}: warning: run overran its budget by {OVERRUN_SECS:.0f} s; stopping it",
                  file=sys.stderr, flush=True)
            _stop_run(popen, sampler)
            return "harness_deadline"
        time.sleep(SAMPLE_SECS)
    return None


def _stop_run(popen: subprocess.Popen, sampler: Sampler) -> None:
    """SIGTERM the run's root (every variant then stops its own processes in order);
    SIGKILL the whole tree, by pid, if it does not end in time."""
    sampler.sample()
    popen.send_signal(signal.SIGTERM)
    try:
        popen.wait(timeout=STOP_TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        sampler.sample()
        for proc in sampler.processes.values():
            try:
                proc.kill()
            except psutil.Error:
                pass
        popen.wait(timeout=10)


def build_record(spec: RunSpec, command: list[str], logdir: Path, log_path: Path,
                 exit_code: int | None, launched: float, ended: float, sampler: Sampler,
                 leftovers: list[str], stop_reason: str | None,
                 frame_skip: int = 1) -> dict[str, Any]:
    history = read_history(logdir)
    rate = steps_per_sec(history)
    final = run_totals(read_progress(logdir))
    solved = solve_report(history)
    started = training_started(history)
    stopped = stopped_at(history)
    startup = startup_seconds(history, launched)
    summary = _read_json(logdir / "summary.json")
    record = {
        "name": spec.name, "variant": spec.variant, "phase": spec.phase, "seed": spec.seed,
        "workers": spec.workers, "max_seconds": spec.max_seconds,
        "command": shlex.join(command), "logdir": str(logdir), "log": str(log_path),
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


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- results

def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


def summarize(records: Sequence[dict], variants: Sequence[str]) -> dict[str, dict]:
    """Per variant over its main runs: runs, solved count and the medians of MEDIAN_KEYS
    (time and steps to solve over the solved runs only)."""
    summary = {}
    for variant in variants:
        runs = [r for r in records if r["variant"] == variant and r["phase"] == "main"]
        summary[variant] = {"runs": len(runs), "solved": sum(r["solved"] for r in runs),
                            **{key: _median([r[key] for r in runs]) for key in MEDIAN_KEYS},
                            "time_to_solve_or_budget_interval": median_interval(
                                [r["time_to_solve_or_budget_s"] for r in runs])}
    return summary


def median_interval(values: Sequence[float | None],
                    confidence: float = CONFIDENCE) -> list[float] | None:
    """A distribution-free interval of the median of `values` (None ignored): the order
    statistics x(k) and x(n + 1 - k) with the largest k whose coverage, by the binomial
    distribution of how many values fall below the median, is at least `confidence`.
    For 10 values at 95 %: x(2) to x(9) (97.9 %). None when n is too small (n < 6 at 95 %).
    """
    x = sorted(v for v in values if v is not None)
    n, best = len(x), None
    for k in range(1, n // 2 + 1):
        if 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n >= confidence:
            best = k
    return None if best is None else [x[best - 1], x[n - best]]


def ceiling_summary(records: Sequence[dict]) -> dict[str, dict[str, Any]] | None:
    """Per variant with ceiling runs: its acting ceiling (median steps/s of its ceiling
    runs) and the share of it its training runs reach; None without ceiling runs."""
    summary = {}
    for variant in dict.fromkeys(r["variant"] for r in records if r["phase"] == "ceiling"):
        runs = [r for r in records if r["phase"] == "ceiling" and r["variant"] == variant]
        ceiling = _median([r["steps_per_sec"] for r in runs])
        training = _median([r["steps_per_sec"] for r in records
                            if r["phase"] == "main" and r["variant"] == variant])
        share = None if not (ceiling and training) else round(training / ceiling, 3)
        summary[variant] = {"runs": len(runs), "steps_per_sec": ceiling,
                            "training_steps_per_sec": training, "training_share": share}
    return summary or None


def ratios(summary: dict[str, dict]) -> dict[str, dict[str, float | None]]:
    """The graph variant against each other variant: its steps/s over theirs, and its time
    to solve over theirs (medians)."""
    graph = summary.get("graph")
    if graph is None:
        return {}

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if not (a and b) else round(a / b, 2)

    return {variant: {"steps_per_sec": ratio(graph["steps_per_sec"], s["steps_per_sec"]),
                      "time_to_solve": ratio(graph["time_to_solve_s"], s["time_to_solve_s"]),
                      "time_to_solve_or_budget": ratio(graph["time_to_solve_or_budget_s"],
                                                       s["time_to_solve_or_budget_s"])}
            for variant, s in summary.items() if variant != "graph"}


def scaling_table(records: Sequence[dict]) -> dict[str, dict[int, float | None]]:
    """steps/s per variant and worker count, from the scaling runs."""
    table: dict[str, dict[int, float | None]] = {}
    for r in records:
        if r["phase"] == "scaling":
            table.setdefault(r["variant"], {})[r["workers"]] = r["steps_per_sec"]
    return table


def _fmt(value: Any, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def markdown_table(summary: dict[str, dict]) -> str:
    lines = ["| variant | runs | solved | agent steps/s | frames/s | time to solve "
             "| every seed, unsolved = budget | env steps to solve | start-up "
             "| peak memory (PSS) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for variant, s in summary.items():
        interval = s["time_to_solve_or_budget_interval"]
        every_seed = _fmt(s["time_to_solve_or_budget_s"], " s", 1) + (
            f" [{interval[0]:.1f}, {interval[1]:.1f}]" if interval else "")
        lines.append(
            f"| {variant} | {s['runs']} | {s['solved']}/{s['runs']} "
            f"| {_fmt(s['steps_per_sec'])} | {_fmt(s['frames_per_sec'])} "
            f"| {_fmt(s['time_to_solve_s'], ' s', 1)} | {every_seed} "
            f"| {_fmt(s['env_steps_to_solve'])} | {_fmt(s['startup_s'], ' s', 1)} "
            f"| {_fmt(s['peak_memory_mb'], ' MB')} |")
    return "\n".join(lines)


def seeds_markdown(records: Sequence[dict], variants: Sequence[str]) -> str:
    """Time to solve per seed and variant (main runs); an unsolved run shows ">" its
    start-up plus budget."""
    main = [r for r in records if r["phase"] == "main"]
    lines = ["| seed | " + " | ".join(variants) + " |", "|---:|" + "---:|" * len(variants)]
    for seed in sorted({r["seed"] for r in main}):
        cells = []
        for variant in variants:
            r = next((r for r in main if r["seed"] == seed and r["variant"] == variant), None)
            value = None if r is None else r["time_to_solve_or_budget_s"]
            cells.append(_fmt(value, " s", 1) if r is None or r["solved"] or value is None
                         else f"> {value:.1f} s")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scaling_markdown(table: dict[str, dict[int, float | None]]) -> str:
    counts = sorted({n for row in table.values() for n in row})
    lines = ["| variant | " + " | ".join(f"{n} worker(s)" for n in counts) + " |",
             "|---|" + "---:|" * len(counts)]
    for variant, row in table.items():
        lines.append(f"| {variant} | " + " | ".join(_fmt(row.get(n)) for n in counts) + " |")
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
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


def write_results(out: Path, settings: dict, machine: dict, records: Sequence[dict],
                  variants: Sequence[str]) -> str:
    """results.json and results.md (rewritten after every run); returns the markdown."""
    summary = summarize(records, variants)
    scaling = scaling_table(records)
    ceiling = ceiling_summary(records)
    versus = ratios(summary)
    data = {"settings": settings, "machine": machine, "medians": summary,
            "graph_versus": versus, "ceiling": ceiling,
            "scaling": {v: {str(n): s for n, s in row.items()} for v, row in scaling.items()},
            "records": list(records)}
    runtime.write_atomic(out / "results.json", json.dumps(data, indent=2) + "\n")
    text = [f"# A3C three ways: {settings['env']}, {settings['workers']} worker(s), "
            f"{settings['seeds']} seed(s), budget {settings['max_seconds']:g} s", "",
            markdown_table(summary), "",
            "Medians over the seeds; time and env steps to solve over the solved runs only, "
            "\"every seed\" over all of them with an unsolved run counted as its start-up "
            "plus budget, and in brackets a distribution-free 95 % interval of that median "
            "(from 6 seeds on). "
            "One clock for every variant: start-up runs from launch to the run's first "
            "applied update, each worker's budget counts from its own first applied update, "
            "and training ends at the final report, before teardown. Agent steps/s and "
            "frames/s (agent steps/s x the env's frame skip: 4 emulator frames per agent step "
            "for ALE ids, 1 elsewhere) are of training only; time to solve includes "
            "start-up. Peak memory is the PSS of each variant's whole process tree (a page "
            "shared by several processes counts once).", ""]
    text += ["Time to solve per seed (launch to the first solved report; > start-up + "
             "budget where the run did not solve):", "", seeds_markdown(records, variants),
             ""]
    if versus:
        text += ["| graph vs | steps/s (x) | time to solve (x) | every seed (x) |",
                 "|---|---:|---:|---:|"]
        text += [f"| {variant} | {_fmt(r['steps_per_sec'], '', 2)} "
                 f"| {_fmt(r['time_to_solve'], '', 2)} "
                 f"| {_fmt(r['time_to_solve_or_budget'], '', 2)} |"
                 for variant, r in versus.items()]
        text += [""]
    if ceiling:
        text += [f"Acting ceilings (--learn false, {settings['workers']} worker(s), runs of "
                 f"{settings['ceiling_seconds']:g} s), and the share of its own ceiling "
                 "each variant's training reaches:", "",
                 "| variant | ceiling runs | acting ceiling, steps/s | training, steps/s "
                 "| share |", "|---|---:|---:|---:|---:|"]
        for variant, c in ceiling.items():
            share = c["training_share"]
            text.append(f"| {variant} | {c['runs']} | {_fmt(c['steps_per_sec'])} "
                        f"| {_fmt(c['training_steps_per_sec'])} "
                        f"| {_fmt(None if share is None else 100 * share, ' %')} |")
        text.append("")
    if scaling:
        text += [f"## steps/s vs workers ({settings['scaling_seconds']:g} s budget or until "
                 "solved)", "", scaling_markdown(scaling), ""]
    text += [f"Machine: {machine['cpu_count']} cores, {machine['memory_gb']} GB, load "
             f"{machine['load_average_at_start']} at start; Python {machine['python']}, "
             f"TF {machine['versions']['tensorflow']}, Ray {machine['versions']['ray']}.", ""]
    markdown = "\n".join(text)
    runtime.write_atomic(out / "results.md", markdown)
    return markdown


def plot_results(out: Path, records: Sequence[dict], variants: Sequence[str],
                 target_return: float | None) -> list[Path]:
    """returns.png, steps_per_sec.png and (with scaling runs) scaling.png."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    written = []
    main = [r for r in records if r["phase"] == "main"]
    ceiling = ceiling_summary(records)
    # One time axis for all panels: how much sooner one variant solves is the point.
    fig, axes = plt.subplots(1, len(variants), figsize=(5 * len(variants), 4), squeeze=False,
                             sharex=True, sharey=True)
    for ax, variant in zip(axes[0], variants):
        for r in (r for r in main if r["variant"] == variant):
            points = [(t, m) for t, _, m in r["return_curve"] if m is not None]
            if points:
                ax.plot(*zip(*points), label=f"seed {r['seed']}")
        if target_return is not None:
            ax.axhline(target_return, color="gray", linestyle="--", linewidth=1)
        ax.set_title(variant)
        ax.set_xlabel("seconds since launch")
        if ax.lines:
            ax.legend(loc="lower right", fontsize="small")
    # From launch: start-up shows as the blank before each line.
    longest = max((t for r in main for t, _, _ in r["return_curve"]), default=1.0)
    axes[0][0].set_xlim(0, longest * 1.02)
    axes[0][0].set_ylabel("mean return (last 100 episodes)")
    written.append(_save(fig, out / "returns.png"))

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, variant in enumerate(variants):
        rates = [r["steps_per_sec"] for r in main if r["variant"] == variant
                 and r["steps_per_sec"] is not None]
        ax.bar(i, statistics.median(rates) if rates else 0.0, color=f"C{i}", alpha=0.6)
        ax.scatter([i] * len(rates), rates, color="black", s=12, zorder=3)
    label = "acting ceiling (--learn false)"
    for i, variant in enumerate(variants):
        level = ((ceiling or {}).get(variant) or {}).get("steps_per_sec")
        if level:
            ax.hlines(level, i - 0.4, i + 0.4, color="gray", linestyle="--", linewidth=1,
                      label=label)
            label = None  # one legend entry for them all
    if ceiling:
        ax.legend(loc="lower right", fontsize="small")
    ax.set_xticks(range(len(variants)), variants)
    ax.set_ylabel("env steps/s after start-up (bar: median, dots: seeds)")
    written.append(_save(fig, out / "steps_per_sec.png"))

    scaling = scaling_table(records)
    if scaling:
        fig, ax = plt.subplots(figsize=(6, 4))
        for variant, row in scaling.items():
            points = sorted((n, s) for n, s in row.items() if s is not None)
            if points:
                ax.plot(*zip(*points), marker="o", label=variant)
        ax.set_xlabel("workers")
        ax.set_xticks(sorted({n for row in scaling.values() for n in row}))
        ax.set_ylabel("env steps/s after start-up")
        ax.set_ylim(bottom=0)  # from zero: a ratio between points reads as it is
        ax.legend(loc="lower right")
        written.append(_save(fig, out / "scaling.png"))
    return written


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


# --------------------------------------------------------------------------- command line

def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, allow_abbrev=False, help_hint=False,
                            description="Run the graph, TF2+multiprocessing and TF2+Ray A3C "
                                        "side by side and write a results table and plots.")
    group = parser.add_argument_group("harness")
    group.add_argument("--workers", type=int, default=2, help="Workers per run (default: 2).")
    group.add_argument("--seeds", type=int, default=3,
                       help="Runs per variant, seeds --seed, --seed + 1, ... (default: 3).")
    group.add_argument("--variants", default=",".join(VARIANTS),
                       help=f"Comma-separated subset of {', '.join(VARIANTS)} (default: all).")
    group.add_argument("--scaling", type=_int_list, default=[], metavar="N[,N..]",
                       help="Also run each variant once per worker count, e.g. 1,2,4.")
    group.add_argument("--scaling-seconds", type=float, default=60.0,
                       help="Budget of each scaling run (default: 60).")
    group.add_argument("--ceiling", action="store_true",
                       help="Also measure the acting ceilings: per seed, one run of each "
                            "variant with --learn false.")
    group.add_argument("--ceiling-seconds", type=float, default=30.0,
                       help="Budget of each ceiling run (default: 30).")
    group.add_argument("--out", default=None,
                       help="Results directory (default: benchmarks/results/<YYYYmmdd-HHMMSS>).")
    runtime.add_allow_remote_argument(group)
    add_config_arguments(parser)  # --env, --seed, --max-seconds and every A3C flag
    return parser


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, A3CConfig, list[str]]:
    args = build_parser().parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise UsageError(f"--variants must name some of {', '.join(VARIANTS)}, got "
                         f"{args.variants!r}")
    for flag in ("workers", "seeds"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    for flag in ("scaling_seconds", "ceiling_seconds"):
        if not getattr(args, flag) > 0:
            raise UsageError(f"--{flag.replace('_', '-')} must be positive, got "
                             f"{getattr(args, flag)}")
    try:
        config = config_from_args(args)
        resolve_target_return(config)  # an unknown env fails here, not in every run
        if set(variants) - {"graph"}:
            runtime.check_tf2_config(config)  # a flag they refuse fails here, not in each run
    except ValueError as error:  # resolve_target_return raises UsageError itself
        raise UsageError(str(error)) from None
    return args, config, variants


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, config, variants = parse_args(argv)
    except UsageError as error:
        return fail(PROG, error)
    runtime.enter_private_network(PROG, args.allow_remote)
    # SIGTERM stops the current run and keeps the results so far, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    out = Path(args.out or REPO / "benchmarks" / "results" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    target = resolve_target_return(config)
    ceiling_seconds = args.ceiling_seconds if args.ceiling else None
    settings = {"env": config.env, "workers": args.workers, "seeds": args.seeds,
                "max_seconds": config.max_seconds, "variants": variants,
                "scaling": args.scaling, "scaling_seconds": args.scaling_seconds,
                "ceiling_seconds": ceiling_seconds,
                "target_return": target, "a3c_flags": config_to_argv(config)}
    machine = machine_info()
    runs = plan_runs(variants, args.seeds, config.seed, args.workers, config.max_seconds,
                     args.scaling, args.scaling_seconds, ceiling_seconds)
    records: list[dict] = []
    interrupted = False
    try:
        for i, spec in enumerate(runs, 1):
            print(f"[{i}/{len(runs)}] {spec.name} ...", flush=True)
            record = run_one(spec, config, out, args.allow_remote)
            records.append(record)
            print(f"[{i}/{len(runs)}] {spec.name}: {_run_line(record)}", flush=True)
            write_results(out, settings, machine, records, variants)
    except (KeyboardInterrupt, RunInterrupted) as stop:
        if isinstance(stop, RunInterrupted):
            records.append(stop.record)
        interrupted = True
        print(f"{PROG}: interrupted; writing the results so far", file=sys.stderr, flush=True)
    markdown = write_results(out, settings, machine, records, variants)
    plot_results(out, records, variants, target)
    print(markdown)
    print(f"results in {out}", flush=True)
    return 130 if interrupted else 0


def _run_line(r: dict) -> str:
    return (f"{'solved' if r['solved'] else r['stop_reason']}, {_fmt(r['steps_per_sec'])} "
            f"agent steps/s, {_fmt(r['frames_per_sec'])} frames/s, start-up "
            f"{_fmt(r['startup_s'], ' s', 1)}, time to solve "
            f"{_fmt(r['time_to_solve_s'], ' s', 1)}, peak {_fmt(r['peak_memory_mb'], ' MB')}, "
            f"mean return(100) {_fmt(r['final_mean_return_100'], '', 1)}"
            + (f", ended leftovers {r['leftover_processes']}" if r["leftover_processes"] else ""))


def _raise_keyboard_interrupt(_signum: int, _frame: object) -> NoReturn:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())

"""Where every microsecond of an agent step goes: the CPU budget of acting and learning.

    python -m benchmarks.step_budget [--env ALE/Pong-v5] [--workers 2] [--seconds 60]
        [--rollouts 40] [--out DIR] [--allow-remote] [any A3C flag]

Two measurements of one setup (the env's preset with the A3C flags given; B is
--envs-per-worker, T --rollout-length):

  in one process, one thread (benchmarks.step_cost's rows for B envs and T steps, per env
  step): the env alone, the numpy_function boundary, the policy's forward pass and
  sampling, the in-graph rollout, the learner's forward and backward pass;
  in the cluster (benchmarks.run's runs and records: the launcher's command for --seconds
  training, the same acting only with --learn false, and the env alone,
  benchmarks.variants.emulator, with as many processes as workers): the CPU time (user +
  system) of every process of the run per agent step, the ps task's apart.

The budget's rows, microseconds of CPU per agent step, each from those figures:

  acting   env (emulator and EnvBatch)      env only
           numpy_function boundary          numpy_function - env only
           policy: forward pass, sampling   policy only
           the rollout's loop and recorder  graph rollout - numpy_function - policy only
           the cluster's share of acting    acting run - graph rollout
             (sessions, queue, the dequeue thread, the ps's counting, progress)
  learning forward and backward pass        learner
           the rest of an update            training run - acting run - learner
             (loss, clipping, the exchange with the ps and its Adam step, the thread
             hand-offs); of which the ps task: its CPU training - acting
  total    the training run's CPU per agent step; with C cores, C x 10^6 / total is the
           steps/s the budget allows, against the training run's measured steps/s.

Rows taken as differences of two measurements carry both one's noise (±10 % here). Writes
<out>/budget.json and <out>/budget.md (the table it prints), <out>/runs and logs/ (the
runs' logdirs); <out> defaults to benchmarks/results/budget-<YYYYmmdd-HHMMSS>.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from a3c_graph.core.config import A3CConfig, add_config_arguments, config_from_args
from a3c_graph.core.run_spec import resolve_run
from a3c_graph.rundir.progress import write_atomic
from a3c_graph.system.cli import OneLineParser, UsageError, fail
from benchmarks import common
from benchmarks.harness.machine import machine_info
from benchmarks.harness.one_run import EMULATOR, REPO, RunSpec, run_one

PROG = "benchmarks.step_budget"


def budget_rows(cost: dict[str, float], B: int, training: dict, acting: dict,
                cores: int, steps_per_sec: float | None) -> list[tuple[str, str, float | None]]:
    """(part, row, microseconds per agent step) from step_cost's costs per step of B envs
    (`cost`) and the cluster runs' cpu_us_per_step (`training`, `acting`)."""
    per = {name: value / B for name, value in cost.items()}
    learner_rest = training["total"] - acting["total"] - per["learner"]
    total = training["total"]
    return [
        ("acting", "env (EnvBatch.step; for ALE ids the emulator)", per["env only"]),
        ("acting", "numpy_function boundary", per["numpy_function"] - per["env only"]),
        ("acting", "policy: forward pass and sampling", per["policy only"]),
        ("acting", "the rollout's loop and recorder",
         per["graph rollout"] - per["numpy_function"] - per["policy only"]),
        ("acting", "the cluster's share of acting (sessions, queue, ps, progress)",
         acting["total"] - per["graph rollout"]),
        ("acting", "= acting, in the cluster", acting["total"]),
        ("learning", "forward and backward pass", per["learner"]),
        ("learning", "the rest of an update (loss, clip, exchange with the ps, Adam)",
         learner_rest),
        ("learning", "  of which the ps task", training.get("ps", 0.0) - acting.get("ps", 0.0)),
        ("learning", "= learning, in the cluster", training["total"] - acting["total"]),
        ("total", "training, CPU per agent step", total),
        ("total", f"steps/s {cores} cores allow at that cost", cores * 1e6 / total),
        ("total", "steps/s the training run measured", steps_per_sec),
    ]


def budget_markdown(rows, title: str) -> str:
    lines = [title, "", "| part | row | us per agent step |", "|---|---|---:|"]
    for part, row, value in rows:
        figure = "-" if value is None else f"{value:,.0f}"
        lines.append(f"| {part} | {row} | {figure} |")
    return "\n".join(lines) + "\n"


def step_costs(config: A3CConfig, rollouts: int, allow_remote: bool) -> dict[str, float]:
    """benchmarks.step_cost's row for B = --envs-per-worker and T = --rollout-length."""
    child = subprocess.run(
        [sys.executable, "-m", "benchmarks.step_cost", "--json", "--env", config.env,
         "--envs", str(config.envs_per_worker), "--rollouts", str(rollouts),
         "--rollout-length", str(config.rollout_length),
         *(["--allow-remote"] if allow_remote else [])],
        capture_output=True, text=True, cwd=REPO)
    if child.returncode != 0:
        raise RuntimeError(f"benchmarks.step_cost failed: {child.stderr.strip()[-500:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, allow_abbrev=False, help_hint=False,
                           description="The CPU budget of an agent step, acting and learning.")
    group = parser.add_argument_group("budget")
    group.add_argument("--workers", type=int, default=2, help="Workers per run (default: 2).")
    group.add_argument("--seconds", type=float, default=60.0,
                       help="Budget of each of the three cluster runs (default: 60).")
    group.add_argument("--rollouts", type=int, default=40,
                       help="Timed rollouts of each step_cost row (default: 40).")
    group.add_argument("--out", default=None, help="Results directory (default: "
                       "benchmarks/results/budget-<YYYYmmdd-HHMMSS>).")
    common.add_allow_remote_argument(group)
    add_config_arguments(parser)
    parser.set_defaults(env="ALE/Pong-v5")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.workers < 1 or args.seconds <= 0 or args.rollouts < 1:
            raise UsageError("--workers and --rollouts must be at least 1 and --seconds "
                             "positive")
        config = config_from_args(args)
        resolve_run(config)  # an unknown env fails here
    except (UsageError, ValueError) as error:
        return fail(PROG, error)
    common.enter_private_network(PROG, args.allow_remote)
    out = Path(args.out or REPO / "benchmarks" / "results"
               / time.strftime("budget-%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{PROG}: step_cost's rows for B = {config.envs_per_worker}, "
          f"T = {config.rollout_length} ...", flush=True)
    cost = step_costs(config, args.rollouts, args.allow_remote)
    records = {}
    for variant, phase in (("graph", "main"), ("graph", "ceiling"), (EMULATOR, "ceiling")):
        spec = RunSpec(variant, config.seed, args.workers, args.seconds, phase)
        print(f"{PROG}: {spec.name} ...", flush=True)
        records[spec.name] = record = run_one(spec, config, out, args.allow_remote)
        if not record["cpu_us_per_step"]:
            return fail(PROG, f"{spec.name} made no steps to divide by (exit status "
                              f"{record['exit_code']}; its log: {record['log']})", 1)
    training, acting, alone = records.values()
    cores = os.cpu_count() or 1
    rows = budget_rows(cost, config.envs_per_worker, training["cpu_us_per_step"],
                       acting["cpu_us_per_step"], cores, training["steps_per_sec"])
    title = (f"CPU per agent step, {config.env}, {args.workers} workers x "
             f"{config.envs_per_worker} envs, T = {config.rollout_length} (training "
             f"{training['steps_per_sec']:,.0f} agent steps/s, acting only "
             f"{acting['steps_per_sec']:,.0f}, the env alone {alone['steps_per_sec']:,.0f} "
             f"at {alone['cpu_us_per_step']['total']:,.0f} us per step)")
    markdown = budget_markdown(rows, title)
    write_atomic(out / "budget.md", markdown)
    write_atomic(out / "budget.json", json.dumps(
        {"settings": {"env": config.env, "workers": args.workers, "seconds": args.seconds,
                      "envs_per_worker": config.envs_per_worker,
                      "rollout_length": config.rollout_length, "rollouts": args.rollouts},
         "machine": machine_info(), "step_cost": cost,
         "rows": [{"part": p, "row": r, "us_per_step": v} for p, r, v in rows],
         "records": records}, indent=2) + "\n")
    print(markdown)
    print(f"results in {out}", flush=True)
    return 0

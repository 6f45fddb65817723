"""The benchmark harness: the same A3C three ways, measured side by side.

    python -m benchmarks.run --env CartPole-v1 --workers 2 --seeds 3 --max-seconds 300 \\
        [--variants graph,tf2_mp,tf2_ray] [--scaling 1,2,4] [--scaling-seconds 60] \\
        [--ceiling] [--ceiling-seconds 30] [--emulator-envs 4] [--out DIR] [--allow-remote]
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
ceiling, which its training throughput is measured against; and a run of the env alone
(benchmarks.variants.emulator: one process per worker stepping a worker's envs with
random actions), the machine's limit for the env, which every variant's training and
acting are measured against too; --emulator-envs N adds runs of the env alone at N envs
per process, a row of their own beside it. With --scaling, each variant
then runs once per worker count with the shorter --scaling-seconds budget. Every run gets
the same A3C flags.

The harness, and so every run it starts, runs in a private network, a network namespace
with only loopback (benchmarks.common.enter_private_network), where the launcher's tasks
run too: Ray's servers and TF's listen on every interface and authenticate no one.
--allow-remote runs the harness and every run (given --allow-remote too) on the host network.

How each run is measured on one clock for every variant, and what its record holds:
benchmarks.harness.one_run; the medians, tables and plots: benchmarks.harness.report.

Writes <out>/results.json (records, per-variant medians, machine info), results.md (the
table this prints at the end), PNG plots, logs/<run>.log and runs/<run>/ (each run's
--logdir). <out> defaults to benchmarks/results/<YYYYmmdd-HHMMSS>. After each run every
process seen in its tree must be gone before the next starts; leftovers are ended by pid
and listed in the record.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from a3c_graph.core.config import A3CConfig, add_config_arguments, config_from_args, config_to_argv
from a3c_graph.core.run_spec import resolve_run
from a3c_graph.system.cli import OneLineParser, UsageError, fail
from benchmarks import common
from benchmarks.harness.machine import machine_info
from benchmarks.harness.one_run import (
    EMULATOR,
    PROG,
    REPO,
    VARIANTS,
    RunInterrupted,
    RunSpec,
    run_one,
)
from benchmarks.harness.report import fmt, plot_results, write_results
from benchmarks.variants import tf2_run


def plan_runs(variants: Sequence[str], seeds: int, base_seed: int, workers: int,
              max_seconds: float, scaling: Sequence[int], scaling_seconds: float,
              ceiling_seconds: float | None = None,
              emulator_envs: Sequence[int] = ()) -> list[RunSpec]:
    """Main runs interleaved seed by seed (with the seed's ceiling runs last when
    ceiling_seconds is given, and after them the env alone, EMULATOR, as many processes
    as workers, stepping a worker's envs and then each count of `emulator_envs` per
    process), then one scaling run per worker count."""
    runs = []
    for s in range(seeds):
        runs += [RunSpec(v, base_seed + s, workers, max_seconds, "main") for v in variants]
        if ceiling_seconds is not None:
            runs += [RunSpec(v, base_seed + s, workers, ceiling_seconds, "ceiling")
                     for v in (*variants, EMULATOR)]
            runs += [RunSpec(EMULATOR, base_seed + s, workers, ceiling_seconds, "ceiling",
                             envs_per_worker=n) for n in emulator_envs]
    runs += [RunSpec(v, base_seed, n, scaling_seconds, "scaling")
             for n in scaling for v in variants]
    return runs


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
    group.add_argument("--emulator-envs", type=_int_list, default=[], metavar="N[,N..]",
                       help="With --ceiling, also run the env alone with N envs per process "
                            "(e.g. 4: a shape the agent no longer uses, shown beside it).")
    group.add_argument("--out", default=None,
                       help="Results directory (default: benchmarks/results/<YYYYmmdd-HHMMSS>).")
    common.add_allow_remote_argument(group)
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
        resolve_run(config)  # an unknown env fails here, not in every run
        if set(variants) - {"graph"}:
            tf2_run.check_tf2_config(config)  # a flag they refuse fails here, not in each run
    except ValueError as error:  # an unknown env, a flag the TF2 variants refuse
        raise UsageError(str(error)) from None
    return args, config, variants


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, config, variants = parse_args(argv)
    except UsageError as error:
        return fail(PROG, error)
    common.enter_private_network(PROG, args.allow_remote)
    # SIGTERM stops the current run and keeps the results so far, as Ctrl-C does.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    out = Path(args.out or REPO / "benchmarks" / "results" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    target = resolve_run(config).target_return
    ceiling_seconds = args.ceiling_seconds if args.ceiling else None
    settings = {"env": config.env, "workers": args.workers, "seeds": args.seeds,
                "max_seconds": config.max_seconds, "variants": variants,
                "scaling": args.scaling, "scaling_seconds": args.scaling_seconds,
                "ceiling_seconds": ceiling_seconds, "envs_per_worker": config.envs_per_worker,
                "emulator_envs": args.emulator_envs,
                "target_return": target, "a3c_flags": config_to_argv(config)}
    machine = machine_info()
    runs = plan_runs(variants, args.seeds, config.seed, args.workers, config.max_seconds,
                     args.scaling, args.scaling_seconds, ceiling_seconds,
                     [n for n in args.emulator_envs if n != config.envs_per_worker])
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
    return (f"{'solved' if r['solved'] else r['stop_reason']}, {fmt(r['steps_per_sec'])} "
            f"agent steps/s, {fmt(r['frames_per_sec'])} frames/s, start-up "
            f"{fmt(r['startup_s'], ' s', 1)}, time to solve "
            f"{fmt(r['time_to_solve_s'], ' s', 1)}, peak {fmt(r['peak_memory_mb'], ' MB')}, "
            f"mean return(100) {fmt(r['final_mean_return_100'], '', 1)}"
            + (f", ended leftovers {r['leftover_processes']}" if r["leftover_processes"] else ""))


def _raise_keyboard_interrupt(_signum: int, _frame: object) -> NoReturn:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())

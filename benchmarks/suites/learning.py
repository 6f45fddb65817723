"""The learning suite: does the agent learn, how fast, and does what it learned hold?

    python -m benchmarks.learning [--tasks cartpole,cartpole-stability,breakout] [--seeds 3]
        [--workers 2] [--out DIR] [any A3C flag, applied to every task, e.g. --learning-rate 3e-4]

Each task is a graph-variant run per seed, started through the launcher exactly as a user's
`scripts/launch_cluster.sh` command (benchmarks.run.run_one), with the task's own flags
and the defaults (the env's preset) for everything else:

  cartpole            CartPole-v1 until solved (mean return of the last 100 episodes >= 475)
  cartpole-stability  CartPole-v1 past the target: --target-return 1e9 --max-steps 2000000.
                      Once the mean first reaches 475 it must never fall below 400 again.
  breakout            MinAtar/Breakout-v1 for the minatar preset's budget (5M frames);
                      its target (15) is a line on the curve, not a reason to stop
  asterix, freeway, seaquest, space-invaders
                      the other MinAtar games, same budget (opt-in: name them in --tasks)
  pong                ALE/Pong-v5 to the atari preset's target of 18, ALE v5's protocol
                      (sticky actions 0.25; opt-in: hours)
  pong-deterministic  ALE/Pong-v5 on the A3C anchors' protocol: no sticky actions
                      (--repeat-action-probability 0), trained for its 45-minute budget; the
                      table gives the time to a mean return(100) of 18 (opt-in)
  atari-breakout, atari-beamrider, atari-qbert, atari-spaceinvaders
                      the A3C paper's games on the classic protocol (--protocol classic) to
                      40M frames; the line on the curve is rl-zoo's A2C score (opt-in: hours)

After a run of a task that plays its final checkpoint (Pong: 10 games, the other Atari
games: 30), the suite
runs `python -m a3c_graph.evaluate --logdir RUN --episodes N` greedy and again with --sample,
each in its own process, and records both (<out>/evaluations/<run>-greedy.txt, -sampled.txt).

The curves come from the progress history every worker appends (a3c_graph.progress): the
cluster's env steps and mean return of the last 100 episodes every --progress-secs, the
lowest mean read in between (so a dip between two writes counts) and the policy's entropy.
Times are wall seconds since launch, start-up included.

Writes <out>/results.json (settings, machine, per-run records with their curves, per-task
summaries), results.md (the table) and per task <task>.png (mean return against frames and
against wall minutes: every seed, and their median). <out> defaults to
benchmarks/results/learning-<YYYYmmdd-HHMMSS>. Paths in the records are relative to <out>.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from a3c_graph.cli import OneLineParser, UsageError, fail
from a3c_graph.core.config import A3CConfig, add_config_arguments, resolve_config
from a3c_graph.core.envs import env_info, env_options
from a3c_graph.core.stats import RECENT_EPISODES, resolve_target_return
from a3c_graph.progress import read_history, read_launches, run_clock, write_atomic
from benchmarks.harness.machine import machine_info
from benchmarks.harness.one_run import REPO, RunInterrupted, RunSpec, child_env, run_one
from benchmarks.suites import resume

# The results' half of the suite; named here too, as the suite's own (tests, docs scripts).
from benchmarks.suites.learning_report import (  # noqa: F401
    _evaluation_cell,
    _fmt,
    median_curve,
    plot_task,
    summarize,
    write_results,
)

PROG = "benchmarks.learning"


@dataclass(frozen=True)
class Task:
    """One row of the suite: an env, the flags that make the task, what counts as reached."""

    name: str
    flags: Mapping[str, Any]  # A3CConfig fields the task sets; the preset gives the rest
    target: float             # the return the table measures the time to
    floor: float | None = None  # stability: after first reaching target, never below this
    default: bool = True        # run when --tasks is not given
    evaluation_games: int = 0   # games the final checkpoint plays, greedy and sampled (0: none)

    def config(self, given: Mapping[str, Any]) -> A3CConfig:
        return resolve_config({**self.flags, **given})


def _minatar(name: str, game: str, target: float, default: bool = False) -> Task:
    return Task(name, {"env": f"MinAtar/{game}-v1"}, target, default=default)


# MinAtar targets: what a working A3C reaches within the 5M-frame budget (Young and Tian
# 2019, Figure 2, and PPO's published curves); Breakout's is the one the project commits to.
TASKS = {task.name: task for task in (
    Task("cartpole", {"env": "CartPole-v1"}, 475.0),
    Task("cartpole-stability", {"env": "CartPole-v1", "target_return": 1e9,
                                "max_steps": 2_000_000, "max_seconds": 1200.0},
         475.0, floor=400.0),
    _minatar("breakout", "Breakout", 15.0, default=True),
    _minatar("asterix", "Asterix", 10.0),
    _minatar("freeway", "Freeway", 40.0),
    _minatar("seaquest", "Seaquest", 10.0),
    _minatar("space-invaders", "SpaceInvaders", 50.0),
    Task("pong", {"env": "ALE/Pong-v5"}, 18.0, default=False, evaluation_games=10),
    # The A3C paper's and universe-starter-agent's Pong: deterministic, frame skip 4. Trained
    # for the whole budget, not stopped at 18: the first reading of 18 is the luckiest
    # 100-game window of a policy still improving, whose own games average less (2026-11-26:
    # checkpoints taken there played 16.4-17.9 sampled); the budget's end 18.1-19.6.
    Task("pong-deterministic", {"env": "ALE/Pong-v5", "repeat_action_probability": 0.0,
                                "max_seconds": 2700.0, "target_return": math.inf}, 18.0,
         default=False, evaluation_games=10),
    # The A3C paper's other games on the classic protocol, each to the atari preset's 40M
    # frames (the launcher's command plus --protocol classic); the target, a line on the
    # curve and no stop rule, is rl-baselines3-zoo's A2C score at 40M frames.
    *(Task(name, {"env": f"ALE/{game}-v5", "protocol": "classic"}, a2c_score,
           default=False, evaluation_games=30)
      for name, game, a2c_score in (("atari-breakout", "Breakout", 280.0),
                                    ("atari-beamrider", "BeamRider", 2890.0),
                                    ("atari-qbert", "Qbert", 3882.0),
                                    ("atari-spaceinvaders", "SpaceInvaders", 627.0))),
)}


# --------------------------------------------------------------------------- one run's curve

@dataclass
class Curve:
    """A run's learning curve: one point per progress write of any worker, oldest first.

    seconds since launch, env steps, frames (env steps x frame skip), the cluster's mean
    return of the last 100 episodes, the lowest mean read since the worker's previous
    write, and the policy's entropy (None before the first update).
    """

    seconds: list[float] = field(default_factory=list)
    env_steps: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    mean_return: list[float] = field(default_factory=list)
    lowest_return: list[float] = field(default_factory=list)
    entropy: list[float | None] = field(default_factory=list)

    @classmethod
    def from_history(cls, rows: Sequence[dict], launches: Sequence[float],
                     frame_skip: int) -> Curve:
        """The curve of a run's history (read_history), its seconds on the run's own clock
        (run_clock: a run resumed in its log dir sums the training time of its pieces)."""
        curve = cls()
        for row, seconds in zip(rows, run_clock(rows, launches)):
            # The mean of "the last 100 episodes" means something once there are 100.
            if row.get("mean_return_100") is None or (row.get("episodes") or 0) < RECENT_EPISODES:
                continue
            mean = float(row["mean_return_100"])
            curve.seconds.append(round(seconds, 2))
            curve.env_steps.append(int(row["env_steps"]))
            curve.frames.append(int(row["env_steps"]) * frame_skip)
            curve.mean_return.append(mean)
            lowest = row.get("lowest_mean_return_100")
            curve.lowest_return.append(mean if lowest is None else min(float(lowest), mean))
            curve.entropy.append(row.get("entropy"))
        return curve

    def first_reaching(self, target: float) -> int | None:
        return next((i for i, m in enumerate(self.mean_return) if m >= target), None)


def judge(curve: Curve, task: Task) -> dict[str, Any]:
    """What the table reports of one run's curve."""
    first = curve.first_reaching(task.target)
    entropies = [e for e in curve.entropy if e is not None]
    result: dict[str, Any] = {
        "reached": first is not None,
        "seconds_to_target": curve.seconds[first] if first is not None else None,
        "env_steps_to_target": curve.env_steps[first] if first is not None else None,
        "frames_to_target": curve.frames[first] if first is not None else None,
        "final_mean_return_100": curve.mean_return[-1] if curve.mean_return else None,
        "best_mean_return_100": max(curve.mean_return, default=None),
        "lowest_entropy": min(entropies, default=None),
    }
    if task.floor is not None:
        # The readings after the first that reached the target (whose own interval's lowest
        # reading still belongs to the climb).
        after = range(first + 1, len(curve.seconds)) if first is not None else range(0)
        lowest = min([curve.mean_return[first]] + [curve.lowest_return[i] for i in after]
                     ) if first is not None else None
        # Time below the target after first reaching it: the intervals with a reading below.
        below = sum(curve.seconds[i] - curve.seconds[i - 1] for i in after
                    if curve.lowest_return[i] < task.target)
        result.update({
            "lowest_mean_after_target": lowest,
            "seconds_below_target_after": round(float(below), 1) if first is not None else None,
            "held": first is not None and lowest is not None and lowest >= task.floor,
        })
    return result


# --------------------------------------------------------------------------- the suite

def run_task(task: Task, config: A3CConfig, seed: int, workers: int, out: Path) -> dict:
    """One seed of one task, through the launcher; its record with curve and verdict. A run
    cut off earlier (its log dir is there) goes on from its checkpoint (resume.py), with
    what is left of its time budget."""
    spec = RunSpec("graph", seed, workers, config.max_seconds, phase=task.name)
    logdir = out / "runs" / spec.name
    if logdir.exists():
        left = max(1.0, config.max_seconds - resume.trained_seconds(logdir))
        config = dataclasses.replace(config, max_seconds=left)
        spec = dataclasses.replace(spec, max_seconds=left)
        print(f"{PROG}: {spec.name} resumes in {logdir} ({left:,.0f} s of its budget left)",
              flush=True)
    frame_skip = env_info(config.env, **env_options(config)).frame_skip
    launched = time.time()
    try:
        record = run_one(spec, config, out)
    except RunInterrupted as stop:
        stop.record.update(_learning_fields(stop.record, task, config, launched, frame_skip,
                                            out))
        raise
    record.update(_learning_fields(record, task, config, launched, frame_skip, out))
    if task.evaluation_games and record["exit_code"] == 0:
        record["evaluation"] = evaluate_final_checkpoint(
            out / record["logdir"], task.evaluation_games, out / "evaluations")
    return record


def evaluate_final_checkpoint(logdir: Path, games: int, folder: Path) -> dict[str, dict]:
    """The run's latest checkpoint played for `games` games, greedy and sampled: each mode's
    summary line of a3c_graph.evaluate (mean_return, min_return, max_return, checkpoint), or
    {"error": its last line on stderr}. The printouts go to <folder>/<run>-<mode>.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    played = {}
    for mode, flags in (("greedy", []), ("sampled", ["--sample"])):
        result = subprocess.run(
            [sys.executable, "-m", "a3c_graph.evaluate", "--logdir", str(logdir),
             "--episodes", str(games), *flags],
            capture_output=True, text=True, cwd=REPO, env=env)
        printout = folder / f"{logdir.name}-{mode}.txt"
        write_atomic(printout, result.stdout)
        if result.returncode != 0:
            lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
            played[mode] = {"error": lines[-1]}
            continue
        summary = json.loads(result.stdout.strip().splitlines()[-1])
        played[mode] = {key: summary[key] for key in ("mean_return", "min_return",
                                                      "max_return", "episodes")}
        played[mode].update(checkpoint=Path(summary["checkpoint"]).name,
                            printout=_relative(printout, folder.parent))
    return played


def _learning_fields(record: dict, task: Task, config: A3CConfig, launched: float,
                     frame_skip: int, out: Path) -> dict[str, Any]:
    logdir = Path(record["logdir"])
    # The launches the launcher recorded (a resumed run has several), else this one.
    curve = Curve.from_history(read_history(logdir), read_launches(logdir) or [launched],
                               frame_skip)
    return {
        "task": task.name, "env": config.env, "target": task.target, "floor": task.floor,
        "curve": dataclasses.asdict(curve), **judge(curve, task),
        # Relative to the results folder, so a committed copy holds no machine paths.
        "logdir": _relative(logdir, out), "log": _relative(Path(record["log"]), out),
        "command": record["command"].replace(str(out) + "/", "").replace(str(REPO) + "/", ""),
        "return_curve": None,  # the harness's 0.5-s samples; the curve above replaces them
    }


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- command line

def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, allow_abbrev=False, help_hint=False,
                            description="Run the learning suite: each task with its defaults "
                                        "over several seeds; table, curves and results.json.")
    group = parser.add_argument_group("suite")
    defaults = ",".join(name for name, task in TASKS.items() if task.default)
    group.add_argument("--tasks", default=defaults,
                       help=f"Comma-separated tasks of {', '.join(TASKS)} (default: {defaults}).")
    group.add_argument("--seeds", type=int, default=3,
                       help="Runs per task, seeds --seed, --seed + 1, ... (default: 3).")
    group.add_argument("--workers", type=int, default=2, help="Workers per run (default: 2).")
    group.add_argument("--out", default=None, help="Results directory (default: "
                       "benchmarks/results/learning-<YYYYmmdd-HHMMSS>).")
    group.add_argument("--resume", action="store_true",
                       help="Go on with the suite started in --out: its finished runs kept, "
                            "a run it left cut off resumed from its checkpoint, then the rest "
                            "(the suite's own flags are read from --out; give no others).")
    add_config_arguments(parser)  # every A3C flag, given to every task
    return parser


def parse_args(argv: Sequence[str] | None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.resume:
        if not args.out or [a for a in argv if a not in ("--resume", "--out", args.out)
                            and not a.startswith("--out=")]:
            raise UsageError("--resume takes --out OUT and no other flag: the suite's flags "
                             "are the ones it started with")
        argv = [*resume.saved_command(Path(args.out)), "--out", args.out, "--resume"]
        args = build_parser().parse_args(argv)
    args.argv = [a for a in argv if a != "--resume"]
    names = [n.strip() for n in args.tasks.split(",") if n.strip()]
    unknown = [n for n in names if n not in TASKS]
    if unknown or not names:
        raise UsageError(f"--tasks must name some of {', '.join(TASKS)}, got {args.tasks!r}")
    for flag in ("seeds", "workers"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(A3CConfig)
             if hasattr(args, f.name)}
    if "env" in given:
        raise UsageError("--env is the task's: choose tasks with --tasks")
    tasks = [TASKS[n] for n in names]
    configs = {}
    for task in tasks:
        try:
            config = task.config(given)
            configs[task.name] = dataclasses.replace(config,
                                                     target_return=resolve_target_return(config))
        except (ValueError, UsageError) as error:
            raise UsageError(f"task {task.name}: {error}") from None
    return args, tasks, configs, given


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, tasks, configs, given = parse_args(argv)
    except UsageError as error:
        return fail(PROG, error)
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    out = Path(args.out or REPO / "benchmarks" / "results"
               / f"learning-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    settings = {"tasks": [t.name for t in tasks], "seeds": args.seeds, "workers": args.workers,
                "a3c_flags": [f"--{k.replace('_', '-')}={v}" for k, v in given.items()],
                "command": "python -m benchmarks.learning " + " ".join(args.argv)}
    machine = machine_info()
    records: list[dict] = []
    interrupted = False
    base_seed = int(given.get("seed", 0))
    runs = [(task, base_seed + s) for task in tasks for s in range(args.seeds)]
    finished = resume.finished_records(out) if args.resume else {}
    if not args.resume:
        resume.save_command(out, [a for a in args.argv if a != "--out" and a != args.out])
    try:
        for i, (task, seed) in enumerate(runs, 1):
            config = dataclasses.replace(configs[task.name], seed=seed)
            done = finished.get(RunSpec("graph", seed, args.workers, 0, task.name).name)
            if done is not None:
                print(f"[{i}/{len(runs)}] {task.name} seed {seed}: finished before: "
                      f"{_run_line(done)}", flush=True)
                records.append(done)
                continue
            print(f"[{i}/{len(runs)}] {task.name} seed {seed} ({config.env}) ...", flush=True)
            record = run_task(task, config, seed, args.workers, out)
            records.append(record)
            print(f"[{i}/{len(runs)}] {task.name} seed {seed}: {_run_line(record)}", flush=True)
            write_results(out, settings, machine, records, tasks)
    except (KeyboardInterrupt, RunInterrupted) as stop:
        if isinstance(stop, RunInterrupted):
            records.append(stop.record)
        interrupted = True
        print(f"{PROG}: interrupted; writing the results so far", file=sys.stderr, flush=True)
    text = write_results(out, settings, machine, records, tasks)
    for task in tasks:
        plot_task(out, task, records)
    print(text)
    print(f"results in {out}", flush=True)
    failed = [r for r in records if r["exit_code"] not in (0, None)
              or any("error" in played for played in (r.get("evaluation") or {}).values())]
    return 130 if interrupted else (1 if failed else 0)


def _run_line(r: dict) -> str:
    parts = [f"reached {r['target']:g} at {r['seconds_to_target']:.0f} s, "
             f"{r['frames_to_target']:,} frames" if r["reached"] else
             f"did not reach {r['target']:g}",
             f"final mean {_fmt(r['final_mean_return_100'])}",
             f"best {_fmt(r['best_mean_return_100'])}",
             f"{_fmt(r['steps_per_sec'], 0)} agent steps/s", f"wall {r['wall_s']:.0f} s"]
    if r.get("floor") is not None:
        parts.append(f"lowest after target {_fmt(r['lowest_mean_after_target'])}, "
                     f"{'held' if r['held'] else 'NOT held'}")
    if r.get("evaluation"):
        parts.append(f"final checkpoint greedy / sampled {_evaluation_cell(r)}")
    if r["exit_code"] not in (0, None):
        parts.append(f"exit {r['exit_code']} ({r['stop_reason']})")
    return "; ".join(parts)


def _raise_keyboard_interrupt(_signum: int, _frame: object) -> NoReturn:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())

"""The learning suite: does the agent learn, how fast, and does what it learned hold?

    python -m benchmarks.learning [--tasks cartpole,cartpole-stability,breakout] [--seeds 3]
        [--workers 2 | --workers 1,2,4,8,16 [--cluster-envs 16]] [--out DIR]
        [any A3C flag, applied to every task, e.g. --learning-rate 3e-4]

Each task is a graph-variant run per seed, started through the launcher exactly as a user's
`scripts/launch_cluster.sh` command (benchmarks.run.run_one), with the task's own flags
and the defaults (the env's preset) for everything else. While a run trains, the suite prints
a line about it every 5 minutes (frames against the budget, mean return(100), agent steps/s,
the time to the budget at that speed); the run's own log (<out>/logs) has one every 5 s.

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
  pendulum, halfcheetah, hopper, walker2d
                      Pendulum-v1 and MuJoCo's v5 tasks (the continuous preset) for 1M env
                      steps; the line is rl-zoo's A2C score (opt-in)

After a run of a task that plays its final checkpoint (Pong: 10 games; the other Atari
games: 100 whole games at once, and further batches of 100 until 150,000 agent steps; the
continuous tasks: 30 episodes), the suite runs `python -m a3c_graph.evaluate --logdir RUN
--episodes N [--min-agent-steps S]` greedy and with --sample,
in two processes at once, and records both (<out>/evaluations/<run>-greedy.txt, -sampled.txt).

The curves come from the progress history every worker appends (a3c_graph.rundir.progress): the
cluster's env steps and mean return of the last 100 episodes every --progress-secs, the
lowest mean read in between (so a dip between two writes counts) and the policy's entropy.
Times are wall seconds since launch, start-up included.

Writes <out>/results.json (settings, machine, per-run records with their curves, per-task
summaries), results.md (the table) and per task <task>.png (mean return against frames and
against wall minutes: every seed, and their median); with several worker counts, a row and
a median per task and count, and workers.png (each task's frames to its target and final
mean return against the worker count, as the A3C paper sets data efficiency against
threads). <out> defaults to benchmarks/results/learning-<YYYYmmdd-HHMMSS>. Paths in the
records are relative to <out>.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple, NoReturn

from a3c_graph.core.config import A3CConfig, add_config_arguments
from a3c_graph.core.run_spec import resolve_run
from a3c_graph.launcher.report import steps_per_sec_between
from a3c_graph.rundir.progress import (
    Totals,
    read_history,
    read_launches,
    read_progress,
    run_totals,
    write_atomic,
)
from a3c_graph.system.cli import OneLineParser, UsageError, fail
from benchmarks.harness.machine import machine_info
from benchmarks.harness.one_run import REPO, RunInterrupted, RunSpec, child_env, run_one
from benchmarks.suites import resume

# The results' half of the suite; named here too, as the suite's own (tests, docs scripts).
from benchmarks.suites.learning_report import (  # noqa: F401
    _evaluation_cell,
    _fmt,
    median_curve,
    plot_against_workers,
    plot_task,
    summarize,
    write_results,
)
from benchmarks.suites.learning_tasks import TASKS, Curve, Task, judge  # noqa: F401

PROG = "benchmarks.learning"
# How often the suite prints a line about the run it is training (its log has one every
# few seconds).
PROGRESS_EVERY_SECS = 300.0


# --------------------------------------------------------------------------- the suite

def run_task(run: PlannedRun, config: A3CConfig, out: Path) -> dict:
    """One planned run (a seed of a task with its workers and envs), through the launcher;
    its record with curve and verdict. A run cut off earlier (its log dir is there) goes on
    from its checkpoint (resume.py), with what is left of its time budget; one whose
    training ended but not its evaluation (resume.TRAINED is there) is only evaluated."""
    task = run.task
    logdir = out / "runs" / run.spec.name
    record = resume.trained_record(logdir)
    if record is not None:
        print(f"{PROG}: {logdir.name} ended its training before; its final checkpoint is "
              "evaluated", flush=True)
    else:
        record = _train(run, config, out, logdir)
        if not (task.evaluation_games and record["exit_code"] == 0):
            return record
        resume.keep_trained(logdir, record)
    record["evaluation"] = evaluate_final_checkpoint(
        out / record["logdir"], task.evaluation_games, out / "evaluations",
        task.evaluation_steps)
    return record


def _train(run: PlannedRun, config: A3CConfig, out: Path, logdir: Path) -> dict:
    """run_task's training: the run launched (or resumed from `logdir`) to its end; its
    record with curve and verdict."""
    task = run.task
    spec = dataclasses.replace(run.spec, max_seconds=config.max_seconds)
    earlier_wall = 0.0  # the wall seconds of the pieces before this one
    # Without a checkpoint the launcher starts the run afresh (and drops its history).
    if (logdir / "checkpoint").exists():
        earlier_wall = resume.wall_seconds(logdir)
        left = max(1.0, config.max_seconds - resume.trained_seconds(logdir))
        config = dataclasses.replace(config, max_seconds=left)
        spec = dataclasses.replace(spec, max_seconds=left)
        print(f"{PROG}: {spec.name} resumes in {logdir} ({left:,.0f} s of its budget left)",
              flush=True)
    frame_skip = resolve_run(config).info.frame_skip
    launched = time.time()
    try:
        record = run_one(spec, config, out,
                         watch=RunProgress(spec.name, logdir, config, frame_skip))
    except RunInterrupted as stop:
        stop.record.update(_learning_fields(stop.record, task, config, launched, frame_skip,
                                            out, earlier_wall))
        raise
    record.update(_learning_fields(record, task, config, launched, frame_skip, out,
                                   earlier_wall))
    return record


class RunProgress:
    """The suite's line about a run while it trains, every PROGRESS_EVERY_SECS: its frames
    against the budget, its mean return(100), its agent steps/s since the line before (the
    workers' own rates at the first) and the time to the budget at that speed, read from its
    progress files as the launcher's `status` reads them. Called at every sample of the run
    (run_one's watch): a line it cannot print (stdout closed) ends the lines, not the run."""

    def __init__(self, name: str, logdir: Path, config: A3CConfig, frame_skip: int,
                 clock=time.monotonic) -> None:
        self.name, self.logdir, self.config, self.frame_skip = name, logdir, config, frame_skip
        self.clock = clock
        self.due = clock() + PROGRESS_EVERY_SECS
        self.last: Totals | None = None  # the reading of the line before

    def __call__(self) -> None:
        now = self.clock()
        if now < self.due:
            return
        self.due = now + PROGRESS_EVERY_SECS
        try:
            line = self.line(run_totals(read_progress(self.logdir)), time.time())
            if line is not None:
                print(line, flush=True)
        except Exception as error:  # whatever it is, the run goes on without its lines
            self.due = float("inf")
            with contextlib.suppress(Exception):
                print(f"{PROG}: warning: no more progress lines for {self.name}: {error}",
                      file=sys.stderr, flush=True)

    def line(self, totals: Totals | None, now: float) -> str | None:
        """The line for the run's `totals` at unix time `now`; None before its first update."""
        if totals is None or totals.training_started is None:
            return None
        frames, budget = (steps * self.frame_skip / 1e6
                          for steps in (totals.env_steps, self.config.max_steps))
        mean = "-" if totals.mean_return_100 is None else f"{totals.mean_return_100:,.1f}"
        head = f"{PROG}: {self.name}: {frames:.2f}M of {budget:g}M frames, mean return(100) {mean}"
        rate = steps_per_sec_between(self.last, totals) or totals.local_steps_per_sec
        self.last = totals
        if totals.stop_reason is not None:
            return f"{head}, stopping ({totals.stop_reason})"
        if rate <= 0:
            return head
        left = min(self.config.max_seconds - (now - totals.training_started),
                   (self.config.max_steps - totals.env_steps) / rate)
        return f"{head}, {rate:,.0f} agent steps/s, about {_duration(left)} to its budget"


def _duration(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


def evaluate_final_checkpoint(logdir: Path, games: int, folder: Path,
                              min_agent_steps: int = 0) -> dict[str, dict]:
    """The run's latest checkpoint played for `games` games (and more, whole batches of
    them, until they hold `min_agent_steps` agent steps), greedy and sampled at once, in two
    processes: each mode's summary line of a3c_graph.evaluate (the returns' mean, spread and
    each game's return and frames, the checkpoint), or {"error": its last line on stderr}.
    The printouts go to <folder>/<run>-<mode>.txt."""
    folder.mkdir(parents=True, exist_ok=True)
    modes = {"greedy": [], "sampled": ["--sample"]}
    with contextlib.ExitStack() as stack:
        started = {}
        for mode, flags in modes.items():
            # Files, not pipes: a pipe nobody reads while the other mode plays could fill.
            stdout, stderr = (stack.enter_context(tempfile.TemporaryFile("w+"))
                              for _ in range(2))
            process = subprocess.Popen(
                [sys.executable, "-m", "a3c_graph.evaluate", "--logdir", str(logdir),
                 "--episodes", str(games), "--min-agent-steps", str(min_agent_steps), *flags],
                stdout=stdout, stderr=stderr, text=True, cwd=REPO, env=child_env())
            stack.callback(_stop, process)
            started[mode] = (process, stdout, stderr)
        return {mode: _evaluation(process.wait(), _read(stdout), _read(stderr),
                                  folder / f"{logdir.name}-{mode}.txt")
                for mode, (process, stdout, stderr) in started.items()}


def _stop(process: subprocess.Popen) -> None:
    """An evaluation still playing when the suite stops (a signal, an error) ends with it."""
    if process.poll() is None:
        process.kill()
        process.wait()


def _read(file: IO[str]) -> str:
    file.seek(0)
    return file.read()


def _evaluation(returncode: int, stdout: str, stderr: str, printout: Path) -> dict:
    write_atomic(printout, stdout)
    if returncode != 0:
        lines = stderr.strip().splitlines() or [f"exit status {returncode}"]
        return {"error": lines[-1]}
    summary = json.loads(stdout.strip().splitlines()[-1])
    played = {key: summary[key] for key in (
        "mean_return", "min_return", "max_return", "std_return", "episodes", "returns",
        "frames") if key in summary}
    played.update(checkpoint=Path(summary["checkpoint"]).name,
                  printout=_relative(printout, printout.parent.parent))
    return played


def _learning_fields(record: dict, task: Task, config: A3CConfig, launched: float,
                     frame_skip: int, out: Path, earlier_wall: float) -> dict[str, Any]:
    logdir = Path(record["logdir"])
    # The launches the launcher recorded (a resumed run has several), else this one.
    launches = read_launches(logdir)
    curve = Curve.from_history(read_history(logdir), launches or [launched], frame_skip)
    pieces = {}  # a resumed run's speed is over all its pieces (CPU and memory: its last's)
    if len(launches) > 1:
        rate = resume.steps_per_sec(logdir)
        pieces = {"steps_per_sec": rate and round(rate, 1),
                  "frames_per_sec": rate and round(rate * frame_skip, 1)}
    return {
        "task": task.name, "env": config.env, "target": task.target, "floor": task.floor,
        "curve": dataclasses.asdict(curve), **judge(curve, task),
        # Relative to the results folder, so a committed copy holds no machine paths.
        "logdir": _relative(logdir, out), "log": _relative(Path(record["log"]), out),
        "command": record["command"].replace(str(out) + "/", "").replace(str(REPO) + "/", ""),
        "return_curve": None,  # the harness's 0.5-s samples; the curve above replaces them
        # A resumed run's wall time is all its pieces', as its minutes to target are.
        "wall_s": round(record["wall_s"] + earlier_wall, 1), **pieces,
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
    group.add_argument("--workers", default="2", metavar="N[,N..]",
                       help="Workers per run; several counts (e.g. 1,2,4,8,16) run every "
                            "task and seed with each, and the table and workers.png set the "
                            "tasks against the count (default: 2).")
    group.add_argument("--cluster-envs", type=int, default=None, metavar="N",
                       help="Give each run N // workers envs per worker (at least 1), so the "
                            "cluster steps about N envs whatever the worker count (default: "
                            "each task's preset, per worker).")
    group.add_argument("--out", default=None, help="Results directory (default: "
                       "benchmarks/results/learning-<YYYYmmdd-HHMMSS>).")
    group.add_argument("--resume", action="store_true",
                       help="Go on with the suite started in --out: its finished runs kept, "
                            "a run it left cut off resumed from its checkpoint, then the rest "
                            "(the suite's own flags are read from --out; give no others but a "
                            "new --max-seconds or --max-steps for the runs still to go).")
    add_config_arguments(parser)  # every A3C flag, given to every task
    return parser


def _resume_budget(argv: Sequence[str], out: str | None) -> list[str]:
    """The budget flags given beside --resume (resume.BUDGET_FLAGS, with their values);
    UsageError for any other flag, or without --out."""
    budget, rest = resume.split_flags(argv, resume.BUDGET_FLAGS)
    others = [token for token in resume.split_flags(rest, ("--out",))[1] if token != "--resume"]
    if not out or others:
        raise UsageError("--resume takes --out OUT and no other flag but a new budget "
                         "(--max-seconds, --max-steps): the suite's flags are the ones it "
                         "started with")
    return budget


def parse_args(argv: Sequence[str] | None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.resume:
        budget = _resume_budget(argv, args.out)
        argv = [*resume.with_budget(resume.saved_command(Path(args.out)), budget),
                "--out", args.out, "--resume"]
        args = build_parser().parse_args(argv)
    args.argv = [a for a in argv if a != "--resume"]
    names = [n.strip() for n in args.tasks.split(",") if n.strip()]
    unknown = [n for n in names if n not in TASKS]
    if unknown or not names:
        raise UsageError(f"--tasks must name some of {', '.join(TASKS)}, got {args.tasks!r}")
    if args.seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {args.seeds}")
    args.workers = _worker_counts(args.workers)
    if args.cluster_envs is not None and args.cluster_envs < 1:
        raise UsageError(f"--cluster-envs must be at least 1, got {args.cluster_envs}")
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(A3CConfig)
             if hasattr(args, f.name)}
    if "env" in given:
        raise UsageError("--env is the task's: choose tasks with --tasks")
    tasks = [TASKS[n] for n in names]
    configs = {}
    for task in tasks:
        try:
            configs[task.name] = resolve_run(task.config(given)).config
        except (ValueError, UsageError) as error:
            raise UsageError(f"task {task.name}: {error}") from None
    return args, tasks, configs, given


def _worker_counts(text: str) -> list[int]:
    """The worker counts of --workers ("2" or "1,2,4,8,16"), in the order given."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--workers must be a count or counts like 1,2,4, got {text!r}") from None
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise UsageError(f"--workers must be distinct counts of at least 1, got {text!r}")
    return counts


def envs_per_worker(cluster_envs: int | None, workers: int) -> int | None:
    """--cluster-envs N: N // workers envs for each worker (at least 1); None: the preset's."""
    return None if cluster_envs is None else max(1, cluster_envs // workers)


class PlannedRun(NamedTuple):
    """One run of the suite: a task's seed, as the harness runs it (`spec`: the seed, the
    workers, their envs, the run's name: its directory under runs/ and its key on --resume;
    its time budget is the task's config's, set when it runs)."""
    task: Task
    spec: RunSpec

    @property
    def name(self) -> str:
        return self.spec.name


def plan(tasks: Sequence[Task], counts: Sequence[int], seeds: int, base_seed: int,
         cluster_envs: int | None) -> list[PlannedRun]:
    """The suite's runs in the order they run: task, then worker count, then seed."""
    return [PlannedRun(task, RunSpec("graph", seed, workers, 0, task.name,
                                     envs_per_worker(cluster_envs, workers)))
            for task in tasks for workers in counts
            for seed in range(base_seed, base_seed + seeds)]


def _settings(args: argparse.Namespace, tasks: Sequence[Task],
              given: dict[str, Any]) -> dict[str, Any]:
    """The suite's plan as results.json records it."""
    counts = args.workers
    return {"tasks": [t.name for t in tasks], "seeds": args.seeds,
            "workers": counts[0] if len(counts) == 1 else counts,
            "cluster_envs": args.cluster_envs,
            "a3c_flags": [f"--{k.replace('_', '-')}={v}" for k, v in given.items()],
            "command": "python -m benchmarks.learning " + " ".join(args.argv)}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, tasks, configs, given = parse_args(argv)
    except UsageError as error:
        return fail(PROG, error)
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    out = Path(args.out or REPO / "benchmarks" / "results"
               / f"learning-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    counts = args.workers
    settings = _settings(args, tasks, given)
    records: list[dict] = []
    interrupted = False
    runs = plan(tasks, counts, args.seeds, int(given.get("seed", 0)), args.cluster_envs)
    finished = resume.finished_records(out) if args.resume else {}
    machine = machine_info()
    if args.resume:
        machine = resume.machine(out, machine, any(run.name not in finished for run in runs))
        for name in resume.lost_runs(out, [run.name for run in runs
                                           if run.name not in finished]):
            print(f"{PROG}: {name} was cut off and its log dir {out / 'runs' / name} is gone: "
                  "it trains again from the start", file=sys.stderr, flush=True)
    # Written at the start, and again at a resume that gave a new budget (kept for the next).
    resume.save_command(out, [a for a in args.argv if a != "--out" and a != args.out])
    try:
        for i, run in enumerate(runs, 1):
            task, seed, workers = run.task, run.spec.seed, run.spec.workers
            config = dataclasses.replace(configs[task.name], seed=seed)
            what = f"{task.name} seed {seed}" + (f", {workers} workers" if len(counts) > 1
                                                 else "")
            done = finished.get(run.name)
            if done is not None:
                print(f"[{i}/{len(runs)}] {what}: finished before: {_run_line(done)}",
                      flush=True)
                records.append(done)
                continue
            print(f"[{i}/{len(runs)}] {what} ({config.env}) ...", flush=True)
            record = run_task(run, config, out)
            records.append(record)
            print(f"[{i}/{len(runs)}] {what}: {_run_line(record)}", flush=True)
            write_results(out, settings, machine, records, tasks)
    except (KeyboardInterrupt, RunInterrupted) as stop:
        if isinstance(stop, RunInterrupted):
            records.append(stop.record)
        interrupted = True
        print(f"{PROG}: interrupted; writing the results so far", file=sys.stderr, flush=True)
    text = write_results(out, settings, machine, records, tasks)
    for task in tasks:
        plot_task(out, task, records)
    if len(counts) > 1:
        plot_against_workers(out, tasks, records)
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

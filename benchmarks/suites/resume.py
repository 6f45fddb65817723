"""A learning suite cut off (the machine restarted, the suite was stopped) goes on where it
stopped: `python -m benchmarks.learning --resume --out OUT`.

The suite writes its own command line to <out>/suite.json before its first run; --resume
reads it back, so the plan (tasks, seeds, flags) is the one the suite started with. A run
with a record in <out>/results.json that ended on its own (its budget, its target, or a
failure: a failed run is a result too) is kept as it is. A run that was cut off is started
again in its own log dir: the launcher restores the chief's latest checkpoint (weights, Adam
slots, global step, frame count, episode statistics), the workers append to the same
history, and the curve puts the pieces on one clock of training time
(a3c_graph.rundir.progress.run_clock); one whose log dir is gone (runs/ deleted, or left
behind in a move to another machine) is named on stderr and trained again from the start.
A time budget (--max-seconds) is the whole run's: a resumed piece gets what is left of it.
The budget is the one flag a resume may change
(`--resume --out OUT --max-seconds N`, or --max-steps): the runs still to finish or cut off
go on to the new budget, and suite.json keeps it for the next resume; a run that ended on its
own stays as it ended.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from pathlib import Path

from a3c_graph.rundir.progress import (
    read_history,
    read_launches,
    run_clock,
    training_reports,
    write_atomic,
)
from a3c_graph.system.cli import UsageError

SUITE_FILE = "suite.json"
# In a run's log dir: its training record, kept until its evaluation has ended.
TRAINED = "trained.json"
# The flags --resume may give anew: the time and frame budgets of the runs to go on.
BUDGET_FLAGS = ("--max-seconds", "--max-steps")
# What tells one machine from another in a results' machine record (the load and the commit
# are recorded at every resume anyway).
HARDWARE = ("cpu_count", "physical_cores", "memory_gb", "platform", "python", "versions")
# How a run that did not end on its own is recorded: stopped by a signal, or the suite
# interrupted during it.
CUT_OFF = ("signal", "harness_interrupted")


def save_command(out: Path, argv: Sequence[str]) -> None:
    """<out>/suite.json: the suite's command line (without --out), for --resume."""
    write_atomic(out / SUITE_FILE, json.dumps({"argv": list(argv)}, indent=2) + "\n")


def saved_command(out: Path) -> list[str]:
    """The command line save_command wrote in `out`; UsageError if there is none."""
    try:
        return list(json.loads((out / SUITE_FILE).read_text(encoding="utf-8"))["argv"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--resume: {out / SUITE_FILE} is missing or damaged: is {out} the "
                         "--out of a learning suite this version started?") from None


def split_flags(argv: Sequence[str], names) -> tuple[list[str], list[str]]:
    """(the flags of `names` in `argv` with their values, the rest), a value given either
    as the next token or after "="."""
    taken, rest, tokens = [], [], iter(argv)
    for token in tokens:
        if token.split("=", 1)[0] in names:
            taken += [token] if "=" in token else [token, next(tokens, "")]
        else:
            rest.append(token)
    return taken, rest


def with_budget(saved: Sequence[str], budget: Sequence[str]) -> list[str]:
    """The saved command line with the budget flags in `budget` (BUDGET_FLAGS and their
    values) in place of its own."""
    given = {token.split("=", 1)[0] for token in budget} & set(BUDGET_FLAGS)
    return [*split_flags(saved, given)[1], *budget]


def finished_records(out: Path) -> dict[str, dict]:
    """The records in <out>/results.json of runs that ended on their own, by run name."""
    try:
        records = json.loads((out / "results.json").read_text(encoding="utf-8"))["records"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {r["name"]: r for r in records if r.get("stop_reason") not in CUT_OFF
            and r.get("exit_code") not in (None, 130, 143)}


def lost_runs(out: Path, names: Sequence[str]) -> list[str]:
    """Of the runs `names` (the suite's, not finished), those that were launched (the suite
    opened their <out>/logs/<name>.log) but whose log dirs under <out>/runs are gone (deleted,
    or left behind in a move to another machine): a resume trains them again from the
    start."""
    return [name for name in names if (out / "logs" / f"{name}.log").exists()
            and not (out / "runs" / name).is_dir()]


def machine(out: Path, now: dict, resumes_a_run: bool) -> dict:
    """The machine as <out>/results.json recorded it when the suite started (`now` if there
    is none, or when neither a finished run nor a run's log dir is left), with the load and
    the code's commit now added to those at a resume when a run goes on, and what differs of
    the machine itself when the resume runs on another (machine_at_resumes): a resume that
    only rewrites the results keeps the record as the run left it."""
    try:
        kept = json.loads((out / "results.json").read_text(encoding="utf-8"))["machine"]
    except (OSError, ValueError, KeyError, TypeError):
        return now
    if not isinstance(kept, dict) or "load_average_at_start" not in kept:
        return now
    if not finished_records(out) and not any(p.is_dir() for p in (out / "runs").glob("*")):
        return now  # nothing the recorded start ran is left: the suite starts anew
    if resumes_a_run:
        kept["load_average_at_resumes"] = [*kept.get("load_average_at_resumes", []),
                                           now["load_average_at_start"]]
        kept["commit_at_resumes"] = [*kept.get("commit_at_resumes", []), now.get("commit")]
        other = {key: now.get(key) for key in HARDWARE if now.get(key) != kept.get(key)}
        if other:
            kept["machine_at_resumes"] = [*kept.get("machine_at_resumes", []), {
                "resume": len(kept["load_average_at_resumes"]), **other}]
    return kept


def keep_trained(logdir: Path, record: dict) -> None:
    """Keeps a run's training record in its log dir before its final checkpoint is
    evaluated: a stop during the evaluation loses neither, and a resume only evaluates."""
    write_atomic(logdir / TRAINED, json.dumps(record, indent=1))


def trained_record(logdir: Path) -> dict | None:
    """The training record keep_trained kept in `logdir`, or None."""
    try:
        return json.loads((logdir / TRAINED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def trained_seconds(logdir: Path) -> float:
    """Seconds the run in `logdir` has trained over all its pieces: the run's own clock
    (run_clock) with the first piece's start-up left out too."""
    history = read_history(logdir)
    clock = run_clock(history, read_launches(logdir), first_startup=False)
    return clock[-1] if clock else 0.0


def steps_per_sec(logdir: Path) -> float | None:
    """Agent steps/s of the run in `logdir` over all its pieces: in each piece, the env steps
    between the report written at its first applied update and its last report, summed, over
    the time between them, summed (one_run's measure of a run in one piece, whose record
    holds only its last piece's); None before two reports."""
    launches = read_launches(logdir)
    history = read_history(logdir)
    steps = seconds = 0.0
    for start, end in zip(launches, [*launches[1:], float("inf")]):
        reports = training_reports([row for row in history
                                    if start <= float(row.get("time") or 0.0) < end])
        if len(reports) >= 2:
            steps += reports[-1]["env_steps"] - reports[0]["env_steps"]
            seconds += float(reports[-1]["time"]) - float(reports[0]["time"])
    return steps / seconds if seconds > 0 else None


def wall_seconds(logdir: Path) -> float:
    """Wall seconds the pieces run so far in `logdir` took: each piece from its launch to its
    last progress write (start-ups included, the pauses between pieces not)."""
    launches = read_launches(logdir)
    last_write: dict[int, float] = {}
    for row in read_history(logdir):
        t = float(row.get("time") or 0.0)
        piece = bisect.bisect_right(launches, t) - 1
        if piece >= 0:
            last_write[piece] = max(last_write.get(piece, t), t)
    return sum(max(0.0, t - launches[piece]) for piece, t in last_write.items())

"""A run's progress, as files: what every worker writes and the launcher reads.

Each worker task i rewrites <logdir>/progress/worker_<i>.json every --progress-secs and once
more when it ends. The launcher (and the benchmark harness, and the TF2 variants that write
the same files) read them back into Totals, and build the progress part of summary.json
from them. Keys of a progress file:

  task, time (unix), state ("starting" | "running" | "done"), stop_reason (None | "solved" |
  "max_steps" | "max_seconds" | "signal"), global_step, env_steps and episodes (global: the
  whole cluster), mean_return_100 (the cluster's, None before the first episode),
  local_env_steps and local_steps_per_sec (this task's own), target_return,
  training_started (unix time of the task's first applied update, None before: the end of
  its start-up, written in a report of its own at once),
  lowest_mean_return_100 (the lowest cluster mean this task read since its last write: a
  dip between two writes is not missed), entropy (the policy's mean entropy over this
  task's updates since its last write; None if it made none), and over the same updates
  the means of LEARNER_DIAGNOSTICS (None where the writer does not measure them):
  grad_norm (before clipping), value_loss and lag_apply (the policy lag: global updates
  from the weights that acted a rollout, and its gradient was computed on, to the globals
  it was applied to).

Each write is also appended as one JSON line to <logdir>/progress/worker_<i>.jsonl: the
run's history, from which run_timing takes start-up and steps/s (for summary.json and
benchmarks.run alike) and benchmarks.learning draws its learning curves. A run resumed in
its log dir appends to the same history; <logdir>/launches.jsonl (record_launch) says where
each piece begins, and run_clock puts the pieces on one clock of training time.

One clock for every program that writes these files (the graph worker and the TF2 benchmark
variants): start-up ends at the task's first applied update (its first update() here),
reported at once; its --max-seconds count from then; and the final report ("done") is
written when the task decides to stop, before it tears anything down (the chief's last
checkpoint, closing sessions or Ray), so a run's last report times its training, not its exit.

No TensorFlow here: the launcher imports this and must start quickly.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STOP_REASON_PRIORITY = ("solved", "max_steps", "max_seconds", "signal")
LEARNER_DIAGNOSTICS = ("grad_norm", "value_loss", "lag_apply")
LAUNCHES_FILE = "launches.jsonl"


def write_atomic(path: Path | str, text: str) -> None:
    """Readers (status, stop, the launcher, tests) never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a full disk: no half-written file left behind
            tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path | str, data: Mapping[str, Any]) -> None:
    write_atomic(path, json.dumps(data, sort_keys=True))


class ProgressFile:
    """progress/worker_<task>.json of one worker task."""

    def __init__(self, logdir: Path | str, task: int, target_return: float,
                 progress_secs: float):
        self.path = Path(logdir) / "progress" / f"worker_{task}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.task = task
        self.target_return = target_return
        self.progress_secs = progress_secs
        self.stats: Mapping[str, Any] = {}
        self.local_env_steps = 0
        self.window_steps = 0
        self.window_start = time.time()
        self.last_write = 0.0
        self.steps_per_sec = 0.0
        self.training_started: float | None = None
        self.lowest_mean = math.nan
        self.entropies: list[float] = []
        self.diagnostics: dict[str, list[float]] = {}

    def update(self, global_stats: Mapping[str, Any], local_steps: int,
               entropy: float | None = None,
               diagnostics: Mapping[str, float] | None = None) -> None:
        """After each applied update: the cluster's counters as it returned them
        (global_step, env_steps, episodes, mean_return_100), the env steps this task just
        added and, if it learned from them, the policy's mean entropy on them and any of
        LEARNER_DIAGNOSTICS measured on that update.

        The first call ends start-up (training_started) and makes a report due at once; the
        steps of that first rollout, collected during start-up, count in local_env_steps but
        not in the first window's steps/s.
        """
        self.stats = global_stats
        self.local_env_steps += local_steps
        if self.training_started is None:
            self.training_started = self.window_start = time.time()
            self.last_write = -math.inf
        else:
            self.window_steps += local_steps
        self.lowest_mean = min(self.lowest_mean, self.mean_return_100, key=_nan_last)
        if entropy is not None:
            self.entropies.append(float(entropy))
        for key, value in (diagnostics or {}).items():
            self.diagnostics.setdefault(key, []).append(float(value))

    def due(self) -> bool:
        return time.time() - self.last_write >= self.progress_secs

    @property
    def mean_return_100(self) -> float:
        """The cluster's mean return of the last 100 episodes as last read; NaN if none."""
        return float(self.stats.get("mean_return_100", float("nan")))

    def write(self, state: str, stop_reason: str | None = None) -> None:
        now = time.time()
        if now > self.window_start:
            self.steps_per_sec = self.window_steps / (now - self.window_start)
        self.window_steps, self.window_start = 0, now
        mean = self.mean_return_100
        record = {
            "task": self.task, "pid": os.getpid(), "time": now, "state": state,
            "stop_reason": stop_reason,
            "global_step": int(self.stats.get("global_step", 0)),
            "env_steps": int(self.stats.get("env_steps", 0)),
            "episodes": int(self.stats.get("episodes", 0)),
            "mean_return_100": _rounded(mean),
            "local_env_steps": self.local_env_steps,
            "local_steps_per_sec": round(self.steps_per_sec, 1),
            "target_return": json_number(self.target_return),
            "training_started": self.training_started,
            "lowest_mean_return_100": _rounded(self.lowest_mean),
            "entropy": _rounded(sum(self.entropies) / len(self.entropies), 5)
            if self.entropies else None,
            **{key: _rounded(sum(values) / len(values), 5) if values else None
               for key in LEARNER_DIAGNOSTICS
               for values in [self.diagnostics.get(key, [])]},
        }
        write_json_atomic(self.path, record)
        with open(self.path.with_suffix(".jsonl"), "a", encoding="utf-8") as history:
            history.write(json.dumps(record, sort_keys=True) + "\n")
        self.last_write = now
        self.lowest_mean, self.entropies, self.diagnostics = self.mean_return_100, [], {}


def json_number(value: float | None) -> float | None:
    """`value` as strict JSON can hold it: None for inf (--target-return inf: no target)."""
    return value if value is None or math.isfinite(value) else None


def _nan_last(value: float) -> float:
    """Sort key of min(): NaN (no episode yet) loses to any real mean."""
    return math.inf if math.isnan(value) else value


def _rounded(value: float, digits: int = 3) -> float | None:
    return None if math.isnan(value) else round(value, digits)


def read_history(logdir: Path) -> list[dict]:
    """Every progress write of every worker of the run in `logdir`, oldest first (the
    global counters in each are the cluster's, so the rows of all workers form one curve)."""
    rows = []
    for path in sorted((Path(logdir) / "progress").glob("worker_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a kill
    return sorted(rows, key=lambda row: row.get("time") or 0.0)


def record_launch(logdir: Path, launched: float) -> None:
    """Append a launch of the run in `logdir` to <logdir>/launches.jsonl. A run cut off (the
    machine restarted, the launcher was killed) and started again in its log dir resumes
    from its checkpoint and appends to the same history; its launches split that history
    into pieces, which run_clock puts on one clock."""
    with open(Path(logdir) / LAUNCHES_FILE, "a", encoding="utf-8") as launches:
        launches.write(json.dumps({"launched": launched}) + "\n")


def read_launches(logdir: Path) -> list[float]:
    """The launch times record_launch wrote for `logdir`, oldest first ([] if none)."""
    path = Path(logdir) / LAUNCHES_FILE
    if not path.exists():
        return []
    times = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            times.append(float(json.loads(line)["launched"]))
    return sorted(times)


def run_clock(history: Sequence[Mapping[str, Any]], launches: Sequence[float],
              first_startup: bool = True) -> list[float]:
    """Seconds on the run's own clock of each row of `history` (oldest first, as read_history
    gives it): the first piece counts from its launch (start-up included, as for a run in
    one piece; first_startup False: from its first applied update too); each later piece
    from its first applied update, after the time the pieces before it ran, so neither the
    pause between pieces nor a resumed piece's start-up counts.
    `launches`: read_launches (empty: one piece, launched at the first row)."""
    if not history:
        return []
    times = [float(row.get("time") or 0.0) for row in history]
    starts = sorted(launches) or [times[0]]
    piece_of = [max(0, bisect.bisect_right(starts, t) - 1) for t in times]
    first_update: dict[int, float] = {}
    for row, piece in zip(history, piece_of):
        if (piece or not first_startup) and row.get("training_started"):
            started = float(row["training_started"])
            first_update[piece] = min(first_update.get(piece, started), started)
    clock: list[float] = []
    offset, current = 0.0, 0
    for t, piece in zip(times, piece_of):
        if piece != current:
            offset, current = (clock[-1] if clock else 0.0), piece
        base = first_update.get(piece, starts[piece])
        clock.append(offset + max(0.0, t - base))
    return clock


def read_progress(logdir: Path) -> dict[int, dict]:
    """The workers' progress files that parse; a file being replaced is simply skipped."""
    progress: dict[int, dict] = {}
    for path in sorted((logdir / "progress").glob("worker_*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            progress[int(data["task"])] = data
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return progress


@dataclass(frozen=True)
class Totals:
    """The global counters of the freshest progress file, and what the workers decided."""

    time: float
    global_step: int
    env_steps: int
    episodes: int
    mean_return_100: float | None
    local_steps_per_sec: float
    stop_reason: str | None
    solved: bool
    training_started: float | None  # the run's first applied update (unix time)


def run_totals(progress: Mapping[int, dict]) -> Totals | None:
    if not progress:
        return None
    # Global counters are read by each worker at its own moment: trust the newest reading,
    # from a worker that has read them (a restarted one reports zeros while it starts).
    readings = [p for p in progress.values() if p.get("state") != "starting"] or \
        list(progress.values())
    newest = max(readings, key=lambda p: (p.get("time") or 0, p.get("env_steps") or 0))
    reasons = {p.get("stop_reason") for p in progress.values()}
    stop_reason = next((r for r in STOP_REASON_PRIORITY if r in reasons), None)
    running = [p for p in progress.values() if p.get("state") != "done"]
    started = [float(p["training_started"]) for p in progress.values()
               if p.get("training_started")]
    return Totals(
        time=float(newest.get("time") or 0.0),
        global_step=int(newest.get("global_step") or 0),
        env_steps=int(newest.get("env_steps") or 0),
        episodes=int(newest.get("episodes") or 0),
        mean_return_100=newest.get("mean_return_100"),
        local_steps_per_sec=sum(float(p.get("local_steps_per_sec") or 0.0) for p in running),
        stop_reason=stop_reason,
        solved=stop_reason == "solved",
        training_started=min(started) if started else None,
    )


def training_started(history: Sequence[Mapping[str, Any]]) -> float | None:
    """The run's first applied update (unix time): the earliest training_started reported
    in `history` (read_history's rows)."""
    return min((float(row["training_started"]) for row in history
                if row.get("training_started")), default=None)


def training_reports(history: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The reports from the one written at the run's first applied update on, oldest first."""
    started = training_started(history)
    if started is None:
        return []
    return [row for row in history
            if row.get("training_started") and float(row["time"]) >= started]


def run_timing(history: Sequence[Mapping[str, Any]],
               launched: float) -> tuple[float | None, float | None]:
    """(start-up seconds, env steps/s after start-up) of the run launched at `launched`,
    from its progress history (read_history), unrounded; None for what it cannot tell yet.

    Start-up runs from launch to the run's first applied update (TF import, servers, graph,
    init). Steps/s is the global env steps between the report written at that update and
    the newest report (the final one once the run has stopped), over the time between them:
    both ends read the same counter, so the first rollouts, collected during start-up, are
    not counted, a restarted worker's steps are, and after a restore the steps of earlier
    runs cancel out. Only reports written since launch count: a logdir a run resumes in (or
    a requeued Slurm job) still holds the history of the runs before.
    """
    history = [row for row in history if float(row.get("time") or 0.0) >= launched]
    started = training_started(history)
    if started is None:
        return None, None
    reports = training_reports(history)
    if len(reports) < 2 or reports[-1]["time"] <= reports[0]["time"]:
        return started - launched, None
    first, last = reports[0], reports[-1]
    return started - launched, (last["env_steps"] - first["env_steps"]) / (
        last["time"] - first["time"])


def summary_fields(logdir: Path, started: float) -> tuple[dict[str, Any], Totals | None]:
    """The part of summary.json that comes from the progress files, and their Totals.

    Whoever ran the tasks (the launcher, a TF2 benchmark variant) adds its own keys.
    """
    totals = run_totals(read_progress(logdir))
    startup_seconds, steps_per_sec = run_timing(read_history(logdir), started)
    return {
        "solved": bool(totals and totals.solved),
        "wall_seconds": round(time.time() - started, 1),
        "env_steps": totals.env_steps if totals else 0,
        "global_step": totals.global_step if totals else 0,
        "episodes": totals.episodes if totals else 0,
        "mean_return_100": totals.mean_return_100 if totals else None,
        "startup_seconds": None if startup_seconds is None else round(startup_seconds, 1),
        "env_steps_per_sec": None if steps_per_sec is None else round(steps_per_sec, 1),
    }, totals

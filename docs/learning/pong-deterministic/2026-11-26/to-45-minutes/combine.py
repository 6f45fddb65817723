"""Joins each seed's run to 18 (benchmarks.learning, stopped at 18) and its continuation to
the 45-minute budget (the launcher in the same log dir, restoring the latest checkpoint) into
one record per seed: the curve with the pause between the two taken out, the time to 18 of
the first part, and the final checkpoint's evaluations. Writes results.json, results.md and
pong-deterministic.png with the learning suite's own functions.

    python combine.py OUT FIRST_0 CONT_0 [FIRST_1 CONT_1 ...]

FIRST_N: the seed's benchmarks.learning --out folder; CONT_N: a folder with run/ (the log dir
the continuation ran in), launched (its launch time, epoch seconds), evaluate-greedy.txt and
evaluate-sampled.txt (a3c_graph.evaluate's printouts)."""
import dataclasses
import json
import sys
from pathlib import Path

from a3c_graph.rundir.progress import read_history
from benchmarks.suites.learning import TASKS, Curve, judge, plot_task, write_results

task = TASKS["pong-deterministic"]
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
records = []
for first, cont in zip(sys.argv[2::2], sys.argv[3::2]):
    first, cont = Path(first), Path(cont)
    data = json.loads((first / "results.json").read_text())
    record = data["records"][0]
    launched2 = float((cont / "launched").read_text())
    rows = [r for r in read_history(cont / "run") if float(r["time"]) >= launched2]
    # Continuation rows on the first part's clock: its seconds at the stop, then the second.
    second = Curve.from_history(rows, launched2 - record["wall_s"], record["frame_skip"])
    curve = Curve(**{k: record["curve"][k] + getattr(second, k)
                     for k in record["curve"]})
    summary = json.loads((cont / "run" / "summary.json").read_text())
    record.update(judge(curve, task), curve=dataclasses.asdict(curve),
                  wall_s=record["wall_s"] + summary["wall_seconds"],
                  stop_reason=summary["stop_reason"],
                  final_env_steps=summary["env_steps"], episodes=summary["episodes"],
                  steps_per_sec_after_18=summary["env_steps_per_sec"],
                  continuation=json.loads((cont / "command.json").read_text()))
    record["evaluation"] = {}
    for mode in ("greedy", "sampled"):
        printout = (cont / f"evaluate-{mode}.txt").read_text()
        played = json.loads(printout.strip().splitlines()[-1])
        record["evaluation"][mode] = {k: played[k] for k in (
            "mean_return", "min_return", "max_return", "episodes")}
        record["evaluation"][mode]["checkpoint"] = Path(played["checkpoint"]).name
    records.append(record)
settings = {**data["settings"], "seeds": len(records), "a3c_flags": ["--seed=N for seed N"],
            "command": "combine.py: each seed's benchmarks.learning run to 18, then the "
                       "launcher on in its log dir to the 45-minute budget"}
print(write_results(out, settings, data["machine"], records, [task]))
plot_task(out, task, records)

"""Judges the ALE v5 runs of the defaults by this stage's goal, a mean return(100) of 0
within 60 minutes (the pong task's own target, 18, is the goal beyond): each seed's record
re-judged at 0 with the learning suite's own functions, into results.json, results.md and
pong.png.

    python combine.py OUT RUN_0 [RUN_1 ...]

RUN_N: the results folder of one seed's `python -m benchmarks.learning --tasks pong` (its
results.json)."""
import dataclasses
import json
import sys
from pathlib import Path

from benchmarks.suites.learning import TASKS, Curve, judge, plot_task, write_results

task = dataclasses.replace(TASKS["pong"], target=0.0)
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
records = []
for folder in sys.argv[2:]:
    data = json.loads((Path(folder) / "results.json").read_text())
    for record in data["records"]:
        record.update(judge(Curve(**record["curve"]), task), target=task.target)
        records.append(record)
settings = {**data["settings"], "seeds": len(records), "a3c_flags": ["--seed=N for seed N"],
            "command": "combine.py: each seed's benchmarks.learning --tasks pong run, "
                       "judged at a mean return(100) of 0"}
print(write_results(out, settings, data["machine"], records, [task]))
plot_task(out, task, records)

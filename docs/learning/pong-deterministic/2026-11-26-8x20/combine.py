"""Joins learning-suite results of the same task run as separate invocations (seed 0 with the
shape runs, seeds 1 and 2 after it) into one table and one plot, with the suite's own
functions. Paths in the records are made relative to OUT.

    python combine.py OUT RESULTS_DIR [RESULTS_DIR ...]
"""
import json
import os
import sys
from pathlib import Path

from benchmarks.suites.learning_report import plot_task, write_results
from benchmarks.suites.learning_tasks import TASKS

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
records, first = [], None
for folder in map(Path, sys.argv[2:]):
    data = json.loads((folder / "results.json").read_text())
    first = first or data
    for record in data["records"]:
        if record.get("logdir"):
            record["logdir"] = os.path.relpath(folder / record["logdir"], out)
        records.append(record)
task = TASKS[records[0]["task"]]
settings = {**first["settings"], "seeds": len(records),
            "command": "combine.py over: " + ", ".join(sys.argv[2:])}
print(write_results(out, settings, first["machine"], records, [task]))
plot_task(out, task, records)

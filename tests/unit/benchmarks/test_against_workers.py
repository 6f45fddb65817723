"""The README's table of data efficiency against workers, and the script that renders it
from the committed records (docs/learning/many-workers/against_workers.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "docs" / "learning" / "many-workers" / "against_workers.py"


def _script():
    spec = importlib.util.spec_from_file_location("against_workers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_holds_the_table_the_committed_records_give():
    script = _script()
    table = script.table(script.figures_of(script.SWEEPS, script.PONG_RECORDS))
    assert table in (REPO / "README.md").read_text(), (
        "render it with python docs/learning/many-workers/against_workers.py")


def _record(task, workers, seed, exit_code=0, **figures):
    return {"task": task, "workers": workers, "seed": seed, "exit_code": exit_code,
            "target": 18.0, **figures}


def test_cut_off_runs_are_left_out_and_a_seed_short_of_the_target_counts_as_the_worst(
        tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    records = [
        _record("cartpole", 4, 0, reached=True, env_steps_to_target=300_000),
        _record("cartpole", 4, 1, reached=False, env_steps_to_target=None),
        _record("cartpole", 4, 2, reached=True, env_steps_to_target=200_000),
        # cut off by the end of a session: neither a figure nor a failure
        _record("cartpole", 4, 3, exit_code=130, reached=False, env_steps_to_target=None),
        _record("breakout", 4, 0, final_env_steps=5_000_000, final_mean_return_100=12.0),
        _record("breakout", 4, 1, exit_code=130, final_env_steps=2_000_000,
                final_mean_return_100=3.0),
    ]
    (sweep / "results.json").write_text(json.dumps({"records": records}))
    pong = tmp_path / "pong"
    pong.mkdir()
    (pong / "results.json").write_text(json.dumps({"records": [
        _record("pong-deterministic", 16, 0, frames_to_target=26e6),
        _record("pong-deterministic", 16, 1, frames_to_target=None),
    ]}))
    script = _script()
    table = script.table(script.figures_of([sweep], [pong]))
    assert ("| CartPole-v1: env steps to a mean return(100) of 475 | 4 | 3 | "
            "300k, not reached, 200k | 300k |") in table
    assert "| MinAtar Breakout: mean return(100) at 5M frames | 4 | 1 | 12.0 | 12.0 |" in table
    # Two seeds, one short of 18: the median falls between a figure and "never", so none.
    assert ("| Pong (A3C protocol): frames to a mean return(100) of 18 | 16 | 2 | "
            "26.0M, not reached | - |") in table


def test_unreadable_records_end_in_one_line_and_status_2(tmp_path, capsys):
    status = _script().main([str(tmp_path / "missing")])
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("against_workers.py: cannot read the records")


def test_a_later_sweeps_run_takes_the_place_of_the_earlier_ones_of_its_seed(tmp_path):
    earlier, later = tmp_path / "earlier", tmp_path / "later"
    for sweep, records in (
            (earlier, [_record("cartpole", 4, seed, reached=True,
                               env_steps_to_target=100_000 * (seed + 1)) for seed in range(3)]),
            # made again on a later agent: seed 0 finished, seed 1 cut off, seed 2 not rerun
            (later, [_record("cartpole", 4, 0, reached=True, env_steps_to_target=450_000),
                     _record("cartpole", 4, 1, exit_code=143, reached=False,
                             env_steps_to_target=None)])):
        sweep.mkdir()
        (sweep / "results.json").write_text(json.dumps({"records": records}))
    script = _script()
    table = script.table(script.figures_of([earlier, later], []))
    assert ("| CartPole-v1: env steps to a mean return(100) of 475 | 4 | 2 | "
            "450k, 300k | 375k |") in table

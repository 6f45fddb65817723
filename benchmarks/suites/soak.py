"""Soak run: a supervised cluster that keeps losing workers, watched for leaks and stalls.

    python -m benchmarks.soak [--workers 8] [--minutes 10] [--kill-every 60] [--out DIR]
        [--allow-remote] [any A3C flag, e.g. --env CartPole-v1]

Starts `scripts/launch_cluster.sh --background` (the path a user takes) with an unreachable
target and step budget, so only this script ends it. Every --kill-every seconds it kills one
worker with SIGKILL (by the pid in the run's pid file, checked to be ours; the chief is
in the rotation too), and every SAMPLE_SECS it records the global step and the RSS of every
task. At the end it stops the run with `launch_cluster.sh stop` and checks that the stop was
clean: the command succeeded, no task had to be SIGKILLed, summary.json exists, no process
of the run is left. It runs in a private network, and so does the run it starts
(benchmarks.common.enter_private_network; --allow-remote: both on the host network).

Writes <out>/soak.json (every sample, kill and the verdicts), <out>/soak.md (the table it
prints) and <out>/soak.png (global step with the kills marked; RSS per task). <out>
defaults to benchmarks/results/soak-<YYYYmmdd-HHMMSS>. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from a3c_graph.core.config import add_config_arguments, config_from_args, config_to_argv
from a3c_graph.launcher import commands
from a3c_graph.rundir.progress import read_progress, run_totals
from a3c_graph.system.cli import fail
from a3c_graph.system.processes import read_pid_file, read_pid_files
from benchmarks import common
from benchmarks.harness.report import save_figure

SAMPLE_SECS = 2.0
RESULTS = Path(__file__).resolve().parents[1] / "results"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kill-every", type=float, default=60.0, metavar="SECS")
    parser.add_argument("--out", type=Path, default=None)
    common.add_allow_remote_argument(parser)
    add_config_arguments(parser)
    return parser


def task_rss_mb(logdir: Path) -> dict[str, float]:
    """RSS of every live task of the run, by name (worker_3, ps_0, launcher)."""
    rss = {}
    for name, record in read_pid_files(logdir).items():
        if record.proc is not None:
            try:
                rss[name] = record.proc.memory_info().rss / 2**20
            except psutil.Error:
                pass
    return rss


def kill_worker(logdir: Path, task: int) -> int | None:
    record = read_pid_file(logdir / "pids" / f"worker_{task}.pid", logdir)
    if record.proc is None:
        return None
    record.proc.send_signal(signal.SIGKILL)
    return record.pid


def soak(args: argparse.Namespace, flags: list[str], out: Path) -> dict:
    logdir = out / "run"
    start = [str(commands.WRAPPER_SCRIPT), "start", "--background", "--logdir", str(logdir),
             "--workers", str(args.workers), "--max-restarts", "10",
             "--max-seconds", str(args.minutes * 60 + 300), "--max-steps", str(10**12),
             "--target-return", "1e9", *(["--allow-remote"] if args.allow_remote else []),
             *flags]
    subprocess.run(start, check=True)
    began = time.monotonic()
    samples: list[dict] = []
    kills: list[dict] = []
    next_kill = began + args.kill_every
    victim = 0
    try:
        while time.monotonic() - began < args.minutes * 60:
            now = time.monotonic()
            progress = read_progress(logdir)
            totals = run_totals(progress)
            samples.append({"t": round(now - began, 1),
                            "global_step": totals.global_step if totals else 0,
                            "env_steps": totals.env_steps if totals else 0,
                            # Which process of each worker trains: [pid, trained yet]
                            "workers": {task: [d.get("pid"), d["state"] == "running"
                                               and d["local_env_steps"] > 0]
                                        for task, d in progress.items()},
                            "rss_mb": {k: round(v, 1) for k, v in task_rss_mb(logdir).items()}})
            if now >= next_kill:
                next_kill += args.kill_every
                pid = kill_worker(logdir, victim)
                kills.append({"t": round(now - began, 1), "worker": victim, "pid": pid,
                              "global_step": samples[-1]["global_step"]})
                print(f"[{now - began:6.0f} s] killed worker {victim} (pid {pid})", flush=True)
                victim = (victim + 1) % args.workers
            elif len(samples) % 15 == 0:
                print(f"[{now - began:6.0f} s] global step {samples[-1]['global_step']:,}",
                      flush=True)
            time.sleep(SAMPLE_SECS)
    finally:
        pids = {name: r.pid for name, r in read_pid_files(logdir).items() if r.proc}
        stop_began = time.monotonic()
        stop = subprocess.run([str(commands.WRAPPER_SCRIPT), "stop", "--logdir", str(logdir)],
                              capture_output=True, text=True)
        stop_secs = time.monotonic() - stop_began
    left = [name for name, pid in pids.items() if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    summary_path = logdir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    clean = (stop.returncode == 0 and "killed" not in stop.stderr and not left
             and bool(summary)
             and all(code == 0 for code in summary.get("task_exit_codes", {}).values()))
    return {"settings": {"workers": args.workers, "minutes": args.minutes,
                         "kill_every_secs": args.kill_every, "flags": flags},
            "samples": samples, "kills": kills, "restarts": summary.get("restarts", {}),
            "stop": {"seconds": round(stop_secs, 1), "returncode": stop.returncode,
                     "stdout": stop.stdout.strip(), "stderr": stop.stderr.strip(),
                     "processes_left": left, "task_exit_codes": summary.get("task_exit_codes"),
                     "clean": clean},
            "logdir": str(logdir)}


def recoveries(result: dict) -> list[float | None]:
    """Seconds from each kill until a new process of that worker trained (None: never)."""
    times = []
    for kill in result["kills"]:
        back = [s for s in result["samples"] if s["t"] > kill["t"]
                and (entry := s["workers"].get(str(kill["worker"]),
                                               s["workers"].get(kill["worker"])))
                and entry[0] != kill["pid"] and entry[1]]
        times.append(round(back[0]["t"] - kill["t"], 1) if back else None)
    return times


def rss_table(result: dict) -> list[tuple[str, float, float]]:
    """(task, RSS once the run trains, RSS at the last sample) in MB.

    The first reading is taken once the global step moves, after every task has imported
    TF and built its graph; a worker's last reading is of its newest process.
    """
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for sample in result["samples"]:
        if sample["global_step"] <= 0:
            continue
        for name, rss in sample["rss_mb"].items():
            first.setdefault(name, rss)
            last[name] = rss
    order = sorted(first, key=lambda n: (n != "launcher", n.split("_")[0],
                                          int(n.split("_")[1]) if "_" in n else 0))
    return [(name, first[name], last[name]) for name in order]


def markdown(result: dict) -> str:
    samples, stop = result["samples"], result["stop"]
    steps = [s["global_step"] for s in samples]
    lines = [f"Soak: {result['settings']['workers']} workers, "
             f"{result['settings']['minutes']:g} min, a worker killed every "
             f"{result['settings']['kill_every_secs']:g} s",
             "",
             f"- kills: {len(result['kills'])}; restarts by the launcher: "
             f"{sum(result['restarts'].values())} ({json.dumps(result['restarts'])})",
             f"- global step: {steps[0] if steps else 0:,} at the first sample, "
             f"{steps[-1] if steps else 0:,} at the last",
             f"- seconds from each kill until that worker's new process trained: "
             f"{recoveries(result)}",
             f"- stop: {'clean' if stop['clean'] else 'NOT clean'} in {stop['seconds']} s "
             f"({stop['stdout'] or stop['stderr']})",
             "",
             "| task | RSS once training (MB) | RSS at the end (MB) | growth (MB) |",
             "|---|---:|---:|---:|"]
    for name, first, last in rss_table(result):
        lines.append(f"| {name} | {first:,.0f} | {last:,.0f} | {last - first:+,.0f} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    t = [s["t"] / 60 for s in samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    top.plot(t, [s["global_step"] for s in samples], color="tab:blue")
    for kill in result["kills"]:
        top.axvline(kill["t"] / 60, color="tab:red", alpha=0.4, linewidth=1)
    top.set_ylabel("global step")
    top.set_title("Soak: global step (red lines: a worker killed with SIGKILL)")
    names = [name for name, _, _ in rss_table(result)]
    for name in names:
        bottom.plot(t, [s["rss_mb"].get(name, float("nan")) for s in samples], label=name,
                    linewidth=1)
    bottom.set_ylabel("RSS (MB)")
    bottom.set_xlabel("minutes")
    bottom.legend(fontsize=7, ncol=4)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as error:
        return fail("benchmarks.soak", error)
    common.enter_private_network("benchmarks.soak", args.allow_remote)
    out = args.out or RESULTS / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    result = soak(args, config_to_argv(config), out)
    (out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    table = markdown(result)
    (out / "soak.md").write_text(table)
    plot(result, out / "soak.png")
    print(table)
    print(f"results in {out}")
    return 0 if result["stop"]["clean"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Can TF2's own ps/worker API step Python envs on its workers? A minimal probe.

    python -m benchmarks.probes.ps_strategy [--allow-remote]

The first question a TF2 user asks of this benchmark: why not a fourth variant on
tf.distribute.experimental.ParameterServerStrategy with a ClusterCoordinator, TF2's
official ps/worker API? In that API one process, the coordinator, traces tf.functions and
schedules them; remote workers (plain tf.distribute.Server processes) run them. An A3C
worker must step its envs, Python code, from inside what runs on it: tf.numpy_function or
tf.py_function, as every variant here does.

The probe starts one ps and one worker server (each `python -m benchmarks.probes.ps_strategy
--serve JOB`), makes the strategy and the coordinator in this process, and schedules these
functions on the worker, each with a time limit (the coordinator's error of one failed
function is cleared before the next, so each gets its own answer):
  tf ops                  a read of a variable on the ps and an add: the setup works
  py_function             the same value through tf.py_function
  numpy_function          the same through tf.numpy_function of a Python function (an "env
                          step") defined here
  ... pinned to the worker    the same inside tf.device("/job:worker/task:0")
  ... for its effect only the numpy_function runs, its result is not returned
  tf ops, again           the coordinator still works after the failures
then counts how many times the Python function ran in this, the coordinator's, process.

What it shows (TF 2.21.0, 2-core VM):

  tf ops: runs: np.float32(3.0)
  py_function: fails: InvalidArgumentError: {{function_node
      __wrapped__Identity_device_/job:chief/replica:0/task:0/device:CPU:0}} Expects 1
      arguments, but 0 is provided [Op:Identity]
  numpy_function: fails: (the same)
  numpy_function, pinned to the worker: fails: (the same)
  numpy_function for its effect only, result not returned: runs: np.float32(3.0)
  tf ops, again: runs: np.float32(3.0)
  the Python function ran in the coordinator's process: 3 call(s) here

Which failure a py_function or numpy_function shows varies from run to run: that
InvalidArgumentError, or a fetch that yields None ("wrong result: None (3.0 expected)").
Never the value.

A numpy_function or py_function op names its Python callable by a token in the registry of
the process that traced it, and the callable ran there: in the coordinator's process (the
error names /job:chief), even inside tf.device of the worker. So a function scheduled on a
worker runs its "env step" in the coordinator, a round trip from the worker back to the
coordinator per call, and in TF 2.21 a result it returns does not even make it back (the
error above). With this API
the envs cannot be stepped on the workers: one coordinator process would do all the acting
for every worker, or the workers would have to be processes of our own again, the
tf2_mp / tf2_ray design. That is why there is no fourth variant. The probe runs in a
private network like every benchmark (benchmarks.common.enter_private_network: TF's
servers listen on every interface and authenticate no one). Exit status 0 when the setup
works (the first function runs), whatever the other answers; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from benchmarks import common
from benchmarks.variants import tf2_run

PROG = "benchmarks.probes.ps_strategy"
REPO = Path(__file__).resolve().parents[2]
# A scheduled function either returns or fails within this; more means it hangs.
FETCH_TIMEOUT_SECS = 60.0


def serve(job: str, cluster: dict) -> None:
    """One server of the probe's cluster, until it is killed."""
    tf2_run.pin_visible_gpus((), 0)
    import tensorflow as tf

    tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=0,
                         protocol="grpc", start=True).join()


def with_time_limit(call: Callable[[], object], seconds: float) -> tuple[bool, str]:
    """(ok, what `call` returned or the first line of what it raised), or (False,
    "no answer ...") when it takes longer than `seconds`."""
    outcome: list[tuple[bool, str]] = []

    def run() -> None:
        try:
            outcome.append((True, repr(call())))
        except Exception as error:  # the error is the answer
            lines = str(error).strip().splitlines() or [""]
            outcome.append((False, f"{type(error).__name__}: {lines[0]}"))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else (False, f"no answer within {seconds:g} s")


def ask(coordinator, function):
    """Run `function` on a worker and fetch its result. A failed function's error stays
    with the coordinator and is raised again by the next schedule; join() raises it once
    more and clears it, so each question gets its own answer."""
    try:
        return coordinator.schedule(function).fetch()
    finally:
        try:
            coordinator.join()
        except Exception:  # the error fetch raised, raised once more to clear it
            pass


def probe(cluster: dict) -> list[tuple[str, bool, str]]:
    """Schedule each test function on the worker: (name, ok, answer)."""
    tf2_run.pin_visible_gpus((), 0)
    import numpy as np
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc")
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        weight = tf.Variable(2.0)  # on the ps

    calls_here = []  # pids of the processes python_env_step ran in, if it ran here

    def python_env_step(x):
        """Stands for an env step: Python code on numpy values."""
        calls_here.append(os.getpid())
        return np.float32(x + 1.0)

    # autograph=False: straight-line functions, and autograph's source files, deleted at
    # exit, would stay in the temp dir after the os._exit below.
    @tf.function(autograph=False)
    def tf_ops():
        return weight + 1.0

    @tf.function(autograph=False)
    def with_numpy_function():
        return tf.numpy_function(python_env_step, [weight.read_value()], tf.float32)

    @tf.function(autograph=False)
    def with_py_function():
        return tf.py_function(lambda x: x + 1.0, [weight.read_value()], tf.float32)

    @tf.function(autograph=False)
    def with_numpy_function_on_the_worker():
        with tf.device("/job:worker/task:0/device:CPU:0"):
            return tf.numpy_function(python_env_step, [weight.read_value()], tf.float32)

    @tf.function(autograph=False)
    def with_numpy_function_for_its_effect_only():
        stepped = tf.numpy_function(python_env_step, [weight.read_value()], tf.float32)
        with tf.control_dependencies([stepped]):
            return weight + 1.0

    answers = []
    # tf ops again last: the coordinator still runs functions after the failures, so those
    # are not one failure's aftermath.
    for name, function in (("tf ops", tf_ops), ("py_function", with_py_function),
                           ("numpy_function", with_numpy_function),
                           ("numpy_function, pinned to the worker",
                            with_numpy_function_on_the_worker),
                           ("numpy_function for its effect only, result not returned",
                            with_numpy_function_for_its_effect_only),
                           ("tf ops, again", tf_ops)):
        ok, answer = with_time_limit(lambda f=function: ask(coordinator, f),
                                     FETCH_TIMEOUT_SECS)
        # Every function returns weight + 1 = 3.0 when it works. A fetch of a function
        # whose Python could not run sometimes yields None instead of raising (a race with
        # the previous question's error): that is not an answer either.
        if ok and answer != repr(np.float32(3.0)):
            ok, answer = False, f"wrong result: {answer} (3.0 expected)"
        answers.append((name, ok, answer))
    answers.append(("the Python function ran in the coordinator's process", bool(calls_here),
                    f"{len(calls_here)} call(s) here"))
    return answers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", choices=["ps", "worker"], help=argparse.SUPPRESS)
    parser.add_argument("--cluster", help=argparse.SUPPRESS)
    common.add_allow_remote_argument(parser)
    args = parser.parse_args(argv)
    if args.serve:  # a server of the cluster below, already in the private network
        serve(args.serve, json.loads(args.cluster))
        return 0
    common.enter_private_network(PROG, args.allow_remote)
    import portpicker

    ports = iter(portpicker.pick_unused_port() for _ in range(3))
    cluster = {job: [f"127.0.0.1:{next(ports)}"] for job in ("chief", "ps", "worker")}
    servers = [subprocess.Popen([sys.executable, "-m", PROG, "--serve", job, "--cluster",
                                 json.dumps(cluster)], cwd=REPO)
               for job in ("ps", "worker")]
    try:
        answers = probe(cluster)
        print(f"\nParameterServerStrategy + ClusterCoordinator, a function scheduled on a "
              f"remote worker (TF {sys.modules['tensorflow'].__version__}):")
        for name, ok, answer in answers:
            print(f"  {name}: {'runs' if ok else 'fails'}: {answer}", flush=True)
    finally:
        for server in servers:  # ours, by pid
            server.kill()
            server.wait(timeout=10)
    sys.stderr.flush()
    # Left to the interpreter, the coordinator's teardown retries the killed servers and
    # logs every failed RPC: the answers are printed, leave now.
    os._exit(0 if answers[0][1] else 1)


if __name__ == "__main__":
    sys.exit(main())

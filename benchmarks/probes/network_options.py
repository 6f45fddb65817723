"""What TF's compute options do for the network's own passes: a probe.

    python -m benchmarks.probes.network_options [--env ALE/Pong-v5] [--repeats 3]
        [--envs-per-worker B] [--rollout-length T] [--protocol classic] [--ops]

Times the env's preset network (Atari: the 42x42 cnn) the two ways a worker runs it: the
acting step (the policy's forward pass and sampling over one actor's B observations) and
the learner's pass (forward and backward over T x B), microseconds per observation, one
intra-op thread as the worker's sessions, each option in a process of its own (oneDNN's
settings are read once per process):

  oneDNN off        TF_ENABLE_ONEDNN_OPTS=0: TF's own kernels (Eigen's Conv2D, separate
                    bias adds, ELUs and layout transposes), what TF 2.21's pip build ran
                    here until process_env turned oneDNN on
  float32           the default: TF's fused oneDNN kernels in float32
  grappler bf16     the session's auto_mixed_precision_onednn_bfloat16 rewrite: the
                    convolutions and matmuls in bfloat16, the weights stay float32
  oneDNN fpmath bf16  ONEDNN_DEFAULT_FPMATH_MODE=BF16: oneDNN may compute float32
                    primitives with bfloat16 arithmetic
  XLA               the session's global_jit_level ON_1: clusters compiled by XLA

Each figure is the median of --repeats timings (200 acting steps, 50 learner passes each)
after a warm-up; the options run interleaved, so a change in the machine's load hits all.
B and T are the preset's unless given. --ops also prints where each pass's time goes under
oneDNN off and float32: TF's step stats of 5 traced runs (RunOptions FULL_TRACE), by op type,
microseconds per observation: the per-sample work of the network, op by op.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from a3c_graph.system import process_env
from benchmarks.probes.traces import op_micros

PROG = "benchmarks.probes.network_options"
OPTIONS = {"oneDNN off": {"TF_ENABLE_ONEDNN_OPTS": "0"}, "float32": {}, "grappler bf16": {},
           "oneDNN fpmath bf16": {"ONEDNN_DEFAULT_FPMATH_MODE": "BF16"}, "XLA": {}}
TRACED = ("oneDNN off", "float32")


def time_passes(env_id: str, option: str, shape: dict, ops: bool = False) -> dict:
    """us per observation of the acting step and of the learner's pass under `option`, and
    with `ops` each pass's traced op types ("acting ops", "learner ops")."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    from a3c_graph.core.config import resolve_config
    from a3c_graph.core.distributions import Categorical
    from a3c_graph.core.envs import env_info, env_options
    from a3c_graph.core.model import build_network

    sample_actions = Categorical().sample  # Atari's discrete actions
    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    config = resolve_config({"env": env_id, **shape})
    info = env_info(env_id, **env_options(config))
    session_config = tf1.ConfigProto(intra_op_parallelism_threads=1,
                                     inter_op_parallelism_threads=2)
    if option == "grappler bf16":
        session_config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = \
            rewriter_config_pb2.RewriterConfig.ON
    elif option == "XLA":
        session_config.graph_options.optimizer_options.global_jit_level = \
            tf1.OptimizerOptions.ON_1

    def traced_ops(session, op, N: int) -> dict[str, float]:
        by_type: dict[str, float] = {}
        for _ in range(5):
            metadata = tf1.RunMetadata()
            session.run(op, options=tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE),
                        run_metadata=metadata)
            for _device, kind, micros in op_micros(metadata):
                by_type[kind] = by_type.get(kind, 0.0) + micros / 5 / N
        return dict(sorted(by_type.items(), key=lambda item: -item[1]))

    def per_observation(N: int, learn: bool, repeats: int) -> float:
        with tf.Graph().as_default():
            network = build_network(info.obs_shape, info.actions, config, "local",
                                    local=True)
            rng = np.random.default_rng(0)
            batch = rng.integers(0, 2, size=(N, *info.obs_shape)).astype(info.obs_dtype)
            # A variable, not a constant: grappler would fold a pass over a constant away.
            obs = tf1.get_variable("obs", initializer=batch, trainable=False)
            logits, values = network(obs.read_value())
            if learn:
                loss = tf.reduce_mean(tf.nn.log_softmax(logits)[:, 0]) + tf.reduce_mean(values)
                op = tf.add_n([tf.reduce_sum(g) for g in tf.gradients(loss, network.variables)])
            else:
                op = sample_actions(logits)
            with tf1.Session(config=session_config) as session:
                session.run([tf1.global_variables_initializer(),
                             tf1.local_variables_initializer()])
                for _ in range(20):
                    session.run(op)
                start = time.perf_counter()
                for _ in range(repeats):
                    session.run(op)
                timing = (time.perf_counter() - start) / repeats / N * 1e6
                if ops:
                    found[("learner" if learn else "acting") + " ops"] = traced_ops(
                        session, op, N)
                return timing

    found: dict = {}
    B, T = config.envs_per_worker, config.rollout_length
    return {"acting": per_observation(B, False, 200),
            "learner": per_observation(T * B, True, 50), **found}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs-per-worker", type=int, default=None, metavar="B")
    parser.add_argument("--rollout-length", type=int, default=None, metavar="T")
    parser.add_argument("--protocol", default=None, help="ALE: the protocol whose preset "
                        "network to time (classic: the A3C paper's network at 84x84).")
    parser.add_argument("--ops", action="store_true",
                        help="Also print each pass's time by op type (oneDNN off, float32).")
    parser.add_argument("--option", choices=list(OPTIONS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = {k: v for k, v in (("envs_per_worker", args.envs_per_worker),
                               ("rollout_length", args.rollout_length),
                               ("protocol", args.protocol)) if v}
    if args.option:  # the child: one option, one line of JSON
        process_env.before_tf_import()  # the tasks' settings, where the option sets none
        print(json.dumps(time_passes(args.env, args.option, shape,
                                     args.ops and args.option in TRACED)))
        return 0
    timings: dict[str, list[dict]] = {option: [] for option in OPTIONS}
    extra = [f"--{k.replace('_', '-')}={v}" for k, v in shape.items()]
    for _ in range(args.repeats):
        for option, env in OPTIONS.items():
            child = subprocess.run(
                [sys.executable, "-m", PROG, "--env", args.env, "--option", option, *extra,
                 *(["--ops"] if args.ops else [])],
                capture_output=True, text=True, env={**os.environ, **env})
            if child.returncode != 0:
                print(f"{PROG}: error: {option}: {child.stderr.strip()[-300:]}",
                      file=sys.stderr)
                return 1
            timings[option].append(json.loads(child.stdout.strip().splitlines()[-1]))
    print(f"us per observation ({args.env}'s preset network, one intra-op thread, medians "
          f"of {args.repeats})\n")
    print("| option | acting step | learner, forward + backward |\n|---|---:|---:|")
    for option, runs in timings.items():
        acting = statistics.median(run["acting"] for run in runs)
        learner = statistics.median(run["learner"] for run in runs)
        print(f"| {option} | {acting:.1f} | {learner:.1f} |")
    if args.ops:
        for option in TRACED:
            last = timings[option][-1]
            for part in ("acting ops", "learner ops"):
                print(f"\n{option}, {part} (us per observation, top 8):")
                for kind, micros in list(last[part].items())[:8]:
                    print(f"  {kind:36s} {micros:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

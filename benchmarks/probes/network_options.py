"""What TF's compute options do for the network's own passes: a probe.

    python -m benchmarks.probes.network_options [--env ALE/Pong-v5] [--repeats 3]

Times the env's preset network (Atari: the 42x42 cnn) the two ways a worker runs it: the
acting step (the policy's forward pass and sampling over one actor's B observations) and
the learner's pass (forward and backward over T x B), microseconds per observation, one
intra-op thread as the worker's sessions, each option in a process of its own (oneDNN's
settings are read once per process):

  float32           the default: TF's oneDNN kernels in float32
  grappler bf16     the session's auto_mixed_precision_onednn_bfloat16 rewrite: the
                    convolutions and matmuls in bfloat16, the weights stay float32
  oneDNN fpmath bf16  ONEDNN_DEFAULT_FPMATH_MODE=BF16: oneDNN may compute float32
                    primitives with bfloat16 arithmetic
  XLA               the session's global_jit_level ON_1: clusters compiled by XLA

Each figure is the median of --repeats timings (200 acting steps, 50 learner passes each)
after a warm-up; the options run interleaved, so a change in the machine's load hits all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROG = "benchmarks.probes.network_options"
OPTIONS = {"float32": {}, "grappler bf16": {}, "oneDNN fpmath bf16":
           {"ONEDNN_DEFAULT_FPMATH_MODE": "BF16"}, "XLA": {}}


def time_passes(env_id: str, option: str) -> dict[str, float]:
    """us per observation of the acting step and of the learner's pass under `option`."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    from a3c_graph.core.config import resolve_config
    from a3c_graph.core.envs import env_info, env_options
    from a3c_graph.core.model import build_network
    from a3c_graph.core.rollout import sample_actions

    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    config = resolve_config({"env": env_id})
    info = env_info(env_id, **env_options(config))
    session_config = tf1.ConfigProto(intra_op_parallelism_threads=1,
                                     inter_op_parallelism_threads=2)
    if option == "grappler bf16":
        session_config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = \
            rewriter_config_pb2.RewriterConfig.ON
    elif option == "XLA":
        session_config.graph_options.optimizer_options.global_jit_level = \
            tf1.OptimizerOptions.ON_1

    def per_observation(N: int, learn: bool, repeats: int) -> float:
        with tf.Graph().as_default():
            network = build_network(info.obs_shape, info.num_actions, config, "local",
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
                return (time.perf_counter() - start) / repeats / N * 1e6

    B, T = config.envs_per_worker, config.rollout_length
    return {"acting": per_observation(B, False, 200),
            "learner": per_observation(T * B, True, 50)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--option", choices=list(OPTIONS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.option:  # the child: one option, one line of JSON
        print(json.dumps(time_passes(args.env, args.option)))
        return 0
    timings: dict[str, list[dict[str, float]]] = {option: [] for option in OPTIONS}
    for _ in range(args.repeats):
        for option, env in OPTIONS.items():
            child = subprocess.run(
                [sys.executable, "-m", PROG, "--env", args.env, "--option", option],
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
    return 0


if __name__ == "__main__":
    sys.exit(main())

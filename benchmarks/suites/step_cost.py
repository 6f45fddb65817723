"""Where an acting step goes: microseconds per step of B envs, one process, one thread.

    python -m benchmarks.step_cost [--env CartPole-v1] [--envs 8 32] [--rollouts 150]
        [--rollout-length T] [--allow-remote]

For each B, times T-step rollouts (T: --rollout-length, by default 32, the cartpole
preset's) of:
  env only          EnvBatch.step in a Python loop (Gymnasium's SyncVectorEnv), random actions
  numpy_function    the graph loop with the env step through tf.numpy_function, no policy
  policy only       the graph loop with the policy network and sampling, no env
  graph rollout     a3c_graph.core.rollout.build_rollout: the real actor op (policy, env step,
                    RolloutRecorder), one session.run per rollout
  tf2 policy call   one call of a policy tf.function (the network and sampling) from
                    Python per step, no env: what a TF2 loop pays per step to enter TF
  tf2 step loop     the TF2 variants' loop before: Python steps the envs and calls the
                    policy tf.function once per step, the same RolloutRecorder
  tf2 rollout       benchmarks.variants.tf2_common.make_rollout_function, the TF2 variants' loop
                    now: the whole rollout in one tf.function call (`for t in tf.range(T)`,
                    the env step through tf.numpy_function, the same RolloutRecorder)
  learner           the learner's forward and backward pass over one T x B rollout (the
                    network's gradients, no optimizer), per env step
The TF2 rows run eagerly with the TF2 variants' thread settings (configure_tensorflow:
one intra-op thread, two inter-op threads, as the graph's sessions here).
No cluster and no ps: the acting path and the learner's own compute, so the per-step
overheads can be read off against the env's own cost. Each env id gets its preset's
network (ALE ids: the atari preset's cnn on 42x42 frames). Prints a markdown table;
benchmarks/PERFORMANCE.md quotes it. Like every benchmark it runs in a private network
(benchmarks.common.enter_private_network; --allow-remote: the host network).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from a3c_graph.system import process_env
from benchmarks import common

PROG = "benchmarks.step_cost"
DEFAULT_T = 32


def measure(env_id: str, B: int, rollouts: int, T: int = DEFAULT_T) -> dict[str, float]:
    """Microseconds per step of B envs of each row of the module docstring."""
    import tensorflow as tf

    from a3c_graph.core.config import resolve_config
    from a3c_graph.core.distributions import Categorical
    from a3c_graph.core.envs import EnvBatch, env_options
    from a3c_graph.core.model import build_network
    from a3c_graph.core.rollout import RolloutRecorder, build_rollout
    from benchmarks.variants import tf2_common

    tf1 = tf.compat.v1
    sample_actions = Categorical().sample  # Atari's discrete actions

    def _per_step(run, rollouts: int) -> float:
        run()  # warm-up: traces, first session.run
        start = time.perf_counter()
        for _ in range(rollouts):
            run()
        return (time.perf_counter() - start) / (rollouts * T) * 1e6

    # The env's preset (atari: the 42x42 frames and the cnn of ALE ids), B envs, T steps.
    config = resolve_config({"env": env_id, "envs_per_worker": B, "rollout_length": T})
    batch = EnvBatch(env_id, B, seed=0, **env_options(config))
    info = batch.info
    rng = np.random.default_rng(0)
    costs = {}

    actions = rng.integers(0, info.actions.n, size=(T, B)).astype(np.int32)

    def env_only():
        for t in range(T):
            batch.step(actions[t])

    costs["env only"] = _per_step(env_only, rollouts)

    # The TF2 variants' loops run eagerly (as in their processes), with their thread
    # settings; the graph parts then run with eager execution off, as in a3c_graph.worker.
    tf2_common.configure_tensorflow(config)
    model = tf2_common.build_model(info, config)
    obs_spec = tf.TensorSpec([B, *info.obs_shape], tf.as_dtype(info.obs_dtype))
    policy_step = tf.function(lambda obs: sample_actions(model(obs)[0]),
                              input_signature=[obs_spec])
    recorder = RolloutRecorder(batch, T)
    observations = batch.observe()

    def policy_calls():
        for _ in range(T):
            policy_step(observations).numpy()

    def step_loop():
        for t in range(T):
            recorder.step_and_record(t, policy_step(batch.observe()).numpy())
        recorder.collect()

    tf2_costs = {"tf2 policy call": _per_step(policy_calls, rollouts),
                 "tf2 step loop": _per_step(step_loop, rollouts),
                 "tf2 rollout": _per_step(tf2_common.make_rollout_function(
                     tf2_common.FlatWeights(model.variables), tf2_common.network_on(info, config),
                     recorder), rollouts)}
    tf1.disable_eager_execution()

    def in_graph(build) -> float:
        with tf.Graph().as_default():
            network = build_network(info.obs_shape, info.actions, config, "local",
                                    local=True)
            op = build(network)
            session_config = tf1.ConfigProto(intra_op_parallelism_threads=1,
                                             inter_op_parallelism_threads=2)
            with tf1.Session(config=session_config) as session:
                session.run([tf1.global_variables_initializer(),
                             tf1.local_variables_initializer()])
                return _per_step(lambda: session.run(op), rollouts)

    def loop(body, first):
        return tf1.while_loop(lambda t, _: t < T, body, (tf.constant(0), first),
                              parallel_iterations=1, back_prop=False)[1]

    def numpy_function_only(network):
        def body(t, obs):
            step = tf.numpy_function(lambda a: batch.step(a).next_obs,
                                     [tf.zeros([B], tf.int32)], obs.dtype, stateful=True)
            step.set_shape(obs.shape)
            return t + 1, step
        return loop(body, tf.zeros([B, *info.obs_shape], info.obs_dtype))

    def policy_only(network):
        def body(t, obs):
            actions = sample_actions(network(obs)[0])
            # Depends on the actions (so the policy runs), leaves the observations as they are.
            return t + 1, obs + tf.reshape(tf.cast(actions, obs.dtype) * 0,
                                           [-1] + [1] * (obs.shape.rank - 1))
        return loop(body, tf.zeros([B, *info.obs_shape], info.obs_dtype))

    def graph_rollout(network):
        return build_rollout(batch, lambda obs: sample_actions(network(obs)[0]), T)

    def learner(network):
        # The learner's forward and backward pass over one rollout of T x B observations
        # (without the bootstrap values of s_T), per env step.
        # A variable, not a constant: grappler would fold a pass over a constant away.
        rollout = np.stack([batch.observe()] * T).reshape(T * B, *info.obs_shape)
        obs = tf1.get_variable("learner_obs", initializer=rollout, trainable=False)
        logits, values = network(obs.read_value())
        loss = tf.reduce_mean(tf.nn.log_softmax(logits)[:, 0]) + tf.reduce_mean(values)
        # One scalar that needs every gradient: grappler prunes gradients that only feed a
        # tf.group's control edges (that measured 4 us per Pong step instead of 1.3 ms).
        return tf.add_n([tf.reduce_sum(g) for g in tf.gradients(loss, network.variables)])

    costs["numpy_function"] = in_graph(numpy_function_only)
    costs["policy only"] = in_graph(policy_only)
    costs["graph rollout"] = in_graph(graph_rollout)
    costs.update(tf2_costs)
    costs["learner"] = in_graph(learner)

    batch.close()
    return costs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG,
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 32],
                        help="Values of B (envs per actor) to measure (default: 8 32).")
    parser.add_argument("--rollouts", type=int, default=150,
                        help="Timed rollouts per measurement (default: 150).")
    parser.add_argument("--rollout-length", type=int, default=DEFAULT_T, metavar="T",
                        help=f"Steps per rollout (default: {DEFAULT_T}).")
    parser.add_argument("--json", action="store_true",
                        help="Measure the one B given and print its costs as JSON.")
    common.add_allow_remote_argument(parser)
    args = parser.parse_args(argv)
    process_env.before_tf_import()  # TF's settings of every task here: oneDNN on, no Keras
    common.enter_private_network(PROG, args.allow_remote)
    if args.json:
        print(json.dumps(measure(args.env, args.envs[0], args.rollouts, args.rollout_length)))
        return 0
    # One process per B: eager execution (the TF2 loop) can only be turned off once.
    rows = {}
    for B in args.envs:
        child = subprocess.run([sys.executable, "-m", PROG, "--json", "--env", args.env,
                                "--envs", str(B), "--rollouts", str(args.rollouts),
                                "--rollout-length", str(args.rollout_length),
                                *(["--allow-remote"] if args.allow_remote else [])],
                               capture_output=True, text=True, check=True)
        rows[B] = json.loads(child.stdout.strip().splitlines()[-1])
    names = list(next(iter(rows.values())))
    print(f"us per step of B envs ({args.env}, T = {args.rollout_length}, one process)\n")
    print("| B | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    for B, costs in rows.items():
        print(f"| {B} | " + " | ".join(f"{costs[name]:.0f}" for name in names) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

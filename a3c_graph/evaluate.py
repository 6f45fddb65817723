"""Play episodes with a trained agent: ``python -m a3c_graph.evaluate --logdir D --episodes N``.

Loads the latest checkpoint of a run (or --checkpoint) into a fresh graph holding only
the global network, and plays N episodes, greedy by default. Reads the network's shape
from <logdir>/config.json, which the chief writes when a run starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

PROG = "a3c_graph.evaluate"


class UsageError(Exception):
    pass


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--logdir", required=True, help="The run's log dir.")
    parser.add_argument("--checkpoint",
                        help="A checkpoint prefix (default: the latest in --logdir).")
    parser.add_argument("--episodes", type=int, default=10, help="Episodes to play (default: 10).")
    parser.add_argument("--env", help="Env id (default: the run's).")
    parser.add_argument("--seed", type=int, default=12345, help="Seed of the evaluation envs.")
    parser.add_argument("--sample", action="store_true",
                        help="Sample actions from the policy instead of taking the most likely.")
    return parser


def load_run_config(logdir: str):
    from a3c_graph.config import A3CConfig

    path = os.path.join(logdir, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            values = json.load(handle)
    except FileNotFoundError:
        raise UsageError(f"{path} not found: is {logdir} the log dir of a training run?") from None
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    values["hidden_sizes"] = tuple(values.get("hidden_sizes", ()))
    try:
        return A3CConfig(**values)
    except TypeError as error:
        raise UsageError(f"{path} is not an a3c_graph config: {error}") from None


def evaluate(config, checkpoint: str, episodes: int, seed: int, sample: bool) -> list[float]:
    """Returns of `episodes` episodes played by the checkpoint's global network."""
    import numpy as np
    import tensorflow as tf

    from a3c_graph.envs import make_env
    from a3c_graph.model import build_network

    tf1 = tf.compat.v1
    env = make_env(config.env)
    graph = tf.Graph()
    with graph.as_default():
        obs_ph = tf1.placeholder(tf.as_dtype(env.observation_space.dtype),
                                 [None, *env.observation_space.shape], name="obs")
        network = build_network(env.observation_space.shape, int(env.action_space.n), config,
                                "global")
        logits, _ = network(obs_ph)
        action = (tf.random.categorical(logits, 1)[:, 0] if sample
                  else tf.argmax(logits, axis=-1))
        saver = tf1.train.Saver(var_list=network.variables)
    returns = []
    with tf1.Session(graph=graph) as session:
        try:
            saver.restore(session, checkpoint)
        except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
                tf.errors.DataLossError) as error:
            first = str(error.message).strip().splitlines()[0]
            raise UsageError(
                f"checkpoint {checkpoint} does not fit this network: {first}") from None
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                a = session.run(action, {obs_ph: np.asarray(obs)[None]})[0]
                obs, reward, terminated, truncated, _ = env.step(int(a))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
            print(f"episode {episode + 1}/{episodes}: return {total:.1f}", flush=True)
    env.close()
    return returns


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.episodes < 1:
            raise UsageError(f"--episodes must be at least 1, got {args.episodes}")
        config = load_run_config(args.logdir)
        if args.env:
            config = config.__class__(**{**config.__dict__, "env": args.env})
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        from a3c_graph.envs import EnvError

        checkpoint = args.checkpoint or tf.train.latest_checkpoint(args.logdir)
        if not checkpoint:
            raise UsageError(f"no checkpoint in {args.logdir}")
        try:
            returns = evaluate(config, checkpoint, args.episodes, args.seed, args.sample)
        except EnvError as error:
            raise UsageError(str(error)) from None
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    mean = sum(returns) / len(returns)
    print(json.dumps({"checkpoint": checkpoint, "episodes": len(returns), "mean_return": mean,
                      "min_return": min(returns), "max_return": max(returns)}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

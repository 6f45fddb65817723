"""The round trip of an exported policy, on a real run: the observations of greedy episodes
played by the graph's own network, then the same observations through the SavedModel in a
plain TF2 process (no a3c_graph import); the largest logit difference and the actions.

    python docs/export/round_trip.py RUN SAVED_MODEL [--episodes 3] [--seed 100]
"""

import argparse
import json
import subprocess
import sys
import textwrap

import numpy as np

LOAD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    act = tf.saved_model.load(sys.argv[1]).signatures["act"]
    obs = np.load(sys.argv[2])
    out = act(observations=tf.constant(obs))
    assert not [m for m in sys.modules if m.startswith("a3c_graph")]
    np.save(sys.argv[3], out["logits"].numpy())
""")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("saved_model")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=100)
    args = parser.parse_args()
    import tensorflow as tf

    from a3c_graph.core.envs import make_env
    from a3c_graph.core.model import build_network
    from a3c_graph.rundir.run_config import read_run_config

    tf1 = tf.compat.v1
    config = read_run_config(args.run)
    policy = json.load(open(f"{args.saved_model}/assets.extra/policy.json"))
    env = make_env(config.env)
    with tf.Graph().as_default():
        obs_ph = tf1.placeholder(tf.float32, [None, *env.observation_space.shape])
        network = build_network(env.observation_space.shape, int(env.action_space.n), config,
                                "global")
        logits = network(obs_ph)[0]
        with tf1.Session() as session:
            tf1.train.Saver(var_list=network.variables).restore(
                session, f"{args.run}/{policy['checkpoint']}")
            observations, graph_logits, returns = [], [], []
            for episode in range(args.episodes):
                obs, _ = env.reset(seed=args.seed + episode)
                done, total = False, 0.0
                while not done:
                    step_logits = session.run(logits, {obs_ph: obs[None]})[0]
                    observations.append(obs)
                    graph_logits.append(step_logits)
                    obs, reward, terminated, truncated, _ = env.step(int(np.argmax(step_logits)))
                    total += reward
                    done = terminated or truncated
                returns.append(total)
    np.save("/tmp/round_trip_obs.npy", np.array(observations, np.float32))
    subprocess.run([sys.executable, "-c", LOAD, args.saved_model, "/tmp/round_trip_obs.npy",
                    "/tmp/round_trip_logits.npy"], check=True)
    saved = np.load("/tmp/round_trip_logits.npy")
    graph = np.array(graph_logits)
    print(json.dumps({"observations": len(observations), "returns": returns,
                      "max_abs_logit_difference": float(np.abs(saved - graph).max()),
                      "same_greedy_actions": bool((saved.argmax(1) == graph.argmax(1)).all())}))


if __name__ == "__main__":
    main()

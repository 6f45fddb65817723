"""Play a policy exported by `python -m a3c_graph.export` with plain TensorFlow 2 and Gymnasium:
no a3c_graph import, as a colleague's script or a notebook would.

    python scripts/play_saved_model.py DIR [--episodes 10] [--seed 0] [--sample]

Reads DIR/assets.extra/policy.json for the env and what to feed the policy, runs the act
signature eagerly, and prints each episode's return and their mean as JSON. Atari ids need
ale-py: the env is ale-py's own vector env with the preprocessing the policy was trained on
(frame skip, max-pooling, grayscale, resize, frame stack, and the classic protocol's FIRE
and new frame stack after a lost life). A Box policy's action (its Gaussian's mean, or a
sample with --sample) is clipped to the Box's bounds before the env, as in training.
"""

import argparse
import json
import os

import gymnasium as gym
import numpy as np
import tensorflow as tf


def make_env(policy: dict):
    """One env of the policy's id, preprocessed as in training; (env, FIRE's index or None
    if a lost life needs no FIRE)."""
    atari = policy.get("atari")
    if atari is None:
        env = gym.make(policy["env"])
        if isinstance(env.action_space, gym.spaces.Box):
            # A Gaussian's actions are unbounded; the env gets them clipped, as in training.
            env = gym.wrappers.ClipAction(env)
        return env, None
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make_vec(
        policy["env"], num_envs=1, vectorization_mode="vector_entry_point",
        img_height=atari["screen_size"], img_width=atari["screen_size"],
        stack_num=atari["frame_stack"], frameskip=policy["frame_skip"],
        repeat_action_probability=atari["repeat_action_probability"],
        full_action_space=atari["full_action_space"], noop_max=atari["noop_max"],
        use_fire_reset=atari["fire_at_reset"], life_loss_info=False, episodic_life=False,
        reward_clipping=False, maxpool=True, grayscale=True,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    actions = list(env.ale.get_action_set())
    fire = (actions.index(ale_py.Action.FIRE)
            if atari["fire_after_life_loss"] and ale_py.Action.FIRE in actions else None)
    return env, fire


def play(saved_model: str, episodes: int, seed: int, sample: bool) -> list[float]:
    with open(os.path.join(saved_model, "assets.extra", "policy.json")) as handle:
        policy = json.load(handle)
    act = tf.saved_model.load(saved_model).signatures["act"]
    env, fire = make_env(policy)
    discrete = policy["action_space"]["type"] != "Box"
    batched = policy.get("atari") is not None  # the vector env gives [1, ...] already
    # The classic protocol: a new life's stack holds zeros for the frames of the life before.
    new_stack = batched and policy["atari"].get("new_stack_after_life_loss", False)
    stack = policy["atari"]["frame_stack"] if batched else 0
    returns = []
    for episode in range(episodes):
        obs, info = env.reset(seed=seed + episode)
        state = np.zeros([1, 2, policy["config"]["lstm_size"]], np.float32)
        lives = info.get("lives", [0])[0] if batched else 0
        total, done, fire_next, life_frames = 0.0, False, False, stack
        while not done:
            inputs = {"observations": tf.constant(obs if batched else obs[None])}
            if policy["recurrent"]:
                inputs["state"] = tf.constant(state)
            out = act(**inputs)
            action = out["sampled_action" if sample else "greedy_action"][0].numpy()
            action = int(action) if discrete else action
            if policy["recurrent"]:
                state = out["state"].numpy()
            if fire_next:
                action = fire  # the classic protocol: FIRE after a lost life
            if batched:
                obs, reward, terminated, truncated, info = env.step(np.array([action]))
                reward, done = float(reward[0]), bool(terminated[0] or truncated[0])
                life_lost = info["lives"][0] < lives and not done
                fire_next = fire is not None and life_lost
                lives = info["lives"][0]
                life_frames = 1 if life_lost else min(life_frames + 1, stack)
                if new_stack and life_frames < stack:
                    obs = obs.copy()
                    obs[0, :stack - life_frames] = 0
            else:
                obs, reward, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
            total += float(reward)
        returns.append(total)
        print(f"episode {episode + 1}/{episodes}: return {total:.1f}", flush=True)
    env.close()
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved_model", help="A directory a3c_graph.export wrote.")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", action="store_true",
                        help="Sample actions as in training (default: the most likely).")
    args = parser.parse_args()
    returns = play(args.saved_model, args.episodes, args.seed, args.sample)
    print(json.dumps({"episodes": len(returns), "returns": returns,
                      "mean_return": sum(returns) / len(returns)}))


if __name__ == "__main__":
    main()

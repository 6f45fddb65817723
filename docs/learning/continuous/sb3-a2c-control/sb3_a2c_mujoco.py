"""The anchor's own code on this machine: stable-baselines3's A2C with rl-baselines3-zoo's
MuJoCo settings (hyperparams/a2c.yml: `normalize: true` and SB3's defaults, one env) on a
Gymnasium v5 task, as a control for a3c_graph's continuous-control runs. Not part of the
project: it needs its own venv (pip install torch==2.13.0 stable-baselines3==2.9.2
gymnasium==1.4.0 mujoco==3.3.7, the project's own versions of the last two).

    python sb3_a2c_mujoco.py OUT_DIR [--env HalfCheetah-v5] [--steps 1e6] [--seed 0] [--episodes 30]

Writes OUT_DIR/progress.jsonl: every 10,000 env steps the minutes and the mean return of the
last 100 episodes (SB3's Monitor under VecNormalize: raw rewards), as a3c_graph's progress
files do; then OUT_DIR/evaluation.json: the final model's mean action (as rl-zoo evaluates
these tasks) over 30 whole episodes with the observation statistics frozen, the episodes of
a3c_graph.evaluate's records (seeds 12345 + i; rl-zoo's benchmark plays 150,000 steps).
Short runs, so no resume: a run cut off is started again (its progress file anew). The
tasks rl-zoo's a2c.yml gives SB3's defaults (gamma 0.99) only.
"""

import argparse
import json
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import A2C
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

EVALUATION_SEED = 12345


class Progress(BaseCallback):
    def __init__(self, out: Path, every: int):
        super().__init__()
        self.out, self.every, self.start, self.last = out, every, time.time(), 0

    def _on_step(self) -> bool:
        if self.num_timesteps - self.last >= self.every:
            self.last = self.num_timesteps
            episodes = [info["r"] for info in self.model.ep_info_buffer]
            row = {"env_steps": self.num_timesteps,
                   "minutes": round((time.time() - self.start) / 60, 2),
                   "episodes_in_mean": len(episodes),
                   "mean_return_100": round(float(np.mean(episodes)), 2) if episodes else None,
                   "log_std": [round(float(x), 3)
                               for x in self.model.policy.log_std.detach().numpy()]}
            with (self.out / "progress.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
        return True


def evaluate(model: A2C, normalize: VecNormalize, env_id: str, episodes: int) -> dict:
    """The mean action over whole episodes, observations normalised by the frozen stats."""
    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=EVALUATION_SEED + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(normalize.normalize_obs(obs[None]), deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return {"episodes": episodes, "mean_return": float(np.mean(returns)),
            "std_return": float(np.std(returns)), "returns": returns}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--env", default="HalfCheetah-v5",
                        choices=["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"])
    parser.add_argument("--steps", type=float, default=1e6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=30)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "progress.jsonl").unlink(missing_ok=True)
    torch.set_num_threads(1)
    env = VecNormalize(make_vec_env(args.env, n_envs=1, seed=args.seed), gamma=0.99)
    model = A2C("MlpPolicy", env, seed=args.seed, device="cpu")
    model.learn(total_timesteps=int(args.steps), callback=Progress(out, 10_000))
    model.save(out / "model.zip")
    env.save(str(out / "vecnormalize.pkl"))
    env.training = False
    result = {"env": args.env, "seed": args.seed, "env_steps": model.num_timesteps,
              "greedy": evaluate(model, env, args.env, args.episodes)}
    (out / "evaluation.json").write_text(json.dumps(result, indent=1))
    print(f"{args.env} seed {args.seed}: final model, mean action over {args.episodes} episodes: "
          f"{result['greedy']['mean_return']:.1f}", flush=True)


if __name__ == "__main__":
    main()

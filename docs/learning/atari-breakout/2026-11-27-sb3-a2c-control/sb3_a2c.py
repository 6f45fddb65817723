"""The anchor's own code on this machine: stable-baselines3's A2C with rl-baselines3-zoo's
Atari settings (hyperparams/a2c.yml, "atari") on BreakoutNoFrameskip-v4, as a control for
a3c_graph's Breakout runs. Not part of the project: it needs its own venv
(pip install torch==2.13.0 "stable-baselines3[extra]"; 2.9.2 with ale-py 0.12.1 and
gymnasium 1.4.0 here, the project's own versions of both).

    python sb3_a2c.py OUT_DIR [--frames 40e6] [--seed 0]

Writes OUT_DIR/progress.jsonl: every 10,000 agent steps the frames, minutes and the mean
score of the last 100 whole games (SB3's Monitor sits under AtariWrapper, so its episodes
are whole games, every life, unclipped), as a3c_graph's progress files do. The model (and
RMSProp's state) is saved to OUT_DIR/model.zip every 5 minutes and on SIGTERM; the same
command resumes from it, frames and minutes carrying on (the last 100 games refill).
"""

import argparse
import json
import signal
import time
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import A2C
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.vec_env import VecFrameStack

SAVE_SECONDS = 300


class Progress(BaseCallback):
    def __init__(self, out: Path, every: int, minutes_before: float):
        super().__init__()
        self.out, self.every, self.before = out, every, minutes_before
        self.start = self.saved = time.time()
        self.last = 0

    def minutes(self) -> float:
        return self.before + (time.time() - self.start) / 60

    def _on_step(self) -> bool:
        if self.num_timesteps - self.last >= self.every:
            self.last = self.num_timesteps
            games = [info["r"] for info in self.model.ep_info_buffer]
            row = {"frames": self.num_timesteps * 4, "minutes": round(self.minutes(), 2),
                   "games": len(games),
                   "mean_return_100": round(float(np.mean(games)), 2) if games else None}
            with (self.out / "progress.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
        if time.time() - self.saved >= SAVE_SECONDS:
            self.save()
        return True

    def save(self) -> None:
        self.model.save(self.out / "model.zip")
        (self.out / "minutes.json").write_text(json.dumps(
            {"minutes": self.minutes(), "frames": self.num_timesteps * 4}))
        self.saved = time.time()


def _stop(signum, frame):
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--frames", type=float, default=40e6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _stop)
    torch.set_num_threads(2)
    gym.register_envs(ale_py)
    saved = out / "model.zip"
    pieces = len(list(out.glob("piece-*")))
    (out / f"piece-{pieces}").touch()
    # A resumed piece's envs start from other seeds, not replaying the first piece's games.
    env = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=16,
                                       seed=args.seed + 1000 * pieces), n_stack=4)
    if saved.exists():
        model = A2C.load(saved, env=env)
        minutes_before = json.loads((out / "minutes.json").read_text())["minutes"]
    else:
        model = A2C("CnnPolicy", env, ent_coef=0.01, vf_coef=0.25, seed=args.seed,
                    policy_kwargs={"optimizer_class": RMSpropTFLike,
                                   "optimizer_kwargs": {"eps": 1e-5}})
        minutes_before = 0.0
    progress = Progress(out, 10_000, minutes_before)
    remaining = int(args.frames / 4) - model.num_timesteps
    try:
        model.learn(total_timesteps=remaining, callback=progress, reset_num_timesteps=False)
    except KeyboardInterrupt:
        print("interrupted; saving", flush=True)
    # Saved at the end and on SIGTERM; an error leaves the last 5-minute save in place.
    progress.save()


if __name__ == "__main__":
    main()

"""What SB3's A2C learns from, update by update: the gradient's norm before clipping (whole
network and per layer), the entropy, the value and policy losses and the advantages' size,
on the control's settings (sb3_a2c.py: rl-zoo's A2C on BreakoutNoFrameskip-v4), to set
beside a3c_graph's losses.csv of the same settings. Same venv as sb3_a2c.py.

    python sb3_gradnorm.py OUT.csv [--frames 1.2e6] [--seed 0]

One row per update: update, frames, grad_norm, one grad_norm/<layer> per layer, entropy,
value_loss (SB3's: mean squared error, no 1/2), policy_loss, adv_abs (mean |advantage|),
adv_std, return_abs (mean |return|).
"""

import argparse
import csv

import ale_py
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import A2C
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.vec_env import VecFrameStack

_clip = torch.nn.utils.clip_grad_norm_
LAST = {}


def _recording_clip(parameters, max_norm, *args, **kwargs):
    parameters = list(parameters)
    norm = _clip(parameters, max_norm, *args, **kwargs)
    LAST["grad_norm"] = float(norm)
    return norm


class RecordingA2C(A2C):
    """SB3's A2C, writing what each update saw (its own train(), untouched)."""

    def __init__(self, *args, out=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.out = out
        self.updates = 0

    def train(self) -> None:
        data = next(self.rollout_buffer.get(batch_size=None))
        # Per-layer norms before clipping: the hook runs after backward, before the clip.
        per_layer = {}

        def before_clip(parameters, max_norm, *args, **kwargs):
            for name, p in self.policy.named_parameters():
                if p.grad is not None and name.endswith("weight"):
                    per_layer[name.rsplit(".", 1)[0]] = float(p.grad.norm())
            return _recording_clip(parameters, max_norm, *args, **kwargs)

        torch.nn.utils.clip_grad_norm_ = before_clip
        try:
            super().train()
        finally:
            torch.nn.utils.clip_grad_norm_ = _clip
        self.updates += 1
        values = self.logger.name_to_value
        adv = data.advantages.numpy()
        row = {"update": self.updates, "frames": self.num_timesteps * 4,
               "grad_norm": LAST["grad_norm"],
               **{f"grad_norm/{k}": v for k, v in sorted(per_layer.items())},
               "entropy": -values["train/entropy_loss"],
               "value_loss": values["train/value_loss"],
               "policy_loss": values["train/policy_loss"],
               "adv_abs": float(np.abs(adv).mean()), "adv_std": float(adv.std()),
               "return_abs": float(np.abs(data.returns.numpy()).mean())}
        new = self.updates == 1
        with open(self.out, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(row))
            if new:
                writer.writeheader()
            writer.writerow(row)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--frames", type=float, default=1.2e6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    gym.register_envs(ale_py)
    env = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=16, seed=args.seed),
                        n_stack=4)
    model = RecordingA2C("CnnPolicy", env, ent_coef=0.01, vf_coef=0.25, seed=args.seed,
                         policy_kwargs={"optimizer_class": RMSpropTFLike,
                                        "optimizer_kwargs": {"eps": 1e-5}}, out=args.out)
    model.learn(total_timesteps=int(args.frames / 4))


if __name__ == "__main__":
    main()

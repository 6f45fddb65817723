"""An image bandit: the smallest task that can only be learned through the image path.

One step per episode. The observation is a uint8 image [2, 6, 9] (channels first, like
Atari's stacked frames; C, H and W all differ): dim noise everywhere, and one bright 2x2
patch in either channel, in the left or the right third. Arm 0 pays 1 when the patch is on
the left, arm 1 when it is on the right. A policy that reads the image earns 1; one that
cannot (observations that never reach the network, or reach it beside another step's
action) earns 0.5. Used through Gymnasium's "module:EnvId" syntax
(tests.support.image_env:ImageBandit-v0), so the tasks a launcher starts import it too.
"""

import gymnasium as gym
import numpy as np

SHAPE = (2, 6, 9)
PATCH = 2


def draw(rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """(an observation [2, 6, 9] uint8, the paying arm: 0 if its patch is left, 1 if right)."""
    side = int(rng.integers(2))
    obs = rng.integers(0, 64, SHAPE).astype(np.uint8)
    channel, row = int(rng.integers(SHAPE[0])), int(rng.integers(SHAPE[1] - PATCH + 1))
    third = SHAPE[2] // 3
    col = int(rng.integers(third - PATCH + 1)) + (0 if side == 0 else SHAPE[2] - third)
    obs[channel, row:row + PATCH, col:col + PATCH] = 255
    return obs, side


class ImageBandit(gym.Env):
    observation_space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.obs, self.side = np.zeros(SHAPE, np.uint8), 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.obs, self.side = draw(self.np_random)
        return self.obs, {}

    def step(self, action):
        reward = 1.0 if int(action) == self.side else 0.0
        return self.obs.copy(), reward, True, False, {}


gym.register(id="ImageBandit-v0", entry_point=ImageBandit)

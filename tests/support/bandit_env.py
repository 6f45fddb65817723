"""A two-armed bandit: the smallest task on which a wrong policy gradient shows.

One step per episode; the observation is always the same; arm 1 pays 1 and arm 0 pays 0.
A learner that follows the policy gradient ends up pulling arm 1 (mean return near 1);
one whose gradient has the wrong sign ends up pulling arm 0 (mean return near 0); a
random policy gets 0.5. Used through Gymnasium's "module:EnvId" syntax
(tests.support.bandit_env:Bandit-v0), so the tasks a launcher starts import it too.
"""

import gymnasium as gym
import numpy as np

PAYING_ARM = 1


class TwoArmedBandit(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.ones(1, np.float32), {}

    def step(self, action):
        reward = 1.0 if int(action) == PAYING_ARM else 0.0
        return np.ones(1, np.float32), reward, True, False, {}


gym.register(id="Bandit-v0", entry_point=TwoArmedBandit)

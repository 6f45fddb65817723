"""Broken CartPoles: one whose step raises after a few thousand steps (an actor thread that
dies), one whose observations turn NaN, one that cannot even be reset and one whose reset
never returns.

Used through Gymnasium's "module:EnvId" syntax, so a real worker process imports it.
"""

import time

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

FAIL_AFTER_STEPS = 3000


class FaultyCartPole(CartPoleEnv):
    steps_in_process = 0

    def step(self, action):
        FaultyCartPole.steps_in_process += 1
        if FaultyCartPole.steps_in_process > FAIL_AFTER_STEPS:
            raise RuntimeError("simulated env failure")
        return super().step(action)


gym.register(id="FaultyCartPole-v0", entry_point=FaultyCartPole, max_episode_steps=500,
             reward_threshold=475.0)


NAN_AFTER_STEPS = 2000


class NaNCartPole(CartPoleEnv):
    """A CartPole whose observations turn NaN after a few thousand steps of its process."""

    steps_in_process = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        NaNCartPole.steps_in_process += 1
        if NaNCartPole.steps_in_process > NAN_AFTER_STEPS:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


gym.register(id="NaNCartPole-v0", entry_point=NaNCartPole, max_episode_steps=500,
             reward_threshold=475.0)


class BrokenResetCartPole(CartPoleEnv):
    """A CartPole that can be made (the launcher's checks make one) but never reset: a
    worker fails before its first update, however often it is restarted."""

    def reset(self, **kwargs):
        raise RuntimeError("simulated env failure at reset")


gym.register(id="BrokenResetCartPole-v0", entry_point=BrokenResetCartPole,
             max_episode_steps=500, reward_threshold=475.0)


class HangingResetCartPole(CartPoleEnv):
    """A CartPole whose reset never returns: a worker that hangs before its first update."""

    def reset(self, **kwargs):
        while True:
            time.sleep(1.0)


gym.register(id="HangingResetCartPole-v0", entry_point=HangingResetCartPole,
             max_episode_steps=500, reward_threshold=475.0)

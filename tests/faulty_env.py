"""A CartPole whose step raises after a few thousand steps: an actor thread that dies.

Used through Gymnasium's "module:EnvId" syntax, so a real worker process imports it.
"""

import gymnasium as gym
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

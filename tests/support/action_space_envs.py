"""Envs of the action spaces a run must take or refuse, used through Gymnasium's
"module:EnvId" syntax (tests.support.action_space_envs:TargetBox-v0), so the tasks a
launcher starts import them too.

TargetBox-v0: the smallest continuous-control task. One step per episode; the
observation is a target x in [-1, 1] drawn at reset; the action a is a Box of two
dimensions in [-2, 2], the reward -(a0 - x)^2 - (a1 + x)^2 (as sent, after the clip to the
Box). A Gaussian policy that follows the gradient moves its means to (x, -x) and narrows:
its return rises from about -2.7 (the start's standard deviation 1) towards 0.

Refused ones, each an otherwise valid env: UnboundedBox-v0 (actions in [-inf, inf]),
MatrixBox-v0 (a Box of shape (2, 3)), DictActions-v0 and TupleActions-v0.
"""

import gymnasium as gym
import numpy as np

TARGET_BOUND = 2.0


class TargetBox(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-TARGET_BOUND, TARGET_BOUND, (2,), np.float32)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.target = np.zeros(1, np.float32)
        self.last_action = None  # as the env received it (after any clip)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = self.np_random.uniform(-1.0, 1.0, 1).astype(np.float32)
        return self.target.copy(), {}

    def step(self, action):
        action = np.asarray(action, np.float64)
        self.last_action = action.copy()
        x = float(self.target[0])
        reward = -((action[0] - x) ** 2) - (action[1] + x) ** 2
        return self.target.copy(), float(reward), True, False, {}


def _refused(space):
    class Refused(TargetBox):
        action_space = space
    return Refused


gym.register(id="TargetBox-v0", entry_point=TargetBox)
gym.register(id="UnboundedBox-v0",
             entry_point=_refused(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)))
gym.register(id="MatrixBox-v0", entry_point=_refused(gym.spaces.Box(-1.0, 1.0, (2, 3),
                                                                    np.float32)))
gym.register(id="DictActions-v0", entry_point=_refused(gym.spaces.Dict(
    {"move": gym.spaces.Discrete(2), "speed": gym.spaces.Box(0.0, 1.0, (1,), np.float32)})))
gym.register(id="TupleActions-v0", entry_point=_refused(gym.spaces.Tuple(
    (gym.spaces.Discrete(2), gym.spaces.Discrete(3)))))

"""A hand-made rollout and random weights, for the learner's tests (test_learner.py and
test_worker_graph_cluster.py).

Shapes are time-major as in a3c_graph.core.rollout: T steps of B envs, [T, B, ...].
"""

from __future__ import annotations

import numpy as np

from a3c_graph.core.action_space import ActionSpace
from a3c_graph.core.config import A3CConfig

T, B = 5, 3
OBS_DIM, NUM_ACTIONS = 3, 3
BOX = ActionSpace(NUM_ACTIONS, (-1.0,) * NUM_ACTIONS, (1.0,) * NUM_ACTIONS)
# Non-default coefficients, so that a coefficient applied to the wrong part shows.
CONFIG = A3CConfig(rollout_length=T, envs_per_worker=B, hidden_sizes=(6, 5), gamma=0.9,
                   gae_lambda=0.8, entropy_coef=0.05, value_coef=0.7)


# ---------------------------------------------------------------------------------------------
# A hand-made rollout and random weights.
# ---------------------------------------------------------------------------------------------

def hand_made_rollout(seed: int = 0, obs_dim: int = OBS_DIM,
                      num_actions: int = NUM_ACTIONS, box: bool = False) -> dict[str, np.ndarray]:
    """[T, B] fields as a3c_graph.core.rollout records them, with episode ends mid-rollout:

      env 0: terminated at t=1; its next episode ends at t=3 with both flags set
      env 1: truncated (time limit) at t=2, so V(final observation) is bootstrapped
      env 2: never ends; bootstrapped from V(next_obs[T-1]) at the rollout's end

    next_obs[t] is s_{t+1}, which is obs[t+1] while the episode goes on; where it ended,
    next_obs[t] is the episode's final observation and obs[t+1] the first of a new one.
    Rewards come in several sizes and both signs (and one 0), so that clipping matters.
    box: actions are vectors of num_actions reals [T, B, n], some beyond a Box of [-1, 1]
    (a Gaussian's samples are unbounded), instead of ids [T, B].
    """
    rng = np.random.default_rng(seed)
    terminated = np.zeros((T, B), bool)
    truncated = np.zeros((T, B), bool)
    terminated[1, 0] = terminated[3, 0] = True
    truncated[2, 1] = truncated[3, 0] = True
    done = terminated | truncated
    obs = np.zeros((T, B, obs_dim), np.float32)
    next_obs = rng.normal(size=(T, B, obs_dim)).astype(np.float32)
    obs[0] = rng.normal(size=(B, obs_dim))
    for t in range(T - 1):
        reset_obs = rng.normal(size=(B, obs_dim))
        obs[t + 1] = np.where(done[t][:, None], reset_obs, next_obs[t])
    rewards = (3.0 * rng.normal(size=(T, B))).astype(np.float32)
    rewards[0, 2] = 0.0
    if box:
        actions = (1.5 * rng.normal(size=(T, B, num_actions))).astype(np.float32)
    else:
        actions = rng.integers(num_actions, size=(T, B)).astype(np.int32)
    return {"obs": obs, "actions": actions, "rewards": rewards, "terminated": terminated,
            "truncated": truncated, "next_obs": next_obs}


def name_in_scope(variable) -> str:
    """"net/policy/fc0/weights:0" -> "policy/fc0/weights"."""
    return variable.name.split("/", 1)[1].rsplit(":", 1)[0]


def random_weights(network, seed: int) -> dict[str, np.ndarray]:
    """Weights far from the near-uniform initial policy, so every part of the loss matters."""
    rng = np.random.default_rng(seed)
    return {name_in_scope(v): rng.normal(scale=0.8, size=v.shape.as_list()).astype(np.float32)
            for v in network.variables}


def zero_state(network, batch_size: int):
    """The recurrent state [batch_size, 2, H] an actor starts from: zeros."""
    import tensorflow as tf

    return tf.zeros([batch_size, *network.state_shape], tf.float32)

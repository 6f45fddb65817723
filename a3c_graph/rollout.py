"""Asynchronous rollouts: actor threads that fill a FIFOQueue with whole rollouts.

Each actor is one enqueue op whose graph is a tf.while_loop of T steps: policy inference
on the worker's local network, then the env step through tf.numpy_function. One
session.run of that op produces a complete rollout, so Python is entered once per env
step (for the env itself) and TF once per rollout. A tf.compat.v1.train.QueueRunner runs
one thread per actor; the Coordinator that owns those threads stops them, and the queue
is closed with pending enqueues cancelled so no thread hangs on a full queue at shutdown.

Rollout tensors are time-major, T refers to the rollout length, B to the envs per actor:
  obs [T, B, *obs_shape]       s_t, the observation acted on
  actions [T, B] int32         a_t
  rewards [T, B] float32       r_t
  terminated, truncated [T, B] bool, Gymnasium's flags for the step
  next_obs [T, B, *obs_shape]  the true s_{t+1} (the final observation where an episode ended)
  episode_returns [T, B]       the return of the episode that ended at t, else 0
  episode_lengths [T, B]       its length, else 0
and for a recurrent policy (state_shape given):
  initial_state [B, *state_shape]  the state the rollout acted on at t = 0

A recurrent policy's state lives in a local variable of its actor ([B, *state_shape], never
saved, zero at start): a rollout reads it first and writes its last state back, so the next
rollout goes on where this one stopped. The state of an env whose episode ended at step t is
zeroed before the policy acts at t + 1 (model.reset_state), and the learner replays the
rollout from `initial_state` with the same resets (done = terminated or truncated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from a3c_graph.envs import EnvBatch
from a3c_graph.model import reset_state

tf1 = tf.compat.v1

ROLLOUT_KEYS = ("obs", "actions", "rewards", "terminated", "truncated", "next_obs",
                "episode_returns", "episode_lengths")


def rollout_keys(recurrent: bool = False) -> tuple[str, ...]:
    return ROLLOUT_KEYS + (("initial_state",) if recurrent else ())


def rollout_signature(obs_shape: Sequence[int], obs_dtype, T: int, B: int,
                      state_shape: Sequence[int] | None = None):
    """(dtypes, shapes) of one rollout, in rollout_keys(state_shape is not None) order."""
    obs_dtype = tf.as_dtype(np.dtype(obs_dtype))
    obs = [T, B, *obs_shape]
    dtypes = [obs_dtype, tf.int32, tf.float32, tf.bool, tf.bool, obs_dtype, tf.float32, tf.int32]
    shapes = [obs, [T, B], [T, B], [T, B], [T, B], obs, [T, B], [T, B]]
    if state_shape is not None:
        dtypes.append(tf.float32)
        shapes.append([B, *state_shape])
    return dtypes, shapes


def build_rollout(env_batch: EnvBatch, policy: Callable, T: int, start_after=None,
                  state_shape: Sequence[int] | None = None) -> dict:
    """Tensors of one T-step rollout of `env_batch`, produced entirely in the graph.

    policy: observations [B, *obs_shape] -> actions [B] int32 (sampled); with state_shape,
      (observations, state [B, *state_shape]) -> (actions, the state after the step).
    start_after: ops that must run before the first observation is read (the sync of
      the local network from the globals, so a rollout acts with fresh parameters).
    state_shape: a recurrent policy's state per env; the state is carried from rollout to
      rollout in a local variable of this actor (see the module docstring).
    """
    info = env_batch.info
    B = env_batch.num_envs
    dtypes, shapes = rollout_signature(info.obs_shape, info.obs_dtype, T, B)
    step_dtypes = [dtypes[0], tf.float32, tf.bool, tf.bool, dtypes[0], tf.float32, tf.int32]

    def env_step(actions):
        return tuple(env_batch.step(actions))

    with tf.control_dependencies(start_after or []):
        first_obs = tf.numpy_function(env_batch.observe, [], dtypes[0], stateful=True,
                                      name="observe")
    first_obs.set_shape([B, *info.obs_shape])
    if state_shape is not None:
        return _build_recurrent_rollout(env_step, step_dtypes, first_obs, policy, T, B,
                                        info.obs_shape, dtypes, shapes, state_shape)

    def body(t, obs, arrays):
        actions = policy(obs)
        next_obs, reward, terminated, truncated, final_obs, ep_return, ep_length = \
            tf.numpy_function(env_step, [actions], step_dtypes, stateful=True, name="env_step")
        next_obs.set_shape([B, *info.obs_shape])
        step = (obs, actions, reward, terminated, truncated, final_obs, ep_return, ep_length)
        arrays = tuple(array.write(t, value) for array, value in zip(arrays, step))
        return t + 1, next_obs, arrays

    arrays = tuple(tf.TensorArray(dtype, size=T, element_shape=shape[1:])
                   for dtype, shape in zip(dtypes, shapes))
    _, _, arrays = tf1.while_loop(lambda t, *_: t < T, body, (tf.constant(0), first_obs, arrays),
                                  back_prop=False, parallel_iterations=1, name="rollout")
    return {key: array.stack() for key, array in zip(ROLLOUT_KEYS, arrays)}


def _build_recurrent_rollout(env_step, step_dtypes, first_obs, policy, T, B, obs_shape,
                             dtypes, shapes, state_shape) -> dict:
    """build_rollout for a recurrent policy: the same loop, carrying the policy's state."""
    with tf1.variable_scope(None, default_name="actor"):
        carried = tf1.get_variable("carried_state", [B, *state_shape], tf.float32,
                                   initializer=tf1.zeros_initializer(), trainable=False,
                                   collections=[tf1.GraphKeys.LOCAL_VARIABLES])
    with tf.control_dependencies([first_obs]):
        initial_state = tf.identity(carried.read_value(), name="initial_state")

    def body(t, obs, state, arrays):
        actions, after = policy(obs, state)
        next_obs, reward, terminated, truncated, final_obs, ep_return, ep_length = \
            tf.numpy_function(env_step, [actions], step_dtypes, stateful=True, name="env_step")
        next_obs.set_shape([B, *obs_shape])
        terminated.set_shape([B])
        truncated.set_shape([B])
        # A new episode starts from the zero state, as in the A3C paper.
        state = reset_state(after, tf.logical_or(terminated, truncated))
        step = (obs, actions, reward, terminated, truncated, final_obs, ep_return, ep_length)
        arrays = tuple(array.write(t, value) for array, value in zip(arrays, step))
        return t + 1, next_obs, state, arrays

    arrays = tuple(tf.TensorArray(dtype, size=T, element_shape=shape[1:])
                   for dtype, shape in zip(dtypes, shapes))
    _, _, last_state, arrays = tf1.while_loop(
        lambda t, *_: t < T, body, (tf.constant(0), first_obs, initial_state, arrays),
        back_prop=False, parallel_iterations=1, name="rollout")
    with tf.control_dependencies([carried.assign(last_state)]):
        rollout = {key: tf.identity(array.stack()) for key, array in zip(ROLLOUT_KEYS, arrays)}
        rollout["initial_state"] = tf.identity(initial_state)
    return rollout


class RolloutQueue:
    """A FIFOQueue of whole rollouts fed by QueueRunner actor threads."""

    def __init__(self, obs_shape, obs_dtype, T: int, B: int, capacity: int,
                 state_shape: Sequence[int] | None = None):
        dtypes, shapes = rollout_signature(obs_shape, obs_dtype, T, B, state_shape)
        self.queue = tf1.FIFOQueue(capacity, dtypes, shapes=shapes,
                                   names=list(rollout_keys(state_shape is not None)),
                                   name="rollout_queue")
        self.size = self.queue.size()

    def add_actors(self, rollouts: Sequence[dict]) -> tf1.train.QueueRunner:
        """Register one QueueRunner thread per rollout; started with the session."""
        runner = tf1.train.QueueRunner(
            self.queue,
            [self.queue.enqueue(rollout) for rollout in rollouts],
            close_op=self.queue.close(),
            cancel_op=self.queue.close(cancel_pending_enqueues=True),
        )
        tf1.train.add_queue_runner(runner)
        return runner

    def dequeue(self) -> dict:
        return self.queue.dequeue(name="next_rollout")


def sample_actions(logits):
    """Actions [N] int32 sampled from categorical logits [N, A].

    Non-finite logits (NaN observations) act uniformly at random rather than produce an
    action id outside the action space; the learner then skips the update they poison.
    """
    logits = tf.where(tf.math.is_finite(logits), logits, tf.zeros_like(logits))
    return tf.cast(tf.random.categorical(logits, 1)[:, 0], tf.int32)

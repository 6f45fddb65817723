"""Asynchronous rollouts: actor threads that fill a FIFOQueue with whole rollouts.

Each actor is one enqueue op whose graph is a tf.while_loop of T steps: policy inference
on the worker's local network, then the env step through tf.numpy_function. One
session.run of that op produces a complete rollout, so Python is entered once per env
step (for the env itself) and TF once per rollout. The loop carries only the step count
and the observations: each step's transition is written into numpy buffers by the env
step itself (RolloutRecorder), and one more numpy_function hands the filled buffers to the
graph after the loop. (Carrying eight TensorArrays through the loop instead cost more
than the policy's forward pass: about 100 us per step of 8 CartPole envs, see
benchmarks/PERFORMANCE.md.) A tf.compat.v1.train.QueueRunner runs one thread per actor;
the Coordinator that owns those threads stops them, and the queue is closed with pending
enqueues cancelled so no thread hangs on a full queue at shutdown.

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

from a3c_graph.envs import EnvBatch, Transition
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


class RolloutRecorder:
    """The T steps of one EnvBatch, written into numpy buffers [T, B, ...] as they happen.

    step(t, actions) steps the envs and writes row t of every rollout_keys() field but
    initial_state; collect() returns copies of the buffers in ROLLOUT_KEYS order. The graph's
    rollout loop calls step once per env step and collect once per rollout, each through a
    numpy_function; the TF2 benchmark variants call them from their Python loop.
    """

    def __init__(self, env_batch: EnvBatch, T: int):
        info = env_batch.info
        self.envs = env_batch
        self.T = T
        dtypes, shapes = rollout_signature(info.obs_shape, info.obs_dtype, T,
                                           env_batch.num_envs)
        self.dtypes = dtypes
        self.buffers = [np.zeros(shape, dtype.as_numpy_dtype)
                        for dtype, shape in zip(dtypes, shapes)]

    def step(self, t, actions) -> Transition:
        obs, actions_, rewards, terminated, truncated, next_obs, returns, lengths = self.buffers
        obs[t] = self.envs.observe()
        step = self.envs.step(actions)
        actions_[t] = actions
        rewards[t] = step.reward
        terminated[t] = step.terminated
        truncated[t] = step.truncated
        next_obs[t] = step.final_obs
        returns[t] = step.episode_return
        lengths[t] = step.episode_length
        return step

    def collect(self) -> list[np.ndarray]:
        return [buffer.copy() for buffer in self.buffers]


def build_rollout(env_batch: EnvBatch, policy: Callable, T: int,
                  state_shape: Sequence[int] | None = None) -> dict:
    """Tensors of one T-step rollout of `env_batch`, produced entirely in the graph.

    policy: observations [B, *obs_shape] -> actions [B] int32 (sampled); with state_shape,
      (observations, state [B, *state_shape]) -> (actions, the state after the step).
    state_shape: a recurrent policy's state per env; the state is carried from rollout to
      rollout in a local variable of this actor (see the module docstring).
    """
    info = env_batch.info
    B = env_batch.num_envs
    recorder = RolloutRecorder(env_batch, T)
    obs_dtype = recorder.dtypes[0]

    def env_step(t, actions):
        return recorder.step(t, actions).next_obs

    def env_step_and_done(t, actions):
        step = recorder.step(t, actions)
        return step.next_obs, np.logical_or(step.terminated, step.truncated)

    first_obs = tf.numpy_function(env_batch.observe, [], obs_dtype, stateful=True,
                                  name="observe")
    first_obs.set_shape([B, *info.obs_shape])
    recurrent = state_shape is not None
    if recurrent:
        with tf1.variable_scope(None, default_name="actor"):
            carried = tf1.get_variable("carried_state", [B, *state_shape], tf.float32,
                                       initializer=tf1.zeros_initializer(), trainable=False,
                                       collections=[tf1.GraphKeys.LOCAL_VARIABLES])
        with tf.control_dependencies([first_obs]):
            initial_state = tf.identity(carried.read_value(), name="initial_state")

    def body(t, obs, *state):
        if not recurrent:
            actions = policy(obs)
            next_obs = tf.numpy_function(env_step, [t, actions], obs_dtype, stateful=True,
                                         name="env_step")
            next_obs.set_shape([B, *info.obs_shape])
            return t + 1, next_obs
        actions, after = policy(obs, state[0])
        next_obs, done = tf.numpy_function(env_step_and_done, [t, actions],
                                           [obs_dtype, tf.bool], stateful=True,
                                           name="env_step")
        next_obs.set_shape([B, *info.obs_shape])
        done.set_shape([B])
        # A new episode starts from the zero state, as in the A3C paper.
        return t + 1, next_obs, reset_state(after, done)

    loop_vars = (tf.constant(0), first_obs) + ((initial_state,) if recurrent else ())
    final = tf1.while_loop(lambda t, *_: t < T, body, loop_vars, back_prop=False,
                           parallel_iterations=1, name="rollout")
    # The last observation depends on every env step (the step count alone would let the
    # executor prune the steps away).
    after_loop = [final[1]]
    if recurrent:
        after_loop.append(carried.assign(final[2]))
    with tf.control_dependencies(after_loop):
        buffers = tf.numpy_function(recorder.collect, [], recorder.dtypes, stateful=True,
                                    name="collect_rollout")
    for buffer, array in zip(buffers, recorder.buffers):
        buffer.set_shape(array.shape)
    rollout = dict(zip(ROLLOUT_KEYS, buffers))
    if recurrent:
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

"""Asynchronous rollouts: actor threads that fill a FIFOQueue with whole rollouts.

Each actor is one enqueue op whose graph is a tf.while_loop of T steps: policy inference
on the worker's local network, then the env step through tf.numpy_function. One
session.run of that op produces a complete rollout, so Python is entered once per env
step (for the env itself) and TF once per rollout. The loop carries only the step count
and the observations: each step's transition is written into numpy buffers by the env
step itself (RolloutRecorder), and one more numpy_function hands the filled buffers to the
graph after the loop (TensorArrays carried through the loop cost more than the policy's
forward pass: benchmarks/PERFORMANCE.md). A tf.compat.v1.train.QueueRunner runs one thread
per actor; the Coordinator that owns those threads stops them, and the queue is closed with
pending enqueues cancelled so no thread hangs on a full queue at shutdown.

Rollout tensors are time-major, T refers to the rollout length, B to the envs per actor:
  obs [T, B, *obs_shape]       s_t, the observation acted on
  actions [T, B] int32         a_t (a Box's: [T, B, n] float32, as sampled, before the
                               env's clipping to its bounds)
  rewards [T, B] float32       r_t
  terminated, truncated [T, B] bool, Gymnasium's flags for the step
  next_obs [T, B, *obs_shape]  the true s_{t+1} (the final observation where an episode ended)
  episode_returns [T, B]       the return of the episode that ended at t, else 0 (an
                               episode is a whole game: episode_ended)
  episode_lengths [T, B]       its length, else 0
with a discount (--normalize-rewards: core/normalization.py):
  discounted_returns [T, B]    R_t = discount x R_{t-1} + r_t, the discounted return so far
                               of the env's episode (R back to 0 after an episode's end)
and for a recurrent policy (state_shape given):
  initial_state [B, *state_shape]  the state the rollout acted on at t = 0
These fields are listed once, by rollout_fields (name, dtype, shape each): the recorder's
buffers, the tensors build_rollout returns and, from those tensors, the queue follow that
list, and B is the EnvBatch's own number of envs.

A recurrent policy's state lives in a local variable of its actor ([B, *state_shape], never
saved, zero at start): a rollout reads it first and writes its last state back, so the next
rollout goes on where this one stopped. The state of an env whose episode ended at step t is
zeroed before the policy acts at t + 1 (model.reset_state), and the learner replays the
rollout from `initial_state` with the same resets (done = terminated or truncated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from a3c_graph.core.action_space import ActionSpace
from a3c_graph.core.envs import EnvBatch, Transition
from a3c_graph.core.model import reset_state

tf1 = tf.compat.v1

class RolloutField(NamedTuple):
    """One field of a rollout: its name, dtype and whole shape ([T, B, ...] or [B, ...])."""

    name: str
    dtype: tf.DType
    shape: tuple[int, ...]


def rollout_fields(obs_shape: Sequence[int], obs_dtype, T: int, B: int,
                   state_shape: Sequence[int] | None = None,
                   actions: ActionSpace | None = None,
                   discounted: bool = False) -> tuple[RolloutField, ...]:
    """The fields of one rollout of B envs with observations of `obs_shape` and `obs_dtype`
    and `actions` (default: discrete), in the order the env steps record them (the module
    docstring says what each holds); with `discounted`, the discounted returns; with
    state_shape, a recurrent policy's initial_state last.

    The one place a rollout's fields are listed: the recorder's buffers, the tensors
    build_rollout returns, and so the queue and the TF2 variants' signatures follow it.
    """
    obs = tf.as_dtype(np.dtype(obs_dtype))
    actions = actions or ActionSpace(1)
    fields = (
        RolloutField("obs", obs, (T, B, *obs_shape)),
        RolloutField("actions", tf.as_dtype(actions.dtype), (T, B, *actions.shape)),
        RolloutField("rewards", tf.float32, (T, B)),
        RolloutField("terminated", tf.bool, (T, B)),
        RolloutField("truncated", tf.bool, (T, B)),
        RolloutField("next_obs", obs, (T, B, *obs_shape)),
        RolloutField("episode_returns", tf.float32, (T, B)),
        RolloutField("episode_lengths", tf.int32, (T, B)),
    )
    if discounted:
        fields += (RolloutField("discounted_returns", tf.float32, (T, B)),)
    if state_shape is not None:
        fields += (RolloutField("initial_state", tf.float32, (B, *state_shape)),)
    return fields



class RolloutRecorder:
    """The T steps of one EnvBatch, written into numpy buffers [T, B, ...] as they happen.

    step_and_record(t, actions) steps the envs and writes the transition into row t of every
    field of `fields`; collect() returns copies of the buffers in that order. The graph's
    rollout loop calls step_and_record (through step_and_record_obs, which gives it the
    observations to act on next) once per env step and collect once per rollout, each
    through a numpy_function; the TF2 benchmark variants call them from their Python loop.
    With a `discount` it also records each env's discounted return so far, carried from
    rollout to rollout (the module docstring).
    """

    def __init__(self, env_batch: EnvBatch, T: int, discount: float | None = None):
        info = env_batch.info
        self.envs = env_batch
        self.T = T
        self.discount = discount
        self.fields = rollout_fields(info.obs_shape, info.obs_dtype, T, env_batch.num_envs,
                                     actions=info.actions, discounted=discount is not None)
        self.discounted_return = np.zeros(env_batch.num_envs, np.float64)
        self.buffers = {field.name: np.zeros(field.shape, field.dtype.as_numpy_dtype)
                        for field in self.fields}

    def step_and_record(self, t, actions) -> Transition:
        """Step the envs by `actions` and write the transition into row t."""
        rows = self.buffers
        rows["obs"][t] = self.envs.observe()
        step = self.envs.step(actions)
        # The policy's action, not the executed one: the FIRE the classic protocol forces
        # after a lost life is the env's (the anchors' FireResetEnv hides that step from the
        # agent). Whatever the policy chose there changed nothing, so its term of the policy
        # gradient has mean zero; the forced FIRE's would push FIRE up or down by that step's
        # advantage at every lost life (docs/environments.md).
        rows["actions"][t] = actions
        rows["rewards"][t] = step.reward
        rows["terminated"][t] = step.terminated
        rows["truncated"][t] = step.truncated
        rows["next_obs"][t] = step.final_obs
        rows["episode_returns"][t] = step.episode_return
        rows["episode_lengths"][t] = step.episode_length
        if self.discount is not None:
            self.discounted_return = self.discount * self.discounted_return + step.reward
            rows["discounted_returns"][t] = self.discounted_return
            self.discounted_return[np.logical_or(step.terminated, step.truncated)] = 0.0
        return step

    def step_and_record_obs(self, t, actions) -> np.ndarray:
        """step_and_record, then the observations to act on next: the rollout loop's env
        step."""
        return self.step_and_record(t, actions).next_obs

    def step_and_record_obs_done(self, t, actions) -> tuple[np.ndarray, np.ndarray]:
        """step_and_record_obs and where an episode ended: a recurrent policy's env step."""
        step = self.step_and_record(t, actions)
        return step.next_obs, np.logical_or(step.terminated, step.truncated)

    def collect(self) -> list[np.ndarray]:
        return [self.buffers[field.name].copy() for field in self.fields]


def build_rollout(env_batch: EnvBatch, policy: Callable, T: int,
                  state_shape: Sequence[int] | None = None,
                  discount: float | None = None) -> dict:
    """Tensors of one T-step rollout of `env_batch`, produced entirely in the graph.

    policy: observations [B, *obs_shape] -> actions [B] int32 or [B, n] float32 (sampled);
      with state_shape, (observations, state [B, *state_shape]) -> (actions, the state
      after the step).
    state_shape: a recurrent policy's state per env; the state is carried from rollout to
      rollout in a local variable of this actor (see the module docstring).
    discount: record the discounted returns with it (RolloutRecorder).
    """
    info, B = env_batch.info, env_batch.num_envs
    recorder = RolloutRecorder(env_batch, T, discount)
    obs_dtype = tf.as_dtype(np.dtype(info.obs_dtype))
    obs_shape = [B, *info.obs_shape]
    first_obs = tf.numpy_function(env_batch.observe, [], obs_dtype, stateful=True,
                                  name="observe")
    first_obs.set_shape(obs_shape)
    recurrent = state_shape is not None
    if recurrent:
        carried = _carried_state(rollout_fields(info.obs_shape, info.obs_dtype, T, B,
                                                state_shape, info.actions)[-1])
        with tf.control_dependencies([first_obs]):
            initial_state = tf.identity(carried.read_value(), name="initial_state")

    def body(t, obs, *state):
        if not recurrent:
            next_obs = tf.numpy_function(recorder.step_and_record_obs, [t, policy(obs)], obs_dtype,
                                         stateful=True, name="env_step")
            return t + 1, _shaped(next_obs, obs_shape)
        actions, after = policy(obs, state[0])
        next_obs, done = tf.numpy_function(recorder.step_and_record_obs_done, [t, actions],
                                           [obs_dtype, tf.bool], stateful=True,
                                           name="env_step")
        # A new episode starts from the zero state, as in the A3C paper.
        return (t + 1, _shaped(next_obs, obs_shape),
                reset_state(after, _shaped(done, [B])))

    loop_vars = (tf.constant(0), first_obs) + ((initial_state,) if recurrent else ())
    final = tf1.while_loop(lambda t, *_: t < T, body, loop_vars, back_prop=False,
                           parallel_iterations=1, name="rollout")
    # The last observation depends on every env step (the step count alone would let the
    # executor prune the steps away).
    after_loop = [final[1]] + ([carried.assign(final[2])] if recurrent else [])
    with tf.control_dependencies(after_loop):
        buffers = tf.numpy_function(recorder.collect, [], [f.dtype for f in recorder.fields],
                                    stateful=True, name="collect_rollout")
    rollout = {field.name: _shaped(buffer, field.shape)
               for field, buffer in zip(recorder.fields, buffers)}
    if recurrent:
        rollout["initial_state"] = tf.identity(initial_state)
    return rollout


def _shaped(tensor: tf.Tensor, shape) -> tf.Tensor:
    """`tensor` with its static shape set (a numpy_function's output has none)."""
    tensor.set_shape(shape)
    return tensor


def _carried_state(field: RolloutField) -> tf.Variable:
    """The local variable an actor carries its recurrent state in, from rollout to rollout
    (never saved, zero at start)."""
    with tf1.variable_scope(None, default_name="actor"):
        return tf1.get_variable("carried_state", field.shape, field.dtype,
                                initializer=tf1.zeros_initializer(), trainable=False,
                                collections=[tf1.GraphKeys.LOCAL_VARIABLES])


class RolloutQueue:
    """A FIFOQueue of whole rollouts fed by QueueRunner actor threads, one per rollout.

    The queue's names, dtypes and shapes are those of the rollouts' own tensors (from
    build_rollout), so the queue cannot disagree with what the actors produce.
    """

    def __init__(self, rollouts: Sequence[dict], capacity: int):
        names = list(rollouts[0])
        self.queue = tf1.FIFOQueue(capacity, [rollouts[0][name].dtype for name in names],
                                   shapes=[rollouts[0][name].shape for name in names],
                                   names=names, name="rollout_queue")
        self.size = self.queue.size()
        # Started with the session (MonitoredSession starts the registered queue runners).
        tf1.train.add_queue_runner(tf1.train.QueueRunner(
            self.queue,
            [self.queue.enqueue(rollout) for rollout in rollouts],
            close_op=self.queue.close(),
            cancel_op=self.queue.close(cancel_pending_enqueues=True),
        ))

    def dequeue(self) -> dict:
        return self.queue.dequeue(name="next_rollout")


def episode_ended(episode_lengths):
    """Where an episode, for Atari a whole game, ended: [T, B] bool from episode_lengths
    [T, B] (TF or NumPy). Not terminated or truncated: on the classic protocol a lost life
    is terminated for learning while the game, and its return, go on (core/envs.py)."""
    return episode_lengths > 0

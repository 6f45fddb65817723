"""A TF2 worker, as both TF2 variants run it: actor threads fill a queue, a learner drains it.

The graph worker's design in TF2 code (a3c_graph.core.rollout, a3c_graph.distributed.worker_graph):

    actor thread k   (--actor-threads of them, each with its own B envs, seeded as the
                     graph's actor k): rollouts of T steps, each one call of a tf.function
                     (tf2_common.make_rollout_function) on the worker's local copy of the
                     network, put on a queue.Queue(maxsize=--queue-capacity); a put waits
                     while the queue is full, as the graph's FIFOQueue enqueue does.
    learner          (the caller's thread): takes the next rollout, its clipped gradients on
                     the weights that acted it (one tf.function call), hands them to
                     `exchange` (the variant's way to the parameter holder and back) and
                     sets the local copy from the weights that come back (one call). With
                     --learn false (the acting ceiling) it only counts the rollout.

So acting goes on while the learner computes gradients and waits for the parameter holder,
and the policy lag is the graph's: each rollout acts on the local copy as it starts and its
gradient is computed on those weights, and it waits behind up to --queue-capacity others.
Threads, not processes: the tf.function calls and the env's C++ release the GIL; the env
step's Python takes it.

The learner's loop (train) writes the progress file with a3c_graph.rundir.progress's one clock:
start-up ends at the first applied update, and the final report is written as soon as the
parameter holder says stop, before the actors are stopped and the envs closed.

This module imports TF (through tf2_common): import it only in a process that has chosen
its device (benchmarks.variants.tf2_run.pin_visible_gpus).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvBatch, env_options
from a3c_graph.core.normalization import return_sums, rollout_sums
from a3c_graph.core.rollout import RolloutRecorder, episode_ended
from a3c_graph.rundir.progress import ProgressFile
from benchmarks.variants import tf2_common
from benchmarks.variants.tf2_common import Reply, RolloutResult

# A blocked put or get wakes up this often to check whether the worker is stopping.
WAKE_SECS = 0.2
# How long stop() waits for an actor thread to finish its rollout.
ACTOR_JOIN_SECS = 10.0


class TF2Worker:
    """The envs, local copy, tf.functions and actor threads of one worker process."""

    def __init__(self, config: A3CConfig, task: int, device: str):
        seed = config.seed + 1000 * task  # the graph worker's seeds for task `task`
        tf.random.set_seed(seed)
        self.task = task
        self.device = device
        self.learning = config.learn
        # One EnvBatch per actor thread, seeded as the graph's actor threads' envs.
        self.recorders = [
            RolloutRecorder(EnvBatch(config.env, config.envs_per_worker, seed=seed + 100 * k,
                                     **env_options(config)), config.rollout_length,
                            discount=config.return_discount())
            for k in range(config.actor_threads)]
        info = self.recorders[0].envs.info
        # The cluster's env steps as the holder last reported them: the entropy bonus's anneal.
        self.env_steps_seen = 0
        self.config = config
        with tf.device(device):
            self.model = tf2_common.build_model(info, config)
            self.weights = tf2_common.FlatWeights(self.model.variables)
            # The holder's update count when it sent the weights: the rollouts' acting_version.
            self.version = tf.Variable(0, dtype=tf.int64, trainable=False)
            obs_dim = int(np.prod(info.obs_shape))
            self.scale = (tf2_common.LocalScale(obs_dim) if config.normalize_observations
                          else None)
            # --normalize-rewards: the holder's discounted-return std, set with the weights.
            self.return_std = (tf.Variable(1.0, trainable=False) if config.normalize_rewards
                               else None)
            on_weights = tf2_common.network_on(info, config)
            self.rollout_functions = [
                tf2_common.make_rollout_function(self.weights, on_weights, recorder,
                                                 self.version, self.scale)
                for recorder in self.recorders]
            self.gradients_of = tf2_common.make_gradient_function(
                self.weights, on_weights, config, self.recorders[0].fields, obs_dim)
            # Traced now, in start-up, as the graph variant builds its graph before it
            # trains; not by the threads that first call them.
            for function in self.rollout_functions:
                function.get_concrete_function()
            if self.learning:
                self.gradients_of.get_concrete_function()
            self.weights.assign.get_concrete_function()
        self.learner_keys = (*tf2_common.learner_signature(self.recorders[0].fields),
                             tf2_common.ACTING_WEIGHTS,
                             *(tf2_common.ACTING_SCALE if self.scale is not None else ()))
        self.rollouts: queue.Queue = queue.Queue(maxsize=config.queue_capacity)
        self.stopping = threading.Event()
        self.actor_error: BaseException | None = None
        self.threads = [threading.Thread(target=self._act, args=(fn,), name=f"actor_{k}",
                                         daemon=True)
                        for k, fn in enumerate(self.rollout_functions)]

    def set_weights(self, flat: np.ndarray, version: int, scale: tuple | None = None,
                    return_std: float | None = None) -> None:
        """The local copy set to the holder's weights after its update number `version`
        (and, with --normalize-observations, to its observation scale; with
        --normalize-rewards, to its discounted return's standard deviation)."""
        with tf.device(self.device):
            self.weights.assign(flat)
            self.version.assign(version)
            if self.scale is not None and scale is not None:
                self.scale.assign(scale)
            if self.return_std is not None and return_std is not None:
                self.return_std.assign(return_std)

    def adopt(self, reply: Reply) -> None:
        """set_weights from the holder's reply after its update number global_step."""
        self.env_steps_seen = int(reply.stats["env_steps"])
        self.set_weights(reply.weights, reply.stats["global_step"], reply.scale,
                         reply.return_std)

    def start_actors(self) -> None:
        for thread in self.threads:
            thread.start()

    def _act(self, rollout_function) -> None:
        try:
            while not self.stopping.is_set():
                with tf.device(self.device):
                    rollout = rollout_function()
                while not self.stopping.is_set():
                    try:
                        self.rollouts.put(rollout, timeout=WAKE_SECS)
                        break
                    except queue.Full:
                        continue
        except BaseException as error:  # the learner re-raises it in its own thread
            self.actor_error = error
            self.stopping.set()

    def next_rollout(self) -> dict | None:
        """The next rollout, or None after WAKE_SECS without one (check whether to stop).
        An actor thread's exception is raised here, in the learner's thread."""
        try:
            return self.rollouts.get(timeout=WAKE_SECS)
        except queue.Empty:
            if self.actor_error is not None:
                raise self.actor_error from None
            return None

    def learn(self, rollout: dict) -> RolloutResult:
        """The result of one rollout: its clipped gradients on the weights that acted it,
        or, acting only (--learn false, the acting ceiling), none: the rollout is counted
        and dropped, as the graph's learner does then."""
        env_steps = int(np.prod(rollout["rewards"].shape))
        if not self.learning:
            finished = rollout["episode_returns"].numpy()[
                episode_ended(rollout["episode_lengths"].numpy())]
            return RolloutResult(self.task, np.zeros(0, np.float32), 0, env_steps,
                                 [float(r) for r in finished], None)
        inputs = {key: rollout[key] for key in self.learner_keys}
        if self.return_std is not None:
            inputs[tf2_common.RETURN_STD] = self.return_std.read_value()
        if self.config.anneal_entropy:
            inputs[tf2_common.ENTROPY_COEF] = tf.constant(
                self.config.entropy_coef_at(self.env_steps_seen), tf.float32)
        with tf.device(self.device):
            gradients, finished, parts = self.gradients_of(inputs)
            sums = (None if self.scale is None
                    else [x.numpy() for x in rollout_sums(rollout["obs"])])
            discounted = (None if self.return_std is None
                          else [x.numpy() for x in return_sums(rollout)])
        return RolloutResult(self.task, gradients.numpy(),
                             int(rollout[tf2_common.ACTING_VERSION]), env_steps,
                             [float(r) for r in finished.numpy()], float(parts["entropy"]),
                             observation_sums=sums, return_sums=discounted)

    def stop(self) -> None:
        """Stop the actor threads (each finishes its rollout) and close the envs."""
        self.stopping.set()
        for thread in self.threads:
            if thread.ident is not None:
                thread.join(timeout=ACTOR_JOIN_SECS)
        for recorder in self.recorders:
            recorder.envs.close()


def train(worker: TF2Worker, progress: ProgressFile,
          exchange: Callable[[RolloutResult], Reply | None],
          stopped_from_outside: Callable[[], bool]) -> str:
    """The learner's loop, until the parameter holder says stop; returns its reason.

    exchange: send one result to the parameter holder and wait for its Reply; None if the
    run is being stopped from outside meanwhile (then, as after stopped_from_outside(),
    the reason is "signal"). The worker's local copy must hold the initial weights.
    """
    reason = "signal"
    worker.start_actors()
    try:
        while not stopped_from_outside():
            rollout = worker.next_rollout()
            if rollout is None:
                continue
            result = worker.learn(rollout)
            result.started = progress.training_started
            reply = exchange(result)
            if reply is None:
                break
            progress.update(reply.stats, result.env_steps, result.entropy)
            if reply.stop_reason is not None:
                reason = reply.stop_reason
                break
            if reply.weights is not None:  # None acting only: nothing was applied
                worker.adopt(reply)
            if progress.due():
                progress.write("running")
        progress.write("done", stop_reason=reason)
    finally:
        worker.stop()
    return reason

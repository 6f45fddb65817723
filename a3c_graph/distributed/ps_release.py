"""When a ps task that nobody stops may end: each worker leaves a token on every ps.

A ps serves until it is told to stop, and on one machine the launcher tells it, after the
workers have ended (workers first: the chief's last checkpoint reads the variables on the
ps). Under a bare srun nobody does, and Slurm signals every task of a step at the same
moment (scancel, the time limit's --signal, a requeue): a ps that left at once would take
the variables with it before the chief had saved them. So under Slurm the ps ends when the
run is over for every worker, and not before:

  * each worker, once its session is closed (for the chief: after its last checkpoint),
    enqueues its index on a queue of every ps task (TF1's "done queue": a FIFOQueue with a
    shared_name, created by whichever task touches it first);
  * the ps polls its queue's size: all the workers' tokens in, it exits 0, and srun's step
    ends with every task's status 0;
  * after a stop signal it waits for the tokens at most STOP_GRACE_SECS, since a worker
    that died leaves none (Slurm's KillWait, 30 s by default, is longer).

Nothing here knows about A3C; it is how a ps/worker cluster ends without a supervisor.
Whether a task's workers end its ps is cluster.releases_ps.
"""

from __future__ import annotations

import time

import tensorflow as tf

from a3c_graph.system.cli import first_line

tf1 = tf.compat.v1

QUEUE_NAME = "workers_done"
# Ample: a token per worker run, whatever restarts happen.
CAPACITY = 4096
POLL_SECS = 0.2
# After a stop signal: the chief's last checkpoint takes well under a second here, and
# every task of a scancel'ed job should be gone within 10 s.
STOP_GRACE_SECS = 8.0
TOKEN_TIMEOUT_SECS = 5.0


def done_queue(ps_task: int):
    """The done queue on ps task `ps_task` (in the default graph)."""
    with tf1.device(f"/job:ps/task:{ps_task}"):
        return tf1.FIFOQueue(CAPACITY, [tf.int32], shapes=[[]],
                             shared_name=f"{QUEUE_NAME}_{ps_task}",
                             name=f"{QUEUE_NAME}_{ps_task}")


def token_ops(num_ps: int, worker_task: int) -> list:
    """A worker's enqueue of its index on every ps task, built before the graph is final."""
    return [done_queue(i).enqueue(tf.constant(worker_task, tf.int32)) for i in range(num_ps)]


def leave_token(target: str, graph, config, ops: list) -> str | None:
    """Run the worker's `ops` in a session of its own; the error, one line, or None."""
    options = tf.compat.v1.RunOptions(timeout_in_ms=int(TOKEN_TIMEOUT_SECS * 1000))
    try:
        with tf.compat.v1.Session(target, graph=graph, config=config) as session:
            session.run(ops, options=options)
    except tf.errors.OpError as error:
        return first_line(error)
    return None


def serve_until_released(target: str, ps_task: int, num_workers: int, config,
                         stopped) -> str:
    """Poll ps task `ps_task`'s done queue until every worker has left a token, or, once
    `stopped()` is true, for STOP_GRACE_SECS more; why it returned."""
    graph = tf.Graph()
    with graph.as_default():
        size = done_queue(ps_task).size()
    stop_deadline = None
    with tf.compat.v1.Session(target, graph=graph, config=config) as session:
        while True:
            if session.run(size) >= num_workers:
                return "every worker is done"
            if stop_deadline is None and stopped():
                stop_deadline = time.monotonic() + STOP_GRACE_SECS
            if stop_deadline is not None and time.monotonic() >= stop_deadline:
                return f"stop signal; no token from some worker within {STOP_GRACE_SECS:g} s"
            time.sleep(POLL_SECS)

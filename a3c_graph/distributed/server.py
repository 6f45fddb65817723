"""A task's TF server, and the ConfigProto its server and sessions run with.

The ConfigProto (task_config) is where a task's devices meet TensorFlow: soft placement
(ops without a kernel on the task's device, such as the env step's numpy_function and the
queue, fall back to its CPU); allow_growth, or --gpu-memory-fraction, and
visible_device_list from the task's device (a3c_graph/system/devices.py: process_task_device
reads --gpu and CUDA_VISIBLE_DEVICES; the launcher's plan that gives each task its GPU is
a3c_graph/launcher/device_plan.py, docs/devices.md the user's view); the op thread counts;
and device filters that keep a worker talking to the ps and to itself only.
"""

from __future__ import annotations

import tensorflow as tf

from a3c_graph.core.config import A3CConfig
from a3c_graph.distributed.cluster import ClusterError, TaskSpec, check_port_free
from a3c_graph.system.devices import TaskDevice, apply_to_config


def task_config(spec: TaskSpec, config: A3CConfig, device: TaskDevice) -> tf.compat.v1.ConfigProto:
    """The ConfigProto of task `spec`'s server and sessions, on `device`."""
    return apply_to_config(
        session_config(spec, config.intra_op_threads, config.inter_op_threads), device)


def session_config(spec: TaskSpec, intra_op_threads: int = 1, inter_op_threads: int = 2,
                   visible_device_list: str = ""):
    """The ConfigProto of this task's server and sessions.

    device_filters keep a worker talking to the ps and to itself only, so a dead worker
    never blocks the others (without them a session waits for every task in the cluster).
    """
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        intra_op_parallelism_threads=intra_op_threads,
        inter_op_parallelism_threads=inter_op_threads,
    )
    config.gpu_options.allow_growth = True
    config.gpu_options.visible_device_list = visible_device_list
    if spec.job == "worker":
        config.device_filters.extend(["/job:ps", f"/job:worker/task:{spec.task}"])
    else:
        config.device_filters.append("/job:ps")
    return config


def start_server(spec: TaskSpec, config):
    """A started tf.compat.v1.train.Server for this task."""
    check_port_free(spec.address)
    cluster = tf.compat.v1.train.ClusterSpec(dict(spec.cluster))
    try:
        return tf.compat.v1.train.Server(cluster, job_name=spec.job, task_index=spec.task,
                                         config=config, start=True)
    except tf.errors.UnknownError as error:
        # Lost a race for the port after the check above, or the host cannot be bound.
        raise ClusterError(f"cannot start the TF server for {spec.job} task {spec.task} "
                           f"at {spec.address}: {error.message}") from None

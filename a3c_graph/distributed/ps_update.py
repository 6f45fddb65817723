"""What the ps tasks apply: --optimizer on the globals where they live, the pool of
--rollouts-per-update rollouts' gradients, and the optimizers' state as a few scalars.

worker_graph.apply_on_ps builds these on each ps task; the names they give their variables
(Adam's slots and beta powers) are the ones every checkpoint holds.
"""

from __future__ import annotations

import tensorflow as tf

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.learner import build_optimizer

tf1 = tf.compat.v1


class GradientPool:
    """Where one ps task pools k = --rollouts-per-update rollouts' gradients of its variables
    into one update: a sum beside each variable and a count of the rollouts added.

    Lock-free, as the ps's other updates: a worker adds its gradients, then the count; the
    worker whose rollout brings the count to a multiple of k applies the mean of what the
    sums hold then, and subtracts exactly what it read, so a gradient another worker adds
    meanwhile stays for the next update: each is applied once. Never saved (no collection):
    a checkpoint holds what it always held, and a resumed run starts with empty pools (at
    most k - 1 rollouts' gradients are lost with a ps task)."""

    def __init__(self, variables: list, ps_task: int | None):
        with tf1.variable_scope("gradient_pool"):
            self.sums = [tf1.Variable(tf.zeros(v.shape, v.dtype.base_dtype), trainable=False,
                                      collections=[], use_resource=True,
                                      name=v.op.name.replace("/", "_"))
                         for v in variables]
            self.count = tf1.Variable(tf.constant(0, tf.int64), trainable=False,
                                      collections=[], use_resource=True,
                                      name=f"rollouts_ps{ps_task or 0}")

    def add(self, gradients: list, counts) -> tf.Tensor:
        """Add a rollout's gradients and count it if `counts` (bool; a rollout at a learning
        rate of 0, not finite or past the anneal, is left out, as the TF2 holder leaves
        it). -> the count after it (int64)."""
        def add_and_count():
            added = [total.assign_add(g) for total, g in zip(self.sums, gradients)]
            with tf.control_dependencies(added):
                return self.count.assign_add(1)

        return tf.cond(counts, add_and_count, self.count.read_value, name="add")

    def apply_when_full(self, count, counted, k: int, apply_mean):
        """apply_mean(mean gradients) if this rollout `counted` and its `count` (add's)
        filled the pool, then the sums less what was applied; else nothing (a rollout left
        out applies nothing, whatever the count it leaves). -> (the op, whether it filled
        the pool: a bool tensor)."""
        def apply():
            pooled = [tf.identity(total.read_value()) for total in self.sums]
            with tf.control_dependencies([apply_mean([p / k for p in pooled])]):
                return tf.group(*(total.assign_sub(p) for total, p in zip(self.sums, pooled)))

        filled = tf.logical_and(counted, tf.equal(tf.math.floormod(count, k), 0))
        return tf.cond(filled, apply, tf.no_op, name="apply_when_full"), filled

    def initialized(self) -> tf.Operation:
        """Zeroes what is not initialized yet (a new ps task), and leaves the rest: each
        worker's local init op runs it."""
        ops = []
        for variable in [*self.sums, self.count]:
            ops.append(tf.cond(tf1.is_variable_initialized(variable), tf.no_op,
                               lambda v=variable: tf.group(v.assign(tf.zeros(v.shape, v.dtype)))))
        return tf.group(*ops)


def apply_to_globals(gradients, variables, learning_rate, config: A3CConfig,
                     global_step=None, ps_task: int | None = None):
    """The update of --optimizer (core/learner.build_optimizer) of `variables` by
    `gradients` (one per variable) at `learning_rate`, where the variables live. Each ps
    task gets an optimizer of its own (worker_graph.exchange_with_ps), so Adam's beta powers sit
    beside its variables; the first ps task's slots are named plainly ("Adam"), the
    others' after their task ("Adam_ps1"), the names every checkpoint holds."""
    suffix = "" if ps_task is None else f"_ps{ps_task}"
    return build_optimizer(config, learning_rate, suffix).apply_gradients(
        zip(gradients, variables), global_step=global_step)


def optimizer_state(variables: list, global_step: tf.Variable, config: A3CConfig) -> dict:
    """The optimizers' state on the ps as a few scalars (TensorBoard's optimizer/ tags).

    Adam: the root mean square over all weights of its first moment m and of sqrt(v), and
    of the step it takes now in units of the learning rate, m_hat / (sqrt(v_hat) + epsilon)
    (bias-corrected at t = global step): 1 means every weight moves by a full learning rate
    each update. RMSProp: the root mean square of sqrt(mean square). `variables`: the global
    network's; t: `global_step`. A slot is found by its name,
    "<variable>/<optimizer>[_ps<k>][_1]" (the names every checkpoint holds)."""
    by_name = {v.op.name: v for v in tf1.global_variables()}
    sums: dict[str, list] = {"first": [], "second": [], "step": []}
    t = tf.cast(global_step.read_value(), tf.float32)
    for variable in variables:
        slots = sorted(name for name in by_name if name.startswith(variable.op.name + "/"))
        if not slots:
            return {}
        first = by_name[next(name for name in slots if not name.endswith("_1"))]
        with tf1.device(variable.device):
            if config.optimizer == "adam":
                second = by_name[next(name for name in slots if name.endswith("_1"))]
                m_hat = first / (1.0 - tf.pow(config.adam_beta1, t))
                v_hat = second / (1.0 - tf.pow(0.999, t))
                sums["first"].append(tf.reduce_sum(tf.square(first)))
                sums["second"].append(tf.reduce_sum(second))
                sums["step"].append(tf.reduce_sum(tf.square(
                    m_hat / (tf.sqrt(v_hat) + config.adam_epsilon))))
            else:
                sums["second"].append(tf.reduce_sum(first))
    count = float(sum(v.shape.num_elements() for v in variables))
    names = {"first": "optimizer/m_rms", "second": "optimizer/sqrt_v_rms",
             "step": "optimizer/step_rms_in_lr"}
    if config.optimizer != "adam":
        names["second"] = "optimizer/sqrt_mean_square_rms"
    return {names[key]: tf.sqrt(tf.add_n(parts) / count)
            for key, parts in sums.items() if parts}

"""The SavedModel of a trained policy: the global network restored from a checkpoint and
saved with the ``act`` signature (exporting.py, the command, says what it holds and where
policy.json goes)."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from a3c_graph.core.envs import env_info, env_options
from a3c_graph.system import process_env
from a3c_graph.trained.playing import checkpointed_network

tf1 = tf.compat.v1


def write_saved_model(config, checkpoint: str, path: Path, signature_name: str):
    """The global network restored from `checkpoint`, saved at `path` with its one signature
    (`signature_name`); the env's EnvInfo."""
    info = env_info(config.env, **env_options(config))
    with tf.Graph().as_default() as graph:
        obs = tf1.placeholder(tf.as_dtype(info.obs_dtype), [None, *info.obs_shape],
                              name="observations")
        network, saver = checkpointed_network(config, info.obs_shape, info.actions)
        inputs = {"observations": obs}
        outputs = {}
        if network.recurrent:
            state = tf1.placeholder(tf.float32, [None, *network.state_shape], name="state")
            inputs["state"] = state
            policy, values, outputs["state"] = network.step(obs, state)
        else:
            policy, values = network(obs)
        outputs.update(_policy_outputs(network, policy), value=tf.identity(values, "value"))
        # The TF1 SavedModel builder warns that it is TF1 API on every use; this is on purpose.
        verbosity = tf1.logging.get_verbosity()
        tf1.logging.set_verbosity(tf1.logging.ERROR)
        try:
            with process_env.stderr_to_devnull():  # the session's cuInit line, no GPU
                session = tf1.Session(graph=graph)
            with session:
                saver.restore(session, checkpoint)
                builder = tf1.saved_model.Builder(str(path))
                signature = tf1.saved_model.predict_signature_def(inputs, outputs)
                builder.add_meta_graph_and_variables(
                    session, [tf1.saved_model.SERVING],
                    signature_def_map={signature_name: signature}, strip_default_attrs=True)
                builder.save()
        finally:
            tf1.logging.set_verbosity(verbosity)
    return info


def _policy_outputs(network, policy) -> dict:
    """The act signature's policy outputs (the module docstring lists them)."""
    distribution = network.distribution
    if not network.actions.continuous:
        return {"logits": tf.identity(policy, "logits"),
                "greedy_action": tf.cast(distribution.mode(policy), tf.int64,
                                         name="greedy_action"),
                "sampled_action": tf.cast(distribution.sample(policy), tf.int64,
                                          name="sampled_action")}
    return {"greedy_action": tf.identity(distribution.mode(policy), "greedy_action"),
            "sampled_action": tf.identity(distribution.sample(policy), "sampled_action"),
            "log_std": tf.identity(distribution.split(policy)[1], "log_std")}

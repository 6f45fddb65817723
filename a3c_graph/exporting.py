"""A trained policy as a SavedModel that plain TensorFlow loads: ``python -m a3c_graph.export
--logdir RUN --out DIR`` and a3c_graph.export(...).

A checkpoint here is read only by this package's graph code. The SavedModel is the policy
alone (the global network of the chief's latest checkpoint, or --checkpoint), with one
signature, ``act``:

  inputs   observations [N, *obs_shape] of the env's dtype (Atari: uint8 [N, 4, 42, 42],
           the last 4 frames, oldest first); a recurrent policy also takes state [N, 2, H]
           (zeros at the start of an episode)
  outputs  discrete actions: greedy_action [N] int64 (the most likely), sampled_action [N]
           int64 (as in training), logits [N, A] float32; a Box of n actions: greedy_action
           [N, n] float32 (the Gaussian's mean), sampled_action [N, n] (as in training:
           clip it to the Box's bounds before the env), log_std [N, n]; and value [N]
           float32; recurrent: state [N, 2, H]

What to feed it, the env id and its protocol (sticky actions, FIRE, life loss, frame skip,
frame stack, screen size), the action space (a Box's bounds) and, for a run with
--normalize-observations, that the model standardizes raw observations itself (with the
checkpoint's frozen statistics), is in DIR/assets.extra/policy.json, SavedModel's place for files
the graph does not read. `tf.saved_model.load(DIR).signatures["act"]` runs it in TF2
eager with no a3c_graph import (scripts/play_saved_model.py plays one with Gymnasium).

Built in TF1 graph mode from the same network code as training and evaluation, so the
exported ops are the ones the checkpoint was trained with. The SavedModel is written to a
temporary directory beside DIR and moved into place whole: a failed export leaves nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from a3c_graph.cli import OneLineParser, UsageError, fail
from a3c_graph.system import process_env

PROG = "a3c_graph.export"
SIGNATURE = "act"
METADATA = os.path.join("assets.extra", "policy.json")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, help_hint=False, description=(
        "Write a run's trained policy as a SavedModel with an 'act' signature: "
        "python -m a3c_graph.export --logdir RUN --out DIR."))
    parser.add_argument("--logdir", required=True, help="The training run's log dir.")
    parser.add_argument("--out", required=True, help="The SavedModel directory to write.")
    parser.add_argument("--checkpoint", help="A checkpoint prefix (default: the newest in "
                                             "--logdir).")
    parser.add_argument("--force", action="store_true",
                        help="Replace --out if it exists (default: refuse).")
    return parser


def policy_metadata(config, info, checkpoint: str) -> dict:
    """What a user of the SavedModel must know to feed it (policy.json)."""
    from a3c_graph.core.config import is_atari, resolve_policy

    data = {"format": "a3c_graph policy 1", "signature": SIGNATURE, "env": config.env,
            "observation_shape": list(info.obs_shape), "observation_dtype": str(info.obs_dtype),
            "num_actions": info.actions.n, "action_space": _action_space(info.actions),
            "recurrent": resolve_policy(config.policy, info.obs_shape)[1],
            "checkpoint": os.path.basename(checkpoint), "frame_skip": info.frame_skip,
            "config": {k: (list(v) if isinstance(v, tuple) else v)
                       for k, v in dataclasses.asdict(config).items()}}
    if config.normalize_observations:
        data["observation_normalization"] = {
            "inside_the_model": True, "feed": "raw observations",
            "rule": "clip((obs - mean) / sqrt(variance + 1e-8), -10, 10), the mean and "
                    "variance of every observation training acted on, frozen at the "
                    "checkpoint"}
    if is_atari(config.env):
        data["atari"] = {
            "protocol": config.protocol, "frame_stack": config.frame_stack,
            "screen_size": config.screen_size, "grayscale": True, "max_pool": True,
            "repeat_action_probability": config.repeat_action_probability,
            "full_action_space": config.full_action_space, "noop_max": 30,
            "fire_at_reset": config.protocol == "classic",
            "fire_after_life_loss": config.protocol == "classic",
            # The frames from before a lost life are zeros in the next life's stack.
            "new_stack_after_life_loss": config.protocol == "classic",
            "make": ("gym.make_vec(env, num_envs, vectorization_mode='vector_entry_point', "
                     "img_height=screen_size, img_width=screen_size, stack_num=frame_stack, "
                     "frameskip=frame_skip, repeat_action_probability=..., "
                     "use_fire_reset=fire_at_reset, life_loss_info=fire_after_life_loss, "
                     "reward_clipping=False)")}
    return data


def export_policy(logdir: str, out: str, checkpoint: str | None = None,
                  force: bool = False) -> Path:
    """Write the policy of the run in `logdir` as a SavedModel at `out`; its path. UsageError
    (one line, nothing written) for a log dir without a usable config or checkpoint, or an
    `out` that exists without `force`."""
    from a3c_graph.evaluation import checked_checkpoint, load_run_config

    target = Path(out)
    if target.exists() and not force:
        raise UsageError(f"{target} exists; give --force to replace it")
    config = load_run_config(logdir)
    # TF's C++ start-up lines would break the one-line error contract of what follows.
    process_env.import_tensorflow_quietly()
    with process_env.set_while_running():
        found = checked_checkpoint(logdir, config, checkpoint, False, warn=lambda _: None)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            info = _write_saved_model(config, found, staging / "model")
            (staging / "model" / "assets.extra").mkdir(exist_ok=True)
            (staging / "model" / METADATA).write_text(
                json.dumps(policy_metadata(config, info, found), indent=2) + "\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging / "model", target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_saved_model(config, checkpoint: str, path: Path):
    """The global network restored from `checkpoint`, saved with the act signature; the
    env's EnvInfo."""
    import tensorflow as tf

    from a3c_graph.core.envs import env_info, env_options
    from a3c_graph.core.model import build_network
    from a3c_graph.core.normalization import checkpointed_scale

    tf1 = tf.compat.v1
    info = env_info(config.env, **env_options(config))
    with tf.Graph().as_default() as graph:
        obs = tf1.placeholder(tf.as_dtype(info.obs_dtype), [None, *info.obs_shape],
                              name="observations")
        scale, statistics = checkpointed_scale(config, info.obs_shape)
        network = build_network(info.obs_shape, info.actions, config, "global",
                                observation_scale=scale)
        inputs = {"observations": obs}
        outputs = {}
        if network.recurrent:
            state = tf1.placeholder(tf.float32, [None, *network.state_shape], name="state")
            inputs["state"] = state
            policy, values, outputs["state"] = network.step(obs, state)
        else:
            policy, values = network(obs)
        outputs.update(_policy_outputs(network, policy), value=tf.identity(values, "value"))
        saver = tf1.train.Saver(var_list=network.variables + statistics)
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
                    signature_def_map={SIGNATURE: signature}, strip_default_attrs=True)
                builder.save()
        finally:
            tf1.logging.set_verbosity(verbosity)
    return info


def _action_space(actions) -> dict:
    """policy.json's account of the actions: Discrete n, or a Box's shape and bounds."""
    if not actions.continuous:
        return {"type": "Discrete", "n": actions.n}
    return {"type": "Box", "shape": [actions.n], "low": list(actions.low),
            "high": list(actions.high)}


def _policy_outputs(network, policy) -> dict:
    """The act signature's policy outputs (the module docstring lists them)."""
    import tensorflow as tf

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


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        path = export_policy(args.logdir, args.out, args.checkpoint, args.force)
    except UsageError as error:
        return fail(PROG, error)
    print(json.dumps({"saved_model": str(path), "signature": SIGNATURE,
                      **{k: v for k, v in json.loads((path / METADATA).read_text()).items()
                         if k in ("env", "observation_shape", "observation_dtype",
                                  "num_actions", "recurrent", "checkpoint")}}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
           [N, n] float32 (the Gaussian's mean), sampled_action [N, n] (from the policy's
           Gaussian in that state; with --sde its noise is drawn anew each call, where
           training's explores along one draw per rollout), both unbounded: clip either to
           the Box's bounds before the env, as training and evaluation do; log_std [N, n];
           and value [N] float32; recurrent: state [N, 2, H]

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

from a3c_graph.core.config import is_atari, resolve_policy
from a3c_graph.system import process_env
from a3c_graph.system.cli import OneLineParser, UsageError, fail
from a3c_graph.trained.evaluation import load_run_config

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
    target = Path(out)
    if target.exists() and not force:
        raise UsageError(f"{target} exists; give --force to replace it")
    config = load_run_config(logdir)
    # TF loads here, once the flags are checked, with its C++ start-up lines off stderr
    # (docs/architecture.md, "Where the heavy imports load").
    process_env.import_tensorflow_quietly()
    from a3c_graph.trained import playing, saved_model

    with process_env.set_while_running():
        found = playing.checked_checkpoint(logdir, config, checkpoint, False,
                                           warn=lambda _: None)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            info = saved_model.write_saved_model(config, found, staging / "model", SIGNATURE)
            (staging / "model" / "assets.extra").mkdir(exist_ok=True)
            (staging / "model" / METADATA).write_text(
                json.dumps(policy_metadata(config, info, found), indent=2) + "\n")
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging / "model", target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _action_space(actions) -> dict:
    """policy.json's account of the actions: Discrete n, or a Box's shape and bounds."""
    if not actions.continuous:
        return {"type": "Discrete", "n": actions.n}
    return {"type": "Box", "shape": [actions.n], "low": list(actions.low),
            "high": list(actions.high)}


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

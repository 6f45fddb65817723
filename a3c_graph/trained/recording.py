"""Recording a MuJoCo episode in a process of its own: ``python -m a3c_graph.trained.recording``.

MuJoCo's headless renderer (EGL) and TensorFlow cannot share a process: once TensorFlow is
loaded, the first rendered frame ends the process with a segmentation fault (mujoco 3.3.7 and
4.0.0, TF 2.21). So playing.py plays a MuJoCo episode in the evaluating process without
frames, keeps the actions it sent, and this module replays them in a child process that
never imports TensorFlow, recording the video there. A MuJoCo env is deterministic given its
reset seed and its actions, so the replay is the episode that was played: the child reports
the return it replayed, and the parent refuses a recording whose return differs.

The child reads one JSON object on stdin: env (id), options (make_env's), seed, actions
(one list per step), video_dir, name_prefix. It writes {"return": R, "steps": T} on stdout,
or one line on stderr and exits 2 if it cannot render.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np

from a3c_graph.core.envs import make_env
from a3c_graph.system.cli import UsageError, first_line

PROG = "a3c_graph.trained.recording"


def renders_apart(env) -> bool:
    """Whether `env` (a make_env env) renders through MuJoCo, which cannot share a process
    with TensorFlow: Gymnasium's MujocoEnv and its subclasses hold a mujoco_renderer."""
    return hasattr(env.unwrapped, "mujoco_renderer")


def record_replay(env_id: str, options: dict, seed: int, actions, video_dir: str,
                  name_prefix: str) -> tuple[float, int]:
    """Records in a child process the episode of `env_id` reset with `seed` and driven by
    `actions` (one per step, as sent to env.step) as <video_dir>/<name_prefix>-episode-0.mp4.
    Returns the replayed (return, steps); UsageError if the child cannot render."""
    spec = {"env": env_id, "options": options, "seed": seed,
            "actions": [[float(x) for x in action] for action in actions],
            "video_dir": video_dir, "name_prefix": name_prefix}
    # EGL renders without a display; a user's own MUJOCO_GL (osmesa, glfw) is kept.
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    result = subprocess.run([sys.executable, "-m", "a3c_graph.trained.recording"],
                            input=json.dumps(spec), capture_output=True, text=True, env=env)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        why = lines[-1] if lines else f"the recording process exited {result.returncode}"
        raise UsageError(f"--record cannot render {env_id}: {why.removeprefix(PROG + ': ')}")
    replayed = json.loads(result.stdout)
    return float(replayed["return"]), int(replayed["steps"])


def _replay(spec: dict) -> tuple[float, int]:


    env = make_env(spec["env"], render_mode="rgb_array", **spec["options"])
    env = gym.wrappers.RecordVideo(env, spec["video_dir"], episode_trigger=lambda e: e == 0,
                                   name_prefix=spec["name_prefix"],
                                   fps=env.metadata.get("render_fps", 30))
    total, steps = 0.0, 0
    try:
        env.reset(seed=spec["seed"])
        for action in spec["actions"]:
            _, reward, terminated, truncated, _ = env.step(np.asarray(action, np.float32))
            total += float(reward)
            steps += 1
            if terminated or truncated:
                break
    finally:
        env.close()  # RecordVideo writes the mp4 here
    return total, steps


def main() -> int:
    try:
        total, steps = _replay(json.loads(sys.stdin.read()))
    except Exception as error:  # noqa: BLE001 - the parent reports it in one line
        print(f"{PROG}: {first_line(error)}", file=sys.stderr)
        return 2
    print(json.dumps({"return": total, "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Playing a trained agent: ``python -m a3c_graph.evaluate``, several models in one process.

Each model's graph is pinned to its own device (--devices); on a CPU-only machine the
process is given several logical CPU devices, and where the ops ran is read from a traced
session.run. A checkpoint evaluate cannot play (damaged, of another network, missing) is
refused in one line: those cases are in test_checkpoints.py, next to the checks they reach.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import untrained_run

from a3c_graph.system.devices import CUDA_ENV, FAKE_GPUS_ENV


def test_evaluate_plays_several_graphs_in_one_process_each_on_its_own_device(tmp_path, capsys):
    from a3c_graph.trained import evaluation

    first, second = tmp_path / "a", tmp_path / "b"
    untrained_run(first)
    untrained_run(second)
    code = evaluation.main(["--logdir", str(first), "--logdir", str(second), "--copies", "2",
                            "--devices", "cpu:0,cpu:1,cpu:2", "--episodes", "1"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    result = json.loads(out[-1])
    models = result["models"]
    assert [(m["logdir"], m["copy"]) for m in models] == [
        (str(first), 0), (str(first), 1), (str(second), 0), (str(second), 1)]
    assert [m["device"] for m in models] == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2",
                                             "/device:CPU:0"]
    for model in models:
        # Each graph's ops ran on its own device, and only there.
        assert model["ran_on"] == ["/job:localhost/replica:0/task:0" + model["device"]]
    assert result["episodes"] == 4
    played = [line for line in out
              if re.match(r"^model \d \(/device:CPU:\d\): episode 1/1: return ", line)]
    assert len(played) == 4, out


def test_evaluate_on_a_gpu_that_is_not_there_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    from a3c_graph.trained import evaluation

    monkeypatch.setenv(FAKE_GPUS_ENV, "0")
    monkeypatch.delenv(CUDA_ENV, raising=False)
    code = evaluation.main(["--logdir", str(tmp_path), "--devices", "cpu:0,gpu:0"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err == ["a3c_graph.evaluate: error: --devices: GPU 0 is not visible: no GPU is "
                   "visible here (A3C_GRAPH_FAKE_GPUS=0)"]


@pytest.mark.parametrize("seconds", ["0", "-1", "nan"])
def test_evaluate_gif_of_no_length_is_one_line_exit_2(tmp_path, capsys, seconds):
    from a3c_graph.trained import evaluation

    code = evaluation.main(["--logdir", str(tmp_path), "--gif", seconds])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err == [f"a3c_graph.evaluate: error: --gif must be a number of seconds above 0, "
                   f"got {float(seconds)}"]


@pytest.mark.parametrize("factor", ["0", "-2", "nan"])
def test_evaluate_gif_speed_below_zero_is_one_line_exit_2(tmp_path, capsys, factor):
    from a3c_graph.trained import evaluation

    code = evaluation.main(["--logdir", str(tmp_path), "--gif", "5", "--gif-speed", factor])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err == [f"a3c_graph.evaluate: error: --gif-speed must be a factor above 0, "
                   f"got {float(factor)}"]


def test_gif_speed_keeps_the_frame_rate_and_drops_frames(tmp_path):
    """A 4-s video at 15 fps played 2x: 2 s of GIF, 15 frames a second (each frame's delay
    stays 1/15 s, which every browser honours), every other frame of the video."""
    pytest.importorskip("moviepy")
    import numpy as np
    from moviepy import ImageSequenceClip
    from PIL import Image

    from a3c_graph.trained.playing import write_gif

    # Frame k is a flat gray of level 4k, so the GIF's frames say which video frames they are.
    frames = [np.full((32, 48, 3), 4 * k, np.uint8) for k in range(60)]
    mp4 = tmp_path / "game.mp4"
    ImageSequenceClip(frames, fps=15).write_videofile(str(mp4), codec="libx264", logger=None)
    gif = write_gif(str(mp4), seconds=100, speed=2.0)
    with Image.open(gif) as image:
        assert 29 <= image.n_frames <= 31, image.n_frames
        assert image.info["duration"] in (60, 70, 66, 67), image.info["duration"]
        levels = []
        for i in range(image.n_frames):
            image.seek(i)
            levels.append(int(np.asarray(image.convert("L"))[16, 24]))
    # Every other video frame: the levels step by about 8, not 4.
    steps = np.diff(levels)
    assert 6 <= np.median(steps) <= 10, levels


def test_a_mujoco_episode_is_recorded_in_a_process_of_its_own_as_it_was_played(tmp_path, capsys):
    """MuJoCo's renderer cannot share a process with TensorFlow: evaluate plays the episode,
    a child process without TF replays its actions into the video. The video is that episode
    (a frame per step; the replay's return is the played one) and shows the robot, not a
    blank frame."""
    pytest.importorskip("mujoco", reason="the mujoco extra is not installed")
    import numpy as np
    from moviepy import VideoFileClip

    from a3c_graph.trained import evaluation

    logdir = tmp_path / "hopper"
    untrained_run(logdir, env="Hopper-v5", normalize_observations=True)
    code = evaluation.main(["--logdir", str(logdir), "--episodes", "1", "--record",
                            "--gif", "1"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    steps = json.loads(out[-1])["frames"][0]
    played = float(re.search(r"^episode 1/1: return (\S+) in", out[0]).group(1))
    assert out[1] == ("recorded episode 1 in a process of its own (MuJoCo renders apart from "
                      f"TensorFlow): replayed return {played:.1f}, as played"), out
    mp4, = (logdir / "videos").glob("*.mp4")
    with VideoFileClip(str(mp4)) as clip:
        frames = list(clip.iter_frames())
    # RecordVideo keeps the reset's frame and one per step; reading the mp4 back may drop
    # the last (its duration is rounded to the frame rate).
    assert steps <= len(frames) <= steps + 1
    assert all(np.asarray(frame).std() > 10 for frame in frames[:: max(1, steps // 5)])
    assert mp4.with_suffix(".gif").exists()


def test_a_negative_number_of_agent_steps_to_evaluate_is_one_line_exit_2(tmp_path, capsys):
    from a3c_graph.trained import evaluation

    logdir = tmp_path / "run"
    untrained_run(logdir)
    assert evaluation.main(["--logdir", str(logdir), "--min-agent-steps", "-1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "a3c_graph.evaluate: error: --min-agent-steps must be 0 or more, got -1"]


def test_evaluate_goes_on_with_whole_episodes_until_the_agent_steps_asked_for(tmp_path, capsys):
    from a3c_graph.trained import evaluation

    logdir = tmp_path / "run"
    untrained_run(logdir)  # CartPole, greedy: episode e the same in every run (seed + e)

    def play(*flags: str) -> tuple[list[int], list[str]]:
        assert evaluation.main(["--logdir", str(logdir), "--episodes", "2", *flags]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        return json.loads(lines[-1])["frames"], lines[:-1]

    two, _ = play()
    asked = sum(two) + 1
    lengths, lines = play("--min-agent-steps", str(asked))
    # Whole episodes until the steps asked for, and not one more than that takes.
    assert lengths[:2] == two and len(lengths) >= 3
    assert sum(lengths) >= asked and sum(lengths[:-1]) < asked
    assert lines[0].startswith("episode 1/2: ")
    assert lines[2].startswith(f"episode 3 (to {asked:,} steps): ")


def test_a_sampled_evaluation_of_one_episode_at_a_time_replays_with_its_seed(tmp_path, capsys):
    from a3c_graph.trained import evaluation

    logdir = tmp_path / "run"
    untrained_run(logdir)  # CartPole: an untrained policy's sampled episodes vary in length

    def lengths(seed: str) -> list[int]:
        assert evaluation.main(["--logdir", str(logdir), "--episodes", "5", "--sample",
                                "--seed", seed]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["frames"]

    assert lengths("3") == lengths("3")


def test_training_s_stream_counts_episodes_as_they_end_through_every_env_s_resets(tmp_path):
    """playing.play_stream, the training curve's way of counting: the workers' env batches
    (their seeds), every env going on after its episode ends, each episode counted once as
    it ends, until the number asked for (the evaluation-gap diagnostic's replay)."""
    from a3c_graph.core.envs import actor_seed
    from a3c_graph.rundir.run_config import read_run_config
    from a3c_graph.trained.playing import play_stream

    logdir = tmp_path / "run"
    untrained_run(logdir, envs_per_worker=2)  # CartPole: an episode's return is its length
    config = read_run_config(str(logdir))
    checkpoint = str(logdir / "model.ckpt-0")
    seeds = [actor_seed(config.seed, task, 0) for task in range(2)]
    lines: list[str] = []
    returns, lengths = play_stream(config, checkpoint, 12, False, seeds, say=lines.append)
    assert len(returns) == len(lines) == 12
    assert returns == [float(n) for n in lengths]  # whole episodes, each its own return
    envs = [int(re.search(r"\(env (\d+)\)", line).group(1)) for line in lines]
    assert set(envs) == {0, 1, 2, 3}  # both workers' batches play
    assert max(envs.count(env) for env in envs) > 1  # an env counted again after its reset
    # Greedy on the same seeds, the same stream; other seeds, other episodes.
    assert play_stream(config, checkpoint, 12, False, seeds, say=lambda line: None)[0] == returns
    assert play_stream(config, checkpoint, 12, False, [s + 1 for s in seeds],
                       say=lambda line: None)[0] != returns

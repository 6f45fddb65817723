"""The classic Atari protocol (--protocol classic; core/envs.py): a lost life ends the episode
for learning while the game goes on, FIRE and a new frame stack follow it, and every return
reported is a whole game's; the games train to their budget without a target (through the launcher:
tests/e2e/test_games.py); evaluation plays whole games as one batch.

Needs the atari extra; without ale-py every test here is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, child_env, untrained_run

pytest.importorskip("ale_py", reason="the atari extra is not installed: "
                                      "pip install -e '.[atari]'")

from a3c_graph.core.config import config_to_argv, resolve_config  # noqa: E402
from a3c_graph.core.envs import EnvBatch, env_options, make_env  # noqa: E402
from a3c_graph.core.rollout import RolloutRecorder  # noqa: E402
from a3c_graph.core.run_spec import resolve_run  # noqa: E402

BREAKOUT = "ALE/Breakout-v5"
FIRE = 1  # Breakout's minimal action set: NOOP, FIRE, RIGHT, LEFT


def test_the_classic_protocol_is_one_flag_with_no_sticky_actions_and_40m_frames():
    config = resolve_config({"env": BREAKOUT, "protocol": "classic"})
    assert config.repeat_action_probability == 0.0
    assert config.max_steps * 4 == 40_000_000  # the budget of rl-zoo's Atari table
    assert config.clip_rewards  # for learning; what is reported stays the game's score
    # rl-baselines3-zoo's A2C, the anchor of the games' scores: the Nature network on 84x84
    # frames, 16 envs x 5 steps, 5-step returns, RMSProp at a constant 7e-4 (docs/learning.md,
    # "The classic games").
    assert (config.screen_size, config.conv_filters, config.conv_kernel, config.conv_stride,
            config.conv_padding, config.activation, config.hidden_sizes) == (
        84, (32, 64, 64), (8, 4, 3), (4, 2, 1), "valid", "relu", (512,))
    assert (config.envs_per_worker, config.rollout_length, config.gae_lambda,
            config.queue_capacity) == (16, 5, 1.0, 1)
    assert (config.optimizer, config.learning_rate, config.rmsprop_epsilon,
            config.anneal_learning_rate, config.anneal_entropy) == (
        "rmsprop", 7e-4, 1e-5, False, False)
    # The value loss is 0.5 x MSE here: a coefficient of 0.5 is the zoo's 0.25 x MSE.
    assert (config.entropy_coef, config.value_coef, config.grad_clip_norm) == (0.01, 0.5, 0.5)
    assert config_to_argv(config) == ["--env=ALE/Breakout-v5", "--protocol=classic"]
    # Given, the flag wins over the protocol's default.
    assert resolve_config({"env": BREAKOUT, "protocol": "classic",
                           "repeat_action_probability": 0.25}).repeat_action_probability == 0.25
    with pytest.raises(ValueError, match="--protocol classic is for ALE/ env ids"):
        resolve_config({"env": "CartPole-v1", "protocol": "classic"})


def test_a_game_without_a_known_target_trains_to_its_budget():
    for protocol in ("ale-v5", "classic"):
        config = resolve_config({"env": BREAKOUT, "protocol": protocol})
        assert resolve_run(config).target_return == float("inf")
    assert resolve_run(resolve_config({"env": "ALE/Pong-v5"})).target_return == 18.0


def test_a_lost_life_ends_the_learning_episode_and_fire_follows_it_until_game_over():
    config = resolve_config({"env": BREAKOUT, "protocol": "classic"})
    batch = EnvBatch(BREAKOUT, 2, seed=3, **env_options(config))
    rng = np.random.default_rng(0)
    score = np.zeros(2)
    lives_lost = [0, 0]
    games: list[tuple[int, float, int]] = []
    fire_next = np.zeros(2, bool)
    try:
        for _ in range(20_000):
            # Never FIRE of its own: the ball is launched only by the protocol's FIRE.
            step = batch.step(rng.choice([0, 2, 3], size=2).astype(np.int32))
            assert np.array_equal(step.action == FIRE, fire_next)  # executed, and recorded
            score += step.reward
            for i in range(2):
                if step.episode_length[i]:  # the game is over
                    assert step.terminated[i] or step.truncated[i]
                    games.append((lives_lost[i], float(step.episode_return[i]), i))
                    assert step.episode_return[i] == score[i]  # the whole game's score
                    score[i], lives_lost[i] = 0.0, 0
                elif step.terminated[i]:  # a lost life: the game goes on
                    lives_lost[i] += 1
                    assert step.episode_return[i] == 0.0
            fire_next = step.terminated & (step.episode_length == 0)
            if len(games) >= 2:
                break
    finally:
        batch.close()
    # Breakout's 5 lives: 4 lost with the game going on, the 5th ends it; the ball was
    # launched each time (random paddles score now and then).
    assert [lost for lost, _, _ in games] == [4, 4]
    assert sum(score for _, score, _ in games) > 0


def test_the_learner_is_given_the_policy_s_action_where_the_protocol_forced_fire():
    config = resolve_config({"env": BREAKOUT, "protocol": "classic"})
    recorder = RolloutRecorder(EnvBatch(BREAKOUT, 2, seed=5, **env_options(config)), T=1)
    forced = 0
    try:
        for _ in range(5_000):
            chosen = np.array([3, 2], np.int32)  # LEFT, RIGHT: never FIRE
            step = recorder.step_and_record(0, chosen)
            # The env executed FIRE after a lost life; the rollout holds what was chosen.
            assert np.array_equal(recorder.buffers["actions"][0], chosen)
            forced += int((step.action == FIRE).sum())
            if forced >= 2:
                break
    finally:
        recorder.envs.close()
    assert forced >= 2


def _stack_after_a_lost_life(step, steps: int) -> list:
    """Which frames of the stack hold pixels, from a lost life on, for `steps` steps; `step`
    steps the env with NOOP and says whether a life was lost and the observation."""
    while True:
        life_lost, obs = step()
        if life_lost:
            break
    seen = [[bool(frame.any()) for frame in obs]]
    for _ in range(steps - 1):
        seen.append([bool(frame.any()) for frame in step()[1]])
    return seen


def test_a_new_life_starts_a_new_frame_stack_in_training_and_in_one_env():
    """As the anchors' stack restarts at the end of a learning episode: the frames from
    before a lost life are zeros until the new life's frames push them out."""
    new_life = [[False, False, False, True], [False, False, True, True],
                [False, True, True, True], [True, True, True, True]]
    options = env_options(resolve_config({"env": BREAKOUT, "protocol": "classic"}))
    batch = EnvBatch(BREAKOUT, 1, seed=1, **options)

    def batch_step():
        step = batch.step(np.zeros(1, np.int32))
        return bool(step.terminated[0] and not step.episode_length[0]), step.next_obs[0]

    env = make_env(BREAKOUT, **options)
    env.reset(seed=1)

    def env_step():
        lives = env.unwrapped.ale.lives()
        obs, _, terminated, truncated, _ = env.step(0)
        return env.unwrapped.ale.lives() < lives and not (terminated or truncated), obs

    try:
        assert _stack_after_a_lost_life(batch_step, 4) == new_life
        assert _stack_after_a_lost_life(env_step, 4) == new_life
    finally:
        batch.close()
        env.close()


def test_one_env_of_the_classic_protocol_fires_after_reset_and_after_a_lost_life():
    env = make_env(BREAKOUT, **env_options(resolve_config({"env": BREAKOUT,
                                                           "protocol": "classic"})))
    try:
        env.reset(seed=0)
        lives, total, done = env.unwrapped.ale.lives(), 0.0, False
        while not done:  # only NOOP from the agent: the wrapper's FIRE launches every ball
            _, reward, terminated, truncated, _ = env.step(0)
            total += reward
            done = terminated or truncated
            lives = min(lives, env.unwrapped.ale.lives())
        assert lives == 0 and not truncated  # every ball was launched and lost: a whole game
    finally:
        env.close()


def test_evaluation_plays_whole_atari_games_as_one_batch(tmp_path):
    logdir = tmp_path / "run"
    untrained_run(logdir, env=BREAKOUT, protocol="classic", conv_filters=(4, 4, 4))
    played = subprocess.run(
        [sys.executable, "-m", "a3c_graph.evaluate", "--logdir", str(logdir), "--episodes",
         "3", "--sample"], capture_output=True, text=True, cwd=REPO, env=child_env(),
        timeout=600)
    assert played.returncode == 0, played.stderr[-2000:]
    lines = played.stdout.strip().splitlines()
    assert sorted(line.split(":")[0] for line in lines[:-1]) == [
        "game 1/3", "game 2/3", "game 3/3"]
    summary = json.loads(lines[-1])
    assert summary["episodes"] == 3 and len(summary["returns"]) == 3
    assert all(frames % 4 == 0 and frames > 0 for frames in summary["frames"])
    assert summary["std_return"] >= 0
    assert played.stderr == ""  # a successful evaluate prints only its own lines




def test_a_sampled_evaluation_with_the_same_seed_plays_the_same_games(tmp_path, capsys):
    # --seed fixes the no-ops and the sampled actions both: an evaluation can be replayed, and
    # two checkpoints evaluated on one seed meet the same games as far as their play agrees.
    from a3c_graph.trained import evaluation

    logdir = tmp_path / "run"
    untrained_run(logdir, env=BREAKOUT, protocol="classic", conv_filters=(4, 4, 4))

    def play(seed: str) -> dict:
        assert evaluation.main(["--logdir", str(logdir), "--episodes", "3", "--sample",
                                "--seed", seed]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    first, again, other = play("7"), play("7"), play("8")
    assert (again["returns"], again["frames"]) == (first["returns"], first["frames"])
    assert other["frames"] != first["frames"]


def test_evaluation_to_a_number_of_agent_steps_plays_whole_batches_of_the_same_games(
        tmp_path, capsys):
    # rl-zoo's and this project's Atari evaluations play at least N agent steps of whole
    # games: batch after batch of --episodes games, game i seeded --seed + i whichever batch
    # it is in, so the games are the ones a single batch of all of them plays (greedy: the
    # same games move for move).
    from a3c_graph.trained import evaluation

    logdir = tmp_path / "run"
    untrained_run(logdir, env=BREAKOUT, protocol="classic", conv_filters=(4, 4, 4))

    def play(*flags: str) -> tuple[dict, list[str]]:
        assert evaluation.main(["--logdir", str(logdir), *flags]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        return json.loads(lines[-1]), lines[:-1]

    four, _ = play("--episodes", "4")
    first_two_steps = sum(four["frames"][:2]) // 4
    by_steps, lines = play("--episodes", "2", "--min-agent-steps", str(first_two_steps + 1))
    assert by_steps["episodes"] == 4
    assert (by_steps["returns"], by_steps["frames"]) == (four["returns"], four["frames"])
    assert sorted(line.split(":")[0] for line in lines) == [
        "game 1/2", "game 2/2", "game 3/4", "game 4/4"]
    # Enough steps already: no second batch.
    just_two, _ = play("--episodes", "2", "--min-agent-steps", str(first_two_steps))
    assert just_two["returns"] == four["returns"][:2]


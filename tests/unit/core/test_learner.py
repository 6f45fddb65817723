"""core/learner.py: learner_loss, the loss a worker learns from, against a slow NumPy ground
truth (tests/support/ground_truth.py: the MLP's forward pass from its weights, GAE per env with the
terminated/truncated rules, returns, then the A3C loss), the clipped update, the learning
rate the optimizer is given, and the direction learning takes: one gradient step on a
hand-made rollout. Where a worker's graph puts these ops is test_worker_graph.py's.

Shapes are time-major as in a3c_graph.core.rollout: T steps of B envs, [T, B, ...].
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from a3c_graph.core import learner
from a3c_graph.core.config import A3CConfig
from a3c_graph.core.model import ActorCriticMLP
from tests.support import ground_truth
from tests.support.hand_made import (
    BOX,
    CONFIG,
    NUM_ACTIONS,
    OBS_DIM,
    B,
    T,
    hand_made_rollout,
    name_in_scope,
    random_weights,
)

tf1 = tf.compat.v1


# ---------------------------------------------------------------------------------------------
# The learner's loss on a hand-made rollout (tests/support/hand_made.py).
# ---------------------------------------------------------------------------------------------

def learner_loss_in_tf(config: A3CConfig, rollout: dict, weights_seed: int = 1,
                       obs_dim: int = OBS_DIM, actions=NUM_ACTIONS, return_std=None):
    """learner.learner_loss of an ActorCriticMLP over `actions` (a number of discrete
    actions, or an ActionSpace) with random weights on `rollout` (and with
    --normalize-rewards, the discounted return's standard deviation `return_std`).

    Returns (the loss and its parts, {"total", "policy_loss", "value_loss", "entropy"};
    the gradients of the total, by variable name; the weights, by variable name).
    """
    with tf.Graph().as_default():
        network = ActorCriticMLP((obs_dim,), actions, config.hidden_sizes, "net")
        total, parts = learner.learner_loss(
            network, {key: tf.constant(value) for key, value in rollout.items()}, config,
            None if return_std is None else tf.constant(return_std, tf.float32))
        gradients = tf.gradients(total, network.variables)
        weights = random_weights(network, weights_seed)
        with tf1.Session() as session:
            session.run([v.assign(weights[name_in_scope(v)]) for v in network.variables])
            got, grads = session.run([{"total": total, **parts}, gradients])
    names = [name_in_scope(v) for v in network.variables]
    return got, dict(zip(names, grads)), weights


def assert_parts_match(got: dict, want: dict, rtol: float = 2e-5) -> None:
    for key in ("total", "policy_loss", "value_loss", "entropy"):
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=1e-6, err_msg=key)


# ---------------------------------------------------------------------------------------------
# learner_loss against the ground truth.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("clip_rewards", [False, True])
@pytest.mark.parametrize("normalize_advantages", [True, False])
def test_learner_loss_matches_the_numpy_ground_truth(normalize_advantages, clip_rewards):
    config = dataclasses.replace(CONFIG, normalize_advantages=normalize_advantages,
                                 clip_rewards=clip_rewards)
    rollout = hand_made_rollout()
    got, _, weights = learner_loss_in_tf(config, rollout)
    assert_parts_match(got, ground_truth.mlp_loss(weights, rollout, config))


@pytest.mark.parametrize("normalize_advantages", [True, False])
def test_a_gaussian_policys_loss_over_three_dimensions_matches_the_ground_truth(
        normalize_advantages):
    """A Box of 3 actions: the log-probability and the entropy of each dimension summed,
    and the log-probability of the actions as sampled, some beyond the Box's bounds (the
    env's clip is not the policy's)."""
    config = dataclasses.replace(CONFIG, normalize_advantages=normalize_advantages)
    rollout = hand_made_rollout(box=True)
    assert np.abs(rollout["actions"]).max() > 1.0
    got, _, weights = learner_loss_in_tf(config, rollout, actions=BOX)
    assert_parts_match(got, ground_truth.mlp_loss(weights, rollout, config))


def test_normalized_and_raw_advantages_give_different_policy_losses_each_its_own():
    rollout = hand_made_rollout()
    configs = {flag: dataclasses.replace(CONFIG, normalize_advantages=flag)
               for flag in (True, False)}
    got = {flag: learner_loss_in_tf(config, rollout) for flag, config in configs.items()}
    weights = got[True][2]
    want = {flag: ground_truth.mlp_loss(weights, rollout, config)
            for flag, config in configs.items()}

    normalized, raw = got[True][0]["policy_loss"], got[False][0]["policy_loss"]
    assert abs(normalized - raw) > 0.1 * max(abs(normalized), abs(raw)), (normalized, raw)
    np.testing.assert_allclose(normalized, want[True]["policy_loss"], rtol=2e-5)
    np.testing.assert_allclose(raw, want[False]["policy_loss"], rtol=2e-5)
    # Normalization is for the policy term only: the value targets are the raw returns.
    np.testing.assert_allclose(got[True][0]["value_loss"], got[False][0]["value_loss"],
                               rtol=1e-6)


def test_clipped_rewards_learn_from_the_sign_of_each_reward_only():
    rollout = hand_made_rollout()
    clipped_config = dataclasses.replace(CONFIG, clip_rewards=True)
    clipped, _, weights = learner_loss_in_tf(clipped_config, rollout)
    raw, _, _ = learner_loss_in_tf(CONFIG, rollout)
    signs, _, _ = learner_loss_in_tf(CONFIG, {**rollout, "rewards": np.sign(rollout["rewards"])})

    # Learning from clipped rewards is learning from rewards of -1, 0 and 1...
    assert_parts_match(clipped, signs, rtol=1e-6)
    assert_parts_match(clipped, ground_truth.mlp_loss(weights, rollout, clipped_config))
    # ...which is not learning from the raw rewards (of sizes up to about 3 here).
    assert abs(clipped["value_loss"] - raw["value_loss"]) > 0.1 * raw["value_loss"]


def test_normalized_rewards_learn_from_each_reward_over_the_return_std_clipped_at_ten():
    """--normalize-rewards: the loss is the ground truth's on rewards divided by the
    discounted return's standard deviation the learner was given, those beyond +-10 clipped
    (VecNormalize's clip_reward); a larger standard deviation gives another loss."""
    rollout = hand_made_rollout()
    config = dataclasses.replace(CONFIG, normalize_rewards=True)
    std = 0.25
    assert np.abs(rollout["rewards"] / std).max() > 10.0  # the clip is reached
    scaled, _, weights = learner_loss_in_tf(config, rollout, return_std=std)
    assert_parts_match(scaled, ground_truth.mlp_loss(weights, {**rollout, "return_std": std},
                                                     config))
    other, _, _ = learner_loss_in_tf(config, rollout, return_std=4.0)
    assert abs(other["value_loss"] - scaled["value_loss"]) > 0.1 * scaled["value_loss"]


def test_a_truncated_episode_bootstraps_from_its_final_observation_a_terminated_one_not():
    """Moving the final observation of the terminated episode (env 0, t=1) changes nothing;
    moving that of the truncated one (env 1, t=2) changes the value targets."""
    rollout = hand_made_rollout()
    base, _, _ = learner_loss_in_tf(CONFIG, rollout)

    def with_final_obs_moved(t, b):
        next_obs = rollout["next_obs"].copy()
        next_obs[t, b] += 2.0
        return learner_loss_in_tf(CONFIG, {**rollout, "next_obs": next_obs})[0]

    after_terminal = with_final_obs_moved(1, 0)
    after_truncation = with_final_obs_moved(2, 1)
    assert_parts_match(after_terminal, base, rtol=1e-6)
    assert abs(after_truncation["value_loss"] - base["value_loss"]) > 1e-3


@pytest.mark.parametrize("box", [False, True])
@pytest.mark.parametrize("normalize_advantages", [True, False])
def test_gradients_are_the_semi_gradient_of_the_ground_truth(normalize_advantages, box):
    """tf.gradients of the total loss equal central differences of the NumPy loss with the
    advantages and returns held constant (A3C's targets carry no gradient); for a Box, the
    log std's gradient too."""
    config = dataclasses.replace(CONFIG, normalize_advantages=normalize_advantages)
    rollout = hand_made_rollout(seed=3, box=box)
    _, gradients, weights = learner_loss_in_tf(config, rollout,
                                               actions=BOX if box else NUM_ACTIONS)
    assert ("policy/log_std" in gradients) == box
    want = ground_truth.mlp_semi_gradient(weights, rollout, config)
    assert set(gradients) == set(want)
    for name, gradient in gradients.items():
        np.testing.assert_allclose(gradient, want[name], rtol=1e-3, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("clip", [1e-3, 1e3], ids=["clipped", "under_the_clip"])
def test_the_update_is_clipped_to_the_global_norm_and_reports_the_norm_before(clip):
    """learner_update's gradients are the loss's, scaled together so that their global norm
    is at most --grad-clip-norm (the direction is kept); grad_norm is the norm before."""
    config = dataclasses.replace(CONFIG, grad_clip_norm=clip)
    rollout = hand_made_rollout(seed=3)
    _, want, _ = learner_loss_in_tf(config, rollout)
    with tf.Graph().as_default():
        network = ActorCriticMLP((OBS_DIM,), NUM_ACTIONS, config.hidden_sizes, "net")
        update = learner.learner_update(
            network, {key: tf.constant(value) for key, value in rollout.items()}, config)
        weights = random_weights(network, 1)  # learner_loss_in_tf's
        with tf1.Session() as session:
            session.run([v.assign(weights[name_in_scope(v)]) for v in network.variables])
            gradients, norm, finite = session.run(
                [update.gradients, update.grad_norm, update.is_finite])
        names = [name_in_scope(v) for v in network.variables]
    norm_before = float(np.sqrt(sum(np.sum(np.square(g)) for g in want.values())))
    assert finite
    np.testing.assert_allclose(norm, norm_before, rtol=1e-5)
    scale = min(1.0, clip / norm_before)
    assert scale < 1.0 if clip < 1 else scale == 1.0  # each case tests what it says
    for name, gradient in zip(names, gradients):
        np.testing.assert_allclose(gradient, want[name] * scale, rtol=1e-4, atol=1e-9,
                                   err_msg=name)


# ---------------------------------------------------------------------------------------------
# The learning rate the optimizer reads.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("anneal, env_steps, finite, want", [
    (True, 0, True, 0.01),
    (True, 250, True, 0.0075),
    (True, 999, True, 0.00001),
    (True, 1000, True, 0.0),
    (True, 5000, True, 0.0),  # past --max-steps: floored at 0, never negative
    (True, 250, False, 0.0),  # a NaN/inf update moves nothing
    (False, 750, True, 0.01),
    (False, 750, False, 0.0),
])
def test_the_learning_rate_op_anneals_linearly_over_max_steps(anneal, env_steps, finite, want):
    """learner.learning_rate_now, the tensor each ps task's Adam is given (the cluster-wide
    step through it is in test_worker_graph_cluster.py): lr (1 - env steps / --max-steps), at 0 past
    the budget and for an update that is not finite."""
    config = dataclasses.replace(CONFIG, learning_rate=0.01, max_steps=1000,
                                 anneal_learning_rate=anneal)
    with tf.Graph().as_default():
        seen = tf1.get_variable("seen", [], tf.int64, initializer=tf1.constant_initializer(
            env_steps))
        rate = learner.learning_rate_now(config, tf.constant(finite), seen,
                                         tf.constant(1, tf.int64))
        with tf1.Session() as session:
            session.run(seen.initializer)
            got = session.run(rate)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("anneal, env_steps, left", [
    (True, 250, 0.75), (True, 1000, 0.0), (True, 4000, 0.0), (False, 750, 1.0)])
def test_the_entropy_bonus_anneals_with_the_budget_under_anneal_entropy(anneal, env_steps,
                                                                        left):
    """learner.entropy_coef_now, the weight the worker's loss gives the entropy bonus: with
    --anneal-entropy, --entropy-coef x (1 - env steps / --max-steps), 0 past the budget; the
    loss with it is the NumPy loss with the entropy bonus weighted so (and the TF2 variants'
    A3CConfig.entropy_coef_at gives the same weight)."""
    config = dataclasses.replace(CONFIG, entropy_coef=0.5, max_steps=1000,
                                 anneal_entropy=anneal)
    rollout = hand_made_rollout()
    with tf.Graph().as_default():
        network = ActorCriticMLP((OBS_DIM,), NUM_ACTIONS, config.hidden_sizes, "net")
        seen = tf1.get_variable("seen", [], tf.int64, initializer=tf1.constant_initializer(
            env_steps))
        total, _ = learner.learner_loss(
            network, {key: tf.constant(value) for key, value in rollout.items()}, config,
            entropy_coef=learner.entropy_coef_now(config, seen))
        weights = random_weights(network, 1)
        with tf1.Session() as session:
            session.run([seen.initializer] + [v.assign(weights[name_in_scope(v)])
                                              for v in network.variables])
            got = session.run(total)
    want = ground_truth.mlp_loss(weights, rollout, dataclasses.replace(
        config, entropy_coef=0.5 * left, anneal_entropy=False))
    full = ground_truth.mlp_loss(weights, rollout, dataclasses.replace(config,
                                                                       anneal_entropy=False))
    np.testing.assert_allclose(got, want["total"], rtol=2e-5, atol=1e-6)
    if left < 1.0:
        assert abs(want["total"] - full["total"]) > 1e-3
    assert config.entropy_coef_at(env_steps) == pytest.approx(0.5 * left)


@pytest.mark.parametrize("lag, tolerance, samples, want", [
    (0, 4.0, (8, 20), 0.01),   # the first update of a fresh cluster
    (4, 4.0, (8, 20), 0.01),   # up to the tolerance: the full rate
    # Up to 2 workers' own lag, 2 x (queue capacity 2 + 1) = 6, the full rate too
    (6, 4.0, (8, 20), 0.01),
    (8, 4.0, (8, 20), 0.01 * 6 / 8),  # past both: lr x tolerated / lag
    (30, 4.0, (8, 20), 0.01 * 6 / 30),  # 15 workers' usual lag
    (120, 4.0, (8, 20), 0.01 * 6 / 120),  # a worker that started late
    (120, 0.0, (8, 20), 0.01),  # --lag-tolerance 0: no scaling
    # Updates of 20 samples, not 160, tolerate sqrt(8) times the lag: 11.3 updates.
    (11, 4.0, (1, 20), 0.01),
    (30, 4.0, (1, 20), 0.01 * 4 * 8 ** 0.5 / 30),  # 16 workers of 1 env each
    (30, 4.0, (4, 160), 0.01 * 6 / 30),  # 640 samples: 2 by the tolerance, 6 by the floor
])
def test_a_stale_update_applies_at_the_rate_scaled_by_tolerance_over_lag(lag, tolerance,
                                                                         samples, want):
    """The learning rate each ps task's optimizer is given for an update whose gradient was
    computed `lag` global updates before the globals it is applied to, with `samples` (envs
    per worker, rollout length) per update; the TF2 variants' A3CConfig.staleness_scale gives
    the same factor."""
    envs, length = samples
    config = dataclasses.replace(CONFIG, learning_rate=0.01, anneal_learning_rate=False,
                                 lag_tolerance=tolerance, envs_per_worker=envs,
                                 rollout_length=length, queue_capacity=2)
    with tf.Graph().as_default():
        seen = tf1.get_variable("seen", [], tf.int64, initializer=tf1.zeros_initializer())
        rate = learner.learning_rate_now(config, tf.constant(True), seen,
                                         tf.constant(lag, tf.int64))
        with tf1.Session() as session:
            session.run(seen.initializer)
            got = session.run(rate)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(config.learning_rate * config.staleness_scale(lag), want,
                               rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# The optimizers' steps.
# ---------------------------------------------------------------------------------------------

def test_pytorch_rmsprop_steps_as_torchs_formula_not_as_tfs():
    """--optimizer rmsprop-pytorch over three updates against torch.optim.RMSprop's update
    written in NumPy (the mean square from 0, epsilon outside its root): at the first update
    sqrt(0.01 g^2) = 0.1 |g|, so a gradient of 1e-4 moves its weight by 5 learning rates
    (epsilon is 1e-5 beside 1e-5) and a large one by 10; TF's form (--optimizer rmsprop)
    moves the first by lr g / sqrt(1 + eps), a fifty-thousandth of that."""
    gradients = [np.array([1e-4, -1e-4, 0.5, 0.0], np.float32),
                 np.array([1e-4, 3e-4, -0.5, 1e-6], np.float32),
                 np.array([2e-4, -1e-4, 0.1, 0.0], np.float32)]
    lr, eps = 7e-4, 1e-5

    def moved(optimizer):
        """How far each update has moved the weights from 0, after each update."""
        config = dataclasses.replace(CONFIG, optimizer=optimizer, rmsprop_epsilon=eps)
        with tf.Graph().as_default():
            weight = tf1.get_variable("w", [4], initializer=tf1.zeros_initializer())
            gradient = tf1.placeholder(tf.float32, [4])
            apply = learner.build_optimizer(config, lr).apply_gradients([(gradient, weight)])
            with tf1.Session() as session:
                session.run(tf1.global_variables_initializer())
                after = []
                for g in gradients:
                    session.run(apply, {gradient: g})
                    after.append(-session.run(weight))
                return after

    mean_square, weight, want = np.zeros(4), np.zeros(4), []
    for g in gradients:
        mean_square = 0.99 * mean_square + 0.01 * g.astype(np.float64) ** 2
        weight = weight - lr * g / (np.sqrt(mean_square) + eps)
        want.append(-weight)
    got = moved("rmsprop-pytorch")
    for update, (got_moved, want_moved) in enumerate(zip(got, want)):
        np.testing.assert_allclose(got_moved, want_moved, rtol=1e-4, atol=1e-9,
                                   err_msg=f"update {update}")
    assert got[0][0] == pytest.approx(lr * 1e-4 / (1e-5 + 1e-5), rel=1e-3)  # ~ 5 lr
    assert got[0][3] == 0.0  # no gradient, no step
    tf_first = moved("rmsprop")[0]
    np.testing.assert_allclose(tf_first, lr * gradients[0] / np.sqrt(0.99 + 0.01 * gradients[0]
                                                                      ** 2 + eps), rtol=1e-4)
    assert abs(got[0][0]) > 10_000 * abs(tf_first[0])


# ---------------------------------------------------------------------------------------------
# The direction of learning.
# ---------------------------------------------------------------------------------------------

def test_a_policy_gradient_step_makes_actions_with_positive_advantage_more_likely():
    """A bandit in rollout form: one observation everywhere, every step a one-step episode,
    arm 1 pays 1 and arm 0 pays 0. The normalized advantage is then positive exactly where
    arm 1 was pulled, and one gradient-descent step on the policy loss must make arm 1 more
    likely and arm 0 less likely. (With two actions and one state the policy loss depends
    only on logit_1 - logit_0 and falls as it rises, so any descent step raises it.)"""
    rng = np.random.default_rng(5)
    actions = rng.integers(2, size=(T, B)).astype(np.int32)
    actions[0, :2] = [0, 1]  # both arms pulled
    same_obs = np.ones((T, B, 1), np.float32)
    rollout = {"obs": same_obs, "actions": actions, "rewards": actions.astype(np.float32),
               "terminated": np.ones((T, B), bool), "truncated": np.zeros((T, B), bool),
               "next_obs": same_obs}
    config = dataclasses.replace(CONFIG, normalize_advantages=True)

    with tf.Graph().as_default():
        network = ActorCriticMLP((1,), 2, config.hidden_sizes, "net")
        _, parts = learner.learner_loss(
            network, {key: tf.constant(value) for key, value in rollout.items()}, config)
        pairs = [(g, v) for g, v in zip(tf.gradients(parts["policy_loss"], network.variables),
                                        network.variables) if g is not None]
        descent_step = tf.group(*[v.assign_sub(0.1 * g) for g, v in pairs])
        log_pi = tf.nn.log_softmax(network(tf.ones([1, 1]))[0])[0]
        weights = random_weights(network, seed=6)
        with tf1.Session() as session:
            session.run([v.assign(weights[name_in_scope(v)]) for v in network.variables])
            before = session.run(log_pi)
            session.run(descent_step)
            after = session.run(log_pi)

    _, values, next_values = ground_truth.mlp_outputs(weights, rollout)
    advantages = ground_truth.targets(values, next_values, rollout, config)["policy_advantages"]
    np.testing.assert_array_equal(advantages > 0, actions == 1)
    assert after[1] > before[1] + 1e-4, (before, after)  # the paying arm: more likely
    assert after[0] < before[0] - 1e-4, (before, after)

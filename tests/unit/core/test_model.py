"""The networks of a3c_graph.core.model: their outputs against the NumPy forward passes of
tests/support/ground_truth.py (uint8, bool and float images of shapes that are not square, so
the [0, 1] scaling and the move of the channels last show), output shapes, the LSTM's state
resets, the learner's replay of a rollout, and the state an actor carries from rollout to
rollout.

None of these need the Atari extra: image networks are checked on made-up images.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from a3c_graph.core.action_space import ActionSpace
from a3c_graph.core.config import resolve_config
from a3c_graph.core.envs import EnvBatch
from a3c_graph.core.model import (
    ActorCriticCNN,
    ActorCriticLSTM,
    ActorCriticMLP,
    build_network,
    reset_state,
    rollout_sampler,
    values_of_next_obs,
)
from a3c_graph.core.rollout import build_rollout
from tests.support import ground_truth
from tests.support.hand_made import zero_state

tf1 = tf.compat.v1
REPO = Path(__file__).resolve().parents[3]
ATARI_SHAPE = (4, 84, 84)


def run(fetches, feed=None):
    """Evaluate `fetches` of the default graph with freshly initialized variables."""
    with tf1.Session() as session:
        session.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
        return session.run(fetches, feed)


def images(shape, seed=0):
    return np.random.RandomState(seed).randint(0, 256, shape).astype(np.uint8)


@pytest.fixture(autouse=True)
def fresh_graph():
    with tf.Graph().as_default():
        tf1.set_random_seed(0)
        yield


# --------------------------------------------------------------------------- choice

@pytest.mark.parametrize("policy, obs_shape, kind", [
    ("auto", (4,), ActorCriticMLP),
    ("auto", ATARI_SHAPE, ActorCriticCNN),
    ("mlp", ATARI_SHAPE, ActorCriticMLP),
    ("cnn", ATARI_SHAPE, ActorCriticCNN),
    ("lstm", (4,), ActorCriticLSTM),
    ("lstm", ATARI_SHAPE, ActorCriticLSTM),
])
def test_build_network_picks_the_network_from_policy_and_observations(policy, obs_shape, kind):
    network = build_network(obs_shape, 6, resolve_config({"policy": policy}), "net")
    assert type(network) is kind
    assert network.recurrent is (kind is ActorCriticLSTM)


def test_cnn_policy_on_vector_observations_is_refused():
    with pytest.raises(ValueError, match="--policy cnn needs image observations"):
        build_network((4,), 2, resolve_config({"policy": "cnn"}), "net")


# --------------------------------------------------------------------------- against NumPy

def random_weights(network, seed: int, scale: float = 0.5) -> dict[str, np.ndarray]:
    """Random values for every variable of `network` (assigned in the default graph's next
    session by `assign`), by name in its scope: "torso/conv0/kernel", ..."""
    rng = np.random.default_rng(seed)
    return {v.name.split("/", 1)[1].rsplit(":", 1)[0]:
            rng.normal(scale=scale, size=v.shape.as_list()).astype(np.float32)
            for v in network.variables}


def assign(network, weights):
    return [v.assign(weights[v.name.split("/", 1)[1].rsplit(":", 1)[0]])
            for v in network.variables]


def observations(shape, dtype, seed=0):
    """Made-up observations [N, ...]: uint8 pixels over 0..255, bool boards, float images."""
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, shape).astype(np.uint8)
    if dtype == np.bool_:
        return rng.random(shape) < 0.3
    return rng.random(shape).astype(np.float32)


# (observation shape [C, H, W] or [H, W], dtype, conv filters, stride): never square, and
# C, H and W all differ, so that a transpose to any other layout changes the outputs.
IMAGE_CASES = [
    ((3, 7, 11), np.uint8, (4, 5), 2),  # Atari's layout: uint8 frames stacked first
    ((3, 7, 11), np.uint8, (4,), 1),
    ((2, 6, 9), np.bool_, (4,), 1),  # MinAtar's: bool boards, one convolution at stride 1
    ((5, 8), np.uint8, (3, 4), 2),  # one channel, no channel axis
    ((3, 7, 11), np.float32, (4,), 2),  # float images are not rescaled
]


def test_a_cnn_of_other_kernels_and_strides_per_layer_is_the_numpy_forward_pass():
    # The classic protocol's shape of network (8x8 at stride 4, then 4x4 at stride 2), small.
    network = ActorCriticCNN((3, 17, 14), 3, (6,), "net", conv_filters=(4, 5),
                             conv_kernel=(5, 3), conv_stride=(3, 2))
    obs = observations([4, 3, 17, 14], np.uint8)
    weights = random_weights(network, seed=2)
    assert weights["torso/conv0/kernel"].shape == (5, 5, 3, 4)
    outputs = network(tf.constant(obs))
    with tf1.Session() as session:
        session.run(assign(network, weights))
        logits, values = session.run(outputs)
    want_logits, want_values = ground_truth.cnn_forward(weights, obs, (3, 2))
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(values, want_values, rtol=1e-4, atol=1e-4)


def test_a_relu_cnn_of_valid_padding_is_the_numpy_forward_pass():
    # The Nature DQN network's kind (rl-baselines3-zoo's A2C and PPO): ReLU, no padding.
    network = ActorCriticCNN((3, 17, 14), 3, (6,), "net", conv_filters=(4, 5),
                             conv_kernel=(5, 3), conv_stride=(3, 2), conv_padding="valid",
                             activation="relu")
    obs = observations([4, 3, 17, 14], np.uint8)
    weights = random_weights(network, seed=3)
    # 17 x 14 -> 5 x 4 -> 2 x 1: the borders are not padded.
    assert weights["torso/fc0/weights"].shape == (2 * 1 * 5, 6)
    outputs = network(tf.constant(obs))
    with tf1.Session() as session:
        session.run(assign(network, weights))
        logits, values = session.run(outputs)
    want_logits, want_values = ground_truth.cnn_forward(weights, obs, (3, 2), "valid", "relu")
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(values, want_values, rtol=1e-4, atol=1e-4)
    elu_logits, _ = ground_truth.cnn_forward(weights, obs, (3, 2), "valid", "elu")
    assert not np.allclose(logits, elu_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("obs_shape, dtype, conv_filters, stride", IMAGE_CASES,
                         ids=["uint8-stride2", "uint8-stride1", "bool", "uint8-2d", "float32"])
def test_cnn_outputs_are_the_numpy_forward_pass(obs_shape, dtype, conv_filters, stride):
    network = ActorCriticCNN(obs_shape, 3, (6,), "net", conv_filters=conv_filters,
                             conv_stride=stride)
    obs = observations([4, *obs_shape], dtype)
    weights = random_weights(network, seed=1)
    outputs = network(tf.constant(obs))
    with tf1.Session() as session:
        session.run(assign(network, weights))
        logits, values = session.run(outputs)
    want_logits, want_values = ground_truth.cnn_forward(weights, obs, stride)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(values, want_values, rtol=1e-4, atol=1e-4)
    # The outputs tell the observations apart (a network that ignored them would pass the
    # comparison above only if the reference ignored them too).
    assert np.ptp(values) > 1e-2, values


@pytest.mark.parametrize("torso, obs_shape, dtype", [
    ("mlp", (4,), np.float32), ("cnn", (3, 7, 11), np.uint8)], ids=["mlp", "cnn"])
def test_lstm_step_and_replay_are_the_numpy_forward_pass(torso, obs_shape, dtype):
    T, B, H = 4, 3, 5
    network = ActorCriticLSTM(obs_shape, 3, (6,), H, torso, "net", conv_filters=(4,),
                              conv_stride=2) if torso == "cnn" else \
        ActorCriticLSTM(obs_shape, 3, (6,), H, torso, "net")
    obs = observations([T, B, *obs_shape], dtype, seed=2)
    next_obs = np.concatenate([obs[1:], observations([1, B, *obs_shape], dtype, seed=3)])
    done = np.zeros([T, B], bool)
    done[1, 0] = done[2, 2] = True
    next_obs[done] = observations([int(done.sum()), *obs_shape], dtype, seed=4)
    initial = np.random.default_rng(5).normal(size=[B, 2, H]).astype(np.float32)
    weights = random_weights(network, seed=6)
    step = network.step(tf.constant(obs[0]), tf.constant(initial))
    replay = network.unroll(tf.constant(obs), tf.constant(next_obs), tf.constant(initial),
                            tf.constant(done))
    with tf1.Session() as session:
        session.run(assign(network, weights))
        (logits, values, after), (r_logits, r_values, r_next) = session.run([step, replay])

    want = ground_truth.lstm_forward(weights, obs[0], initial, torso, stride=2)
    for got, expected in zip((logits, values, after), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    want_logits, want_values, want_next = ground_truth.lstm_replay(
        weights, obs, next_obs, initial, done, torso, stride=2)
    np.testing.assert_allclose(r_logits, want_logits.reshape(T * B, -1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r_values, want_values.reshape(-1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r_next, want_next.reshape(-1), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- shapes

def test_cnn_outputs_and_variables():
    network = ActorCriticCNN(ATARI_SHAPE, 6, (256,), "net")
    logits, values = network(tf.constant(images([5, *ATARI_SHAPE])))
    logits, values = run([logits, values])
    assert logits.shape == (5, 6) and values.shape == (5,)
    assert np.all(np.isfinite(logits)) and np.all(np.isfinite(values))
    shapes = {v.name: v.shape.as_list() for v in network.variables}
    # Four 3x3 stride-2 convolutions of 32 filters: 84 -> 42 -> 21 -> 11 -> 6.
    assert shapes["net/torso/conv0/kernel:0"] == [3, 3, 4, 32]
    assert shapes["net/torso/conv3/kernel:0"] == [3, 3, 32, 32]
    assert shapes["net/torso/fc0/weights:0"] == [6 * 6 * 32, 256]
    assert shapes["net/policy/weights:0"] == [256, 6]
    assert shapes["net/value/weights:0"] == [256, 1]


def test_cnn_takes_single_channel_images():
    network = ActorCriticCNN((20, 30), 3, (16,), "net")
    logits, values = run(network(tf.constant(images([2, 20, 30]))))
    assert logits.shape == (2, 3) and values.shape == (2,)


@pytest.mark.parametrize("obs_shape", [(4,), (4, 24, 24)])
def test_lstm_step_and_unroll_shapes(obs_shape):
    T, B, H = 3, 2, 8
    network = ActorCriticLSTM(obs_shape, 5, (16,), H, "cnn" if len(obs_shape) > 1 else "mlp",
                              "net")
    assert network.state_shape == (2, H)
    obs = tf.constant(images([T, B, *obs_shape]))
    step = network.step(obs[0], zero_state(network, B))
    unrolled = network.unroll(obs, obs, zero_state(network, B), tf.zeros([T, B], tf.bool))
    (logits, values, state), (u_logits, u_values, u_next) = run([step, unrolled])
    assert (logits.shape, values.shape, state.shape) == ((B, 5), (B,), (B, 2, H))
    assert (u_logits.shape, u_values.shape, u_next.shape) == ((T * B, 5), (T * B,), (T * B,))


# --------------------------------------------------------------------------- LSTM state

def test_reset_state_zeroes_exactly_the_envs_whose_episode_ended():
    state = tf.constant(np.arange(1, 13, dtype=np.float32).reshape(3, 2, 2))
    out = run(reset_state(state, tf.constant([False, True, False])))
    np.testing.assert_array_equal(out[1], 0.0)
    np.testing.assert_array_equal(out[[0, 2]], np.arange(1, 13).reshape(3, 2, 2)[[0, 2]])


def test_after_a_reset_the_lstm_steps_exactly_as_from_the_zero_state():
    B, H = 3, 8
    network = ActorCriticLSTM((4,), 2, (16,), H, "mlp", "net")
    obs = tf.constant(np.random.RandomState(1).normal(size=[B, 4]).astype(np.float32))
    carried = tf.constant(np.random.RandomState(2).normal(size=[B, 2, H]).astype(np.float32))
    done = tf.constant([True, False, True])
    after_reset = network.step(obs, reset_state(carried, done))
    from_zero = network.step(obs, zero_state(network, B))
    from_carried = network.step(obs, carried)
    (l_reset, v_reset, s_reset), (l_zero, v_zero, s_zero), (_, _, s_carried) = run(
        [after_reset, from_zero, from_carried])
    np.testing.assert_array_equal(s_reset[[0, 2]], s_zero[[0, 2]])
    np.testing.assert_array_equal(v_reset[[0, 2]], v_zero[[0, 2]])
    np.testing.assert_array_equal(s_reset[1], s_carried[1])  # no reset: the carried state
    assert not np.allclose(s_zero[1], s_carried[1])  # (so the check above means something)


def test_learner_replay_matches_acting_step_by_step_with_the_same_resets():
    T, B, H = 5, 3, 8
    network = ActorCriticLSTM((4,), 2, (16,), H, "mlp", "net")
    rng = np.random.RandomState(3)
    done_np = np.zeros([T, B], bool)
    done_np[1, 0] = done_np[3, 2] = done_np[4, 1] = True
    # As in a rollout: s_{t+1} is the next step's s_t, except where an episode ended.
    obs_np = rng.normal(size=[T, B, 4]).astype(np.float32)
    next_obs_np = np.concatenate([obs_np[1:], rng.normal(size=[1, B, 4])]).astype(np.float32)
    next_obs_np[done_np] = rng.normal(size=[done_np.sum(), 4])
    obs, next_obs, done = tf.constant(obs_np), tf.constant(next_obs_np), tf.constant(done_np)
    initial = tf.constant(rng.normal(size=[B, 2, H]).astype(np.float32))
    logits, values, next_values = network.unroll(obs, next_obs, initial, done)

    # Acting: the state is zeroed after a step that ended an episode; s_{t+1} is valued from
    # the state right after step t.
    state, step_logits, step_values, step_next = initial, [], [], []
    for t in range(T):
        l_t, v_t, after = network.step(obs[t], state)
        step_logits.append(l_t)
        step_values.append(v_t)
        step_next.append(network.step(next_obs[t], after)[1])
        state = reset_state(after, done[t])
    got, want = run([(logits, values, next_values),
                     (tf.concat(step_logits, 0), tf.concat(step_values, 0),
                      tf.concat(step_next, 0))])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_values_of_next_obs_reuse_the_rollouts_own_values():
    T, B = 4, 3
    rng = np.random.RandomState(4)
    done = np.zeros([T, B], bool)
    done[1, 2] = done[2, 0] = True
    # A rollout: s_{t+1} is the next s_t unless the episode ended (then its final obs).
    obs = rng.normal(size=[T, B, 2]).astype(np.float32)
    next_obs = np.concatenate([obs[1:], rng.normal(size=[1, B, 2])]).astype(np.float32)
    next_obs[done] = rng.normal(size=[done.sum(), 2])
    weights = tf.constant([[1.5], [-2.0]])
    value = lambda x: tf.matmul(tf.reshape(x, [-1, 2]), weights)[:, 0]  # noqa: E731
    asked = []

    def value_of(indices):
        asked.append(indices)
        return value(tf.gather_nd(next_obs, indices))

    reused = values_of_next_obs(tf.reshape(value(obs), [T, B]), tf.constant(done), value_of)
    got, want, indices = run([reused, tf.reshape(value(next_obs), [T, B]), asked[0]])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # Only the last step and the two ended episodes were valued afresh.
    assert sorted(map(tuple, indices)) == [(1, 2), (2, 0), (3, 0), (3, 1), (3, 2)]


# --------------------------------------------------------------------------- rollouts

SHORT_ENV_ID = "A3CTestCartPoleFive-v0"


@pytest.fixture(scope="module")
def five_step_cartpole() -> str:
    """CartPole truncated after 5 steps: episodes end at known steps."""
    if SHORT_ENV_ID not in gym.registry:
        gym.register(id=SHORT_ENV_ID,
                     entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
                     max_episode_steps=5)
    return SHORT_ENV_ID


def test_actor_carries_the_lstm_state_across_rollouts_and_zeroes_it_at_episode_ends(
        five_step_cartpole):
    T, B, H = 3, 2, 8
    batch = EnvBatch(five_step_cartpole, B, seed=0)
    network = ActorCriticLSTM((4,), 2, (16,), H, "mlp", "net")

    def policy(obs, state):
        logits, _, after = network.step(obs, state)
        return tf.cast(tf.argmax(logits, axis=-1), tf.int32), after

    rollout = build_rollout(batch, policy, T, state_shape=network.state_shape)
    [carried] = [v for v in tf1.local_variables() if "carried_state" in v.name]
    with tf1.Session() as session:
        session.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
        first = session.run(rollout)
        after_first = session.run(carried)
        second = session.run(rollout)  # episode steps 4, 5 (truncated at t=1), then 1
        after_second = session.run(carried)
    batch.close()

    np.testing.assert_array_equal(first["initial_state"], 0.0)
    assert not first["truncated"].any() and np.abs(after_first).min(axis=(1, 2)).all() > 0
    # The next rollout starts where the last one stopped.
    np.testing.assert_array_equal(second["initial_state"], after_first)
    assert second["truncated"][1].all() and not second["truncated"][[0, 2]].any()

    # The learner's replay of the second rollout from its initial state, with its resets,
    # ends in the state the actor carried on with.
    done = np.logical_or(second["terminated"], second["truncated"])
    state = tf.constant(second["initial_state"])
    for t in range(T):
        state = reset_state(network.step(second["obs"][t], state)[2], done[t])
    replayed_zero_start = network.step(second["obs"][2], zero_state(network, B))[2]
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        replayed, zero_start = session.run([state, replayed_zero_start])
    np.testing.assert_allclose(replayed, after_second, rtol=1e-5, atol=1e-6)
    # ...which, since every episode restarted at t=2, is one step from the zero state.
    np.testing.assert_allclose(after_second, zero_start, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- gSDE

def test_a_gsde_actor_explores_along_one_matrix_a_rollout_and_draws_anew_for_the_next():
    """--sde on Pendulum, a policy tower of 2 features so that a rollout's 6 steps pin its
    matrices down: in each env every step's action minus the policy's mean is the step's
    features times one matrix (fitted on the first 3 steps, it predicts the last 3); the
    next rollout's matrices are new draws; the log std in the policy output differs by
    state, and the log std variable is [features, actions], started at --log-std-init."""
    T, B = 6, 2
    batch = EnvBatch("Pendulum-v1", B, seed=0)
    network = ActorCriticMLP((3,), batch.info.actions, (2,), "net", log_std_init=-1.0, sde=True)
    rollout = build_rollout(batch, rollout_sampler(network, B), T)
    obs = tf1.placeholder(tf.float32, [None, 3])
    policy, features = network.policy_and_features(obs)
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        matrices = []
        for _ in range(2):
            got = session.run(rollout)
            flat_obs = got["obs"].reshape(T * B, 3)
            params, z = session.run([policy, features], {obs: flat_obs})
            noise = got["actions"].reshape(T * B) - params[:, 0]
            z, noise = z.reshape(T, B, 2), noise.reshape(T, B)
            fitted = [np.linalg.lstsq(z[:3, b], noise[:3, b], rcond=None)[0] for b in range(B)]
            for b in range(B):
                np.testing.assert_allclose(z[3:, b] @ fitted[b], noise[3:, b], rtol=1e-3,
                                           atol=1e-5)
            matrices.append(np.stack(fitted))
        log_std = session.run(network.log_std)
    batch.close()
    assert np.abs(matrices[0] - matrices[1]).min() > 1e-3  # drawn anew
    np.testing.assert_array_equal(log_std, np.full((2, 1), -1.0))
    assert params[:, 1].std() > 1e-3  # a log std per state


def test_a_gsde_actor_given_nan_observations_acts_finite_actions():
    """As the plain Gaussian's (test_distributions.py): a NaN observation poisons the
    features gSDE's noise is made of; the env still gets an action in the space."""
    network = ActorCriticMLP((3,), ActionSpace(1, (-2.0,), (2.0,)), (2,), "net", sde=True)
    observations = np.array([[np.nan, 0.0, 0.0], [0.1, 0.2, 0.3]], np.float32)
    actions = run(network.sde_sampler(2)(tf.constant(observations)))
    assert np.isfinite(actions).all() and actions[0].tolist() == [0.0]


def test_ortho_init_false_draws_every_weight_as_pytorchs_linear_layers():
    """--ortho-init false (rl-zoo's Pendulum): each dense layer's weights and biases uniform
    within +-1/sqrt(fan in) (nn.Linear's default), the policy output too (no 0.01 gain), the
    log std still at --log-std-init; the default keeps orthogonal weights and zero biases."""
    config = resolve_config({"env": "Pendulum-v1", "hidden_sizes": (256, 64),
                             "log_std_init": -2.0, "ortho_init": False})
    network = build_network((3,), ActionSpace(1, (-2.0,), (2.0,)), config, "torch")
    orthogonal = build_network((3,), ActionSpace(1, (-2.0,), (2.0,)),
                               resolve_config({"env": "Pendulum-v1", "hidden_sizes": (256, 64)}),
                               "ortho")
    values = run(network.variables)
    ortho_values = run(orthogonal.variables)
    for variable, value in zip(network.variables, values):
        name = variable.op.name
        if name.endswith("log_std"):
            np.testing.assert_array_equal(value, -2.0)
            continue
        fan_in = {"fc0": 3, "fc1": 256, "fc2": 64}[name.split("/")[-2]]
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(value).max() <= bound, name
        if value.size >= 64:
            assert value.std() == pytest.approx(bound / np.sqrt(3), rel=0.25), name
    for variable, value in zip(orthogonal.variables, ortho_values):
        if variable.op.name.endswith("biases"):
            np.testing.assert_array_equal(value, 0.0)


# --------------------------------------------------------------------------- smoke run



# --------------------------------------------------------------------------- learning from images





# --------------------------------------------------------------------------- local and global

# The learner computes gradients on the local copy and applies them to the globals, and the
# local copy is refreshed from the globals, both by position in network.variables: the two
# lists must name the same layers in the same order.
PAIRED_NETWORKS = [
    ("mlp", (4,), {}),
    ("cnn", (2, 12, 12), {"conv_filters": (4, 6), "hidden_sizes": (8,)}),
    ("lstm", (4,), {"lstm_size": 8}),
    ("lstm", (2, 12, 12), {"conv_filters": (4,), "hidden_sizes": (8,), "lstm_size": 8}),
]


@pytest.mark.parametrize("policy, obs_shape, settings", PAIRED_NETWORKS,
                         ids=["mlp", "cnn", "lstm-mlp", "lstm-cnn"])
def test_local_and_global_variables_pair_up_by_name_in_order(policy, obs_shape, settings):
    from a3c_graph.core.model import assign_op

    config = resolve_config({"policy": policy, **settings})
    global_net = build_network(obs_shape, 3, config, "global")
    local_net = build_network(obs_shape, 3, config, "local", local=True)

    def in_scope(network, scope):
        names = [v.name for v in network.variables]
        assert all(name.startswith(f"{scope}/") for name in names), names
        return [name.split("/", 1)[1] for name in names]

    global_names, local_names = in_scope(global_net, "global"), in_scope(local_net, "local")
    assert local_names == global_names
    assert len(set(global_names)) == len(global_names)
    assert ([v.shape.as_list() for v in local_net.variables]
            == [v.shape.as_list() for v in global_net.variables])
    # Every variable of each network is in the pairing: the trainable globals, the local
    # copy's (never saved, never trained directly) local variables.
    assert {v.name for v in global_net.variables} == {v.name for v in tf1.trainable_variables()}
    assert {v.name for v in local_net.variables} == {
        v.name for v in tf1.local_variables() if v.name.startswith("local/")}

    # Synced by position, the local copy then computes what the globals compute.
    obs = tf.constant(images([3, *obs_shape]) if len(obs_shape) > 1
                      else np.random.RandomState(0).normal(size=[3, *obs_shape]), tf.float32)
    if global_net.recurrent:
        state = tf.constant(np.random.RandomState(1).normal(size=[3, 2, 8]), tf.float32)
        outputs = [net.step(obs, state) for net in (global_net, local_net)]
    else:
        outputs = [net(obs) for net in (global_net, local_net)]
    with tf1.Session() as session:
        session.run([tf1.global_variables_initializer(), tf1.local_variables_initializer()])
        session.run(assign_op(local_net, [v.read_value() for v in global_net.variables], "sync"))
        got_global, got_local = session.run(outputs)
    for want, got in zip(got_global, got_local):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

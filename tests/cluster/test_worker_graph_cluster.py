"""worker_graph.py through real ps tasks: one update of the globals, and a resume from a checkpoint.

Each runs in a child process that hosts the servers (tests/support/cluster_child.py): TF's
in-process servers cannot be stopped, so none may live in the test process. The worker's graph
is build_worker_graph's, with a hand-made rollout (tests/support/hand_made.py) put on its
rollout queue, and what comes back is compared with NumPy: the loss's semi-gradient of
tests/support/ground_truth.py and Adam's first step.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from a3c_graph.core import normalization
from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvBatch, env_info
from a3c_graph.core.model import ActorCriticMLP
from a3c_graph.distributed import worker_graph
from a3c_graph.distributed.cluster import TaskSpec
from tests.support import ground_truth
from tests.support.hand_made import CONFIG, B, T, hand_made_rollout, name_in_scope, random_weights

tf1 = tf.compat.v1

CLUSTER_ENV = "CartPole-v1"  # observations [4], 2 actions
UPDATE_CONFIG = dataclasses.replace(
    CONFIG, envs_per_worker=B, rollout_length=T, learning_rate=0.01, adam_epsilon=1e-3,
    anneal_learning_rate=True, max_steps=1000, grad_clip_norm=1.0)
# The cluster's env steps when the update is made: the learning rate is a quarter of 0.01.
ENV_STEPS_BEFORE = 750


def queued_rollout(seed: int) -> dict[str, np.ndarray]:
    """hand_made_rollout for CartPole's shapes, with every field the rollout queue holds."""
    rollout = hand_made_rollout(seed, obs_dim=4, num_actions=2)
    done = rollout["terminated"] | rollout["truncated"]
    rollout["episode_returns"] = np.where(done, 10.0 + np.arange(T)[:, None], 0.0).astype(
        np.float32)
    rollout["episode_lengths"] = np.where(done, 1 + np.arange(T)[:, None], 0).astype(np.int32)
    return rollout


def network_weights(seed: int) -> dict[str, np.ndarray]:
    with tf.Graph().as_default():
        network = ActorCriticMLP((4,), 2, UPDATE_CONFIG.hidden_sizes, "global")
        return random_weights(network, seed)


def _worker_graph(cluster: dict, config: A3CConfig):
    """(worker 0's graph as the worker builds it, its env batch), into the default graph."""
    spec = TaskSpec(cluster=cluster, job="worker", task=0)
    batch = EnvBatch(CLUSTER_ENV, config.envs_per_worker, seed=0)
    return worker_graph.build_worker_graph(config, spec, env_info(CLUSTER_ENV), [batch]), batch


def _values(session, variables) -> dict[str, np.ndarray]:
    """{name without ":0": value} of `variables`."""
    return dict(zip([v.op.name for v in variables], session.run(variables)))


def _update_then(cluster, config, rollout, weights, env_steps, save_to=None, acting=None,
                 global_step=0, more_rollouts=()) -> dict:
    """Initialize the globals to `weights`, the cluster's env steps to `env_steps` and its
    global step to `global_step`, sync the local copy (the local init op), put `rollout` on
    the queue, acted on the weights `acting` (default: the synced copy's) at version 0, and
    run one training step; then one more for each of `more_rollouts`, acted on the same
    weights (what the globals and counters were after the first: "after_first")."""
    from tests.support.cluster_child import start_servers

    servers = start_servers(cluster)
    with tf.Graph().as_default():
        built, batch = _worker_graph(cluster, config)
        [runner] = tf1.get_collection(tf1.GraphKeys.QUEUE_RUNNERS)
        network = built.global_network.variables
        acted = acting or weights
        enqueues = [runner.queue.enqueue({key: tf.constant(value) for key, value in {
            **queued_one, worker_graph.ACTING_VERSION: np.int64(0),
            **{f"{worker_graph.ACTING_WEIGHTS}{i}": acted[name_in_scope(v)]
               for i, v in enumerate(network)}}.items()})
            for queued_one in [rollout, *more_rollouts]]
        [env_steps_var] = [v for v in tf1.global_variables()
                           if v.op.name == "episode_stats/env_steps"]
        local = [v for v in tf1.local_variables() if v.op.name.startswith("local/")]
        [seen] = [v for v in tf1.local_variables() if v.op.name == "env_steps_seen"]
        [others] = [v for v in tf1.local_variables() if v.op.name == "others_since_refresh"]
        with tf1.Session(servers["worker", 0].target) as session:
            session.run(tf1.global_variables_initializer())
            session.run([v.assign(weights[name_in_scope(v)]) for v in network]
                        + [env_steps_var.assign(env_steps),
                           tf1.train.get_global_step().assign(global_step)])
            session.run(built.local_init_op)
            local_after_init = _values(session, local)
            session.run(enqueues[0])
            fetched = session.run(built.train_fetches)
            after_first = {"globals": _values(session, tf1.global_variables()),
                           "global_step": int(fetched.counters.global_step),
                           "env_steps": int(fetched.counters.env_steps),
                           "others_since_refresh": int(session.run(others))}
            for enqueue in enqueues[1:]:
                session.run(enqueue)
                fetched = session.run(built.train_fetches)
            result = {"after_first": after_first, "local_after_init": local_after_init,
                      "globals": _values(session, tf1.global_variables()),
                      "local": _values(session, local), "env_steps_seen": session.run(seen),
                      "others_since_refresh": int(session.run(others)),
                      "devices": {v.op.name: v.device for v in network},
                      "fetched": {"update_skipped": fetched.update_skipped,
                                  "learning_rate": float(fetched.learning_rate),
                                  "lag_apply": int(fetched.lag_apply),
                                  **{key: getattr(fetched.counters, key) for key in
                                     ("global_step", "env_steps", "episodes")}}}
            if save_to is not None:
                result["saved"] = built.saver.save(
                    session, str(Path(save_to) / "model.ckpt"), global_step=1)
    batch.close()
    return result


def one_update(cluster, config, rollout, weights, env_steps, acting=None, global_step=0) -> dict:
    """Run in the cluster child: what the globals, the Adam slots and the local copy hold
    after one update."""
    return _update_then(cluster, config, rollout, weights, env_steps, acting=acting,
                        global_step=global_step)


def pooled_updates(cluster, config, rollouts, weights, env_steps) -> dict:
    """Run in the cluster child: the globals after the first of `rollouts` and after all."""
    return _update_then(cluster, config, rollouts[0], weights, env_steps,
                        more_rollouts=rollouts[1:])


def adam_first_step(weight, gradient, learning_rate, epsilon, beta1=0.9, beta2=0.999):
    """Adam's first update of a variable (Kingma and Ba 2015, in the form of
    tf.compat.v1.train.AdamOptimizer): m = (1 - b1) g, v = (1 - b2) g^2,
    w' = w - lr sqrt(1 - b2) / (1 - b1) m / (sqrt(v) + eps). -> (w', m, v)"""
    m = (1 - beta1) * gradient
    v = (1 - beta2) * gradient ** 2
    step = learning_rate * np.sqrt(1 - beta2) / (1 - beta1) * m / (np.sqrt(v) + epsilon)
    return weight - step, m, v


def slots_of(variables: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(Adam's m, Adam's v) of variable `name`: "<name>/Adam" and "<name>/Adam_1" (on a ps
    task other than the first, "<name>/Adam_ps1" and "<name>/Adam_ps1_1")."""
    slots = sorted((key for key in variables if key.startswith(name + "/Adam")), key=len)
    assert len(slots) == 2, slots
    return variables[slots[0]], variables[slots[1]]


@pytest.mark.parametrize("num_ps", [1, 2])
def test_one_update_moves_every_global_by_adams_step_of_its_own_gradient(num_ps, in_cluster):
    """Through build_worker_graph and real ps tasks: the local copy starts as the globals;
    one rollout later each global variable has moved by Adam's first step of the clipped
    semi-gradient of the NumPy loss for that very variable, at the annealed learning rate,
    and the local copy equals the new globals. With 2 ps tasks the variables are spread over
    both, so a gradient sent to the wrong variable (the policy's and the value's first
    layers have the same shape) fails."""
    rollout, weights = queued_rollout(seed=4), network_weights(seed=5)
    got = in_cluster("tests.cluster.test_worker_graph_cluster:one_update", num_ps=num_ps,
                     config=UPDATE_CONFIG, rollout=rollout, weights=weights,
                     env_steps=ENV_STEPS_BEFORE)

    gradients = ground_truth.clipped(
        ground_truth.mlp_semi_gradient(weights, rollout, UPDATE_CONFIG),
        UPDATE_CONFIG.grad_clip_norm)
    learning_rate = UPDATE_CONFIG.learning_rate * (1 - ENV_STEPS_BEFORE / UPDATE_CONFIG.max_steps)
    assert {device.split("/")[2] for device in got["devices"].values()} == {
        f"task:{i}" for i in range(num_ps)}
    for name, weight in weights.items():
        assert_close = np.testing.assert_allclose
        assert_close(got["local_after_init"][f"local/{name}"], weight, err_msg=name)
        want, m, v = adam_first_step(weight.astype(np.float64), gradients[name], learning_rate,
                                     UPDATE_CONFIG.adam_epsilon)
        assert_close(got["globals"][f"global/{name}"], want, rtol=0, atol=2e-5, err_msg=name)
        got_m, got_v = slots_of(got["globals"], f"global/{name}")
        assert_close(got_m, m, rtol=2e-3, atol=1e-6, err_msg=name)
        assert_close(got_v, v, rtol=5e-3, atol=1e-9, err_msg=name)
        assert_close(got["local"][f"local/{name}"], got["globals"][f"global/{name}"],
                     rtol=0, atol=0, err_msg=name)
    # The update moved the weights by much more than the tolerance above.
    moved = max(np.abs(got["globals"][f"global/{name}"] - weights[name]).max()
                for name in weights)
    assert moved > 1e-3, moved
    done = rollout["terminated"] | rollout["truncated"]
    assert got["fetched"] == {"global_step": 1, "env_steps": ENV_STEPS_BEFORE + T * B,
                              "episodes": int(done.sum()), "update_skipped": False,
                              "lag_apply": 0,
                              # The rate Adam applied, as TensorBoard shows it.
                              "learning_rate": pytest.approx(learning_rate)}
    # The next update's learning rate is annealed from the counters this one read back.
    assert got["env_steps_seen"] == ENV_STEPS_BEFORE + T * B


def test_a_stale_rollouts_gradient_is_its_acting_weights_and_applies_at_a_scaled_rate(
        in_cluster):
    """A rollout acted on weights other than the globals (an older copy, as any rollout that
    waited while other workers updated), learned when the cluster is at global step 30: the
    globals move by Adam's first step of the clipped gradient of the NumPy loss at the weights
    that acted, not at the globals or the local copy, at the annealed rate x tolerated / 30
    (a lag of 30 updates, past the 13 that --lag-tolerance 4 gives updates of 15 samples),
    and the update reports that lag."""
    rollout, weights, acting = queued_rollout(seed=4), network_weights(seed=5), \
        network_weights(seed=8)
    global_step = 30
    got = in_cluster("tests.cluster.test_worker_graph_cluster:one_update", num_ps=1,
                     config=UPDATE_CONFIG, rollout=rollout, weights=weights,
                     env_steps=ENV_STEPS_BEFORE, acting=acting, global_step=global_step)
    gradients = ground_truth.clipped(
        ground_truth.mlp_semi_gradient(acting, rollout, UPDATE_CONFIG),
        UPDATE_CONFIG.grad_clip_norm)
    # Updates of B x T = 15 samples tolerate sqrt(160 / 15) times --lag-tolerance: 13 updates.
    tolerated = UPDATE_CONFIG.lag_tolerance * math.sqrt(160 / (B * T))
    learning_rate = (UPDATE_CONFIG.learning_rate * (1 - ENV_STEPS_BEFORE / UPDATE_CONFIG.max_steps)
                     * tolerated / global_step)
    for name, weight in weights.items():
        want, _, _ = adam_first_step(weight.astype(np.float64), gradients[name], learning_rate,
                                     UPDATE_CONFIG.adam_epsilon)
        np.testing.assert_allclose(got["globals"][f"global/{name}"], want, rtol=0, atol=2e-6,
                                   err_msg=name)
    assert got["fetched"]["lag_apply"] == global_step
    assert got["fetched"]["learning_rate"] == pytest.approx(learning_rate)


def test_with_anneal_entropy_the_gradient_weights_the_entropy_by_the_budget_left(in_cluster):
    """--anneal-entropy through build_worker_graph and a real ps task: at 750 of 1,000 env
    steps the update's gradient (Adam's first moment, 0.1 x it) is the NumPy loss's with the
    entropy bonus at a quarter of --entropy-coef, not its full weight. The weight 1 makes
    the bonus's share of the gradient large enough to tell the two apart."""
    config = dataclasses.replace(UPDATE_CONFIG, entropy_coef=1.0, anneal_entropy=True,
                                 grad_clip_norm=1e6)
    rollout, weights = queued_rollout(seed=4), network_weights(seed=5)
    got = in_cluster("tests.cluster.test_worker_graph_cluster:one_update", num_ps=1,
                     config=config, rollout=rollout, weights=weights,
                     env_steps=ENV_STEPS_BEFORE)
    left = 1 - ENV_STEPS_BEFORE / config.max_steps
    annealed, constant = (ground_truth.mlp_semi_gradient(
        weights, rollout, dataclasses.replace(config, entropy_coef=coef, anneal_entropy=False))
        for coef in (config.entropy_coef * left, config.entropy_coef))
    apart = max(np.abs(annealed[name] - constant[name]).max() for name in weights)
    assert apart > 1e-2, apart
    for name in weights:
        got_m, _ = slots_of(got["globals"], f"global/{name}")
        np.testing.assert_allclose(got_m, 0.1 * annealed[name], rtol=2e-3, atol=1e-6,
                                   err_msg=name)


def test_pooled_rollouts_apply_once_the_mean_of_their_gradients_each_clipped_at_sqrt_k(
        in_cluster):
    """--rollouts-per-update 2 through 2 real ps tasks: the first rollout leaves every global
    and the global step as they were (its gradient waits in the pool); the second applies,
    on each ps task, Adam's first step of the mean of the two rollouts' gradients, each
    clipped at sqrt(2) x --grad-clip-norm, and advances the global step once."""
    rollouts, weights = [queued_rollout(seed=4), queued_rollout(seed=6)], network_weights(seed=5)
    config = dataclasses.replace(UPDATE_CONFIG, rollouts_per_update=2, grad_clip_norm=0.2)
    got = in_cluster("tests.cluster.test_worker_graph_cluster:pooled_updates", num_ps=2,
                     config=config, rollouts=rollouts, weights=weights,
                     env_steps=ENV_STEPS_BEFORE)
    each = [ground_truth.mlp_semi_gradient(weights, rollout, config) for rollout in rollouts]
    norms = [math.sqrt(sum(float(np.sum(g ** 2)) for g in grads.values())) for grads in each]
    clip = 0.2 * math.sqrt(2)
    assert max(norms) > clip  # the clip at sqrt(k) x 0.2 bites, and is checked below
    clipped = [ground_truth.clipped(grads, clip) for grads in each]
    # The second update's rate: annealed by the env steps the first read back.
    learning_rate = config.learning_rate * (1 - (ENV_STEPS_BEFORE + T * B) / config.max_steps)
    for name, weight in weights.items():
        np.testing.assert_array_equal(got["after_first"]["globals"][f"global/{name}"], weight,
                                      err_msg=name)
        mean = (clipped[0][name] + clipped[1][name]) / 2
        want, _, _ = adam_first_step(weight.astype(np.float64), mean, learning_rate,
                                     config.adam_epsilon)
        np.testing.assert_allclose(got["globals"][f"global/{name}"], want, rtol=0, atol=2e-6,
                                   err_msg=name)
    assert got["after_first"]["global_step"] == 0
    assert got["after_first"]["env_steps"] == ENV_STEPS_BEFORE + T * B
    assert got["fetched"]["global_step"] == 1
    assert got["fetched"]["env_steps"] == ENV_STEPS_BEFORE + 2 * T * B
    assert not any(name.startswith("gradient_pool") for name in got["globals"])  # never saved
    # No other worker updated: the next rollout's lag estimate adds none, whether this
    # worker's rollout waited in the pool or filled it.
    assert got["after_first"]["others_since_refresh"] == 0
    assert got["others_since_refresh"] == 0


@pytest.mark.parametrize("optimizer", ["rmsprop", "rmsprop-pytorch"])
def test_with_rmsprop_one_update_moves_every_global_by_rmsprops_step(in_cluster, optimizer):
    """--optimizer rmsprop through 2 real ps tasks: each global moves by TF's RMSProp first
    step of its own clipped gradient (the mean square starts at 1: ms = 0.99 + 0.01 g^2,
    w' = w - lr g / sqrt(ms + eps), the update rl-zoo's A2C applies on Atari); with
    rmsprop-pytorch by PyTorch's (from 0: ms = 0.01 g^2, w' = w - lr g / (sqrt(ms) + eps),
    SB3's A2C on MuJoCo); the mean square kept in a slot named after the optimizer on each
    ps task."""
    config = dataclasses.replace(UPDATE_CONFIG, optimizer=optimizer, rmsprop_epsilon=1e-5)
    rollout, weights = queued_rollout(seed=4), network_weights(seed=5)
    got = in_cluster("tests.cluster.test_worker_graph_cluster:one_update", num_ps=2,
                     config=config, rollout=rollout, weights=weights,
                     env_steps=ENV_STEPS_BEFORE)
    gradients = ground_truth.clipped(ground_truth.mlp_semi_gradient(weights, rollout, config),
                                     config.grad_clip_norm)
    learning_rate = config.learning_rate * (1 - ENV_STEPS_BEFORE / config.max_steps)
    steps = []
    for name, weight in weights.items():
        if optimizer == "rmsprop":
            mean_square = 0.99 + 0.01 * gradients[name] ** 2
            step = learning_rate * gradients[name] / np.sqrt(mean_square
                                                             + config.rmsprop_epsilon)
        else:
            mean_square = 0.01 * gradients[name] ** 2
            step = learning_rate * gradients[name] / (np.sqrt(mean_square)
                                                      + config.rmsprop_epsilon)
        np.testing.assert_allclose(got["globals"][f"global/{name}"], weight - step, rtol=0,
                                   atol=1e-6, err_msg=name)
        slot = [key for key in got["globals"] if key.startswith(f"global/{name}/RMSProp")
                and not key.endswith("_1")]  # "_1": TF's momentum slot, unused at momentum 0
        assert len(slot) == 1, slot
        # rtol 1e-4: PyTorch's mean square is g^2 of a float32 gradient
        np.testing.assert_allclose(got["globals"][slot[0]], mean_square, rtol=1e-4)
        steps.append(np.abs(step).max())
    assert not [key for key in got["globals"] if "/Adam" in key]
    assert max(steps) > 1e-4  # the update moved the weights by far more than the tolerance


def train_and_save(cluster, config, rollout, weights, logdir) -> dict:
    """Run in the cluster child: one update, then a checkpoint by the worker's Saver."""
    return _update_then(cluster, config, rollout, weights, 0, save_to=logdir)


def restore_as_the_chief(cluster, config, logdir) -> dict:
    """Run in a cluster child whose ps tasks are new: the chief's session as the worker makes
    it (checkpoints.restorable_checkpoint, sessions.ChiefSessionCreator); what the globals
    and the local copy hold then."""
    from a3c_graph.distributed.sessions import ChiefSessionCreator
    from a3c_graph.rundir.checkpoints import restorable_checkpoint
    from tests.support.cluster_child import start_servers

    servers = start_servers(cluster)
    with tf.Graph().as_default():
        worker_graph, batch = _worker_graph(cluster, config)
        scaffold = tf1.train.Scaffold(saver=worker_graph.saver,
                                      local_init_op=worker_graph.local_init_op)
        checkpoint = restorable_checkpoint(str(logdir), worker_graph.saver)
        local = [v for v in tf1.local_variables() if v.op.name.startswith("local/")]
        creator = ChiefSessionCreator(scaffold, servers["worker", 0].target, None, checkpoint)
        session = creator.create_session()
        try:
            result = {"checkpoint": checkpoint,
                      "globals": _values(session, tf1.global_variables()),
                      "local": _values(session, local)}
        finally:
            session.close()
    batch.close()
    return result


def test_a_resumed_run_restores_every_weight_and_adam_slot_of_the_checkpoint(in_cluster,
                                                                            tmp_path):
    """A new cluster on the log dir gets back the checkpoint's weights, Adam's slots and beta
    powers, the global step and the episode counters, each equal to what was saved (and to
    what the first cluster held), and its local copy starts from the restored weights. Two
    ps tasks: the first's optimizer names ("Adam") and another's ("Adam_ps1") both come back."""
    num_ps = 2
    logdir = tmp_path / "run"
    logdir.mkdir()
    rollout, weights = queued_rollout(seed=6), network_weights(seed=7)
    trained = in_cluster("tests.cluster.test_worker_graph_cluster:train_and_save", num_ps=num_ps,
                         config=UPDATE_CONFIG, rollout=rollout, weights=weights, logdir=logdir)
    restored = in_cluster("tests.cluster.test_worker_graph_cluster:restore_as_the_chief",
                          num_ps=num_ps, config=UPDATE_CONFIG, logdir=logdir)

    assert restored["checkpoint"] == trained["saved"]
    reader = tf.train.load_checkpoint(trained["saved"])
    saved = reader.get_variable_to_shape_map()
    assert set(saved) == set(restored["globals"]) == set(trained["globals"])
    slots = [name for name in saved if "/Adam" in name]
    assert len(slots) == 2 * len(weights), slots
    assert any("/Adam_ps1" in name for name in slots) and any(
        name.endswith("/Adam") for name in slots), slots
    assert {"global_step", "episode_stats/env_steps"} <= set(saved)
    for name in saved:
        np.testing.assert_array_equal(restored["globals"][name], reader.get_tensor(name),
                                      err_msg=name)
        np.testing.assert_array_equal(trained["globals"][name], reader.get_tensor(name),
                                      err_msg=name)
    for name in weights:
        np.testing.assert_array_equal(restored["local"][f"local/{name}"],
                                      restored["globals"][f"global/{name}"], err_msg=name)
    assert restored["globals"]["global_step"] == 1
    # The weights did move in the first cluster: the restore is not of an initial state.
    assert any(np.abs(restored["globals"][f"global/{name}"] - weights[name]).max() > 1e-3
               for name in weights)


# --normalize-observations: a scale chosen for worker 0's rollout, as if its actor had read it.
ACTED_SCALE = (np.array([0.5, -0.25, 1.0, 0.0], np.float32), np.array([2.0, 0.5, 1.5, 3.0],
                                                                       np.float32))


def two_normalized_updates(cluster, config, rollouts, weights,
                           scope: str = "observation_statistics") -> dict:
    """Run in the cluster child, with a second worker task added: worker 0 learns
    rollouts[0] (acted with ACTED_SCALE, if observations are normalized), then worker 1
    starts (its local init) and learns rollouts[1] acted with the scale its local copy
    synced. What the statistics of `scope` (observation_statistics or return_statistics),
    the local copy's scale of them and each worker's loss were."""
    import portpicker

    from tests.support.cluster_child import start_servers

    cluster = {**cluster, "worker": [*cluster["worker"],
                                     f"127.0.0.1:{portpicker.pick_unused_port()}"]}
    servers = start_servers(cluster)
    result = {}
    for task, rollout in enumerate(rollouts):
        with tf.Graph().as_default():
            batch = EnvBatch(CLUSTER_ENV, config.envs_per_worker, seed=task)
            built = worker_graph.build_worker_graph(config, TaskSpec(cluster, "worker", task),
                                                    env_info(CLUSTER_ENV), [batch])
            [runner] = tf1.get_collection(tf1.GraphKeys.QUEUE_RUNNERS)
            network = built.global_network.variables
            statistics = [v for v in tf1.global_variables()
                          if v.op.name.startswith(f"{scope}/")]
            scale = sorted((v for v in tf1.local_variables()
                            if v.op.name.startswith(f"local_{scope}/")),
                           key=lambda v: v.op.name)  # mean, std
            with tf1.Session(servers["worker", task].target) as session:
                if task == 0:
                    session.run(tf1.global_variables_initializer())
                    session.run([v.assign(weights[name_in_scope(v)]) for v in network])
                session.run(built.local_init_op)
                synced = session.run(scale)
                acted = ({} if not config.normalize_observations else
                         dict(zip(normalization.ROLLOUT_FIELDS,
                                  ACTED_SCALE if task == 0 else synced)))
                acting_weights = session.run([v.read_value() for v in network])
                queued = {**rollout, worker_graph.ACTING_VERSION: np.int64(task), **acted,
                          **{f"{worker_graph.ACTING_WEIGHTS}{i}": value
                             for i, value in enumerate(acting_weights)}}
                session.run(runner.queue.enqueue({k: tf.constant(v) for k, v in queued.items()}))
                fetched = session.run(built.train_fetches)
                result[task] = {"synced": synced, "after": session.run(scale),
                                "loss": float(fetched.loss),
                                "acting_weights": {name_in_scope(v): value for v, value
                                                   in zip(network, acting_weights)},
                                "statistics": _values(session, statistics)}
            batch.close()
    return result


def test_two_workers_observation_statistics_add_up_and_each_update_uses_its_rollouts_scale(
        in_cluster):
    """--normalize-observations through a real ps: two workers' rollouts add up to the count,
    sum and sum of squares of all their observations; a worker's local copy syncs and then
    refreshes to their mean and standard deviation (NumPy's, over both rollouts); and the
    loss of an update is that of its observations standardized by the scale the rollout was
    acted with (not the globals' nor the local copy's)."""
    config = dataclasses.replace(UPDATE_CONFIG, normalize_observations=True)
    rollouts = [queued_rollout(seed=4), queued_rollout(seed=6)]
    rollouts[1]["obs"] = 3.0 * rollouts[1]["obs"] + 1.0  # another mean and spread
    weights = network_weights(seed=5)
    got = in_cluster("tests.cluster.test_worker_graph_cluster:two_normalized_updates",
                     config=config, rollouts=rollouts, weights=weights)

    def scale_of(*batches):
        x = np.concatenate([b["obs"].reshape(-1, 4) for b in batches]).astype(np.float64)
        return x.mean(axis=0), np.sqrt(x.var(axis=0) + 1e-8)

    both = np.concatenate([r["obs"].reshape(-1, 4) for r in rollouts]).astype(np.float64)
    statistics = got[1]["statistics"]
    np.testing.assert_allclose(statistics["observation_statistics/count"], len(both))
    np.testing.assert_allclose(statistics["observation_statistics/sum"], both.sum(axis=0))
    np.testing.assert_allclose(statistics["observation_statistics/sum_of_squares"],
                               (both ** 2).sum(axis=0))
    np.testing.assert_allclose(got[0]["synced"], [np.zeros(4), np.ones(4)], atol=1e-4)
    np.testing.assert_allclose(got[0]["after"], scale_of(rollouts[0]), rtol=1e-5)
    np.testing.assert_allclose(got[1]["synced"], scale_of(rollouts[0]), rtol=1e-5)
    np.testing.assert_allclose(got[1]["after"], scale_of(*rollouts), rtol=1e-5)
    mean, std = ACTED_SCALE
    standardized = {**rollouts[0],
                    **{key: np.clip((rollouts[0][key] - mean) / std, -10, 10)
                       for key in ("obs", "next_obs")}}
    want = ground_truth.mlp_loss(weights, standardized, config)["total"]
    assert got[0]["loss"] == pytest.approx(want, rel=2e-5)


def test_two_workers_return_statistics_add_up_and_each_update_scales_by_its_copys_std(
        in_cluster):
    """--normalize-rewards through a real ps: two workers' rollouts add up to the count, sum
    and sum of squares of all their discounted returns; a worker's copy of the return scale
    syncs and refreshes to their standard deviation (NumPy's); and an update learns from
    the rewards divided by the standard deviation its copy held (worker 0: 1, none seen
    yet; worker 1: worker 0's rollout's), clipped at 10."""
    config = dataclasses.replace(UPDATE_CONFIG, normalize_rewards=True)
    rollouts = [queued_rollout(seed=4), queued_rollout(seed=6)]
    for k, rollout in enumerate(rollouts):
        rollout["discounted_returns"] = (0.1 + 5.0 * k + np.random.default_rng(k).random(
            rollout["rewards"].shape)).astype(np.float32)
    weights = network_weights(seed=5)
    got = in_cluster("tests.cluster.test_worker_graph_cluster:two_normalized_updates",
                     config=config, rollouts=rollouts, weights=weights,
                     scope="return_statistics")

    def std_of(*batches):
        x = np.concatenate([b["discounted_returns"].ravel() for b in batches]).astype(
            np.float64)
        return np.sqrt(x.var() + 1e-8)

    both = np.concatenate([r["discounted_returns"].ravel() for r in rollouts]).astype(
        np.float64)
    statistics = got[1]["statistics"]
    np.testing.assert_allclose(statistics["return_statistics/count"], len(both))
    np.testing.assert_allclose(statistics["return_statistics/sum"], [both.sum()], rtol=1e-6)
    np.testing.assert_allclose(statistics["return_statistics/sum_of_squares"],
                               [(both ** 2).sum()], rtol=1e-6)
    np.testing.assert_allclose(got[0]["synced"][1], [1.0], rtol=1e-6)
    np.testing.assert_allclose(got[0]["after"][1], [std_of(rollouts[0])], rtol=1e-5)
    np.testing.assert_allclose(got[1]["synced"][1], [std_of(rollouts[0])], rtol=1e-5)
    np.testing.assert_allclose(got[1]["after"][1], [std_of(*rollouts)], rtol=1e-5)
    for task, std in ((0, 1.0), (1, std_of(rollouts[0]))):
        want = ground_truth.mlp_loss(got[task]["acting_weights"],
                                     {**rollouts[task], "return_std": std}, config)["total"]
        assert got[task]["loss"] == pytest.approx(want, rel=2e-5), task

"""Hand mutations of the learner's code, and the one test that catches each (docs/testing.md).

    python -m tests.support.mutations [NAME ...]  apply each (all by default), run its test
    python -m tests.support.mutations --baseline  the same tests on the code as it is: they pass
    python -m tests.support.mutations --table     docs/testing.md's table, from MUTATIONS

Each mutation replaces one snippet of one file in a copy of the repository's tracked files
(a temporary directory; the work tree is never touched) and runs only its catching test
there. It is caught when that test fails (pytest's exit status 1); a run that errors instead
(status 2 and up) or passes is reported. A snippet that no longer occurs exactly once makes
the table stale: tests/unit/test_mutations.py checks that without running anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]


class Mutation(NamedTuple):
    name: str
    path: str  # in the repository
    old: str  # occurs exactly once in `path`
    new: str
    test: str  # the pytest node id that fails
    what: str  # the bug, as the table says it


MUTATIONS = [
    # losses
    Mutation("pg-sign", "a3c_graph/core/losses.py",
             "return -tf.reduce_mean(log_probs * advantages)",
             "return tf.reduce_mean(log_probs * advantages)",
             "tests/unit/core/test_losses.py::test_policy_gradient_loss_matches_numpy",
             "the policy gradient's sign flipped"),
    Mutation("entropy-sign", "a3c_graph/core/losses.py",
             "total = pg + value_coef * vf - entropy_coef * ent",
             "total = pg + value_coef * vf + entropy_coef * ent",
             "tests/unit/core/test_losses.py::test_a3c_loss_total_and_parts_match_numpy",
             "the entropy bonus turned into a penalty"),
    Mutation("value-coef", "a3c_graph/core/losses.py",
             "total = pg + value_coef * vf - entropy_coef * ent",
             "total = pg + vf - entropy_coef * ent",
             "tests/unit/core/test_losses.py::test_a3c_loss_total_and_parts_match_numpy",
             "the value loss's coefficient dropped"),
    Mutation("gae-lambda", "a3c_graph/core/losses.py",
             "return delta + gamma * lam * goes_on * next_advantage",
             "return delta + gamma * goes_on * next_advantage",
             "tests/unit/core/test_losses.py::test_gae_advantages_match_slow_reference",
             "GAE's lambda dropped"),
    Mutation("terminal-bootstrap", "a3c_graph/core/losses.py",
             "deltas = rewards + gamma * not_terminal * next_values - values",
             "deltas = rewards + gamma * next_values - values",
             "tests/unit/core/test_losses.py::test_gae_truncation_bootstraps_and_termination_does_not",
             "a terminated step bootstraps from the value after it"),
    Mutation("truncation-goes-on", "a3c_graph/core/losses.py",
             "not_done = 1.0 - tf.cast(tf.logical_or(terminated, truncated), dtype)",
             "not_done = 1.0 - tf.cast(terminated, dtype)",
             "tests/unit/core/test_losses.py::test_gae_truncation_bootstraps_and_termination_does_not",
             "a truncated episode's advantage runs on into the next episode"),
    Mutation("value-target-gradient", "a3c_graph/core/losses.py",
             "tf.square(tf.stop_gradient(returns) - values)",
             "tf.square(returns - values)",
             "tests/unit/core/test_losses.py::test_value_loss_gradient_flows_into_values_but_not_returns",
             "the value targets carry a gradient"),
    # model
    Mutation("uint8-scale", "a3c_graph/core/model.py",
             "x = x * (1.0 / 255.0)", "x = x * 1.0",
             "tests/unit/core/test_model.py::test_cnn_outputs_are_the_numpy_forward_pass[uint8-stride2]",
             "uint8 pixels not scaled to [0, 1]"),
    Mutation("channels-last", "a3c_graph/core/model.py",
             "return tf.transpose(x, [0, 2, 3, 1])", "return tf.transpose(x, [0, 3, 2, 1])",
             "tests/unit/core/test_model.py::test_cnn_outputs_are_the_numpy_forward_pass[uint8-stride2]",
             "[C, H, W] moved to [W, H, C] instead of [H, W, C]"),
    Mutation("conv-activation", "a3c_graph/core/model.py",
             "x = self.activation(tf.nn.conv2d(x, kernel, stride, padding) + biases)",
             "x = tf.nn.relu(tf.nn.conv2d(x, kernel, stride, padding) + biases)",
             "tests/unit/core/test_model.py::test_cnn_outputs_are_the_numpy_forward_pass[bool]",
             "ReLU for ELU after the convolutions"),
    Mutation("conv-padding", "a3c_graph/core/model.py",
             "tf.nn.conv2d(x, kernel, stride, padding)", 'tf.nn.conv2d(x, kernel, stride, "SAME")',
             "tests/unit/core/test_model.py::"
             "test_a_relu_cnn_of_valid_padding_is_the_numpy_forward_pass",
             "same padding whatever --conv-padding says"),
    Mutation("mlp-activation", "a3c_graph/core/model.py",
             "                x = tf.tanh(x)", "                x = tf.nn.relu(x)",
             "tests/unit/core/test_learner.py::test_learner_loss_matches_the_numpy_ground_truth"
             "[True-False]",
             "ReLU for tanh in the MLP towers"),
    Mutation("lstm-forget-bias", "a3c_graph/core/model.py",
             "c = tf.sigmoid(f + LSTM_FORGET_BIAS) * c", "c = tf.sigmoid(f) * c",
             "tests/unit/core/test_model.py::test_lstm_step_and_replay_are_the_numpy_forward_pass[mlp]",
             "the LSTM's forget-gate bias dropped"),
    Mutation("lstm-gates", "a3c_graph/core/model.py",
             "i, f, g, o = tf.split(gates, 4, axis=1)", "f, i, g, o = tf.split(gates, 4, axis=1)",
             "tests/unit/core/test_model.py::test_lstm_step_and_replay_are_the_numpy_forward_pass[cnn]",
             "the LSTM's input and forget gates swapped"),
    Mutation("replay-reset", "a3c_graph/core/model.py",
             "return reset_state(after, done_t), after", "return after, after",
             "tests/unit/core/test_model.py::test_lstm_step_and_replay_are_the_numpy_forward_pass[mlp]",
             "the learner's replay keeps the state across an episode end"),
    Mutation("next-values", "a3c_graph/core/model.py",
             "shifted = tf.concat([values[1:], tf.zeros([1, B], values.dtype)], axis=0)",
             "shifted = values",
             "tests/unit/core/test_model.py::test_values_of_next_obs_reuse_the_rollouts_own_values",
             "V(s_t) reused as V(s_{t+1})"),
    # agent
    Mutation("initial-sync", "a3c_graph/distributed/worker_graph.py",
             "ops = [sync_local_from_global(local.network, globals_.network),", "ops = [",
             "tests/cluster/test_worker_graph_cluster.py::test_one_update_moves_every_global_by_adams_step_of_its_own"
             "_gradient[1]",
             "the local copy not synced from the globals before the first rollout"),
    Mutation("refresh", "a3c_graph/distributed/worker_graph.py",
             "refreshed = [assign_op(local.network, transfer.in_variable_order(groups, "
             "returned),\n                               \"refresh_local\"),",
             "refreshed = [",
             "tests/cluster/test_worker_graph_cluster.py::test_one_update_moves_every_global_by_adams_step_of_its_own"
             "_gradient[2]",
             "the local copy not refreshed after an update"),
    Mutation("same-shape-pairing", "a3c_graph/distributed/worker_graph.py",
             "    message = [learner.update.gradients[i] for i in shard.indices]",
             "    gradients = list(learner.update.gradients)\n"
             "    # the two towers' first layers: the same shape\n"
             "    gradients[0], gradients[6] = gradients[6], gradients[0]\n"
             "    message = [gradients[i] for i in shard.indices]",
             "tests/cluster/test_worker_graph_cluster.py::test_one_update_moves_every_global_by_adams_step_of_its_own"
             "_gradient[2]",
             "gradients applied to another variable of the same shape"),
    Mutation("gradient-on-local-copy", "a3c_graph/distributed/worker_graph.py",
             "acted = network_on_weights(acting_weights(rollout),",
             "acted = network_on_weights([v.read_value() for v in tf1.local_variables()\n"
             "                                    if v.op.name.startswith(\"local/\")],",
             "tests/cluster/test_worker_graph_cluster.py::test_a_stale_rollouts_gradient_is_its_acting"
             "_weights_and_applies_at_a_scaled_rate",
             "a rollout's gradient taken on the local copy as refreshed, not on the weights that "
             "acted it"),
    Mutation("staleness-scale", "a3c_graph/core/learner.py",
             "return learning_rate * staleness_scale(policy_lag, config.tolerated_lag())",
             "return learning_rate",
             # The collapse itself, in the default suite; test_learner.py's
             # test_a_stale_update_applies_at_the_rate_scaled_by_tolerance_over_lag fails too.
             "tests/e2e/test_learns.py::test_sixteen_workers_keep_a_stochastic_policy_where_"
             "stale_full_size_steps_collapse",
             "a stale update applied at the full learning rate: 16 workers' policy on MinAtar "
             "Breakout collapses"),
    Mutation("tolerance-not-per-samples", "a3c_graph/core/config.py",
             "return max(self.lag_tolerance * math.sqrt(LAG_TOLERANCE_SAMPLES / samples),",
             "return max(self.lag_tolerance,",
             "tests/unit/core/test_learner.py::test_a_stale_update_applies_at_the_rate_scaled_by_"
             "tolerance_over_lag[30-4.0-samples8-0.003771236166328254]",
             "the tolerated lag the same for updates of 20 samples as of 160"),
    Mutation("pool-applies-every-rollout", "a3c_graph/distributed/ps_update.py",
             "filled = tf.logical_and(counted, tf.equal(tf.math.floormod(count, k), 0))",
             "filled = tf.constant(True)",
             "tests/cluster/test_worker_graph_cluster.py::test_pooled_rollouts_apply_once_the_"
             "mean_of_their_gradients_each_clipped_at_sqrt_k",
             "every pooled rollout applied as it arrives: the ps applies the pool's running sum "
             "over and over"),
    Mutation("pool-clip-not-per-rollouts", "a3c_graph/core/config.py",
             "return self.grad_clip_norm * math.sqrt(self.rollouts_per_update)",
             "return self.grad_clip_norm",
             "tests/cluster/test_worker_graph_cluster.py::test_pooled_rollouts_apply_once_the_"
             "mean_of_their_gradients_each_clipped_at_sqrt_k",
             "a pooled rollout clipped at the update's norm: the noise of a k-th of its samples "
             "cut to the size of all of them"),
    Mutation("pooled-rollout-counted-as-own-update", "a3c_graph/distributed/worker_graph.py",
             "own_updates = tf.cast(filled, tf.int64)",
             "own_updates = tf.constant(1, tf.int64)",
             "tests/cluster/test_worker_graph_cluster.py::test_pooled_rollouts_apply_once_the_"
             "mean_of_their_gradients_each_clipped_at_sqrt_k",
             "a rollout that waited in the pool counted as an update of its own: the next "
             "rollout's policy lag one too low (-1 with no other worker)"),
    Mutation("no-own-lag-floor", "a3c_graph/core/config.py",
             "return PRESET_WORKERS * (self.queue_capacity + 1)",
             "return 0",
             "tests/unit/core/test_learner.py::test_a_stale_update_applies_at_the_rate_scaled_by_"
             "tolerance_over_lag[6-4.0-samples2-0.01]",
             "2 workers' own lag scaled down: CartPole's updates of 256 samples past 3.16 updates"),
    Mutation("envs-not-spread", "a3c_graph/core/config.py",
             "return max(1, min(preset_envs, round(PRESET_WORKERS * preset_envs / workers)))",
             "return preset_envs",
             "tests/unit/core/test_config.py::test_a_cluster_of_more_workers_steps_fewer_envs_in_"
             "each_and_pools_them[argv5-15-1-8]",
             "15 workers each stepping the preset's 8 envs, set for 2 workers"),
    Mutation("anneal", "a3c_graph/core/learner.py",
             "learning_rate *= budget_left(env_steps_seen, config.max_steps)",
             "learning_rate *= 1.0",
             "tests/cluster/test_worker_graph_cluster.py::test_one_update_moves_every_global_by_adams_step_of_its_own"
             "_gradient[1]",
             "the optimizer's learning rate not annealed"),
    Mutation("entropy-not-annealed", "a3c_graph/core/learner.py",
             "return config.entropy_coef * budget_left(env_steps_seen, config.max_steps)",
             "return config.entropy_coef",
             "tests/cluster/test_worker_graph_cluster.py::test_with_anneal_entropy_the_gradient_"
             "weights_the_entropy_by_the_budget_left",
             "--anneal-entropy's bonus left at its full weight to the end of the budget"),
    Mutation("entropy-anneal-not-given", "a3c_graph/distributed/worker_graph.py",
             "                                entropy_coef_now(config, env_steps_seen))",
             "                                None)",
             "tests/cluster/test_worker_graph_cluster.py::test_with_anneal_entropy_the_gradient_"
             "weights_the_entropy_by_the_budget_left",
             "the worker's loss not given the annealed entropy weight"),
    Mutation("nonfinite-rate", "a3c_graph/core/learner.py",
             "learning_rate = config.learning_rate * tf.cast(is_finite, tf.float32)",
             "learning_rate = config.learning_rate + 0.0 * tf.cast(is_finite, tf.float32)",
             "tests/unit/core/test_learner.py::test_the_learning_rate_op_anneals_linearly_over_max_steps"
             "[True-250-False-0.0]",
             "a NaN/inf update applied at the full learning rate"),
    Mutation("env-steps-seen", "a3c_graph/distributed/worker_graph.py",
             "learner.env_steps_seen.assign(counters.env_steps)",
             "learner.env_steps_seen.read_value()",
             "tests/cluster/test_worker_graph_cluster.py::test_one_update_moves_every_global_by_adams_step_of_its_own"
             "_gradient[1]",
             "the anneal stuck at the env steps of the first read"),
    Mutation("no-clip", "a3c_graph/core/learner.py",
             "tf.clip_by_global_norm(gradients, config.rollout_clip_norm())",
             "tf.clip_by_global_norm(gradients, 1e9)",
             "tests/unit/core/test_learner.py::test_the_update_is_clipped_to_the_global_norm_and_reports_the"
             "_norm_before[clipped]",
             "gradients not clipped"),
    Mutation("normalized-value-target", "a3c_graph/core/learner.py",
             "returns = advantages + tf.stop_gradient(to_tb(values))",
             "returns = (losses.normalize(advantages) if config.normalize_advantages else "
             "advantages) + tf.stop_gradient(to_tb(values))",
             "tests/unit/core/test_learner.py::test_normalized_and_raw_advantages_give_different_policy_losses"
             "_each_its_own",
             "the value targets built from normalized advantages"),
    Mutation("reward-clip", "a3c_graph/core/learner.py",
             "rewards = tf.sign(rewards)", "rewards = rewards",
             "tests/unit/core/test_learner.py::test_clipped_rewards_learn_from_the_sign_of_each_reward_only",
             "--clip-rewards ignored"),
    Mutation("rmsprop-epsilon-inside", "a3c_graph/core/learner.py",
             "learning_rate * grad / (tf.sqrt(updated) + self._epsilon)",
             "learning_rate * grad / tf.sqrt(updated + self._epsilon)",
             "tests/unit/core/test_learner.py::test_pytorch_rmsprop_steps_as_torchs_formula_not_"
             "as_tfs",
             "--optimizer rmsprop-pytorch adds epsilon inside the root, as TF's RMSProp"),
    Mutation("rewards-not-scaled", "a3c_graph/core/learner.py",
             "rewards = scaled_rewards(rewards, return_std)", "rewards = rewards",
             "tests/unit/core/test_learner.py::test_normalized_rewards_learn_from_each_reward_over_"
             "the_return_std_clipped_at_ten",
             "--normalize-rewards ignored by the learner"),
    Mutation("saver-slots", "a3c_graph/rundir/checkpoints.py",
             "return tf1.train.Saver(max_to_keep=KEEP,",
             'return tf1.train.Saver([v for v in tf1.global_variables() if "Adam" not in '
             "v.name], max_to_keep=KEEP,",
             "tests/cluster/test_worker_graph_cluster.py::test_a_resumed_run_restores_every_weight_and_adam_slot_of_the"
             "_checkpoint",
             "checkpoints without Adam's slots"),
    # envs
    Mutation("life-stack", "a3c_graph/core/envs.py",
             "            obs = frames_of_this_life(obs, self._life_frames)\n", "",
             "tests/unit/core/test_atari_classic.py::test_a_new_life_starts_a_new_frame_stack_in"
             "_training_and_in_one_env",
             "the frames of a lost life kept in the next life's stack"),
    # rollout
    Mutation("obs-after-step", "a3c_graph/core/rollout.py",
             'rows["obs"][t] = self.envs.observe()\n        step = self.envs.step(actions)',
             'step = self.envs.step(actions)\n        rows["obs"][t] = self.envs.observe()',
             "tests/unit/core/test_rollout.py::test_next_obs_is_the_following_obs_while_the_episode_goes_on",
             "s_t recorded after the step (the next state)"),
    Mutation("final-obs", "a3c_graph/core/rollout.py",
             'rows["next_obs"][t] = step.final_obs', 'rows["next_obs"][t] = step.next_obs',
             "tests/unit/core/test_rollout.py::test_where_an_episode_ended_next_obs_is_its_final_obs_and_obs"
             "_a_new_episodes_first",
             "the next episode's first observation as an ended episode's s_{t+1}"),
    Mutation("episode-returns", "a3c_graph/core/rollout.py",
             'rows["episode_returns"][t] = step.episode_return',
             'rows["episode_returns"][t] = step.reward',
             "tests/unit/core/test_rollout.py::test_episode_returns_and_lengths_are_nonzero_exactly_where_an"
             "_episode_ended",
             "the step's reward recorded as the episode's return"),
    Mutation("return-not-reset", "a3c_graph/core/rollout.py",
             "self.discounted_return[np.logical_or(step.terminated, step.truncated)] = 0.0",
             "pass",
             "tests/unit/core/test_rollout.py::test_discounted_returns_sum_each_episodes_rewards_"
             "so_far_across_rollouts",
             "the discounted return of --normalize-rewards carried into the next episode"),
    Mutation("acting-reset", "a3c_graph/core/rollout.py",
             "reset_state(after, _shaped(done, [B])))", "after)",
             "tests/unit/core/test_model.py::test_actor_carries_the_lstm_state_across_rollouts_and_zeroes"
             "_it_at_episode_ends",
             "the actor's LSTM state not zeroed at an episode end"),
    Mutation("carried-state", "a3c_graph/core/rollout.py",
             "([carried.assign(final[2])] if recurrent else [])", "[]",
             "tests/unit/core/test_model.py::test_actor_carries_the_lstm_state_across_rollouts_and_zeroes"
             "_it_at_episode_ends",
             "the LSTM state not carried to the next rollout"),
    # continuous actions
    Mutation("gaussian-entropy-mean", "a3c_graph/core/distributions.py",
             "return tf.reduce_sum(log_std + 0.5 * (1.0 + LOG_2PI), axis=-1)",
             "return tf.reduce_mean(log_std + 0.5 * (1.0 + LOG_2PI), axis=-1)",
             "tests/unit/core/test_distributions.py::test_the_gaussians_log_probability_and_"
             "entropy_sum_over_the_dimensions",
             "a Gaussian's entropy averaged over its dimensions, not summed"),
    Mutation("sde-features-not-squared", "a3c_graph/core/distributions.py",
             "tf.matmul(tf.square(tf.stop_gradient(features)), tf.exp(2.0 * log_std))",
             "tf.matmul(tf.abs(tf.stop_gradient(features)), tf.exp(2.0 * log_std))",
             "tests/unit/core/test_distributions.py::test_gsdes_log_std_in_each_state_is_that_"
             "of_the_features_times_the_matrix",
             "gSDE's log std from the features' sizes, not their squares"),
    Mutation("sde-matrices-per-step", "a3c_graph/core/model.py",
             "        matrices = exploration_matrices(self.log_std, num_envs)\n\n"
             "        def sample(observations):\n",
             "        def sample(observations):\n"
             "            matrices = exploration_matrices(self.log_std, num_envs)\n",
             "tests/unit/core/test_model.py::test_a_gsde_actor_explores_along_one_matrix_a_"
             "rollout_and_draws_anew_for_the_next",
             "gSDE's matrices drawn anew at every step, not once a rollout"),
    Mutation("log-std-sign", "a3c_graph/core/distributions.py",
             "z = (actions - mean) * tf.exp(-log_std)", "z = (actions - mean) * tf.exp(log_std)",
             "tests/unit/core/test_distributions.py::test_the_gaussians_log_probability_and_"
             "entropy_sum_over_the_dimensions",
             "the log std's sign flipped in the Gaussian's log-probability"),
    Mutation("log-prob-of-clipped-action", "a3c_graph/core/rollout.py",
             'rows["actions"][t] = actions', 'rows["actions"][t] = step.action',
             "tests/unit/core/test_rollout.py::test_a_box_rollout_records_the_sampled_actions_"
             "and_the_env_gets_them_clipped",
             "the action clipped to the Box before the log-probability"),
    Mutation("statistics-overwritten", "a3c_graph/core/normalization.py",
             "v.assign_add(s, use_locking=True)", "v.assign(s, use_locking=True)",
             "tests/cluster/test_worker_graph_cluster.py::test_two_workers_observation_"
             "statistics_add_up_and_each_update_uses_its_rollouts_scale",
             "each rollout's observation statistics replacing the cluster's, not added"),
    Mutation("statistics-of-the-last-axis", "a3c_graph/core/normalization.py",
             "x = tf.reshape(x, [-1, math.prod(x.shape[2:])])",
             "x = tf.reshape(x, [-1, x.shape[-1]])",
             "tests/unit/core/test_normalization.py::test_image_observations_are_counted_per_"
             "entry_of_the_flattened_observation",
             "observation statistics per channel of an image, not per entry the mlp torso "
             "sees: MinAtar with --policy mlp --normalize-observations fails to build"),
    Mutation("statistics-not-frozen", "a3c_graph/core/normalization.py",
             "return statistics.scale(), statistics.variables",
             "return None, statistics.variables",
             "tests/e2e/test_export.py::test_a_box_policy_exports_its_mean_and_log_std_and_"
             "standardizes_raw_observations",
             "evaluation and the SavedModel without the checkpoint's observation statistics"),
    Mutation("replay-another-episode", "a3c_graph/trained/recording.py",
             'env.reset(seed=spec["seed"])', 'env.reset(seed=spec["seed"] + 1)',
             "tests/unit/test_evaluate.py::test_a_mujoco_episode_is_recorded_in_a_process_of_"
             "its_own_as_it_was_played",
             "a MuJoCo video replaying its actions from another start than the episode played"),
    Mutation("argmax-actions", "a3c_graph/core/distributions.py",
             "tf.random.categorical(logits, 1)[:, 0]", "tf.argmax(logits, axis=-1)",
             "tests/unit/core/test_rollout.py::test_actions_are_sampled_from_the_policy_and_nan_logits_act"
             "_uniformly",
             "the most likely action taken instead of a sampled one"),
]


def mutated(text: str, mutation: Mutation) -> str:
    """`text` with the mutation applied; ValueError unless its snippet occurs exactly once."""
    count = text.count(mutation.old)
    if count != 1:
        raise ValueError(f"{mutation.name}: its snippet occurs {count} times in {mutation.path}")
    return text.replace(mutation.old, mutation.new)


def table() -> str:
    """The markdown table of docs/testing.md."""
    rows = ["| mutation | file | the bug | caught by |", "| --- | --- | --- | --- |"]
    for m in MUTATIONS:
        rows.append(f"| `{m.name}` | `{m.path}` | {m.what} | `{m.test}` |")
    return "\n".join(rows)


def copy_repository(destination: Path) -> None:
    """The tracked files of the work tree, as they are now (uncommitted edits included)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def run(mutation: Mutation, copy: Path, baseline: bool = False) -> int:
    """pytest's exit status for the mutation's test, with the mutation applied in `copy`
    (not applied for the baseline)."""
    target = copy / mutation.path
    original = target.read_text()
    target.write_text(original if baseline else mutated(original, mutation))
    try:
        # The copy first on the path of every process the test starts (a launcher's tasks
        # run elsewhere than the copy and would import the installed, unmutated package).
        path = os.pathsep.join(filter(None, [str(copy), os.environ.get("PYTHONPATH")]))
        return subprocess.run([sys.executable, "-m", "pytest", mutation.test, "-q", "-x",
                               "-p", "no:cacheprovider"], cwd=copy, capture_output=True,
                              env={**os.environ, "PYTHONPATH": path}, timeout=1200).returncode
    finally:
        target.write_text(original)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.mutations", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--baseline", action="store_true",
                        help="run the tests without the mutations: each must pass")
    parser.add_argument("--table", action="store_true", help="print docs/testing.md's table")
    args = parser.parse_args(argv)
    if args.table:
        print(table())
        return 0
    known = {m.name: m for m in MUTATIONS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown mutation(s) {', '.join(unknown)}; known: {', '.join(known)}")
    chosen = [known[name] for name in args.names] if args.names else MUTATIONS
    missed = 0
    with tempfile.TemporaryDirectory(prefix="a3c_mutations_") as tmp:
        copy = Path(tmp)
        copy_repository(copy)
        for mutation in chosen:
            status = run(mutation, copy, args.baseline)
            want, word = (0, "passes") if args.baseline else (1, "caught")
            verdict = word if status == want else f"FAILED (pytest exit status {status})"
            missed += status != want
            print(f"{mutation.name:<26} {verdict:<10} {mutation.test}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

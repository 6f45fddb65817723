"""The SavedModel export (a3c_graph/trained/exporting.py): a trained policy that plain TensorFlow 2
loads and plays, with the graph's own outputs, and the export's bad input refused in one line
with nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO, child_env, evaluate_run, last_json_line, untrained_run

IMAGE_BANDIT = "tests.support.image_env:ImageBandit-v0"

# Plain TF2, eager, and no a3c_graph: what a colleague's script does with a SavedModel. Every
# case's model in one process: [(dir, dtype, feed)] on stdin, their outputs on stdout.
LOAD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    results = []
    for path, dtype, feed in json.loads(sys.stdin.read()):
        act = tf.saved_model.load(path).signatures["act"]
        out = act(**{k: tf.constant(np.array(v, dtype=np.float32 if k == "state" else dtype))
                     for k, v in feed.items()})
        results.append({k: v.numpy().tolist() for k, v in out.items()})
    assert not [m for m in sys.modules if m.startswith("a3c_graph")]
    print(json.dumps(results))
""")
CASES = {"mlp": ("CartPole-v1", "auto"), "cnn": (IMAGE_BANDIT, "auto"),
         "lstm": (IMAGE_BANDIT, "lstm")}


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "a3c_graph.export", *args],
                          capture_output=True, text=True, cwd=REPO, env=child_env(), timeout=300)


def graph_outputs(logdir, observations, state=None) -> dict:
    """The checkpoint's logits (and state) by the package's own graph code."""
    import tensorflow as tf

    from a3c_graph.core.envs import env_info, env_options
    from a3c_graph.core.model import build_network
    from a3c_graph.rundir.run_config import read_run_config

    tf1 = tf.compat.v1
    config = read_run_config(str(logdir))
    info = env_info(config.env, **env_options(config))
    with tf.Graph().as_default():
        network = build_network(info.obs_shape, info.actions, config, "global")
        obs = tf.constant(observations)
        if network.recurrent:
            logits, _, after = network.step(obs, tf.constant(state))
        else:
            (logits, _), after = network(obs), tf.constant(0)
        with tf1.Session() as session:
            tf1.train.Saver(var_list=network.variables).restore(
                session, tf.train.latest_checkpoint(str(logdir)))
            logits, after = session.run([logits, after])
    return {"logits": logits, "state": after}


def test_the_saved_models_give_the_graphs_outputs_in_plain_tf2(tmp_path):
    """The MLP, the CNN and the LSTM (on the image bandit), exported and run by plain TF2."""
    from a3c_graph.trained.exporting import export_policy

    rng = np.random.default_rng(0)
    cases = []
    for name, (env, policy) in CASES.items():
        logdir, out = tmp_path / name, tmp_path / f"{name}-exported"
        untrained_run(logdir, env=env, policy=policy, conv_filters=(4,), lstm_size=8)
        export_policy(str(logdir), str(out))
        metadata = json.loads((out / "assets.extra" / "policy.json").read_text())
        assert metadata["env"] == env and metadata["recurrent"] == (policy == "lstm")
        shape, dtype = metadata["observation_shape"], metadata["observation_dtype"]
        observations = (rng.integers(0, 256, [5, *shape]) if dtype == "uint8"
                        else rng.normal(size=[5, *shape])).astype(dtype)
        feed = {"observations": observations.tolist()}
        state = None
        if metadata["recurrent"]:
            state = rng.normal(size=[5, 2, 8]).astype(np.float32)
            feed["state"] = state.tolist()
        cases.append((logdir, metadata, observations, state, [str(out), dtype, feed]))
    loaded = subprocess.run([sys.executable, "-c", LOAD],
                            input=json.dumps([case[-1] for case in cases]),
                            capture_output=True, text=True, env=child_env(), timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    results = json.loads(loaded.stdout.strip().splitlines()[-1])
    for (logdir, metadata, observations, state, _), got in zip(cases, results):
        want = graph_outputs(logdir, observations, state)
        np.testing.assert_allclose(got["logits"], want["logits"], atol=1e-5)
        assert got["greedy_action"] == np.argmax(want["logits"], axis=-1).tolist()
        assert all(0 <= a < metadata["num_actions"] for a in got["sampled_action"])
        assert np.shape(got["value"]) == (5,)
        if metadata["recurrent"]:
            np.testing.assert_allclose(got["state"], want["state"], atol=1e-5)


def test_the_cli_lists_the_signature_and_the_example_plays_as_evaluate_plays(tmp_path):
    logdir, out = tmp_path / "run", tmp_path / "exported"
    untrained_run(logdir)
    exported = export("--logdir", str(logdir), "--out", str(out))
    assert exported.returncode == 0 and exported.stderr == "", exported.stderr
    shown = subprocess.run([str(REPO / ".venv" / "bin" / "saved_model_cli")
                            if (REPO / ".venv" / "bin" / "saved_model_cli").exists()
                            else "saved_model_cli", "show", "--dir", str(out), "--all"],
                           capture_output=True, text=True, env=child_env(), timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "signature_def['act']" in shown.stdout and "greedy_action" in shown.stdout
    played = subprocess.run([sys.executable, str(REPO / "scripts" / "play_saved_model.py"),
                             str(out), "--episodes", "3", "--seed", "7"],
                            capture_output=True, text=True, env=child_env(), timeout=300)
    assert played.returncode == 0, played.stderr[-2000:]
    assert (last_json_line(played.stdout)["returns"]
            == evaluate_run(logdir, 3, "--seed", "7")["returns"])


def test_bad_input_is_one_line_and_leaves_nothing_written(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    no_checkpoint = tmp_path / "no-checkpoint"
    untrained_run(no_checkpoint)
    for path in no_checkpoint.glob("model.ckpt*"):
        path.unlink()
    (no_checkpoint / "checkpoint").unlink(missing_ok=True)
    other_version = tmp_path / "other-version"
    untrained_run(other_version)
    config = json.loads((other_version / "config.json").read_text())
    (other_version / "config.json").write_text(json.dumps({**config, "from_the_future": 1}))
    good = tmp_path / "good"
    untrained_run(good)
    taken = tmp_path / "taken"
    taken.mkdir()
    cases = [(empty, tmp_path / "out1", "config.json not found"),
             (no_checkpoint, tmp_path / "out2", "no checkpoint in"),
             (other_version, tmp_path / "out3", "unknown field 'from_the_future'"),
             (good, taken, "exists; give --force to replace it")]
    for logdir, out, message in cases:
        before = sorted(p.name for p in out.parent.iterdir())
        result = export("--logdir", str(logdir), "--out", str(out))
        assert result.returncode == 2, (message, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
        assert sorted(p.name for p in out.parent.iterdir()) == before  # nothing half-written
    assert not any(taken.iterdir())
    import a3c_graph  # the API says the same, as a ValueError

    with pytest.raises(ValueError, match="exists; give --force to replace it"):
        a3c_graph.export(good, taken)
    forced = export("--logdir", str(good), "--out", str(taken), "--force")
    assert forced.returncode == 0 and (taken / "saved_model.pb").exists()


@pytest.mark.parametrize("sde", [False, True], ids=["state-independent-std", "gsde"])
def test_a_box_policy_exports_its_mean_and_log_std_and_standardizes_raw_observations(
        tmp_path, sde):
    """A Gaussian policy of a run with --normalize-observations (TargetBox: 2 actions in
    [-2, 2]): plain TF2 feeds raw observations; greedy_action is the mean of the network on
    the observations standardized by the checkpoint's statistics (UNTRAINED_STATISTICS),
    log_std its log std (with --sde, gSDE's log std of each state, from the policy tower's
    features), and policy.json gives the bounds and the normalization."""
    import tensorflow as tf
    from conftest import UNTRAINED_STATISTICS

    from a3c_graph.trained.exporting import export_policy
    from tests.support import ground_truth

    logdir, out = tmp_path / "run", tmp_path / "exported"
    untrained_run(logdir, env="tests.support.action_space_envs:TargetBox-v0",
                  normalize_observations=True, log_std_init=-0.5, sde=sde)
    export_policy(str(logdir), str(out))
    metadata = json.loads((out / "assets.extra" / "policy.json").read_text())
    assert metadata["action_space"] == {"type": "Box", "shape": [2], "low": [-2.0, -2.0],
                                        "high": [2.0, 2.0]}
    assert metadata["observation_normalization"]["feed"] == "raw observations"
    observations = np.array([[-1.0], [0.3], [0.9], [25.0]], np.float32)
    loaded = subprocess.run([sys.executable, "-c", LOAD], input=json.dumps(
        [[str(out), "float32", {"observations": observations.tolist()}]]),
        capture_output=True, text=True, env=child_env(), timeout=300)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    got = json.loads(loaded.stdout.strip().splitlines()[-1])[0]

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(logdir)))
    weights = {name.split("/", 1)[1]: reader.get_tensor(name)
               for name in reader.get_variable_to_shape_map() if name.startswith("global/")}
    mean, std = UNTRAINED_STATISTICS["mean"], UNTRAINED_STATISTICS["std"]
    standardized = np.clip((observations - mean) / np.sqrt(std ** 2 + 1e-8), -10, 10)
    (want_mean, want_log_std), _ = ground_truth.mlp_forward(weights, standardized)
    np.testing.assert_allclose(got["greedy_action"], want_mean, atol=1e-5)
    np.testing.assert_allclose(got["log_std"], want_log_std, atol=1e-5)
    spread = np.ptp(np.asarray(got["log_std"]), axis=0)
    if sde:
        assert np.all(spread > 1e-2), got["log_std"]  # a std of its own in each state
    else:
        np.testing.assert_allclose(got["log_std"], -0.5, atol=1e-6)
    assert np.shape(got["sampled_action"]) == (4, 2) and np.shape(got["value"]) == (4,)


def test_the_example_plays_a_box_policy_as_evaluate_plays(tmp_path):
    """scripts/play_saved_model.py on a Gaussian policy (TargetBox, raw observations fed):
    the greedy action, the mean clipped to the Box, earns what evaluate's greedy play earns
    on the same seeds; sampled play runs too."""
    logdir, out = tmp_path / "run", tmp_path / "exported"
    untrained_run(logdir, env="tests.support.action_space_envs:TargetBox-v0",
                  normalize_observations=True, log_std_init=-0.5)
    assert export("--logdir", str(logdir), "--out", str(out)).returncode == 0
    script = [sys.executable, str(REPO / "scripts" / "play_saved_model.py"), str(out),
              "--episodes", "4", "--seed", "3"]
    greedy = subprocess.run(script, capture_output=True, text=True, env=child_env(),
                            timeout=300)
    assert greedy.returncode == 0, greedy.stderr[-2000:]
    np.testing.assert_allclose(last_json_line(greedy.stdout)["returns"],
                               evaluate_run(logdir, 4, "--seed", "3")["returns"], rtol=1e-4)
    sampled = subprocess.run([*script, "--sample"], capture_output=True, text=True,
                             env=child_env(), timeout=300)
    assert sampled.returncode == 0, sampled.stderr[-2000:]
    assert len(last_json_line(sampled.stdout)["returns"]) == 4

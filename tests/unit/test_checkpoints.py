"""Log dirs that hold a different run, and damaged checkpoints: refused in one line (exit 2)
before anything is written or started, or skipped for an intact older checkpoint.

The checkpoints are the chief's: worker_graph.build_worker_graph is built (once per network) for
the names, shapes and dtypes of every variable its Saver saves, and a graph of plain
variables with exactly those is saved with worker_graph.py's Saver settings. (The worker graph
itself only runs against a real cluster: its globals are pinned to /job:ps.)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import tensorflow as tf
from conftest import run_to_end

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvBatch, env_info
from a3c_graph.distributed.cluster import TaskSpec
from a3c_graph.distributed.worker_graph import build_worker_graph
from a3c_graph.launcher import commands
from a3c_graph.rundir import checkpoints, run_config
from a3c_graph.rundir.checkpoints import CheckpointError
from a3c_graph.rundir.progress import write_json_atomic
from a3c_graph.trained import evaluation

tf1 = tf.compat.v1
REPO = Path(__file__).resolve().parents[2]
ENV = "CartPole-v1"
STEPS = (10, 20, 30)  # three checkpoints: the Saver keeps max_to_keep=3
TIMEOUT_SECS = 90
# What TF's C++ runtime prints on import on a machine without CUDA drivers, before
# absl logging is set up (TF_CPP_MIN_LOG_LEVEL cannot silence it): not ours to show.
TF_STARTUP_LINE = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\)"
                             r"|[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\] )")


# --------------------------------------------------------------------------- helpers

@functools.cache
def worker_saver(hidden_sizes=(64, 64), policy="auto", workers=1, keep_every_minutes=0.0):
    """The Saver of worker 0's graph (as the chief builds it) for this network."""
    config = A3CConfig(hidden_sizes=hidden_sizes, policy=policy, envs_per_worker=1,
                       rollout_length=2, keep_checkpoint_every_minutes=keep_every_minutes)
    spec = TaskSpec(cluster={"ps": ["127.0.0.1:1"],
                             "worker": [f"127.0.0.1:{2 + i}" for i in range(workers)]},
                    job="worker", task=0)
    batch = EnvBatch(ENV, 1, seed=0)
    try:
        with tf.Graph().as_default():
            return build_worker_graph(config, spec, env_info(ENV), [batch]).saver
    finally:
        batch.close()


def clone_graph(specs):
    """A graph of plain variables with the names, shapes and dtypes of `specs`, and a Saver
    with worker_graph.py's settings: (graph, saver, {name: variable})."""
    graph = tf.Graph()
    with graph.as_default():
        variables = {name: tf1.get_variable(name, spec.shape, tf.as_dtype(spec.dtype),
                                            initializer=tf1.zeros_initializer())
                     for name, spec in specs.items()}
        saver = tf1.train.Saver(max_to_keep=3, sharded=False, save_relative_paths=True)
    return graph, saver, variables


def write_run(logdir: Path, hidden_sizes=(64, 64), policy="auto", workers=1,
              steps=STEPS) -> list[str]:
    """A log dir as the chief leaves it: config.json and a checkpoint at each of `steps`
    (global_step holding the step); the checkpoint prefixes, oldest first."""
    logdir.mkdir(parents=True, exist_ok=True)
    config = A3CConfig(hidden_sizes=hidden_sizes, policy=policy)
    write_json_atomic(logdir / "config.json", dataclasses.asdict(config))
    graph, saver, variables = clone_graph(
        checkpoints.saved_variables(worker_saver(hidden_sizes, policy, workers)))
    prefixes = []
    with graph.as_default(), tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        for step in steps:
            session.run(variables["global_step"].assign(step))
            prefixes.append(saver.save(session, str(logdir / "model.ckpt"), global_step=step))
    return prefixes


def data_file(prefix: str) -> str:
    return prefix + ".data-00000-of-00001"


def truncate_data(prefix):
    os.truncate(data_file(prefix), os.path.getsize(data_file(prefix)) // 2)
    return data_file(prefix)


def flip_a_data_byte(prefix):
    data = bytearray(Path(data_file(prefix)).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(data_file(prefix)).write_bytes(bytes(data))
    return data_file(prefix)


def truncate_index(prefix):
    os.truncate(prefix + ".index", os.path.getsize(prefix + ".index") // 2)
    return prefix + ".index"


def garble_index(prefix):
    Path(prefix + ".index").write_bytes(b"not an sstable at all" * 20)
    return prefix + ".index"


def delete_files(prefix):
    os.remove(prefix + ".index")
    os.remove(data_file(prefix))
    return prefix + ".index"


DAMAGE = {"truncated data": truncate_data, "flipped data byte": flip_a_data_byte,
          "truncated index": truncate_index, "garbled index": garble_index,
          "missing files": delete_files}


def listing(directory: Path) -> list:
    """Every file under `directory` with its size and mtime: any write shows up."""
    return sorted((str(p.relative_to(directory)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in directory.rglob("*"))


def run_cli(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TF_CPP_MIN_LOG_LEVEL")}
    env["PYTHONPATH"] = str(REPO)
    # Past the timeout, the process and all it started are stopped by their pids.
    return run_to_end([sys.executable, "-m", module, *args], timeout=TIMEOUT_SECS, cwd=REPO,
                      env=env)


def error_line(result: subprocess.CompletedProcess, prefix: str) -> str:
    """The one error line of a run that must end in exit status 2 (TF's own start-up lines
    aside, which no setting silences)."""
    shown = f"status {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 2, shown
    assert "Traceback" not in result.stdout + result.stderr, shown
    lines = [ln for ln in result.stderr.splitlines()
             if ln.strip() and not TF_STARTUP_LINE.match(ln)]
    assert len(lines) == 1 and lines[0].startswith(prefix), shown
    return lines[0]


def one_error_line(capsys, prefix: str) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith(prefix), err
    return err[0]


# --------------------------------------------------------------------------- no TensorFlow

def test_the_savers_state_file_is_read_newest_first_with_absolute_paths(tmp_path):
    prefixes = write_run(tmp_path)
    state = run_config.read_checkpoint_state(str(tmp_path))
    assert state.newest == prefixes[-1]
    assert state.all_paths == tuple(prefixes)
    assert state.newest_first() == prefixes[::-1]
    # save_relative_paths: the file itself names them relative to the log dir.
    assert f'model_checkpoint_path: "{Path(prefixes[-1]).name}"' in \
        (tmp_path / "checkpoint").read_text()


def test_no_state_file_means_no_checkpoint(tmp_path):
    assert run_config.read_checkpoint_state(str(tmp_path)) is None
    # A config.json of any network without checkpoints is fine: a fresh start rewrites it.
    write_json_atomic(tmp_path / "config.json", dataclasses.asdict(A3CConfig(policy="lstm")))
    run_config.check_logdir_config(str(tmp_path), A3CConfig(), (4,))


@pytest.mark.parametrize("text", ["model_checkpoint_path: model.ckpt-10\n",
                                  "\x00\x01garbage\n",
                                  'all_model_checkpoint_paths: "model.ckpt-10"\n',
                                  'model_checkpoint_path: "model.ckpt-10"\nlast_preserved: 1\n'])
def test_a_garbled_state_file_is_an_error_naming_it(tmp_path, text):
    (tmp_path / "checkpoint").write_text(text)
    with pytest.raises(CheckpointError, match=r"checkpoint state file .*checkpoint .*damaged"):
        run_config.read_checkpoint_state(str(tmp_path))


NETWORKS = {  # (there, here, the flag named, or None when they build the same variables)
    "same": (A3CConfig(), A3CConfig(learning_rate=0.5, envs_per_worker=3, seed=7), None),
    "hidden sizes": (A3CConfig(), A3CConfig(hidden_sizes=(32,)), "hidden-sizes"),
    "lstm vs mlp": (A3CConfig(policy="lstm"), A3CConfig(policy="mlp"), "policy"),
    "auto is mlp here": (A3CConfig(policy="auto"), A3CConfig(policy="mlp"), None),
    "lstm size": (A3CConfig(policy="lstm"), A3CConfig(policy="lstm", lstm_size=32), "lstm-size"),
    "lstm size of an mlp": (A3CConfig(), A3CConfig(lstm_size=32), None),
    "env": (A3CConfig(), A3CConfig(env="Acrobot-v1"), "env"),
    "full action space off ALE": (A3CConfig(), A3CConfig(full_action_space=True), None),
    "optimizer": (A3CConfig(), A3CConfig(optimizer="rmsprop"), "optimizer"),
    # Their running statistics are in the checkpoint: a run cannot gain or drop them.
    "observation statistics": (A3CConfig(), A3CConfig(normalize_observations=True),
                               "normalize-observations"),
    "return statistics": (A3CConfig(normalize_rewards=True), A3CConfig(),
                          "normalize-rewards"),
}


@pytest.mark.parametrize("case", NETWORKS)
def test_network_differences_are_the_settings_that_change_variables(case):
    there, here, flag = NETWORKS[case]
    differences = run_config.network_differences(there, here, (4,))
    assert [d[0] for d in differences][:1] == ([flag] if flag else [])


def test_full_action_space_changes_an_atari_network():
    there = A3CConfig(env="ALE/Pong-v5", preset="atari")
    here = dataclasses.replace(there, full_action_space=True)
    assert run_config.network_differences(there, here, (4, 84, 84)) == [
        ("full-action-space", "false", "true")]


def test_screen_size_changes_an_atari_network():
    there = A3CConfig(env="ALE/Pong-v5", preset="atari")
    here = dataclasses.replace(there, screen_size=84)
    assert run_config.network_differences(there, here, (4, 42, 42)) == [
        ("screen-size", "42", "84")]


def test_conv_padding_and_activation_change_an_atari_network():
    there = A3CConfig(env="ALE/Pong-v5", preset="atari")
    assert run_config.network_differences(
        there, dataclasses.replace(there, conv_padding="valid"), (4, 42, 42)) == [
        ("conv-padding", "same", "valid")]
    assert run_config.network_differences(
        there, dataclasses.replace(there, activation="relu"), (4, 42, 42)) == [
        ("activation", "elu", "relu")]


def test_a_logdir_of_other_hidden_sizes_is_refused_in_one_sentence(tmp_path):
    write_run(tmp_path)
    with pytest.raises(CheckpointError) as caught:
        run_config.check_logdir_config(str(tmp_path), A3CConfig(hidden_sizes=(32,)), (4,))
    assert str(caught.value) == (
        f"log dir {tmp_path} holds checkpoints of a different network (--hidden-sizes 64,64 "
        "there, 32 here); use a new --logdir, or --hidden-sizes 64,64 to go on with that run")
    run_config.check_logdir_config(str(tmp_path), A3CConfig(learning_rate=0.1), (4,))


def test_a_logdir_of_another_optimizer_is_refused_in_one_sentence(tmp_path):
    write_run(tmp_path)
    with pytest.raises(CheckpointError) as caught:
        run_config.check_logdir_config(str(tmp_path), A3CConfig(optimizer="rmsprop"), (4,))
    assert str(caught.value) == (
        f"log dir {tmp_path} holds checkpoints of another optimizer (--optimizer adam there, "
        "rmsprop here); use a new --logdir, or --optimizer adam to go on with that run")


def test_a_logdir_of_the_plain_gaussian_refuses_sde_in_one_sentence(tmp_path):
    """--sde makes the log std a matrix: a run of the plain Gaussian cannot go on with it."""
    write_run(tmp_path)
    with pytest.raises(CheckpointError) as caught:
        run_config.check_logdir_config(str(tmp_path), A3CConfig(sde=True), (4,))
    assert str(caught.value) == (
        f"log dir {tmp_path} holds checkpoints of a different network (--sde false there, "
        "true here); use a new --logdir, or --sde false to go on with that run")


def test_a_logdir_without_observation_statistics_refuses_them_in_one_sentence(tmp_path):
    """A run that learned from raw observations cannot go on standardizing them: its
    checkpoints hold no statistics to start from."""
    write_run(tmp_path)
    with pytest.raises(CheckpointError) as caught:
        run_config.check_logdir_config(str(tmp_path), A3CConfig(normalize_observations=True),
                                       (4,))
    assert str(caught.value) == (
        f"log dir {tmp_path} holds checkpoints of other running statistics "
        "(--normalize-observations false there, true here); use a new --logdir, or "
        "--normalize-observations false to go on with that run")


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"hidden_sizes": "abc"}',
                                     '{"no_such_field": 1}'])
def test_a_garbled_config_json_next_to_checkpoints_is_an_error(tmp_path, content):
    write_run(tmp_path, steps=(10,))
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(CheckpointError, match=r"config\.json (is|are) "):
        run_config.check_logdir_config(str(tmp_path), A3CConfig(), (4,))


def test_a_state_file_whose_checkpoints_are_all_gone_is_refused_before_tf(tmp_path):
    prefix, = write_run(tmp_path, steps=(10,))
    delete_files(prefix)
    with pytest.raises(CheckpointError, match=r"names model\.ckpt-10, whose files are missing"):
        run_config.check_logdir_config(str(tmp_path), A3CConfig(), (4,))


# --------------------------------------------------------------------------- the chief's check

def test_a_compatible_checkpoint_is_restored_from_the_newest(tmp_path):
    prefixes = write_run(tmp_path)
    saver = worker_saver()
    assert checkpoints.restorable_checkpoint(str(tmp_path), saver) == prefixes[-1]
    # The Saver goes on rotating them out, as after a restore from checkpoint_dir.
    assert saver.last_checkpoints == prefixes


def test_an_empty_logdir_is_a_fresh_start(tmp_path):
    assert checkpoints.restorable_checkpoint(str(tmp_path), worker_saver()) is None


def test_a_checkpoint_of_other_hidden_sizes_names_a_variable_and_both_shapes(tmp_path):
    write_run(tmp_path, hidden_sizes=(64, 64))
    with pytest.raises(CheckpointError) as caught:
        checkpoints.restorable_checkpoint(str(tmp_path), worker_saver(hidden_sizes=(32,)))
    assert str(caught.value) == (
        f"log dir {tmp_path} holds checkpoints of a different network (global/policy/fc0/biases "
        "is float32 [64] there, float32 [32] here); use a new --logdir or the same network flags")


@pytest.mark.parametrize("there, here", [("lstm", "auto"), ("auto", "lstm")])
def test_a_checkpoint_of_another_policy_is_refused(tmp_path, there, here):
    write_run(tmp_path, policy=there)
    with pytest.raises(CheckpointError, match=r"holds checkpoints of a different network "
                                              r"\(global/\S+ (\[[\d, ]+\] is not in|is )"):
        checkpoints.restorable_checkpoint(str(tmp_path), worker_saver(policy=here))


def test_a_checkpoint_of_another_number_of_workers_is_refused(tmp_path):
    # stats.EpisodeStats keeps a row per worker, so the cluster's size is in the checkpoint.
    write_run(tmp_path, workers=2)
    with pytest.raises(CheckpointError, match=r"holds checkpoints of a run with 2 worker\(s\), "
                                              r"this one has 1 \(episode_stats/\S+ \[2(, 100)?\] "
                                              r"there, \[1(, 100)?\] here\); use a new --logdir "
                                              r"or 2 worker\(s\)$"):
        checkpoints.restorable_checkpoint(str(tmp_path), worker_saver(workers=1))


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_newest_checkpoint_falls_back_to_the_older_one(tmp_path, damage):
    prefixes = write_run(tmp_path)
    damaged_file = DAMAGE[damage](prefixes[-1])
    warnings = []
    saver = worker_saver()
    path = checkpoints.restorable_checkpoint(str(tmp_path), saver, warn=warnings.append)
    assert path == prefixes[-2]
    assert len(warnings) == 1 and damaged_file in warnings[0], warnings
    assert warnings[0].endswith("restoring the older checkpoint model.ckpt-20 instead")
    assert saver.last_checkpoints == prefixes[:-1]
    # Restoring from the path given (as the chief's ChiefSessionCreator does) gets step 20.
    graph, clone_saver, variables = clone_graph(checkpoints.saved_variables(saver))
    with graph.as_default():
        creator = tf1.train.ChiefSessionCreator(
            scaffold=tf1.train.Scaffold(saver=clone_saver), checkpoint_filename_with_path=path)
        session = creator.create_session()
        assert session.run(variables["global_step"]) == 20
        session.close()


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_only_checkpoint_is_an_error_naming_the_file(tmp_path, damage):
    prefix, = write_run(tmp_path, steps=(10,))
    damaged_file = DAMAGE[damage](prefix)
    with pytest.raises(CheckpointError) as caught:
        checkpoints.restorable_checkpoint(str(tmp_path), worker_saver())
    message = str(caught.value)
    assert message.startswith(f"log dir {tmp_path} has no intact checkpoint: ")
    assert damaged_file in message
    assert ("is damaged" if damage != "missing files" else "is missing") in message
    assert "\n" not in message


def test_every_checkpoint_damaged_is_an_error(tmp_path):
    for prefix in write_run(tmp_path):
        truncate_data(prefix)
    with pytest.raises(CheckpointError, match=r"model\.ckpt-30\.data-00000-of-00001 is damaged "
                                              r".*\(and 2 older one\(s\)\)"):
        checkpoints.restorable_checkpoint(str(tmp_path), worker_saver())


def test_a_state_file_naming_a_missing_checkpoint_is_an_error(tmp_path):
    write_run(tmp_path, steps=(10,))
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-99"\n'
                                         'all_model_checkpoint_paths: "model.ckpt-99"\n')
    with pytest.raises(CheckpointError, match=r"no intact checkpoint: checkpoint \S+model\.ckpt-99 "
                                              r"is missing its index file"):
        checkpoints.restorable_checkpoint(str(tmp_path), worker_saver())


@pytest.mark.parametrize("keep_every_minutes, kept", [(0.0, 3), (0.001, 6)])
def test_keep_checkpoint_every_minutes_keeps_older_checkpoints_for_good(
        tmp_path, keep_every_minutes, kept):
    """Six checkpoints at least a tenth of a second apart, the first too after the Saver was
    made (its clock starts there): the newest 3 stay; with --keep-checkpoint-every-minutes
    (here 0.06 s) every one that falls out of them stays too, on disk for evaluate
    --checkpoint, while the state file lists the newest 3."""
    with tf.Graph().as_default():
        tf1.get_variable("w", (2,), initializer=tf1.zeros_initializer())
        saver = checkpoints.build_saver(keep_every_minutes)
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            for step in range(1, 7):
                time.sleep(0.1)
                saver.save(session, str(tmp_path / "model.ckpt"), global_step=step)
    on_disk = sorted(int(p.name.split("-")[1].split(".")[0])
                     for p in tmp_path.glob("model.ckpt-*.index"))
    assert on_disk == list(range(7 - kept, 7))
    assert len(run_config.read_checkpoint_state(str(tmp_path)).all_paths) == 3


def test_the_chiefs_saver_keeps_checkpoints_as_the_flag_says():
    keep = worker_saver(keep_every_minutes=30.0).saver_def.keep_checkpoint_every_n_hours
    assert keep == pytest.approx(0.5)


# --------------------------------------------------------------------------- the launcher

def test_the_launcher_refuses_a_logdir_of_another_network_and_writes_nothing(tmp_path):
    logdir = tmp_path / "run"
    write_run(logdir)
    before = listing(logdir)
    # Not a dry run: were the check missing, the tasks would really start (and soon stop).
    result = run_cli("a3c_graph.launch", "start", "--logdir", str(logdir), "--workers", "1",
                     "--hidden-sizes", "32", "--max-seconds", "5")
    line = error_line(result, "launch_cluster: error: ")
    assert line == (f"launch_cluster: error: log dir {logdir} holds checkpoints of a different "
                    "network (--hidden-sizes 64,64 there, 32 here); use a new --logdir, or "
                    "--hidden-sizes 64,64 to go on with that run")
    assert result.stdout == ""
    assert listing(logdir) == before
    assert not [p for p in psutil.process_iter(["cmdline"])
                if any(str(logdir) in part for part in p.info["cmdline"] or [])]


def _garble_config(logdir):
    (logdir / "config.json").write_text("{\"hidden_sizes\": [64, 6")


def _garble_state(logdir):
    (logdir / "checkpoint").write_text("model_checkpoint_path: ???\n")


def _state_names_missing(logdir):
    for prefix in run_config.read_checkpoint_state(str(logdir)).all_paths:
        delete_files(prefix)


LAUNCH_CASES = {  # flags, how the log dir is spoiled, what the error line must say
    "policy lstm": (["--policy", "lstm"], None, r"\(--policy auto \(mlp\) there, lstm here\)"),
    "garbled config.json": ([], _garble_config, r"config\.json is not valid JSON"),
    "garbled state file": ([], _garble_state, r"checkpoint state file \S+ is garbled"),
    "state names missing files": ([], _state_names_missing, r"whose files are missing"),
}


@pytest.mark.parametrize("case", LAUNCH_CASES)
def test_the_launcher_refuses_a_logdir_it_cannot_go_on_from(tmp_path, capsys, case):
    flags, spoil, expected = LAUNCH_CASES[case]
    logdir = tmp_path / "run"
    write_run(logdir, steps=(10,))
    if spoil:
        spoil(logdir)
    before = listing(logdir)
    assert commands.main(["start", "--dry-run", "--logdir", str(logdir), *flags]) == 2
    assert re.search(expected, one_error_line(capsys, "launch_cluster: error: "))
    assert listing(logdir) == before


def test_the_launcher_accepts_a_logdir_of_the_same_network(tmp_path, capsys):
    logdir = tmp_path / "run"
    write_run(logdir)
    # --policy mlp is what auto resolves to for CartPole; the learning rate is no network flag.
    assert commands.main(["start", "--dry-run", "--logdir", str(logdir), "--policy", "mlp",
                        "--learning-rate", "0.01"]) == 0
    assert "--policy=mlp" in capsys.readouterr().out


# --------------------------------------------------------------------------- evaluate

def _lstm_checkpoint_elsewhere(logdir):
    return ["--checkpoint", write_run(logdir.parent / "lstm_run", policy="lstm", steps=(10,))[0]]


def _damage_newest(damage):
    def spoil(logdir):
        DAMAGE[damage](run_config.read_checkpoint_state(str(logdir)).newest)
        return []
    return spoil


def _empty_logdir(logdir):
    for path in logdir.iterdir():
        if path.name != "config.json":
            path.unlink()
    return []


def _spoil(action):
    def spoil(logdir):
        action(logdir)
        return []
    return spoil


EVALUATE_CASES = {  # how the log dir is spoiled (returns extra flags), what the error says
    "checkpoint of another network": (_lstm_checkpoint_elsewhere,
                                      r"checkpoint \S+model\.ckpt-10 is of a different network "
                                      r"\(global/\S+ .*\); \S+config\.json describes another"),
    "truncated data": (_damage_newest("truncated data"),
                       r"no intact checkpoint: checkpoint data file \S+ is damaged"),
    "garbled index": (_damage_newest("garbled index"),
                      r"no intact checkpoint: checkpoint index file \S+\.index is damaged"),
    "no checkpoint": (_empty_logdir, r"no checkpoint in "),
    "garbled config.json": (_spoil(_garble_config), r"config\.json is not valid JSON"),
    "state names missing files": (_spoil(_state_names_missing), r"is missing its index file"),
}


@pytest.mark.parametrize("case", EVALUATE_CASES)
def test_evaluate_refuses_what_it_cannot_play_in_one_line(tmp_path, capsys, case):
    spoil, expected = EVALUATE_CASES[case]
    logdir = tmp_path / "run"
    write_run(logdir, steps=(10,))
    flags = spoil(logdir)
    assert evaluation.main(["--logdir", str(logdir), "--episodes", "1", *flags]) == 2
    assert re.search(expected, one_error_line(capsys, "a3c_graph.evaluate: error: "))


@pytest.mark.parametrize("case", ["checkpoint of another network", "truncated data"])
def test_evaluate_cli_exits_2_with_one_line(tmp_path, case):
    spoil, expected = EVALUATE_CASES[case]
    logdir = tmp_path / "run"
    write_run(logdir, steps=(10,))
    flags = spoil(logdir)
    result = run_cli("a3c_graph.evaluate", "--logdir", str(logdir), "--episodes", "1", *flags)
    assert re.search(expected, error_line(result, "a3c_graph.evaluate: error: "))
    assert result.stdout == ""


def test_evaluate_plays_the_older_checkpoint_when_the_newest_is_damaged(tmp_path, capsys):
    logdir = tmp_path / "run"
    prefixes = write_run(logdir)
    damaged_file = truncate_data(prefixes[-1])
    assert evaluation.main(["--logdir", str(logdir), "--episodes", "1"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[-1])["checkpoint"] == prefixes[-2]
    assert err.startswith("a3c_graph.evaluate: warning: ") and damaged_file in err
    assert len(err.splitlines()) == 1, err

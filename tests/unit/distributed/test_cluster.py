"""distributed.cluster: every ClusterSpec source, its errors, ports and ConfigProtos."""

from __future__ import annotations

import json
import socket

import portpicker
import pytest

from a3c_graph.distributed.cluster import (
    ClusterError,
    TaskSpec,
    check_loopback,
    check_port_free,
    cluster_from_file,
    cluster_from_flags,
    is_loopback,
    non_loopback_hosts,
    resolve_task,
    split_host_port,
)
from a3c_graph.distributed.server import session_config

PS = "127.0.0.1:2222"
WORKERS = "127.0.0.1:2223,127.0.0.1:2224"
CLUSTER = {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}


def error_of(fn, *args, **kwargs) -> str:
    """The message of the ClusterError `fn` raises, checked to be the one line a user sees."""
    with pytest.raises(ClusterError) as excinfo:
        fn(*args, **kwargs)
    message = str(excinfo.value)
    assert message.strip(), "a ClusterError needs a message"
    assert "\n" not in message, f"ClusterError message is not one line: {message!r}"
    return message


def write_json(path, data) -> str:
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def tf_config(cluster=None, task=None) -> dict:
    data: dict = {"cluster": CLUSTER if cluster is None else cluster}
    if task is not None:
        data["task"] = task
    return {"TF_CONFIG": json.dumps(data)}


# ------------------------------------------------------------------- --ps-hosts/--worker-hosts

def test_flags_give_the_cluster_in_order():
    cluster = cluster_from_flags(PS, " 127.0.0.1:2223 , 127.0.0.1:2224 ")
    assert cluster == CLUSTER


def test_flags_resolve_to_the_named_task():
    spec = resolve_task(PS, WORKERS, None, "worker", 1, environ={})
    assert spec == TaskSpec(cluster=CLUSTER, job="worker", task=1)
    assert spec.address == "127.0.0.1:2224"
    assert (spec.num_ps, spec.num_workers) == (1, 2)
    assert not spec.is_chief
    assert resolve_task(PS, WORKERS, None, "worker", 0, environ={}).is_chief
    assert not resolve_task(PS, WORKERS, None, "ps", 0, environ={}).is_chief


def test_task_defaults_to_zero():
    assert resolve_task(PS, WORKERS, None, "worker", None, environ={}).task == 0


@pytest.mark.parametrize("text", ["", " , ", ","])
def test_empty_host_list_is_rejected(text):
    assert "--ps-hosts is empty" in error_of(cluster_from_flags, text, WORKERS)
    assert "--worker-hosts is empty" in error_of(cluster_from_flags, PS, text)


def test_one_flag_without_the_other_is_rejected():
    assert "go together" in error_of(resolve_task, PS, None, None, "worker", 0, environ={})
    assert "go together" in error_of(resolve_task, "", WORKERS, None, "worker", 0, environ={})


@pytest.mark.parametrize("address, words", [
    ("127.0.0.1:http", "not a number"),
    ("127.0.0.1:", "not a number"),
    ("127.0.0.1:0", "outside 1-65535"),
    ("127.0.0.1:70000", "outside 1-65535"),
    (":2222", "has no host"),
    ("[]:2222", "has no host"),
    ("127.0.0.1", "not of the form host:port"),
])
def test_bad_address_in_flags_is_rejected(address, words):
    message = error_of(cluster_from_flags, PS, address)
    assert words in message
    assert repr(address) in message


def test_duplicate_address_is_rejected():
    message = error_of(cluster_from_flags, PS, f"127.0.0.1:2223,{PS}")
    assert f"address {PS} is given to two tasks" in message
    assert "given to two tasks" in error_of(cluster_from_flags, PS, "127.0.0.1:2223,127.0.0.1:2223")


def test_port_edges_are_accepted():
    assert split_host_port("127.0.0.1:1") == ("127.0.0.1", 1)
    assert split_host_port("127.0.0.1:65535") == ("127.0.0.1", 65535)


# --------------------------------------------------------------------------- --cluster FILE.json

def test_cluster_file_with_a_plain_dict(tmp_path):
    path = write_json(tmp_path / "cluster.json", CLUSTER)
    assert cluster_from_file(path) == CLUSTER
    spec = resolve_task(None, None, path, "ps", 0, environ={})
    assert spec.address == "127.0.0.1:2222"


def test_cluster_file_in_tf_config_shape(tmp_path):
    path = write_json(tmp_path / "tf_config.json",
                      {"cluster": CLUSTER, "task": {"type": "ps", "index": 0}})
    assert cluster_from_file(path) == CLUSTER
    # The file's "task" is not ours: the job and task come from the flags.
    spec = resolve_task(None, None, path, "worker", 1, environ={})
    assert (spec.job, spec.task) == ("worker", 1)


def test_missing_cluster_file(tmp_path):
    path = str(tmp_path / "nope.json")
    message = error_of(cluster_from_file, path)
    assert path in message and "does not exist" in message


def test_invalid_json_names_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    # The colon after "worker" is missing: column 12 is where the "[" stands.
    path.write_text('{\n  "ps": ["127.0.0.1:2222"],\n  "worker" ["127.0.0.1:2223"]\n}\n')
    message = error_of(cluster_from_file, str(path))
    assert "is not valid JSON: Expecting ':' delimiter" in message
    assert message.endswith("(line 3, column 12)")


def test_cluster_file_that_is_a_directory(tmp_path):
    message = error_of(cluster_from_file, str(tmp_path))
    assert "cannot be read" in message


@pytest.mark.parametrize("data, words", [
    (["127.0.0.1:2222"], "must be a JSON object"),
    ("127.0.0.1:2222", "must be a JSON object"),
    ({"ps": "127.0.0.1:2222", "worker": ["127.0.0.1:2223"]},
     "non-empty list of host:port for 'ps'"),
    ({"ps": ["127.0.0.1:2222"]}, "non-empty list of host:port for 'worker'"),
    ({"ps": ["127.0.0.1:2222"], "worker": {"0": "127.0.0.1:2223"}},
     "non-empty list of host:port for 'worker'"),
    ({"ps": [2222], "worker": ["127.0.0.1:2223"]}, "ps: address 2222 is not of the form"),
    ({"ps": ["127.0.0.1:2222"], "worker": [None]}, "worker: address None is not of the form"),
    ({"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:99999"]}, "outside 1-65535"),
])
def test_cluster_file_with_wrong_types(tmp_path, data, words):
    path = write_json(tmp_path / "cluster.json", data)
    message = error_of(cluster_from_file, path)
    assert message.startswith(f"cluster file {path}")
    assert words in message


def test_cluster_file_with_unknown_job(tmp_path):
    path = write_json(tmp_path / "cluster.json", {**CLUSTER, "chief": ["127.0.0.1:2225"]})
    message = error_of(cluster_from_file, path)
    assert "unknown job 'chief'" in message and "'ps' and 'worker'" in message


def test_cluster_file_with_empty_worker_list(tmp_path):
    path = write_json(tmp_path / "cluster.json", {"ps": ["127.0.0.1:2222"], "worker": []})
    assert "non-empty list of host:port for 'worker'" in error_of(cluster_from_file, path)


# --------------------------------------------------------------------------- TF_CONFIG (TFJob)

def test_tf_config_names_the_job_and_task():
    environ = tf_config(task={"type": "worker", "index": 1})
    spec = resolve_task(None, None, None, None, None, environ=environ)
    assert spec == TaskSpec(cluster=CLUSTER, job="worker", task=1)
    environ = tf_config(task={"type": "ps", "index": 0})
    ps = resolve_task(None, None, None, None, None, environ=environ)
    assert (ps.job, ps.task, ps.address) == ("ps", 0, "127.0.0.1:2222")


def test_flags_override_tf_config_task():
    environ = tf_config(task={"type": "worker", "index": 1})
    spec = resolve_task(None, None, None, "ps", 0, environ=environ)
    assert (spec.job, spec.task) == ("ps", 0)
    # Only the index given: the job still comes from TF_CONFIG.
    spec = resolve_task(None, None, None, None, 0, environ=environ)
    assert (spec.job, spec.task) == ("worker", 0)


def test_cluster_flags_win_over_tf_config():
    environ = tf_config(cluster={"ps": ["127.0.0.1:3000"], "worker": ["127.0.0.1:3001"]},
                        task={"type": "worker", "index": 0})
    spec = resolve_task(PS, WORKERS, None, "worker", 1, environ=environ)
    assert spec.cluster == CLUSTER


def test_tf_config_without_task_needs_a_job():
    message = error_of(resolve_task, None, None, None, None, None, environ=tf_config())
    assert "no job given" in message and "--job" in message


@pytest.mark.parametrize("text", ["{bad", '{"cluster": ', "not json"])
def test_malformed_tf_config(text):
    message = error_of(resolve_task, None, None, None, "worker", 0, environ={"TF_CONFIG": text})
    assert message.startswith("TF_CONFIG is not valid JSON")


@pytest.mark.parametrize("text, words", [
    ("[]", "has no 'cluster' entry"),
    ('{"task": {"type": "worker", "index": 0}}', "has no 'cluster' entry"),
    (json.dumps({"cluster": CLUSTER, "task": "worker"}), "'task' must be an object"),
    (json.dumps({"cluster": {"worker": ["127.0.0.1:1"]}}), "TF_CONFIG: needs a non-empty list"),
])
def test_tf_config_with_wrong_shape(text, words):
    assert words in error_of(resolve_task, None, None, None, "worker", 0,
                             environ={"TF_CONFIG": text})


@pytest.mark.parametrize("task_type", ["chief", "evaluator"])
def test_tf_config_task_type_other_than_ps_or_worker(task_type):
    environ = tf_config(task={"type": task_type, "index": 0})
    message = error_of(resolve_task, None, None, None, None, None, environ=environ)
    assert f"TF_CONFIG task type {task_type!r} is not 'ps' or 'worker'" == message


def test_tf_config_from_a_tfjob_with_a_chief_replica():
    cluster = {**CLUSTER, "chief": ["127.0.0.1:2230"]}
    environ = tf_config(cluster=cluster, task={"type": "worker", "index": 0})
    message = error_of(resolve_task, None, None, None, None, None, environ=environ)
    assert "TF_CONFIG" in message and "unknown job 'chief'" in message


@pytest.mark.parametrize("index", ["1", 1.0, True, None])
def test_tf_config_task_index_not_int(index):
    environ = tf_config(task={"type": "worker", "index": index})
    if index is None:  # no index: task 0, like a TFJob with one replica
        assert resolve_task(None, None, None, None, None, environ=environ).task == 0
        return
    message = error_of(resolve_task, None, None, None, None, None, environ=environ)
    assert f"TF_CONFIG task index {index!r} is not an integer" == message


def test_tf_config_index_outside_the_cluster():
    environ = tf_config(task={"type": "worker", "index": 2})
    message = error_of(resolve_task, None, None, None, None, None, environ=environ)
    assert "--task 2 is outside the cluster" in message and "has 2 task(s)" in message


# --------------------------------------------------------------------------- choosing the task

@pytest.mark.parametrize("job, task, count", [("worker", 2, 2), ("worker", 5, 2), ("ps", 1, 1),
                                              ("worker", -1, 2)])
def test_task_index_outside_the_cluster(job, task, count):
    message = error_of(resolve_task, PS, WORKERS, None, job, task, environ={})
    assert f"--task {task} is outside the cluster" in message
    assert f"job {job!r} has {count} task(s), indices 0-{count - 1}" in message


def test_unknown_job_name_is_rejected():
    message = error_of(resolve_task, PS, WORKERS, None, "chief", 0, environ={})
    assert "--job 'chief' is not 'ps' or 'worker'" == message


def test_both_flags_and_cluster_file(tmp_path):
    path = write_json(tmp_path / "cluster.json", CLUSTER)
    message = error_of(resolve_task, PS, WORKERS, path, "worker", 0, environ={})
    assert "either --ps-hosts/--worker-hosts or --cluster, not both" in message
    assert "not both" in error_of(resolve_task, PS, None, path, "worker", 0, environ={})


def test_nothing_given():
    message = error_of(resolve_task, None, None, None, "worker", 0, environ={})
    assert message.startswith("no cluster given")
    for source in ("--ps-hosts/--worker-hosts", "--cluster", "TF_CONFIG"):
        assert source in message
    # An empty TF_CONFIG is nothing given too.
    assert error_of(resolve_task, None, None, None, "worker", 0,
                    environ={"TF_CONFIG": ""}).startswith("no cluster given")


# --------------------------------------------------------------------------- addresses

def test_ipv6_address_parses_and_is_loopback():
    assert split_host_port("[::1]:2222") == ("::1", 2222)
    cluster = cluster_from_flags("[::1]:2222", "[::1]:2223,127.0.0.1:2224")
    assert cluster["ps"] == ["[::1]:2222"]
    assert non_loopback_hosts(cluster) == []


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True),
    ("127.0.0.5", True),
    ("localhost", True),
    ("::1", True),
    ("10.0.0.1", False),
    ("0.0.0.0", False),
    ("::", False),
    ("worker-3.example.com", False),
    ("myhost", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_non_loopback_hosts_lists_every_remote_address_in_job_order():
    cluster = {"worker": ["127.0.0.1:2223", "10.0.0.2:2222", "localhost:2224"],
               "ps": ["node-a:2222", "[::1]:2225"]}
    assert non_loopback_hosts(cluster) == ["node-a:2222", "10.0.0.2:2222"]
    assert non_loopback_hosts(CLUSTER) == []


def test_the_launcher_and_a_task_refuse_a_remote_cluster_in_the_same_words(tmp_path):
    from a3c_graph import worker as worker_command
    from a3c_graph.launcher import commands, plan
    from a3c_graph.system.cli import UsageError

    remote = {"ps": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "10.0.0.2:2224"]}
    cluster_file = tmp_path / "cluster.json"
    cluster_file.write_text(json.dumps(remote))
    with pytest.raises(UsageError) as launcher:
        plan.resolve_cluster(commands.build_start_parser().parse_args(
            ["--cluster", str(cluster_file)]), environ={})
    with pytest.raises(UsageError) as task:
        worker_command._validated_task(worker_command.parse_args(
            ["--job", "worker", "--task", "0", "--cluster", str(cluster_file),
             "--logdir", str(tmp_path / "run")]))
    assert str(launcher.value) == str(task.value) == (
        "10.0.0.2:2224 is not a loopback address; the TF server is unauthenticated gRPC, so "
        "pass --allow-remote only if the network is trusted")
    assert not (tmp_path / "run").exists()
    check_loopback(remote, allow_remote=True)  # the user says the network is trusted
    check_loopback(CLUSTER, allow_remote=False)


# --------------------------------------------------------------------------- ports

def test_check_port_free_names_a_taken_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        message = error_of(check_port_free, f"127.0.0.1:{port}")
        assert f"port {port} for 127.0.0.1:{port} is already in use" == message
        # TF's server takes the port on every interface, so another host name collides too.
        assert "already in use" in error_of(check_port_free, f"localhost:{port}")


def test_check_port_free_passes_for_a_free_port():
    port = portpicker.pick_unused_port()
    try:
        check_port_free(f"127.0.0.1:{port}")
        check_port_free(f"[::1]:{port}")
        # The check must not keep the port: it can be bound right after.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as after:
            after.bind(("127.0.0.1", port))
    finally:
        portpicker.return_port(port)


def test_check_port_free_rejects_a_bad_address():
    assert "outside 1-65535" in error_of(check_port_free, "127.0.0.1:0")


# --------------------------------------------------------------------------- session config

def worker_cluster(num_workers: int) -> dict:
    return {"ps": ["127.0.0.1:2222"],
            "worker": [f"127.0.0.1:{2300 + i}" for i in range(num_workers)]}


def test_session_config_of_a_worker():
    spec = TaskSpec(cluster=worker_cluster(4), job="worker", task=3)
    config = session_config(spec, intra_op_threads=3, inter_op_threads=4, visible_device_list="1")
    assert config.allow_soft_placement
    assert config.gpu_options.allow_growth
    assert config.gpu_options.visible_device_list == "1"
    assert list(config.device_filters) == ["/job:ps", "/job:worker/task:3"]
    assert config.intra_op_parallelism_threads == 3
    assert config.inter_op_parallelism_threads == 4


def test_session_config_of_a_ps():
    spec = TaskSpec(cluster=worker_cluster(2), job="ps", task=0)
    config = session_config(spec)
    assert list(config.device_filters) == ["/job:ps"]
    assert config.gpu_options.visible_device_list == ""
    assert config.allow_soft_placement and config.gpu_options.allow_growth
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (1, 2)

"""deploy/kubernetes/tfjob.yaml and the Dockerfile: every replica finds the same cluster and
its own task.

No Kubernetes here. Each replica gets the TF_CONFIG that Kubeflow's training operator sets
(genTFConfigJSONStr in kubeflow/training-operator): the cluster as the replicas' service
names `<job name>-<replica type>-<index>.<namespace>.svc:<port>`, the port being the one
named tfjob-port of the container named tensorflow, with the replica's own task type and
index, and "environment": "cloud". Its container's command line goes through the worker's own
parser and cluster code, as in the pod.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from a3c_graph import worker as worker_command
from a3c_graph.core.config import config_from_args
from a3c_graph.distributed.cluster import non_loopback_hosts, resolve_task
from a3c_graph.launcher import commands
from a3c_graph.launcher.plan import resolve_cluster

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "deploy" / "kubernetes" / "tfjob.yaml"
DOCKERFILE = REPO / "Dockerfile"
# The training operator's defaults (kubeflow/training-operator, pkg/apis/.../constants.go).
CONTAINER, PORT_NAME, DEFAULT_PORT = "tensorflow", "tfjob-port", 2222
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


def manifest(kind: str) -> dict:
    [document] = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == kind]
    return document


def tensorflow_container(replica_spec: dict) -> dict:
    containers = replica_spec["template"]["spec"]["containers"]
    [container] = [c for c in containers if c["name"] == CONTAINER]
    return container


def tf_port(container: dict) -> int:
    ports = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == PORT_NAME]
    return ports[0] if ports else DEFAULT_PORT


def operator_tf_configs(tfjob: dict) -> dict[tuple[str, int], str]:
    """TF_CONFIG of every replica, by (task type, index), as the training operator sets it."""
    name = tfjob["metadata"]["name"]
    namespace = tfjob["metadata"].get("namespace", "default")
    specs = tfjob["spec"]["tfReplicaSpecs"]
    cluster = {
        rtype.lower(): [f"{name}-{rtype.lower()}-{i}.{namespace}.svc:"
                        f"{tf_port(tensorflow_container(spec))}"
                        for i in range(spec.get("replicas", 1))]
        for rtype, spec in specs.items()}
    return {(job, i): json.dumps({"cluster": cluster, "task": {"type": job, "index": i},
                                  "environment": "cloud"})
            for job, addresses in cluster.items() for i in range(len(addresses))}


def container_args(replica_spec: dict):
    """The worker's parsed arguments of the replica's container command."""
    container = tensorflow_container(replica_spec)
    command = [*container.get("command", []), *container.get("args", [])]
    assert command[:3] == ["python", "-m", "a3c_graph.worker"], command
    return worker_command.parse_args(command[3:])


def replica_specs() -> dict[str, dict]:
    """The replica specs by task type ("ps", "worker")."""
    specs = manifest("TFJob")["spec"]["tfReplicaSpecs"]
    return {rtype.lower(): spec for rtype, spec in specs.items()}


def test_every_replica_resolves_the_same_cluster_and_its_own_task():
    tfjob = manifest("TFJob")
    name = tfjob["metadata"]["name"]
    tf_configs = operator_tf_configs(tfjob)
    assert sorted(tf_configs) == [("ps", 0), ("worker", 0), ("worker", 1), ("worker", 2)]
    expected = {"ps": [f"{name}-ps-0.default.svc:2222"],
                "worker": [f"{name}-worker-{i}.default.svc:2222" for i in range(3)]}
    chiefs = []
    for (job, index), tf_config in tf_configs.items():
        args = container_args(replica_specs()[job])
        spec = resolve_task(args.ps_hosts, args.worker_hosts, args.cluster, args.job, args.task,
                            environ={"TF_CONFIG": tf_config}, num_ps=args.ps, port=args.port)
        assert spec.cluster == expected
        assert (spec.job, spec.task) == (job, index)
        chiefs += [spec.address] if spec.is_chief else []
        # scripts/launch_cluster.sh in the pod would start the same one task.
        launch_args = commands.build_start_parser().parse_args(["--allow-remote"])
        cluster, keys, _, _ = resolve_cluster(launch_args, {"TF_CONFIG": tf_config})
        assert (cluster, keys) == (expected, [(job, index)])
    assert chiefs == [f"{name}-worker-0.default.svc:2222"]


def test_every_replica_passes_allow_remote_and_valid_flags():
    for job, spec in replica_specs().items():
        args = container_args(spec)
        config_from_args(args)
        # The pod network is not loopback, and TF's server is unauthenticated: the worker
        # refuses these addresses unless told the network is trusted.
        assert args.allow_remote, f"{job} replicas need --allow-remote"
        assert args.job is None and args.task is None, "TF_CONFIG names each replica's task"
    tf_config = json.loads(operator_tf_configs(manifest("TFJob"))[("worker", 0)])
    assert non_loopback_hosts(tf_config["cluster"])


def test_workers_write_their_logdir_to_a_mounted_volume():
    spec = replica_specs()["worker"]
    logdir = container_args(spec).logdir
    mounts = [m["mountPath"] for m in tensorflow_container(spec).get("volumeMounts", [])]
    assert logdir and any(logdir.startswith(path.rstrip("/") + "/") for path in mounts)


def test_only_ps_and_worker_replicas_restarted_on_failure():
    # The worker refuses a "chief" or "evaluator" task type; exit 75 (lost the ps) must
    # restart the container, which Kubeflow's ExitCode policy would not.
    assert set(replica_specs()) == {"ps", "worker"}
    assert all(spec["restartPolicy"] == "OnFailure" for spec in replica_specs().values())


def test_network_policy_admits_only_this_jobs_pods_to_the_tf_port():
    tfjob, policy = manifest("TFJob"), manifest("NetworkPolicy")
    name = tfjob["metadata"]["name"]
    assert policy["metadata"]["namespace"] == tfjob["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {JOB_NAME_LABEL: name}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {JOB_NAME_LABEL: name}}}]
    ports = {tf_port(tensorflow_container(spec)) for spec in replica_specs().values()}
    assert [p["port"] for p in rule["ports"]] == sorted(ports)


def test_the_image_is_built_from_this_package():
    dockerfile = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.MULTILINE)
    assert re.search(r"^RUN pip install \. ", dockerfile, re.MULTILINE)
    version = re.search(r'version="([^"]+)"', (REPO / "setup.py").read_text()).group(1)
    images = {tensorflow_container(spec)["image"] for spec in replica_specs().values()}
    assert images == {f"a3c-graph:{version}"}
    assert f"docker build -t a3c-graph:{version} ." in dockerfile

"""Where ops really ran: the worker graph traced in a cluster child whose worker has two
logical CPUs, so the planned device (CPU:1 standing in for an accelerator, or a GPU that
this machine may lack) can be told from the task's own CPU; the globals on the ps; one
message each way per update."""

from __future__ import annotations

from a3c_graph.launcher.device_plan import plan_devices
from a3c_graph.system import devices
from tests.support.fake_gpus import cluster_keys, fake_gpus


class Ran(dict):
    """{node name: devices it ran on} of a traced run, and each node's op type."""

    def __init__(self, run_metadata):
        super().__init__()
        self.partition_graphs = list(run_metadata.partition_graphs)
        self.op_types: dict[str, str] = {}
        for stats in run_metadata.step_stats.dev_stats:
            for node in stats.node_stats:
                self.setdefault(node.node_name, set()).add(stats.device)
                # timeline_label reads "name = OpType(inputs)".
                self.op_types[node.node_name] = node.timeline_label.partition(" = ")[2] \
                    .partition("(")[0]

    def received_from_other_tasks(self) -> dict[str, int]:
        """{task: tensors it received from another task} in the run: each is a message."""
        counts: dict[str, int] = {}
        for graph in self.partition_graphs:
            for node in graph.node:
                if node.op in ("_Recv", "_HostRecv"):
                    sender, receiver = (node.attr[key].s.decode().split("/device:")[0]
                                        for key in ("send_device", "recv_device"))
                    if sender != receiver:
                        counts[receiver] = counts.get(receiver, 0) + 1
        return counts

    def matmuls(self, scope: str) -> set[str]:
        """Devices where the matrix products under `scope` ran, in whatever fused op the
        CPU's graph rewrites put them (MatMul, _FusedMatMul, _MklNativeFusedMatMul, ...)."""
        return {device for name, op_type in self.op_types.items()
                if name.startswith(scope) and "MatMul" in op_type for device in self[name]}


def traced_train_step(cluster: dict, worker_device: str | None) -> dict:
    """Run in a cluster child (tests/support/cluster_child.py): a ps and a worker server whose
    worker has two logical CPUs, configured from a device plan whose worker has a GPU (on a machine
    without one, that worker's GPU ops must fall back to its CPU). Builds the worker graph on
    `worker_device` (None: the plan's), runs one rollout and one update, traced."""
    import tensorflow as tf

    from a3c_graph.core.config import A3CConfig
    from a3c_graph.core.envs import EnvBatch, env_info
    from a3c_graph.distributed.cluster import TaskSpec
    from a3c_graph.distributed.server import session_config
    from a3c_graph.distributed.worker_graph import build_worker_graph
    from tests.support.cluster_child import start_servers

    tf1 = tf.compat.v1
    plan = plan_devices(cluster_keys(1), "0", inventory=fake_gpus(1))
    specs = {job: TaskSpec(cluster, job, 0) for job in ("ps", "worker")}
    configs = {job: devices.apply_to_config(session_config(spec), plan.for_task(job, 0))
               for job, spec in specs.items()}
    configs["worker"].device_count["CPU"] = 2
    servers = start_servers(cluster, configs)
    worker_device = worker_device or plan.for_task("worker", 0).device

    config = A3CConfig(envs_per_worker=2, rollout_length=4, hidden_sizes=(8,))
    batch = EnvBatch("CartPole-v1", 2, seed=0)
    try:
        with tf.Graph().as_default():
            worker = build_worker_graph(config, specs["worker"], env_info("CartPole-v1"),
                                        [batch], worker_device=worker_device)
            [runner] = tf1.get_collection(tf1.GraphKeys.QUEUE_RUNNERS)
            init = [tf1.global_variables_initializer(), tf1.local_variables_initializer()]
            with tf1.Session(servers["worker", 0].target, config=configs["worker"]) as session:
                devices_here = {d.name for d in session.list_devices()}
                session.run(init)
                trace = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE,
                                       output_partition_graphs=True)
                rollout, update = tf1.RunMetadata(), tf1.RunMetadata()
                session.run(runner.enqueue_ops[0], options=trace, run_metadata=rollout)
                fetched = session.run(worker.train_fetches, options=trace, run_metadata=update)
    finally:
        batch.close()
    return {"worker_device": worker_device, "devices_here": devices_here,
            "global_step": int(fetched.counters.global_step),
            "rollout_steps": int(fetched.rollout_steps),
            "rollout": rollout.SerializeToString(), "update": update.SerializeToString(),
            "global_names": {v.op.name for v in worker.global_network.variables}}


def traced_in_cluster(in_cluster, worker_device: str | None = None):
    """(worker device, Ran of the rollout, Ran of the update, global names, devices here)."""
    import tensorflow as tf

    got = in_cluster("tests.cluster.test_placement:traced_train_step",
                     worker_device=worker_device)
    assert got["global_step"] == 1 and got["rollout_steps"] == 8
    ran = [Ran(tf.compat.v1.RunMetadata.FromString(got[key])) for key in ("rollout", "update")]
    return got["worker_device"], *ran, got["global_names"], got["devices_here"]


PS_CPU = "/job:ps/replica:0/task:0/device:CPU:0"


WORKER = "/job:worker/replica:0/task:0/device:"


def test_globals_on_the_ps_and_the_rollout_on_the_planned_worker_device(in_cluster):
    # CPU:1 stands in for an accelerator: the plan's device is where the worker's ops run.
    _, rollout, update, global_names, devices_here = traced_in_cluster(
        in_cluster, "/job:worker/task:0/device:CPU:1")
    assert {PS_CPU, WORKER + "CPU:0", WORKER + "CPU:1"} <= devices_here
    # The rollout: the local copy's forward pass and the env step, on the worker's CPU:1.
    assert rollout.matmuls("actors/rollout/body/") == {WORKER + "CPU:1"}
    assert rollout["actors/rollout/body/_1/env_step_0"] == {WORKER + "CPU:1"}
    # An actor never talks to the ps: the learner's step refreshes the local copy.
    assert all(PS_CPU not in where for where in rollout.values()), "nothing of a rollout on the ps"
    # The update: gradients applied to the globals on the ps, each global variable there.
    applied = {name: where for name, where in update.items() if name.endswith("ResourceApplyAdam")}
    assert len(applied) == len(global_names)
    assert all(where == {PS_CPU} for where in applied.values()), applied
    for name in global_names:
        assert update[name] == {PS_CPU}, (name, update[name])
    # The learner's loss on the local copy ran on the worker's planned device.
    assert update.matmuls("") == {WORKER + "CPU:1"}
    # One message each way (transfer.py): the gradients with the finished episodes to the
    # ps, split there; the updated globals with the counters back, concatenated there. Not
    # a message per variable, nor one per cross-task control dependency.
    assert update.received_from_other_tasks() == {
        "/job:ps/replica:0/task:0": 1, "/job:worker/replica:0/task:0": 1}
    on_ps = [update.op_types[name] for name, where in update.items() if PS_CPU in where]
    assert (on_ps.count("SplitV"), on_ps.count("ConcatV2")) == (1, 1), sorted(on_ps)


def test_a_worker_planned_on_a_gpu_runs_its_ops_there_and_the_env_step_on_its_cpu(in_cluster):
    device, rollout, update, global_names, devices_here = traced_in_cluster(in_cluster)
    assert device == "/job:worker/task:0/device:GPU:0"
    has_gpu = WORKER + "GPU:0" in devices_here
    # numpy_function has no GPU kernel: soft placement puts it on the worker's CPU.
    assert rollout["actors/rollout/body/_1/env_step_0"] == {WORKER + "CPU:0"}
    # The forward pass goes to the GPU when there is one, else (this machine) to the CPU.
    expected = WORKER + ("GPU:0" if has_gpu else "CPU:0")
    assert rollout.matmuls("actors/rollout/body/") == {expected}
    for name in global_names:
        assert update[name] == {PS_CPU}

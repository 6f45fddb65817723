"""A child process that hosts a cluster of real TF servers and runs one function against it.

TF's in-process servers cannot be stopped (their C++ Stop is unimplemented), so a test that
needs tf.train.Servers of its own starts them in a child process that it stops by pid: no
server outlives its test. The child runs in the test session's private network
(conftest.PrivateNetwork), since a TF server listens on every interface whatever host its
cluster names (a3c_graph/system/netns.py) and there only lo exists.

    python -m tests.support.cluster_child MODULE:FUNCTION NUM_PS WORKDIR

picks a port for each of NUM_PS ps tasks and one worker, unpickles WORKDIR/in.pickle as keyword
arguments, calls FUNCTION(cluster, **kwargs) with cluster {"ps": [...], "worker": [...]} and
pickles what it returns to WORKDIR/out.pickle. The function starts the servers it needs
(start_servers), with the configs it needs. The parent side is conftest.run_in_cluster.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import traceback
from pathlib import Path


def start_servers(cluster: dict, configs: dict | None = None) -> dict:
    """A started server for every task of `cluster`, {(job, index): server}, each with
    configs[job] or the project's session_config for its task (a3c_graph.distributed.cluster)."""
    from a3c_graph.distributed.cluster import TaskSpec
    from a3c_graph.distributed.server import session_config, start_server

    servers = {}
    for job, addresses in cluster.items():
        for index in range(len(addresses)):
            spec = TaskSpec(cluster, job, index)
            config = (configs or {}).get(job) or session_config(spec)
            servers[job, index] = start_server(spec, config)
    return servers


def main(function: str, num_ps: int, workdir: Path) -> None:
    import portpicker

    from a3c_graph.system import process_env

    process_env.before_tf_import()  # this process's own environment: quiet TF, no Keras load
    ports = [portpicker.pick_unused_port() for _ in range(num_ps + 1)]
    cluster = {"ps": [f"127.0.0.1:{port}" for port in ports[:num_ps]],
               "worker": [f"127.0.0.1:{ports[-1]}"]}
    module, name = function.split(":")
    kwargs = pickle.loads((workdir / "in.pickle").read_bytes())
    result = getattr(importlib.import_module(module), name)(cluster, **kwargs)
    (workdir / "out.pickle").write_bytes(pickle.dumps(result))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))  # test modules import conftest, as pytest
    status = 0
    try:
        main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # the servers cannot be shut down cleanly: leave without waiting for them

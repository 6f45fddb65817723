"""A ps task: start its server and serve the variables until it is told to stop.

A ps holds no state of its own (the chief checkpoints the variables it serves), so it stops
the moment it decides to: on a stop signal, or under Slurm, where no supervisor stops it,
once every worker has left its token (ps_release.py).
"""

from __future__ import annotations

import os
import time

from a3c_graph.distributed import ps_release, server
from a3c_graph.system.cli import WORKER_PROG as PROG
from a3c_graph.system.devices import describe_task


def run_ps(spec, config, device, stop, released_by_workers: bool = False) -> int:
    """Serve until a stop signal (`stop`: the task's TaskStopSignals); or,
    released_by_workers (under Slurm, where no supervisor stops the ps after the workers),
    until every worker is done (ps_release.py)."""
    server_config = server.task_config(spec, config, device)
    task_server = server.start_server(spec, server_config)
    print(f"{PROG}: {describe_task(device)}", flush=True)
    print(f"{PROG}: ps task {spec.task} serving at {spec.address}", flush=True)
    stop.in_loop = True
    if released_by_workers:
        own = type(server_config)()
        own.CopyFrom(server_config)
        del own.device_filters[:]
        own.device_filters.append(f"/job:ps/task:{spec.task}")  # its own queue only
        why = ps_release.serve_until_released(task_server.target, spec.task, spec.num_workers, own,
                                              lambda: stop.received is not None)
    else:
        why = "stop signal"
        while stop.received is None:  # server.join() would block signals forever
            time.sleep(0.2)
    print(f"{PROG}: ps task {spec.task} stopping ({why})", flush=True)
    # A ps holds no state of its own to flush (the chief checkpoints the variables), and
    # tearing down a gRPC server with live peers can take a while: leave at once.
    os._exit(0)

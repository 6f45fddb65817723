"""A ps that nobody stops (Slurm) ends when every worker has left its token, and after a stop
signal waits for the tokens only a bounded time (a3c_graph/distributed/ps_release.py).

One process in a private network holds a real ps server and a real worker server; the ps
side polls its done queue in a thread while the worker side leaves its token.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, child_env

SCRIPT = r"""
import json, threading, time
import portpicker
from a3c_graph.distributed import ps_release
from a3c_graph.system import process_env
tf = process_env.import_tensorflow_quietly()
tf.compat.v1.disable_eager_execution()
tf1 = tf.compat.v1
ps_port, worker_port = portpicker.pick_unused_port(), portpicker.pick_unused_port()
cluster = tf1.train.ClusterSpec({"ps": [f"localhost:{ps_port}"],
                                 "worker": [f"localhost:{worker_port}"]})
ps = tf1.train.Server(cluster, job_name="ps", task_index=0)
worker = tf1.train.Server(cluster, job_name="worker", task_index=0)
ps_config = tf1.ConfigProto(device_filters=["/job:ps/task:0"])
worker_config = tf1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])
out = {}

def serve(key, workers, stopped):
    out[key] = ps_release.serve_until_released(ps.target, 0, workers, ps_config, stopped)

released = threading.Thread(target=serve, args=("released", 1, lambda: False))
released.start()
time.sleep(2.0)
out["serving_before_the_token"] = released.is_alive()
graph = tf.Graph()
with graph.as_default():
    ops = ps_release.token_ops(1, 0)
out["token_error"] = ps_release.leave_token(worker.target, graph, worker_config, ops)
released.join(30)
out["serving_after_the_token"] = released.is_alive()
# A stop signal, and a second worker that never leaves a token: the ps waits the grace only.
ps_release.STOP_GRACE_SECS = 1.0
stopped = threading.Thread(target=serve, args=("stopped", 2, lambda: True))
stopped.start()
stopped.join(30)
out["serving_after_the_grace"] = stopped.is_alive()
print(json.dumps(out), flush=True)
"""


def test_the_ps_ends_when_every_worker_left_a_token(private_network):
    result = subprocess.run(private_network.command([sys.executable, "-c", SCRIPT]),
                            capture_output=True, text=True, env=child_env(), cwd=REPO,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["serving_before_the_token"] is True
    assert out["token_error"] is None
    assert out["serving_after_the_token"] is False
    assert out["released"] == "every worker is done"
    assert out["serving_after_the_grace"] is False
    assert out["stopped"].startswith("stop signal; no token from some worker")

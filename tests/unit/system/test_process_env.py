"""The environment a task imports TF with: no Keras load at start-up, the user's values win."""

import json
import subprocess
import sys

from conftest import REPO, child_env

PROBE = """
import json, os, sys
from a3c_graph.system.process_env import graph_mode_tensorflow
tf = graph_mode_tensorflow()
from tensorflow.python.framework import test_util
print(json.dumps({"onednn": test_util.IsMklEnabled(),
                  "keras_loaded": any(m == "keras" or m.startswith("keras.") for m in sys.modules),
                  "log_level": os.environ["TF_CPP_MIN_LOG_LEVEL"],
                  "graph_mode": not tf.executing_eagerly()}))
"""


def probe(**extra: str) -> dict:
    env = child_env(**extra)
    for name in ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS"):
        if name not in extra:
            env.pop(name, None)
    # A guard against a hang, not a speed bound: importing TF on a loaded machine has taken
    # over 120 s (pytest's own timeout is 600 s a test).
    ran = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=480, cwd=REPO, env=env)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_a_task_imports_tf_with_onednn_and_without_loading_keras():
    assert probe() == {"onednn": True, "keras_loaded": False, "log_level": "2",
                       "graph_mode": True}


def test_values_the_user_exported_win():
    got = probe(TF_USE_LEGACY_KERAS="0", TF_CPP_MIN_LOG_LEVEL="1", TF_ENABLE_ONEDNN_OPTS="0")
    assert got == {"onednn": False, "keras_loaded": True, "log_level": "1", "graph_mode": True}


def test_settings_made_for_a_block_are_gone_after_it_and_the_users_stay():
    from a3c_graph.system import process_env

    environ = {"TF_CPP_MIN_LOG_LEVEL": "0", "HOME": "/home/user"}
    with process_env.set_while_running(environ=environ):
        assert environ == {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_USE_LEGACY_KERAS": "1",
                           "TF_ENABLE_ONEDNN_OPTS": "1", "HOME": "/home/user"}
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "0", "HOME": "/home/user"}
    try:
        with process_env.set_while_running(environ=environ):
            raise RuntimeError("the block failed")
    except RuntimeError:
        pass
    assert environ == {"TF_CPP_MIN_LOG_LEVEL": "0", "HOME": "/home/user"}

"""The names a checkpoint holds do not change: long runs resume across a change of the code.

tests/support/data/checkpoint_names.json lists every variable the chief's Saver writes (name, shape,
dtype) for the MLP on one ps task and the CNN and LSTM on two (Adam's slots and beta powers
of each ps task's optimizer included), as the worker graph built them before its top-down
layout. Regenerate it only for a change that is meant to break old checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tensorflow as tf

from a3c_graph.core.config import A3CConfig
from a3c_graph.core.envs import EnvBatch, env_info
from a3c_graph.distributed.cluster import TaskSpec
from a3c_graph.distributed.worker_graph import build_worker_graph

NAMES = json.loads((Path(__file__).resolve().parents[2] / "support" / "data"
                    / "checkpoint_names.json").read_text())
CASES = {"mlp on 1 ps": ("mlp", "CartPole-v1", 1), "cnn on 2 ps": ("cnn", "MinAtar/Breakout-v1", 2),
         "lstm on 2 ps": ("lstm", "MinAtar/Breakout-v1", 2)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_chiefs_checkpoint_holds_the_names_it_always_held(case):
    policy, env, num_ps = CASES[case]
    spec = TaskSpec(cluster={"ps": [f"127.0.0.1:{1 + i}" for i in range(num_ps)],
                             "worker": ["127.0.0.1:9"]}, job="worker", task=0)
    config = A3CConfig(env=env, envs_per_worker=2, rollout_length=4, policy=policy)
    batch = EnvBatch(env, 2, seed=0)
    try:
        with tf.Graph().as_default():
            build_worker_graph(config, spec, env_info(env), [batch])
            saved = sorted(f"{v.op.name} {v.shape.as_list()} {v.dtype.base_dtype.name}"
                           for v in tf.compat.v1.global_variables())
    finally:
        batch.close()
    assert saved == NAMES[case]

"""Where a traced session.run spent its time: TF's step stats, op by op, for the probes
that sum them by op type (network_options, update_cost)."""

from __future__ import annotations

from collections.abc import Iterator


def op_micros(metadata) -> Iterator[tuple[str, str, int]]:
    """(device, op type, microseconds) of every op a RunMetadata traced with
    RunOptions(trace_level=FULL_TRACE); the op type is read from the node's timeline label
    ("name = Type(inputs)"), its name where the label has none."""
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            label = node.timeline_label
            kind = (label.split("=")[-1].split("(")[0].strip() if "=" in label
                    else node.node_name)
            yield device.device, kind, node.op_end_rel_micros - node.op_start_rel_micros

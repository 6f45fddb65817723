"""Benchmarks: the same A3C three ways (graph/ps-worker, TF2 + multiprocessing, TF2 + Ray),
measured side by side, and the suites that measure what one way does.

    variants/     the two TF2 ways, sharing only a3c_graph's core
    harness/      benchmarks.run: runs the variants side by side, records, tables, plots
    suites/       learning, soak, step_cost: one property each, through the harness
    ps_capacity/  how many ps tasks a cluster needs, measured on simulated hosts
    probes/       small experiments that answer one question about TF
    common        what every command does: its private network, no process left behind

The commands users type (python -m benchmarks.run, .learning, .soak, .step_cost,
.ps_capacity) are the thin modules at this level.
"""

"""Benchmarks: the same A3C three ways (graph/ps-worker, TF2 + multiprocessing, TF2 + Ray),
and the harness that runs them side by side (`python -m benchmarks.run`)."""

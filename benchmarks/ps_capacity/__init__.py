"""How many ps tasks a cluster needs, measured on simulated hosts (python -m
benchmarks.ps_capacity): the network lab, a latency relay, the pushers and the measurement."""

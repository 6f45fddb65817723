"""How many ps tasks a cluster needs, measured on simulated hosts (python -m
benchmarks.ps_capacity): netlab (the hosts and their links), latency_relay, pusher (a worker
that only updates), tasks (the processes on the hosts), report (rows, the rule of thumb,
files) and measure (the command)."""

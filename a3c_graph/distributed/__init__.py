"""How one task runs in a cluster: the cluster spec and servers, the worker's graph placed
over the ps tasks, tensors moved in one message, sessions that survive a lost ps, and the
tasks themselves (ps_task, and worker_task with its loop in training), which
`python -m a3c_graph.worker` (a3c_graph/worker.py) starts."""

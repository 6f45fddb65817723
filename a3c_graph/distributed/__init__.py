"""How one task runs in a cluster: the cluster spec and servers, the worker's graph placed
over the ps tasks, tensors moved in one message, sessions that survive a lost ps, and the
task's own loop (`python -m a3c_graph.worker`)."""

"""How one task runs in a cluster: the cluster spec and servers, the worker's graph placed
over the ps tasks, tensors moved in one message, sessions that survive a lost ps, and the
task itself (`python -m a3c_graph.worker`: task_runner, ps_task, training)."""

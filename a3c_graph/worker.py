"""One task of the cluster: ``python -m a3c_graph.worker --job worker --task 3 ...``.

The command users, the launcher, Slurm and Kubernetes start; the task itself is
a3c_graph.distributed.task_runner (its main; run_command also leaves without TF's teardown).
"""

from a3c_graph.distributed.task_runner import main, run_command

__all__ = ["main"]

if __name__ == "__main__":
    run_command()

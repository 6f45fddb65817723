"""One task of the cluster: ``python -m a3c_graph.worker --job worker --task 3 ...``.

The command users, the launcher, Slurm and Kubernetes start; the task itself is
a3c_graph.distributed.task_runner.
"""

import sys

from a3c_graph.distributed.task_runner import main

if __name__ == "__main__":
    sys.exit(main())

"""Play episodes with a trained agent: ``python -m a3c_graph.evaluate --logdir D --episodes N``.

The command; the evaluation itself is a3c_graph.trained.evaluation (and a3c_graph.evaluate(...) from
Python, a3c_graph/api.py).
"""

import sys

from a3c_graph.trained.evaluation import main

if __name__ == "__main__":
    sys.exit(main())

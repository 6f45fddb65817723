"""Write a run's trained policy as a SavedModel: ``python -m a3c_graph.export --logdir RUN
--out DIR``.

The command; the export itself is a3c_graph.trained.exporting (and a3c_graph.export(...) from
Python, a3c_graph/api.py).
"""

import sys

from a3c_graph.trained.exporting import main

if __name__ == "__main__":
    sys.exit(main())

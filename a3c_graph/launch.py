"""The launcher's command (behind scripts/launch_cluster.sh): start, status, stop.

``python -m a3c_graph.launch [start|status|stop] ...``; the commands are
a3c_graph.launcher.commands.
"""

import sys

from a3c_graph.launcher.commands import main

if __name__ == "__main__":
    sys.exit(main())

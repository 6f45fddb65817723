#!/usr/bin/env bash
# Start, inspect or stop a local a3c_graph cluster; all the work is in a3c_graph/launch.py
# (and the plan.py, supervisor.py and pids.py it uses).
#   scripts/launch_cluster.sh [start] [flags]     (see --help; --dry-run prints every command)
#   scripts/launch_cluster.sh status --logdir D
#   scripts/launch_cluster.sh stop --logdir D
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$repo_root/.venv/bin/python"
if [[ ! -x "$python" ]]; then
  python="python3"
fi
# The tasks inherit this, so they import the same a3c_graph as the launcher.
export PYTHONPATH="$repo_root${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m a3c_graph.launch "$@"

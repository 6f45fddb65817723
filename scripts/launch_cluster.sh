#!/usr/bin/env bash
# Start, inspect or stop a local a3c_graph cluster; all the work is in a3c_graph/launcher/commands.py
# (and the plan.py, supervisor.py and processes.py it uses).
#   scripts/launch_cluster.sh [start] [flags]     (see --help; --dry-run prints every command)
#   scripts/launch_cluster.sh status --logdir D
#   scripts/launch_cluster.sh stop --logdir D
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$repo_root/.venv/bin/python"
if [[ ! -x "$python" ]]; then
  python="python3"
fi
exec "$python" -m a3c_graph.launch "$@"

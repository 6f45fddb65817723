#!/usr/bin/env bash
# A real Slurm on this machine (as root): munge, slurmctld with accounting, two slurmd
# nodes, each a host of its own on a private bridge. See scripts/slurm/local_cluster.py.
#
#   scripts/slurm/local_cluster.sh start                      # installs what is missing
#   scripts/slurm/local_cluster.sh run sinfo                  # any client command, on the
#   scripts/slurm/local_cluster.sh run sbatch scripts/slurm/a3c.sbatch   # login host
#   scripts/slurm/local_cluster.sh status
#   scripts/slurm/local_cluster.sh stop                       # leaves nothing behind
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
exec "${PYTHON:-$repo/.venv/bin/python}" "$repo/scripts/slurm/local_cluster.py" "$@"

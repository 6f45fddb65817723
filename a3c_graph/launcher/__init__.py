"""Starting, watching and stopping the tasks of a run: the start/status/stop commands, the
plan every check makes before anything starts, the supervisor, pid files, the private
network, the resource estimate and the Slurm job's end."""

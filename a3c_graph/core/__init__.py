"""The algorithm: config, envs, the networks and their TF-free spec, losses, rollouts and the
episode statistics. Nothing here imports the cluster or process code."""

"""The algorithm: config, envs, the networks and their TF-free spec, losses, the learner,
rollouts, and the episode statistics with the rules that stop a run. Nothing here imports
the cluster or process code."""

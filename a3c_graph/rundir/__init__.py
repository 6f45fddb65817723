"""A run's log dir: its progress files (progress), its checkpoints and the config.json they
were written under (checkpoints), and what a write that failed there means (storage)."""

"""The harness: runs the variants side by side and turns their runs into records, tables
and plots (the command is benchmarks.run)."""

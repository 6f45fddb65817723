"""Suites that measure one property each: learning, soak (faults over time), step cost."""

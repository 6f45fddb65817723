"""The CPU budget of an agent step: ``python -m benchmarks.step_budget`` (code:
suites.step_budget)."""

import sys

from benchmarks.suites.step_budget import main

if __name__ == "__main__":
    sys.exit(main())

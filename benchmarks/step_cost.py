"""Where an acting step goes: ``python -m benchmarks.step_cost`` (code: suites.step_cost)."""

import sys

from benchmarks.suites.step_cost import main

if __name__ == "__main__":
    sys.exit(main())

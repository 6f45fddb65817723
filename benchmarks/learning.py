"""The learning suite: ``python -m benchmarks.learning`` (code: benchmarks.suites.learning)."""

import sys

from benchmarks.suites.learning import main

if __name__ == "__main__":
    sys.exit(main())

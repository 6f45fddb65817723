"""The soak run: ``python -m benchmarks.soak`` (the code is benchmarks.suites.soak)."""

import sys

from benchmarks.suites.soak import main

if __name__ == "__main__":
    sys.exit(main())

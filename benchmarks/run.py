"""The benchmark harness: ``python -m benchmarks.run`` (the code is benchmarks.harness.compare)."""

import sys

from benchmarks.harness.compare import main

if __name__ == "__main__":
    sys.exit(main())

"""The Atari games' table and figure: ``python -m benchmarks.atari_games OUT RESULTS_DIR ...``
(code: benchmarks.suites.atari_games)."""

import sys

from benchmarks.suites.atari_games import main

if __name__ == "__main__":
    sys.exit(main())

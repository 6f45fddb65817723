"""``sudo python -m benchmarks.ps_capacity``: the code is benchmarks.ps_capacity.measure."""

import sys

from benchmarks.ps_capacity.measure import main

sys.exit(main())

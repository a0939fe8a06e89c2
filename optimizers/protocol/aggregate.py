"""`python -m optimizers.protocol.aggregate RUNS --out summary.json`: a thin entry point into
`lcb.optimize.aggregate` (see its module docstring for the statistics)."""

import sys

from lcb.optimize.aggregate import main

if __name__ == "__main__":
    sys.exit(main())

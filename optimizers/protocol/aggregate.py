"""`python -m optimizers.protocol.aggregate RUNS [--out summary.json] [--split-mixed]`: a thin
entry point into `lcb.optimize.aggregate` (see its module docstring for the grouping and the
statistics). It exits 2, naming the differing setting, on a cell whose seeds were run with
different settings, unless `--split-mixed` reports each setting as its own row."""

import sys

from lcb.optimize.aggregate import main

if __name__ == "__main__":
    sys.exit(main())

"""`lcb splits`: write the optimizer protocol's train / validation / test split file.

The rule is `lcb.optimize.splits.make_splits` (test = the eval IDs; train and validation by a
seeded shuffle of the other usable rows; sizes scaled down for small datasets). The command
loads every row of the source except the eval-ID rows' private tests, which it never decodes
(`load_split_source`), writes the JSON file with its source (hub: repo, release, resolved
revision; row counts), and prints the sizes, the path and the revision on stdout; rows left out
(no usable tests, malformed) are listed on stderr. An unusable source or a dataset too small
to split exits with status 2 and one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lcb.cli.application import app
from lcb.cli.options import DataOpt, ReleaseOpt, RevisionOpt, fail, report_skipped
from lcb.data.datasets import DataError
from lcb.data.hub import DEFAULT_RELEASE
from lcb.data.manifest import ManifestError
from lcb.optimize.splits import (
    DEFAULT_SPLITS_PATH,
    SplitError,
    load_split_source,
    splits_from_loaded,
)


@app.command("splits")
def splits(
    *,
    data: DataOpt = None,
    release: ReleaseOpt = DEFAULT_RELEASE,
    revision: RevisionOpt = None,
    out: Annotated[Path, typer.Option(
        "--out", dir_okay=False,
        help="Where to write the split file.")] = DEFAULT_SPLITS_PATH,
) -> None:
    """Write the train / validation / test split file of the optimizer protocol.

    Test = the 50 eval IDs; train (150) and validation (50) are drawn from the other usable
    rows by a fixed-seed shuffle. Default source: the hub dataset at release_v1.
    """
    try:
        loaded = load_split_source(data, release=release, revision=revision)
        report_skipped(loaded)
        result = splits_from_loaded(loaded)
    except (DataError, ManifestError, SplitError) as exc:
        fail(str(exc))
    result.save(out)
    sizes = ", ".join(f"{name} {count}" for name, count in result.sizes.items())
    note = "" if result.standard else " (scaled down: not the standard 150/50/50)"
    where = result.source.get("revision")
    at = f"; revision {where}" if where else ""
    Console(soft_wrap=True).print(f"wrote {out}: {sizes}{note}; test rule: {result.test_rule}"
                                  f"{at}", markup=False, highlight=False)

"""The grid's status as a static page: what `lcb grid status --html DIR` writes and `lcb report`
links to.

Contract of `write_status_page(spec, jobs, folder, lines=N) -> Path`:
- Writes `folder/index.html` (atomically, `lcb.io.write_text`) and returns its absolute path.
  The page shows, for `jobs` as read at one moment (`lcb.grid.state.statuses`, once): the
  totals per status and how many pending jobs were interrupted; per axis with more than one
  value, each value's counts (`lcb.grid.status.grid_status`); per cell (every axis but the
  seed: method, topology, team size, communication, model) its jobs, their counts and what
  they spent so far (`lcb.grid.spend.job_spend`, added by `Spend.__add__`), with the whole
  grid's row last; per failed job its key, reason, attempts, the last `lines` lines of its log
  and a link to the whole log; and when it was written.
- The page is self-contained: inline style, no script, no fetch (its Content-Security-Policy
  forbids every one), so it opens from `file://`. jinja2 autoescapes every text: reasons and
  logs hold model-written text.
- Writes `<grid folder>/.grid/status_page.json` (`{"page": <absolute path>, "written_at"}`),
  the pointer `lcb report` follows to link the page from a report of the grid folder.
A job whose spend cannot be read is counted as unreadable, never stops the page.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from lcb.agents.usage import tokens_text
from lcb.grid.plan import GridJob, plan
from lcb.grid.spec import GridSpec
from lcb.grid.spend import Spend, job_spend, total_spend
from lcb.grid.state import GRID_DIR, STATUSES, Status, log_path, statuses
from lcb.grid.status import grid_status
from lcb.io import page_link, write_text

POINTER = "status_page.json"  # under <grid folder>/.grid/; lcb.report.collect reads it
CELL_AXES = ("method", "topology", "team_size", "communication", "model")
AXIS_NAMES = {"method": "method", "topology": "topology", "team_size": "team size",
              "communication": "communication", "model": "model", "seed": "seed"}


def pointer_path(root: Path) -> Path:
    """Where the grid folder `root` records its status page."""
    return Path(root) / GRID_DIR / POINTER


def write_status_page(spec: GridSpec, jobs: Sequence[GridJob], folder: Path, *,
                      lines: int = 40) -> Path:
    """Write the status page of `jobs` into `folder` and the grid's pointer to it (module
    docstring); returns the page's absolute path."""
    page = Path(os.path.abspath(folder)) / "index.html"
    seen = statuses(jobs)
    report = grid_status(spec, jobs, lines=lines, seen=seen)
    spends = {job.key: job_spend(job) for job in jobs}
    by_key = {job.key: job for job in jobs}
    failed = [{**entry, "log_href": page_link(log_path(by_key[entry["key"]]), page.parent)}
              for entry in report["failed"]]
    rows = cell_rows(jobs, seen, spends)
    written_at = datetime.now(UTC).isoformat(timespec="seconds")
    html = _environment().get_template("status.html.j2").render(
        title=f"Grid status: {spec.root.name}", written_at=written_at, jobs=len(jobs),
        planned=len(plan(spec)), report=report, statuses=STATUSES, axis_names=AXIS_NAMES,
        cell_axes=CELL_AXES, cells=rows, total=rows[-1], failed=failed)
    write_text(page, html)
    pointer = {"page": str(page), "written_at": written_at}
    write_text(pointer_path(spec.root), json.dumps(pointer, indent=1) + "\n")
    return page


def cell_of(job: GridJob) -> tuple[str, ...]:
    """The job's cell as shown: its axes but the seed, an axis it lacks as "—"."""
    return tuple("—" if job.axes.get(name) is None else str(job.axes[name])
                 for name in CELL_AXES)


def cell_rows(jobs: Sequence[GridJob], seen: Mapping[str, Status],
              spends: Mapping[str, Spend]) -> list[dict[str, Any]]:
    """One row per cell in plan order, then the whole grid's row (`all`)."""
    cells: dict[tuple[str, ...], list[GridJob]] = {}
    for job in jobs:
        cells.setdefault(cell_of(job), []).append(job)
    rows = [_row(axes, members, seen, spends) for axes, members in cells.items()]
    everything = ("all", *[""] * (len(CELL_AXES) - 1))
    return [*rows, _row(everything, jobs, seen, spends, everything=True)]


def _row(axes: Sequence[str], jobs: Sequence[GridJob], seen: Mapping[str, Status],
         spends: Mapping[str, Spend], *, everything: bool = False) -> dict[str, Any]:
    spend = total_spend(spends[job.key] for job in jobs)
    counts = {status: sum(seen[job.key] == status for job in jobs) for status in STATUSES}
    return {"axes": list(axes), "jobs": len(jobs), "counts": counts, "spend": spend,
            "calls": spend.calls, "tokens": tokens_text(spend.tokens, spend.without_usage),
            "errors": list(spend.errors), "all": everything}


def _environment() -> Environment:
    return Environment(loader=PackageLoader("lcb.grid", "templates"), autoescape=True,
                       undefined=StrictUndefined, keep_trailing_newline=True)

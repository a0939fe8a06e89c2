"""`lcb grid report`: the grid's aggregate, then `lcb report` over the grid folder.

Contract of `report(spec, out, split_mixed=False) -> (summary, text)`:
- An optimize grid is aggregated with `lcb.optimize.aggregate` (seeds paired per cell; a cell
  whose seeds differ in settings raises its `AggregateError` unless `split_mixed`); the summary
  is written to `out/summary.json` and `text` is its markdown table.
- A run grid's summary lists each finished batch (a complete `summary.json`,
  `lcb.grid.state.is_done`) with its axes, `n` and `em`; `text` is one line per batch.
- `run_lcb_report(root, out)` then runs `lcb report ROOT --out OUT/report` when this lcb has
  that command (`lcb.cli.report_cmd`), and returns its exit code (None: not available).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

from lcb.grid.jobrun import command_argv
from lcb.grid.plan import plan
from lcb.grid.spec import GridSpec
from lcb.grid.state import is_done


def _run_grid_summary(spec: GridSpec) -> tuple[dict[str, Any], str]:
    rows = []
    for job in plan(spec):
        if not is_done(job):
            continue
        summary = json.loads((job.out / job.done_file).read_text(encoding="utf-8"))
        rows.append({"key": job.key, **job.axes, "n": summary.get("n"), "em": summary.get("em")})
    lines = [f"{row['key']}: n={row['n']} em={row['em']}" for row in rows]
    return {"kind": "run", "batches": rows}, "\n".join(lines) or "no finished batch yet"


def report(spec: GridSpec, out: Path, *, split_mixed: bool = False) -> tuple[dict[str, Any], str]:
    """Aggregate the grid and write `out/summary.json` (module docstring)."""
    from lcb.io import write_json

    if spec.kind == "optimize":
        from lcb.optimize.aggregate import aggregate, markdown_table

        summary = aggregate(spec.root, split_mixed=split_mixed)
        text = markdown_table(summary)
    else:
        summary, text = _run_grid_summary(spec)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", summary)
    return summary, text


def run_lcb_report(root: Path, out: Path) -> int | None:
    """`lcb report ROOT --out OUT/report` when available (module docstring)."""
    if importlib.util.find_spec("lcb.cli.report_cmd") is None:
        return None
    argv = command_argv(("lcb", "report", str(root), "--out", str(out / "report")))
    return subprocess.run(argv, check=False).returncode

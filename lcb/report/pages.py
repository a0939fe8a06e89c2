"""Write a report folder: `index.html`, a page per optimizer cell and per problem, the paper
tables and `report.json`.

Contract of `write_report(sources, out, title=..., baseline=...)`:
- `OUT/report.json` is `lcb.report.aggregates.build`'s object, every number the pages show;
  `OUT/tables/*.md|tex` come from it (`lcb.report.tables`).
- `OUT/index.html` links to `cells/<slug>.html` (one per optimizer group) and
  `problems/<name>.html` (one per problem any condition holds; `lcb.report.problems.page_name`).
  A problem page holds that problem's transcripts and no other's, so the index stays small.
- When a folder reported on is a grid folder with a status page (`Sources.status_pages`),
  the index's header links to it: relative to `OUT` (the report stays linked when both
  folders move together), a `file://` address only where no relative path exists.
- Pages are rendered by jinja2 with autoescaping on: every text that came from a model
  (programs, transcripts, feedback) or from a file is escaped; only our own SVG is inserted as
  is. Each page opens from `file://` with no server and no network (see `lcb.report.assets`).
- The folder is written whole or not at all: into a new sibling folder, swapped in for `OUT`
  once every file is written (an earlier report there is replaced, with its stale cell and
  problem pages; a failure leaves `OUT` as it was and no half-written folder). An `OUT` that
  is a file, or a non-empty folder that holds no `report.json` (so is no report), is never
  touched: `ReportError`.
Returns the report object.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from jinja2 import Environment

from lcb.io import fsync_folder, json_text, page_link, write_text
from lcb.report import aggregates, plots
from lcb.report.assets import CSP, CSS, SCRIPT, environment
from lcb.report.collect import ReportError, Sources
from lcb.report.problems import first_records, page_name, problem_page
from lcb.report.tables import tables


def _render(env: Environment, name: str, path: Path, *, title: str, page_title: str,
            up: str | None, **values: Any) -> None:
    html = env.get_template(name).render(csp=CSP, css=CSS, script=SCRIPT, title=title,
                                         page_title=page_title, up=up, **values)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, html)  # a lone surrogate (a model's reply) shows as its \uXXXX escape


def _svgs(report: dict[str, Any]) -> dict[str, str]:
    rows = report["conditions"]
    grid = report["grid"]
    return {"conditions": plots.pass_by_condition(rows),
            "teams": plots.teams(report["teams"], rows),
            "difficulty": plots.grouped(rows, "by_difficulty", title="by difficulty"),
            "platform": plots.grouped(rows, "by_platform", title="by platform"),
            "month": plots.grouped(rows, "by_month", title="by contest month"),
            "pareto": plots.pareto(rows),
            "heatmaps": [plots.heatmap(panel, grid["groups"]) for panel in grid["heatmap"]],
            "delta_tokens": plots.delta_vs_tokens(grid["groups"]),
            "curves": [plots.budget_curves(panel) for panel in grid["curves"]]}


def _changes(report: dict[str, Any]) -> dict[str, list[str]]:
    """Per problem, `<pair index>:<change>` for each pair holding it (the flip filter's key)."""
    found: dict[str, list[str]] = {pid: [] for pid in report["flips"]["matrix"]}
    for index, pair in enumerate(report["flips"]["pairs"]):
        for row in pair["rows"]:
            found[row["id"]].append(f"{index}:{row['change']}")
    return found


def check_out(out: Path) -> None:
    """Refuse an `out` that a report must not replace (module contract)."""
    if out.is_file() or out.is_symlink():
        raise ReportError(f"--out {out} is a file, not a report folder")
    if out.is_dir() and any(out.iterdir()) and not (out / "report.json").is_file():
        raise ReportError(f"--out {out} is a non-empty folder that holds no report.json (not "
                          "an earlier report): refusing to replace it; name a new or empty "
                          "folder")


def _swap(tmp: Path, out: Path) -> None:
    """Put the finished folder `tmp` at `out`, replacing an earlier report there."""
    old = None
    fsync_folder(tmp)  # its files are on disk (`write_text`), and now their names too
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
    os.replace(tmp, out)
    fsync_folder(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_report(sources: Sources, out: Path, *, title: str = "lcb report",
                 baseline: Path | None = None, resamples: int | None = None) -> dict[str, Any]:
    """Write the report folder (module contract) and return `report.json`'s object."""
    out = Path(os.path.abspath(out))  # absolute, "." and ".." resolved, links kept
    check_out(out)
    extra = {} if resamples is None else {"resamples": resamples}
    report = aggregates.build(sources, title=title, baseline=baseline, **extra)
    out.parent.mkdir(parents=True, exist_ok=True)
    # mkdir, not mkdtemp: the folder gets the umask's mode (0700 would hide it from others)
    tmp = out.parent / f".{out.name}.new-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    try:
        _write(sources, report, tmp, title=title, status=status_links(sources, out))
        _swap(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return report


def status_links(sources: Sources, out: Path) -> list[dict[str, str]]:
    """A link per grid status page of `sources`, from the report folder `out` (module
    contract): `href`, and `grid`, the grid folder as `Sources.shown` gives it."""
    links = []
    for folder, page in sources.status_pages:
        links.append({"href": page_link(page, out), "grid": sources.shown(folder) or folder.name})
    return links


def _write(sources: Sources, report: dict[str, Any], out: Path, *, title: str,
           status: list[dict[str, str]]) -> None:
    # One line, not indented: a 108-job grid's report.json is then ~40 % smaller.
    write_text(out / "report.json", json_text(report) + "\n")
    paper = tables(report)
    for name, text in paper.items():
        (out / "tables").mkdir(exist_ok=True)
        write_text(out / "tables" / name, text)
    env = environment()
    matrix = report["flips"]["matrix"]
    names = {pid: page_name(pid) for pid in matrix}
    groups = {g["slug"]: g for g in report["grid"]["groups"]}
    _render(env, "index.html.j2", out / "index.html", title=title, page_title=title, up=None,
            report=report, svg=_svgs(report), tables=sorted(paper), groups=groups,
            labels=[c.label for c in sources.conditions], changes=_changes(report),
            problem_pages=names, status_pages=status)
    for group in report["grid"]["groups"]:
        _render(env, "cell.html.j2", out / "cells" / f"{group['slug']}.html", title=title,
                page_title=f"{group['method']} on {group['column']}", up="../index.html",
                g=group, curve=plots.learning_curve(group["details"]))
    records = {c.label: first_records(c) for c in sources.conditions}
    for pid, name in names.items():
        page = problem_page(pid, sources.conditions, records, baseline=report["baseline"])
        _render(env, "problem.html.j2", out / "problems" / name, title=title,
                page_title=f"Problem {pid}", up="../index.html", page=page)


def report_size(out: Path) -> int:
    """Bytes of every file under a report folder."""
    return sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file())


def load_report(out: Path) -> dict[str, Any]:
    return json.loads((Path(out) / "report.json").read_text(encoding="utf-8"))

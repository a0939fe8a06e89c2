"""The report's page templates, stylesheet and script, and the jinja2 environment that renders
them.

The files live in `lcb/report/templates/` (package data, so a wheel install has them):
`base.html.j2` (the page frame: CSP, inline style and script), `macros.html.j2` (number and
code cells), the pages `index.html.j2` (provenance, the runs table, plots, the optimizer grid,
flips, cost and health; fed `report.json`'s object and the plots), `problem.html.j2` (fed by
`lcb.report.problems`) and `cell.html.j2` (one group of `report.json`'s grid), and
`report.css` and `report.js`, which every page inlines.

Every page is self-contained: CSS and script inline, plots inline SVG, links relative. A
Content-Security-Policy (`CSP`) forbids every fetch and allows only the script (by its hash),
so even text that escaped escaping could neither run nor load anything. The page reads fully
with JavaScript off; the script only sorts tables (click a header) and filters the flips table.
`environment()` autoescapes everything, fails on an undefined name and keeps a template's
trailing newline.
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined

FOLDER = "templates"


def _read(name: str) -> str:
    return resources.files("lcb.report").joinpath(FOLDER, name).read_text(encoding="utf-8")


SCRIPT = _read("report.js")
CSS = _read("report.css")
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
CSP = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       f"script-src 'sha256-{SCRIPT_HASH}'")


def short_source(dataset: str) -> str:
    """A local file's dataset as `local: <file name>` (the full path is in the title).

    >>> short_source("local: /data/rows.jsonl"), short_source("livecodebench/x")
    ('local: rows.jsonl', 'livecodebench/x')
    """
    kind, _, path = dataset.partition(": ")
    return f"{kind}: {Path(path).name}" if path else dataset


def environment() -> Environment:
    """The environment the pages are rendered in (module docstring)."""
    env = Environment(loader=PackageLoader("lcb.report", FOLDER), autoescape=True,
                      undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["short_source"] = short_source
    return env

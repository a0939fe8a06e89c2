"""`lcb report` (a static HTML report, report.json and paper tables) and `lcb compare`.

`lcb report PATH... --out DIR [--title T] [--baseline PATH]` reads any mix of run directories,
`lcb score` results, optimizer job directories and folders holding them (`lcb.report.collect`)
and writes the report folder (`lcb.report.pages`). `lcb compare RUN_A RUN_B` prints the flips
from A to B (`lcb.report.compare`). A path that holds nothing to report, a malformed or
unreadable file (a transcript cut short, a bad seed bundle or selection), or an `--out` that is
not a report folder (a file, or a non-empty folder without report.json) exits with status 2
and a one-line message naming it; nothing is written then. A line of an `lcb score` results
file that is not a readable record is left out of the report and named on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lcb.cli.application import app
from lcb.cli.options import fail
from lcb.optimize.aggregate import AggregateError
from lcb.optimize.artifacts import ArtifactError
from lcb.report.collect import Condition, ReportError


@app.command("report")
def report(
    paths: Annotated[list[Path], typer.Argument(
        metavar="PATH", help="Run directories, lcb score results, optimizer job directories "
                                "or folders holding them (searched recursively).")],
    out: Annotated[Path, typer.Option(
        "--out", file_okay=False, metavar="DIR",
        help="Where to write index.html, report.json, tables/ and the pages.")],
    title: Annotated[str, typer.Option("--title", help="The report's title.")] = "lcb report",
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", metavar="PATH",
        help="The run or results file flips compare against (default: the first single-agent "
             "run, else the first found).")] = None,
) -> None:
    """Write a static HTML report (opens from file://), report.json and paper tables."""
    from lcb.report.collect import collect
    from lcb.report.pages import report_size, write_report

    try:
        sources = collect(paths)
        written = write_report(sources, out, title=title, baseline=baseline)
    except (ReportError, ArtifactError, AggregateError) as exc:
        fail(str(exc))
    _say_skipped(sources.conditions)
    n_conditions, n_groups = len(written["conditions"]), len(written["grid"]["groups"])
    Console(soft_wrap=True).print(
        f"{out / 'index.html'}: {n_conditions} run(s) or results, {n_groups} optimizer "
        f"group(s), {len(written['flips']['matrix'])} problem page(s), "
        f"{report_size(out) / 1e6:.2f} MB", markup=False, highlight=False)


def _say_skipped(conditions: list[Condition]) -> None:
    """Name on stderr each results line the report left out (not a readable record)."""
    err = Console(stderr=True, soft_wrap=True)
    for cond in conditions:
        if cond.skipped:
            err.print(f"{cond.path}: left out {len(cond.skipped)} line(s) that are not "
                      "readable records:", markup=False, highlight=False)
            for reason in cond.skipped:
                err.print(f"  {reason}", markup=False, highlight=False)


@app.command("compare")
def compare(
    run_a: Annotated[Path, typer.Argument(metavar="RUN_A", help="The baseline run or results.")],
    run_b: Annotated[Path, typer.Argument(metavar="RUN_B", help="The run or results compared.")],
) -> None:
    """Print which problems flipped from RUN_A to RUN_B, the counts, Δ and McNemar's p."""
    from lcb.report.compare import compare as show

    try:
        show(run_a, run_b, console=Console(soft_wrap=True))
    except (ReportError, ArtifactError) as exc:
        fail(str(exc))

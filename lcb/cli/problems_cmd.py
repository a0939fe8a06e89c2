"""`lcb problems`: list the problems a source and filters select.

Output on stdout: a table sized to the terminal; when stdout is not a terminal (a pipe, a
file), tab-separated lines instead, a header line first, every column whole, as `kubectl get`
does (a title's tabs and line breaks become spaces; the count goes to stderr); or `--json`: one
object per line with `id, mode, difficulty, platform, contest_date, n_public, n_private,
fn_name`. The source and any skipped rows, with reasons, go to stderr. An unusable source or a
bad option exits with status 2 and one line.
"""

from __future__ import annotations

import json
import re
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from lcb.cli.application import app
from lcb.cli.options import DataOptions, load_or_exit, report_skipped, with_data_options
from lcb.data.problems import Problem


def problem_summary(problem: Problem) -> dict:
    """The JSON-able listing of one problem (the `--json` line)."""
    return {
        "id": problem.id,
        "mode": str(problem.mode),
        "difficulty": problem.difficulty,
        "platform": problem.platform,
        "contest_date": problem.contest_date,
        "n_public": len(problem.public_tests),
        "n_private": len(problem.private_tests),
        "fn_name": problem.fn_name,
    }


COLUMNS = ("id", "title", "mode", "difficulty", "platform", "date", "public", "private",
           "fn_name")
_BREAKS = re.compile(r"[\t\r\n\v\f]+")


def _cells(problem: Problem) -> tuple[str, ...]:
    """One problem's row, in `COLUMNS` order."""
    row = problem_summary(problem)
    return (problem.id, problem.title, row["mode"], problem.difficulty, problem.platform,
            problem.contest_date[:10], str(row["n_public"]), str(row["n_private"]),
            problem.fn_name or "")


def _table(problems: list[Problem]) -> Table:
    table = Table(title=f"{len(problems)} problem(s)")
    for column in COLUMNS:
        justify = "right" if column in ("public", "private") else "left"
        table.add_column(column, justify=justify, no_wrap=column == "id")
    for problem in problems:
        table.add_row(*_cells(problem))
    return table


def tsv_lines(problems: list[Problem]) -> list[str]:
    """The listing for a pipe or file: the header, then one tab-separated line per problem,
    no cell cut; tabs and line breaks inside a cell become one space each run."""
    rows = [COLUMNS, *(_cells(problem) for problem in problems)]
    return ["\t".join(_BREAKS.sub(" ", cell) for cell in row) for row in rows]


def _describe(source: dict) -> str:
    if source.get("kind") == "hub":
        return (f"source: hub {source['repo']} {source['release']} @ {source['revision']} "
                f"({', '.join(source['files'])})")
    return f"source: {source.get('kind')} {source.get('path')}"


@app.command("problems")
@with_data_options
def problems(
    *,
    data_options: DataOptions,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object per line (id, mode, difficulty, platform, "
                       "contest_date, n_public, n_private, fn_name) instead of a table.")] = False,
) -> None:
    """List the problems a source and filters select; skipped rows are reported on stderr.

    Piped or redirected, the list is tab-separated lines with every column whole.

    Default source: the hub dataset livecodebench/code_generation_lite, release_v1, in dataset
    order (cached by huggingface_hub; works offline once downloaded).

    --data sample (the bundled sample set) needs no download.
    """
    loaded = load_or_exit(data_options)
    err = Console(stderr=True, soft_wrap=True)
    err.print(_describe(loaded.source), markup=False, highlight=False)
    out = Console(soft_wrap=True)
    if as_json:
        for problem in loaded.problems:
            typer.echo(json.dumps(problem_summary(problem)))
    elif out.is_terminal:
        out.print(_table(loaded.problems))
    else:  # a pipe or a file: whole cells, no table drawn at the terminal's width
        err.print(f"{len(loaded.problems)} problem(s)", markup=False, highlight=False)
        for line in tsv_lines(loaded.problems):
            typer.echo(line)
    report_skipped(loaded, console=err)

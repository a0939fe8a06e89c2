"""`lcb problems`: list the problems a source and filters select.

Output: a table on stdout (or `--json`: one object per line with `id, mode, difficulty,
platform, contest_date, n_public, n_private, fn_name`); the source and any skipped rows, with
reasons, on stderr. An unusable source or a bad option exits with status 2 and one line.
"""

from __future__ import annotations

import json
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


def _table(problems: list[Problem]) -> Table:
    table = Table(title=f"{len(problems)} problem(s)")
    for column in ("id", "title", "mode", "difficulty", "platform", "date", "public", "private",
                   "fn_name"):
        justify = "right" if column in ("public", "private") else "left"
        table.add_column(column, justify=justify, no_wrap=column == "id")
    for problem in problems:
        row = problem_summary(problem)
        table.add_row(problem.id, problem.title, row["mode"], problem.difficulty,
                      problem.platform, problem.contest_date[:10], str(row["n_public"]),
                      str(row["n_private"]), problem.fn_name or "")
    return table


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

    Default source: the hub dataset livecodebench/code_generation_lite, release_v1, in dataset
    order (cached by huggingface_hub; works offline once downloaded).
    """
    loaded = load_or_exit(data_options)
    err = Console(stderr=True, soft_wrap=True)
    err.print(_describe(loaded.source), markup=False, highlight=False)
    if as_json:
        for problem in loaded.problems:
            typer.echo(json.dumps(problem_summary(problem)))
    else:
        Console(soft_wrap=True).print(_table(loaded.problems))
    report_skipped(loaded, console=err)

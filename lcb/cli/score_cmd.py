"""`lcb score`: grade given programs with no model.

Reads PRED.jsonl (`{"id": …, "code": …}` per line, other fields carried along), grades each
line against the selected problems, writes one result line per input line to RESULTS.jsonl (in
input order, flushed line by line), writes the summary as JSON next to it (`RESULTS.summary.json`,
see `lcb.runs.scoring.summary_path`; the schema of `lcb run`'s summary) and prints it as the same
table. `--grader both` grades each program with both graders: the default grade stays the
line's, and the agreement of the two (rate, and each disagreement's divergence class) is added
to the lines and the summary and said on the console. `--references` (with `--data sample`)
grades the sample set's reference solutions instead of a file: a check that grading works
here, labelled on every line and in the summary (`programs: "reference"`), never taken for a
model's programs. Per-line problems (bad JSON, unknown
id, no code) become error lines, each named on stderr with its line number and reason, as are
the selected problems without a prediction (`--missing-as-fail` counts them as failures);
configuration problems (neither or both of `--predictions` and `--references`, `--references`
without `--data sample`, missing official grader, unusable data source, a RESULTS.jsonl that
already holds lines: the summary would not count them, or one that another lcb process is
writing: see `lcb.runs.lock`) exit with status 2 and a one-line message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from lcb.cli.application import app
from lcb.cli.options import (
    GRADER_HELP,
    SANDBOX_HELP,
    DataOptions,
    Grader,
    Sandbox,
    fail,
    load_or_exit,
    report_skipped,
    with_data_options,
)
from lcb.data.datasets import SAMPLE, Loaded, Selection, source_kind
from lcb.grading import SandboxUnavailable
from lcb.grading.official import OfficialGraderMissing
from lcb.io import write_text
from lcb.runs import scoring
from lcb.runs.lock import file_lock
from lcb.runs.rundir import OutputError
from lcb.runs.tables import print_summary

ScoreGrader = StrEnum("ScoreGrader", {name: name for name in (*Grader, scoring.BOTH)})
GRADING = "Grading"  # its own help panel: room for the graders' choices at 80 columns
BOTH_HELP = (" both: the default grade, plus the official one and where the two agree (see "
             "docs/grading.md).")


def agreement_line(summary: dict) -> str:
    """`--grader both` in one line: official pass@1, agreement and the classes seen."""
    agreement = summary["agreement"]
    classes = ", ".join(f"{name} {count}" for name, count in agreement["by_class"].items()
                        if count)
    return (f"official grader pass@1 {summary['em_official']:.3f}  agreement "
            f"{agreement['rate']:.1%} ({agreement['n_agree']} of {agreement['n']} programs; "
            f"same pass/fail {agreement['same_em_rate']:.1%})"
            + (f"  disagreements: {classes}" if classes else ""))


@app.command("score")
@with_data_options
def score(
    *,
    predictions: Annotated[Path | None, typer.Option(
        "--predictions", exists=True, dir_okay=False, readable=True, metavar="PRED.jsonl",
        help="JSONL of programs: one {\"id\": question_id, \"code\": program, …} per line.")
        ] = None,
    references: Annotated[bool, typer.Option(
        "--references", help="Grade the bundled reference solutions of the sample set (with "
                             "--data sample) instead of a predictions file: a check that "
                             "grading works here; no model.")] = False,
    out: Annotated[Path, typer.Option(
        "--out", dir_okay=False, metavar="RESULTS.jsonl",
        help="Results JSONL (new or empty); the summary goes to <stem>.summary.json beside it.")],
    grader: Annotated[ScoreGrader, typer.Option(
        "--grader", case_sensitive=False, help=GRADER_HELP + BOTH_HELP,
        rich_help_panel=GRADING)] = ScoreGrader.default,
    all_tests: Annotated[bool, typer.Option(
        "--all-tests", rich_help_panel=GRADING,
        help="Run every test (full pass counts) instead of stopping at the first failure.")
        ] = False,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", min=1, rich_help_panel=GRADING,
        help="Grading worker processes (default: the number of cores).")] = None,
    sandbox: Annotated[Sandbox, typer.Option(
        "--sandbox", case_sensitive=False, help=SANDBOX_HELP,
        rich_help_panel=GRADING)] = Sandbox.process,
    missing_as_fail: Annotated[bool, typer.Option(
        "--missing-as-fail", help="Count each selected problem without a prediction as a "
                                  "failed program (default: leave it out, with a warning).")
                               ] = False,
    data_options: DataOptions,
) -> None:
    """Grade the programs of a predictions file (or the sample set's reference solutions) and
    print pass@1."""
    _check_programs(predictions, references=references, data=data_options.data)
    config = scoring.ScoreConfig(grader=str(grader), all_tests=all_tests, jobs=jobs,
                                 sandbox=str(sandbox), missing_as_fail=missing_as_fail)
    _check_grader(config)
    with _locked(out):
        _check_out(out)
        _score(predictions, out, config=config, data_options=data_options)


def _check_programs(predictions: Path | None, *, references: bool, data: str | None) -> None:
    """Exactly one of `--predictions` and `--references`; the references need the sample set."""
    if predictions is not None and references:
        fail("--references grades the sample set's reference solutions, --predictions a file "
             "of programs: give one of them, not both")
    if predictions is None and not references:
        fail("nothing to grade: give --predictions PRED.jsonl, or --references with --data "
             "sample (the bundled reference solutions)")
    if references and source_kind(data) != SAMPLE:
        where = f"--data {data}" if data else "the default source (the hub dataset)"
        fail(f"--references: only the bundled sample set has reference solutions, not {where}; "
             "add --data sample")


def _programs(predictions: Path | None, data_options: DataOptions
              ) -> tuple[list[scoring.Prediction], Loaded]:
    """The predictions to grade and the problems they are graded against: the file's, or (no
    file) the reference solution of every selected problem."""
    if predictions is None:
        loaded = load_or_exit(data_options)
        report_skipped(loaded)
        return scoring.reference_predictions(loaded.problems), loaded
    parsed = scoring.read_predictions(predictions)
    narrowed = _narrowed(data_options, parsed)
    loaded = load_or_exit(narrowed)
    report_skipped(loaded if narrowed is data_options else _without_absent_ids(loaded))
    return parsed, loaded


def _score(predictions: Path | None, out: Path, *, config: scoring.ScoreConfig,
           data_options: DataOptions) -> None:
    parsed, loaded = _programs(predictions, data_options)
    problems = {p.id: p for p in loaded.problems}
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with out.open("w", encoding="utf-8") as handle:
            lines = asyncio.run(scoring.score_predictions(parsed, problems, handle,
                                                          config=config))
    except SandboxUnavailable as exc:  # the preflight: nothing was graded
        if out.exists() and out.stat().st_size == 0:
            out.unlink()
        fail(str(exc))
    summary = {**scoring.summarize_scores(lines, selected=problems,
                                          missing_as_fail=config.missing_as_fail),
               "grader": config.grader, "all_tests": config.all_tests,
               scoring.PROGRAMS: scoring.PREDICTIONS if predictions else scoring.REFERENCE,
               "predictions": str(predictions) if predictions else None, "results": str(out),
               "source": loaded.source}
    write_text(scoring.summary_path(out), json.dumps(summary, indent=2) + "\n")
    err = Console(stderr=True, soft_wrap=True)
    for note in scoring.notes(lines, summary):
        err.print(note, markup=False, highlight=False)
    console = Console(soft_wrap=True)
    grader_name = "default" if config.grader == scoring.BOTH else config.grader
    whose = "" if predictions else " of the reference solutions (NOT model output)"
    print_summary(summary, console=console, title=f"pass@1{whose} ({grader_name} grader)",
                  totals=False)
    if "agreement" in summary:
        console.print(agreement_line(summary), markup=False, highlight=False)


def _check_grader(config: scoring.ScoreConfig) -> None:
    """Fail before any work when the chosen grader or sandbox cannot run here."""
    try:
        scoring.check_grading(grader=config.grader, sandbox=config.sandbox)
    except (SandboxUnavailable, OfficialGraderMissing, ValueError) as exc:
        fail(str(exc))


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Hold `out`'s lock for the whole scoring: two scorings of one file would interleave."""
    lock = file_lock(out, by="lcb score")
    try:
        lock.acquire()
    except OutputError as exc:
        fail(str(exc))
    try:
        yield
    finally:
        lock.release()


def _check_out(out: Path) -> None:
    """Refuse results that already hold lines: appending would mix two scorings in one file
    while the summary counts only this one."""
    if out.is_file() and out.stat().st_size > 0:
        fail(f"--out {out} already holds results; choose another --out (or delete it to "
             "score again)")


def _narrowed(options: DataOptions, parsed: list[scoring.Prediction]) -> DataOptions:
    """With no selection given, load only the problems the predictions name."""
    if options.selection != Selection():
        return options
    ids = tuple(dict.fromkeys(p.id for p in parsed if p.id and not p.invalid))
    if not ids:
        return options
    return dataclasses.replace(options, selection=Selection(only=ids))


def _without_absent_ids(loaded: Loaded) -> Loaded:
    """Drop the loader's "not in the source" notes for ids we asked for on the user's behalf:
    their prediction lines already get an error naming the id. Malformed rows stay reported."""
    kept = [s for s in loaded.skipped if not s.reason.startswith("requested with --only")]
    return dataclasses.replace(loaded, skipped=kept)

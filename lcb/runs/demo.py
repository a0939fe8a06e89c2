"""The demo: a team solves the two built-in problems, and every test's result is printed.

Contract of `run_demo(model, topology=, console=)` (returns the process exit code):
- With an endpoint that answers: the team solves `lcb.data.samples.DEMO_IDS` (stdin, then
  functional) from the bundled sample set; for each problem the extracted code and one line per
  hidden test are printed. Exit 0 whatever the score (a demo reports, it does not judge).
- With no endpoint (`check_endpoint` fails): the message says which URL and model were tried and
  how to point lcb at a server; then the sample set's reference solutions are graded and their
  summary printed, labelled as reference solutions, not model output. Exit 0.
  `grade_references` is `lcb score --data sample --references` without the files: the same
  predictions (`lcb.runs.scoring.reference_predictions`), grading and summary.
"""

from __future__ import annotations

import asyncio
import io

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from lcb.agents.check import EndpointError, check_endpoint
from lcb.agents.endpoints import redact_url
from lcb.agents.models import ModelConfig
from lcb.data.datasets import Selection, load_problems
from lcb.data.problems import Problem
from lcb.data.samples import DEMO_IDS
from lcb.grading import Grade, GradingPool
from lcb.runs import scoring
from lcb.runs.tables import print_summary
from lcb.teams.common import TeamResult, TeamRuntime
from lcb.teams.solving import solve


def _test_table(grade: Grade) -> Table:
    table = Table(show_header=True, header_style="bold")
    for column in ("test", "verdict", "wall s"):
        table.add_column(column, justify="right" if column != "verdict" else "left")
    for outcome in grade.outcomes:
        style = "green" if outcome.verdict == "passed" else "red"
        table.add_row(str(outcome.index), f"[{style}]{outcome.verdict}[/]",
                      f"{outcome.wall_s:.3f}")
    return table


def print_attempt(problem: Problem, result: TeamResult, grade: Grade | None,
                  console: Console) -> None:
    """The extracted code of one problem and its per-test results."""
    console.rule(f"{problem.id} ({problem.mode}, {problem.difficulty}): {problem.title}")
    if result.error:
        console.print(f"[red]error:[/] {result.error}")
    if not result.code:
        console.print("[yellow]No program was extracted from the team's answer.[/]")
        return
    console.print("[bold]Extracted code:[/]")
    console.print(Syntax(result.code, "python", line_numbers=False))
    if grade is None:
        return
    console.print(_test_table(grade))
    verdict = "[green]solved[/]" if grade.em else "[red]not solved[/]"
    console.print(f"{grade.passed}/{grade.total} hidden tests passed: {verdict}")
    if grade.feedback is not None:
        console.print(f"first failure (test {grade.feedback.test_index}, "
                      f"{grade.feedback.verdict}): {grade.feedback.error or grade.feedback.actual}")


async def _solve_demo(problems: list[Problem], model: ModelConfig, topology: str,
                      console: Console) -> None:
    runtime = TeamRuntime(model)
    try:
        results = await asyncio.gather(*(solve(topology, p, runtime) for p in problems))
    finally:
        await runtime.aclose()
    with GradingPool() as pool:
        for problem, result in zip(problems, results, strict=True):
            grade = None
            if result.code and not result.error:
                grade = await pool.grade(problem, result.code, all_tests=True)
            print_attempt(problem, result, grade, console)


async def grade_references(console: Console) -> dict:
    """Grade every sample problem's reference solution; print and return the summary."""
    problems = load_problems("sample").problems
    predictions = scoring.reference_predictions(problems)
    lines = await scoring.score_predictions(predictions, {p.id: p for p in problems},
                                            io.StringIO(), config=scoring.ScoreConfig())
    for problem, line in zip(problems, lines, strict=True):
        console.print(f"  {problem.id:<12} {problem.mode:<10} {line['pass']}/{line['total']} tests")
    summary = scoring.summarize_scores(lines)
    console.print("[bold]Reference solutions of the sample set (NOT model output)[/]")
    print_summary(summary, console=console, title="pass@1 of the reference solutions",
                  totals=False)
    return summary


async def run_demo(model: ModelConfig, *, topology: str = "single",
                   console: Console | None = None) -> int:
    """Run the demo (see the module docstring); returns the exit code."""
    console = console or Console()
    try:
        await check_endpoint(model)
    except EndpointError as exc:
        console.print(f"[bold red]No model endpoint answered at {redact_url(model.base_url)}.[/]")
        console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
        console.print("On the command line, --model picks the model and --no-vllm-extras "
                      "switches vLLM's extra fields off.", soft_wrap=True)
        console.print("\n[bold]Meanwhile, to show the grading pipeline working, lcb grades the "
                      "bundled sample set's reference solutions (written by hand, not by a "
                      "model):[/]")
        await grade_references(console)
        return 0
    problems = load_problems("sample", selection=Selection(only=DEMO_IDS)).problems
    console.print(f"Demo: the {topology} team ({model.model_id} at {redact_url(model.base_url)}) "
                  "solves "
                  f"{', '.join(p.id for p in problems)}.")
    await _solve_demo(problems, model, topology, console)
    return 0

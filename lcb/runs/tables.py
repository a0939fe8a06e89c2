"""The summary as the console shows it: one table for `lcb run`, `lcb score` and the demo.

`summary_table` renders the summary schema (`lcb.runs.records`): per set (all programs, those
with extracted code, each difficulty, each platform) the programs, solved, pass@1 and the share
of truncated answers next to it, plus a problems column when there are several samples per
problem. When grading failed on some programs (`n_infra`, verdict `infra`), a row "graded
(infra left out)" gives pass@1 over the others (`em_graded`) below "all", which counts them as
failures as LiveCodeBench would. `estimate_line` says pass@k, the bootstrap interval, the
truncation rate and the infra count in words; `totals_line` the errors, tokens ("unknown"
where no server reported usage), calls and wall time. `print_summary` prints all three.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from lcb.agents.usage import tokens_text


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def summary_table(summary: Mapping[str, Any], *, title: str = "pass@1") -> Table:
    """The per-set table of a summary (see the module docstring)."""
    several = summary["n"] != summary["n_problems"]
    columns = ["set", *(["problems"] if several else []), "n", "solved", "pass@1", "truncated"]
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column == "set" else "right")

    def row(name: str, group: Mapping[str, Any]) -> None:
        problems = [str(group.get("n_problems", ""))] if several else []
        truncated = _share(group["n_truncated"], group["n"]) if "n_truncated" in group else ""
        table.add_row(name, *problems, str(group["n"]), str(group["solved"]),
                      f"{group['em']:.3f}", truncated)

    row("all", summary)
    infra = summary.get("n_infra", 0)
    if infra:
        row("graded (infra left out)", {"n": summary["n"] - infra, "solved": summary["solved"],
                                        "em": summary["em_graded"]})
    row("with extracted code", {"n": summary["n_extracted"], "solved": summary["extracted_solved"],
                                "em": summary["extracted_em"]})
    for key, prefix in (("by_difficulty", "difficulty"), ("by_platform", "platform")):
        for name, group in summary[key].items():
            row(f"{prefix}: {name}", group)
    return table


def estimate_line(summary: Mapping[str, Any]) -> str:
    """pass@k for each k, pass@1's bootstrap interval and the truncation rate, in one line."""
    words = [f"pass@{k} {value:.3f}" for k, value in summary["pass_at_k"].items()]
    ci = summary["ci"]
    if ci["low"] is not None:
        words.insert(1, f"({ci['level']:.0%} CI {ci['low']:.3f}-{ci['high']:.3f}, bootstrap "
                        f"over {summary['n_problems']} problem(s), {ci['resamples']} resamples)")
    words.append(f"samples per problem {summary['samples_per_problem']}")
    words.append(f"truncated {_share(summary['n_truncated'], summary['n'])} "
                 f"({summary['n_truncated']} of {summary['n']})")
    if "n_infra" in summary:
        words.append(f"infra {summary['n_infra']} (grading failed: pass@1 over the rest "
                     f"{summary['em_graded']:.3f})")
    return "  ".join(words)


def totals_line(summary: Mapping[str, Any]) -> str:
    """Errors, tokens, calls and wall time (all sessions too, after a resume). Tokens no
    server reported are "unknown" (`lcb.agents.usage.tokens_text`), never 0."""
    without = summary.get("n_calls_without_usage") or 0
    totals = [f"errors {summary.get('n_errors', 0)}",
              f"prompt tokens {tokens_text(summary.get('prompt_tokens', 0), without)}",
              f"completion tokens {tokens_text(summary.get('completion_tokens', 0), without)}",
              f"LLM calls {summary.get('n_llm_calls', 0):,}",
              *([f"calls without usage {without:,}"] if without else []),
              f"tool calls {summary.get('n_tool_calls', 0):,}"]
    if "wall_s" in summary:
        totals.append(f"wall time {summary['wall_s']:.1f}s")
    if summary.get("wall_s_total", 0) > summary.get("wall_s", 0):
        totals.append(f"(all sessions {summary['wall_s_total']:.1f}s)")
    return "  ".join(totals)


def print_summary(summary: Mapping[str, Any], *, console: Console | None = None,
                  title: str = "pass@1", totals: bool = True) -> None:
    """Print the table, the estimates line and (with `totals`) the totals line."""
    console = console or Console()
    console.print(summary_table(summary, title=title))
    console.print(estimate_line(summary), markup=False, highlight=False)
    if totals:
        console.print(totals_line(summary), markup=False, highlight=False)

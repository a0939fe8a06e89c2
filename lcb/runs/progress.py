"""Batch progress on stderr and the end-of-run table.

`BatchProgress` shows done/total, running pass@1, errors and tokens: a rich progress bar when
stderr is a terminal, otherwise one plain line every `interval_s` seconds (and one at the end), so
a log file of a 10-hour batch stays readable. `print_summary` renders the summary contract as a
rich table.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


def _tokens(count: int) -> str:
    return f"{count / 1000:.1f}k" if count >= 1000 else str(count)


class BatchProgress:
    """Counts finished problems and reports them; `update` takes each record as it lands."""

    def __init__(self, *, total: int, stream: TextIO | None = None, plain: bool | None = None,
                 interval_s: float = 30.0, label: str = "batch"):
        self.total, self.label, self.interval_s = total, label, interval_s
        self.stream = stream if stream is not None else sys.stderr
        self.plain = (not self.stream.isatty()) if plain is None else plain
        self.done = self.solved = self.errors = self.tokens = 0
        self._started = time.monotonic()
        self._last_line = self._started
        self._done_at_line = 0
        self._bar: Progress | None = None
        self._task = None

    def __enter__(self) -> BatchProgress:
        if not self.plain:
            self._bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                console=Console(file=self.stream), transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total, completed=self.done,
                                            stats=self._stats())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.done and self.done != self._done_at_line:
            self._line()

    def _stats(self) -> str:
        rate = self.solved / self.done if self.done else 0.0
        return f"pass@1 {rate:.3f}  errors {self.errors}  tokens {_tokens(self.tokens)}"

    def _line(self) -> None:
        elapsed = time.monotonic() - self._started
        print(f"[{self.label}] {self.done}/{self.total}  {self._stats()}  elapsed {elapsed:.0f}s",
              file=self.stream, flush=True)
        self._last_line = time.monotonic()
        self._done_at_line = self.done

    def count(self, record: Mapping[str, Any]) -> None:
        """Count a record without reporting it (records of an earlier session)."""
        self.done += 1
        self.solved += int(record.get("em") or 0)
        self.errors += 1 if record.get("error") else 0
        self.tokens += int(record.get("prompt_tokens") or 0)
        self.tokens += int(record.get("completion_tokens") or 0)

    def update(self, record: Mapping[str, Any]) -> None:
        """Count one finished problem's record and report progress."""
        self.count(record)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, stats=self._stats())
        elif time.monotonic() - self._last_line >= self.interval_s or self.done == self.total:
            self._line()


def _row(table: Table, name: str, group: Mapping[str, Any]) -> None:
    table.add_row(name, str(group["n"]), str(group["solved"]), f"{group['em']:.3f}")


def print_summary(summary: Mapping[str, Any], *, console: Console | None = None,
                  title: str = "pass@1", totals: bool = True) -> None:
    """Print pass@1 overall, with extracted code, per difficulty and per platform; then totals."""
    console = console or Console()
    table = Table(title=title)
    for column in ("set", "n", "solved", "pass@1"):
        table.add_column(column, justify="left" if column == "set" else "right")
    _row(table, "all", summary)
    _row(table, "with extracted code", {"n": summary["n_extracted"],
                                        "solved": summary["extracted_solved"],
                                        "em": summary["extracted_em"]})
    for key, prefix in (("by_difficulty", "difficulty"), ("by_platform", "platform")):
        for name, group in summary[key].items():
            _row(table, f"{prefix}: {name}", group)
    console.print(table)
    if totals:
        console.print(_totals_line(summary))


def _totals_line(summary: Mapping[str, Any]) -> str:
    totals = [f"errors {summary.get('n_errors', 0)}",
              f"prompt tokens {summary.get('prompt_tokens', 0):,}",
              f"completion tokens {summary.get('completion_tokens', 0):,}",
              f"LLM calls {summary.get('n_llm_calls', 0):,}",
              f"tool calls {summary.get('n_tool_calls', 0):,}"]
    if "wall_s" in summary:
        totals.append(f"wall time {summary['wall_s']:.1f}s")
    if summary.get("wall_s_total", 0) > summary.get("wall_s", 0):
        totals.append(f"(all sessions {summary['wall_s_total']:.1f}s)")
    return "  ".join(totals)

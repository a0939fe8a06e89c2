"""Batch progress on stderr: the start banner and the running counts.

`start_banner(...)` is the text a batch prints once before its first model call (team, model
and endpoint, data, how many problems and samples, where the files go). `BatchProgress` shows
done/total, running pass@1, errors and tokens (unknown when no server reported usage: see
`lcb.agents.usage`): a rich progress bar when stderr is a terminal; otherwise (a log file,
`nohup`) a plain line at once, then one whenever both `interval_s` seconds (10) and
`step_fraction` of the total (5 %) have passed since the last line, and one at the end: a log
shows life at the start, and a 10-hour batch stays readable. The end-of-run
table is `lcb.runs.tables`.
"""

from __future__ import annotations

import math
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

from lcb.agents.usage import TOKEN_KEYS, WITHOUT_USAGE, sum_usage, tokens_text


def _tokens(count: int) -> str:
    return f"{count / 1000:.1f}k" if count >= 1000 else str(count)


def start_banner(*, team: str, model: str, endpoint: str, data: str, problems: int,
                 samples: int, out: str) -> str:
    """The start banner: one labelled line per fact, under a title line.

    >>> print(start_banner(team="single", model="m", endpoint="http://h/v1", data="sample",
    ...                    problems=2, samples=1, out="results/x"))
    lcb batch
      team      single
      model     m at http://h/v1
      data      sample
      problems  2 (1 sample each)
      output    results/x
    """
    each = f"{samples} sample{'s' if samples != 1 else ''} each"
    rows = (("team", team), ("model", f"{model} at {endpoint}"), ("data", data),
            ("problems", f"{problems} ({each})"), ("output", out))
    return "lcb batch\n" + "\n".join(f"  {name:<10}{value}" for name, value in rows)


class BatchProgress:
    """Counts finished problems and reports them; `update` takes each record as it lands."""

    def __init__(self, *, total: int, stream: TextIO | None = None, plain: bool | None = None,
                 interval_s: float = 10.0, step_fraction: float = 0.05, label: str = "batch"):
        self.total, self.label, self.interval_s = total, label, interval_s
        self.step = max(1, math.ceil(step_fraction * total))
        self.stream = stream if stream is not None else sys.stderr
        self.plain = (not self.stream.isatty()) if plain is None else plain
        self.done = self.solved = self.errors = 0
        self.usage = sum_usage([])  # tokens and calls so far, unknown ones apart
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
        else:
            self._line()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self.done != self._done_at_line:
            self._line()

    def _stats(self) -> str:
        rate = self.solved / self.done if self.done else 0.0
        prompt, completion = (self.usage[key] for key in TOKEN_KEYS)
        total = None if prompt is None and completion is None else (prompt or 0) + (
            completion or 0)
        tokens = tokens_text(total, self.usage[WITHOUT_USAGE] or 0, shown=_tokens)
        return f"pass@1 {rate:.3f}  errors {self.errors}  tokens {tokens}"

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
        self.usage = sum_usage([self.usage, record])

    def update(self, record: Mapping[str, Any]) -> None:
        """Count one finished problem's record and report progress."""
        self.count(record)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, stats=self._stats())
        elif self.done == self.total or (
                time.monotonic() - self._last_line >= self.interval_s
                and self.done - self._done_at_line >= self.step):
            self._line()

"""Verdicts: the enum every test result carries, and the clipping of feedback text.

Contract: `Verdict` values are the strings records carry. `INFRA` is not a verdict on the
program: grading itself failed (a host, judge or zygote lost, a slot that died or would not
start), on a retry too (`lcb.grading.pool`). This module is stdlib-only and slim (zygotes
import it; forking them must stay cheap). The grade data (`TestOutcome`,
`Feedback`, `Grade`) lives in `lcb.grading.grades` and is re-exported here on first use.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from lcb.text import FEEDBACK_NOTE, HALF, clip

if TYPE_CHECKING:
    from lcb.grading.grades import Feedback, Grade, TestOutcome

__all__ = ["FEEDBACK_CHARS", "Feedback", "Grade", "TestOutcome", "Verdict", "clip_feedback"]

FEEDBACK_CHARS = 2000


class Verdict(StrEnum):
    PASSED = "passed"
    WRONG_ANSWER = "wrong_answer"
    TIME_LIMIT = "time_limit"
    RUNTIME_ERROR = "runtime_error"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    COMPILE_ERROR = "compile_error"
    INFRA = "infra"  # the grading infrastructure failed: no verdict on the program


def clip_feedback(text: str, limit: int = FEEDBACK_CHARS) -> str:
    """`text` if short enough, else its head and tail halves around a note saying how much
    was cut (`lcb.text.clip` with `HALF` and `FEEDBACK_NOTE`)."""
    return clip(text, limit, head=HALF, note=FEEDBACK_NOTE)


def __getattr__(name: str):
    # Grade data classes load on first use: `dataclasses` pulls in `inspect`, `ast`, `dis` …,
    # which would fatten every zygote (and every process forked from it).
    if name in ("Feedback", "Grade", "TestOutcome"):
        from lcb.grading import grades

        return getattr(grades, name)
    raise AttributeError(f"module 'lcb.grading.verdicts' has no attribute {name!r}")

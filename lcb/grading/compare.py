"""LiveCodeBench's stdout comparison (official `grade_stdio`), restated.

Both texts are stripped, split on "\\n", and each line stripped. Line counts must be equal. Each
line pair passes if the strings are equal, or if both lines are whitespace-separated tokens that
all parse as `Decimal` and the two Decimal lists are equal. No tolerance: `1.5000` equals `1.5`
but `1.500000001` does not; `NaN` never equals anything (Decimal NaN != NaN).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def lines_match(actual: str, expected: str) -> bool:
    """One line pair: equal text, or equal lists of Decimal tokens."""
    if actual == expected:
        return True
    got = _decimals(actual)
    if got is None:
        return False
    want = _decimals(expected)
    try:
        return want is not None and got == want
    except InvalidOperation:  # signalling NaN ("sNaN") refuses comparison: not a match
        return False


def stdout_matches(actual: str, expected: str) -> bool:
    """True when `actual` program output matches `expected` by the official rule."""
    got, want = _lines(actual), _lines(expected)
    return len(got) == len(want) and all(map(lines_match, got, want))

"""Errors in a row stop a batch: an endpoint that dies mid-batch does not turn the rest of the
batch into error records.

Contract: `ErrorStreak(limit).add(error)` counts samples that ended in an error (`error` not
None) in a row, a sample without one resets the count; at `limit` in a row it raises
`BatchAborted` naming the last error. A limit of 0 or None never stops.
"""

from __future__ import annotations


class BatchAborted(RuntimeError):
    """Too many samples in a row failed (the endpoint probably went away)."""


class ErrorStreak:
    """The count of samples in a row that ended in an error (module docstring)."""

    def __init__(self, limit: int | None):
        self.limit, self.count = limit, 0

    def add(self, error: str | None) -> None:
        self.count = self.count + 1 if error else 0
        if self.limit and self.count >= self.limit:
            raise BatchAborted(
                f"{self.count} problems in a row ended in an error (the last: {error}). The "
                "batch stopped rather than turn every remaining problem into an error record.")

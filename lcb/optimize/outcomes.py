"""How a rollout attempt ends when it is not simply usable: infrastructure failed, or the model
server refused the request (HTTP 400: the bundle's fault, or a misconfigured job).

Contract:
- `InfraFailure` (raised by an attempt): infrastructure, not the answer, failed; the attempt is
  retried and never charged. `infra_reason(...)` classifies a finished team run.
- A team run that failed because the server refused its request as malformed or too long
  (`TeamResult.error_kind == "bad_request"`, e.g. "context length exceeded") is a usable, failed
  rollout: score 0, charged, with `refusal_feedback(...)` as its feedback. `TeamRunner.attempt`
  raises `Refused` carrying that rollout, so the budget ledger can watch refusals; it is never
  retried (the same request would be refused again).
- `RefusalWatch` decides when refusals mean the job itself is misconfigured (tools unsupported,
  wrong model, a context too small for the data) rather than bad bundles:
  * the streak rule: refusals on `MISCONFIGURED_STREAK` (10) distinct rows in a row, with no
    usable non-refused outcome between them (infrastructure failures neither extend nor break
    a streak);
  * the first-calls rule (`first_calls=True`, the optimize phase): a refusal while the endpoint
    is unconfirmed (no usable non-refused outcome yet in this job) and no other rollout is
    running, i.e. the job's first rollout(s) were all refused (or failed for infrastructure).
  Tripped, it stays tripped and returns the `Misconfigured` to raise, naming the server's words.
  Every refusal of the current streak is "refundable": the caller charges nothing for them.
- Pure and synchronous: callers that share one watch across tasks or threads hold their own
  lock around it (`BudgetLedger` does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lcb.text import ELLIPSIS, HEAD_ONLY, clip

MISCONFIGURED_STREAK = 10
MESSAGE_CLIP = 300
_LIMIT = re.compile(r"context(?: length| window)?(?: is|:)? *\(?(\d[\d,]*)", re.IGNORECASE)
_TOKENS = re.compile(r"(\d[\d,]*) *(?:input |prompt )?tokens", re.IGNORECASE)
_OVERFLOW = re.compile(r"context|too long|exceed", re.IGNORECASE)
_HINT = ("check the model id, that the endpoint supports tool calls (vLLM: "
         "--enable-auto-tool-choice --tool-call-parser ...), and max_tokens against the "
         "model's context length")


def one_line(text: str, limit: int = MESSAGE_CLIP) -> str:
    """`text` on one line (each run of whitespace one space), cut after `limit` characters."""
    return clip(" ".join(text.split()), limit, head=HEAD_ONLY, note=ELLIPSIS)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def context_overflow(message: str) -> tuple[int, int | None] | None:
    """(tokens the request needed, the model's limit or None) when `message` says the request
    exceeded the model's context, else None."""
    if not _OVERFLOW.search(message):
        return None
    found = _LIMIT.search(message)
    limit = _number(found.group(1)) if found else None
    counts = [_number(n) for n in _TOKENS.findall(message)]
    others = [n for n in counts if n != limit]
    return (max(others), limit) if others else None


def refusal_feedback(message: str, *, status: int = 400) -> str:
    """What a method reads about a refused request: the cause, then the server's words."""
    head = f"the model server refused the request (HTTP {status})"
    overflow = context_overflow(message)
    if overflow is None:
        return f"{head}: {one_line(message)}"
    tokens, limit = overflow
    of_limit = f" (the model's limit is {limit})" if limit else ""
    return (f"{head}: prompt exceeded the model's context: {tokens} tokens{of_limit}\n"
            f"server: {one_line(message)}")


class InfraFailure(Exception):
    """Raised by a rollout attempt when infrastructure, not the team's answer, failed.

    Examples: connection refused, timeout, HTTP 5xx after the client's retries, a rollout that
    made no model call, an exception inside the grader. Such a rollout is not charged.
    `usage` holds the tokens the attempt spent (`prompt_tokens`, `completion_tokens`,
    `n_llm_calls`); `kept` says the team run was kept to be graded again on the next try.
    """

    def __init__(self, reason: str, *, usage: Mapping[str, int] | None = None,
                 kept: bool = False) -> None:
        super().__init__(reason)
        self.usage, self.kept = dict(usage or {}), kept


def infra_reason(*, error: str | None, n_llm_calls: int) -> str | None:
    """Why a finished team run counts as an infrastructure failure, or None when it is usable.

    The team contract (`lcb.teams.TeamResult`) sets `error` only when the run could not finish
    (a model call failed after the client's retries, or the team code crashed): neither is the
    answer's fault. A run that made no model call has no answer to charge. A run without an
    error is usable even when its answer is missing, wrong or malformed. (The runner checks two
    cases first: a request the server refused, and a masked team that abstained by design.)
    """
    if n_llm_calls == 0:
        return "no model call" + (f" ({error})" if error else "")
    return error or None


class Refused(Exception):  # noqa: N818 - an outcome, like InfraFailure
    """Raised by a rollout attempt whose request the server refused (see the module doc):
    `result` is the usable, failed rollout to return; `row` the problem it ran on."""

    def __init__(self, message: str, *, result: Any, row: str) -> None:
        super().__init__(message)
        self.message, self.result, self.row = message, result, row


class Misconfigured(RuntimeError):
    """The model server refused the job's requests in a way that no bundle causes: stop the
    job. `rows` are the refused rows of the streak; `refunded` the results left uncharged."""

    def __init__(self, message: str, *, rows: tuple[str, ...] = (),
                 refunded: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.rows, self.refunded = rows, refunded


@dataclass
class RefusalWatch:
    """Refusals since the last usable non-refused outcome (see the module docstring)."""

    limit: int = MISCONFIGURED_STREAK
    first_calls: bool = True
    confirmed: bool = False
    rows: dict[str, None] = field(default_factory=dict)  # distinct refused rows, in order
    refusals: list[Any] = field(default_factory=list)  # each refusal's result, in order
    message: str | None = None  # the server's words on the first refusal of the streak
    tripped: Misconfigured | None = None

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"RefusalWatch.limit must be >= 1, got {self.limit}")

    def usable(self) -> None:
        """A usable outcome whose requests were not refused: the endpoint works."""
        self.confirmed = True
        self.rows.clear()
        self.refusals.clear()
        self.message = None

    def refused(self, row: str, message: str, *, result: Any = None,
                others_running: int | None = 0) -> Misconfigured | None:
        """One refused rollout of `row`; the `Misconfigured` to raise when the watch trips.
        `others_running` None (not known, e.g. a replay) skips the first-calls rule."""
        self.rows[row] = None
        self.refusals.append(result)
        self.message = self.message or message
        return self.check(others_running=others_running)

    def check(self, *, others_running: int | None = 0) -> Misconfigured | None:
        """Apply the rules now (also after a rollout ended in an infrastructure failure)."""
        if self.tripped is None:
            if len(self.rows) >= self.limit:
                self._trip(f"refused the requests of {len(self.rows)} rows in a row")
            elif (self.first_calls and not self.confirmed and self.refusals
                  and others_running == 0):
                self._trip(f"refused the job's first rollout(s) ({len(self.rows)} row(s)) "
                           "before any rollout was answered")
        return self.tripped

    def _trip(self, what: str) -> None:
        rows = tuple(self.rows)
        self.tripped = Misconfigured(
            f"the job looks misconfigured: the model server {what} (e.g. {', '.join(rows[:3])}): "
            f"the server said: {one_line(self.message or '')}; nothing was charged for them; "
            f"{_HINT}",
            rows=rows, refunded=tuple(self.refusals))

    def state(self) -> dict[str, Any]:
        """JSON-able: whether the endpoint was confirmed, and the current streak's rows and
        size (its results stay in memory)."""
        return {"confirmed": self.confirmed, "rows": list(self.rows),
                "refusals": len(self.refusals), "message": self.message}

    def restore(self, state: dict[str, Any]) -> None:
        """Take back `state()`; the streak's results are unknown (None) after a restore."""
        self.confirmed = bool(state.get("confirmed", False))
        self.rows = dict.fromkeys(str(r) for r in state.get("rows", []))
        self.refusals = [None] * int(state.get("refusals", 0))
        self.message = state.get("message")

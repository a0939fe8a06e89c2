"""Token and call accounting, counted by lcb itself from each response's usage numbers.

LangChain's own counters can double count (its response cache re-reports usage on a hit), so
every model call is recorded here once, by the call wrapper (`lcb.agents.llm`), tagged with the
problem, team, role and agent that made it.

Contract:
- A `UsageLedger` belongs to one team run (one problem); it may forward every entry to a parent
  ledger (one per batch) that keeps totals only, so a long batch does not grow without bound.
- `by_role()` values always hold the keys `prompt_tokens`, `completion_tokens`, `n_llm_calls`,
  `n_tool_calls`, `n_retries`, `n_calls_without_usage`; summed over roles (`sum_usage`) they
  equal `total().to_record()`.
- Used from one event loop; the lock only guards against a parent shared across threads.

Unknown usage is not zero (the one rule every token total in lcb follows):
- A call answered by a server that reported no usage (llama-cpp-python when streaming, some
  proxies) records `prompt_tokens` and `completion_tokens` as None: unknown. A call that failed
  (no answer was used) records 0 of each, as do the lost attempts of a retried call: usage
  describes the answers a run used, and a failed attempt's spending is never reported.
- A total over calls keeps, per token count, the sum of what is known and
  `n_calls_without_usage`: how many of its answered calls reported none. When it covers
  answered calls and every one of them is unknown, the total is None (null in JSON); otherwise
  it is the known sum, a lower bound whenever `n_calls_without_usage` > 0. A total over no
  answered call is 0. `token_total` is that rule, and every total applies it: through
  `Usage.to_record` (over calls) and `sum_usage` (totals of totals: records, summaries, the
  optimizer's ledger and cost, the report), never by adding token fields up on its own.
- A part written before `n_calls_without_usage` existed counts as having none (an old record,
  summary, ledger or journal line reads as it always did).
- A view shows an unknown total as "unknown" (or "—"), never 0; a ratio of tokens (per
  problem, per sample) or a comparison by tokens over a total with calls without usage is
  unknown too, since its known sum understates the cost. `tokens_text` is the text views' way.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

TOKEN_KEYS = ("prompt_tokens", "completion_tokens")
WITHOUT_USAGE = "n_calls_without_usage"
_MAX_COUNT = 2**63 - 1  # a larger "count" is not one (and would not read back as JSON)


def count(value: Any) -> int:
    """A well-formed count (a whole number in 0..2**63 - 1, int or float), else 0: what a total
    takes from a part (None, a string, NaN or a negative number count 0)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT:
        return value
    return 0


def token_total(known: int, *, calls: int, without_usage: int) -> int | None:
    """The total shown for `known` tokens over `calls` answered calls, `without_usage` of which
    reported no usage: None when every one of them is unknown, else the known sum.

    >>> token_total(120, calls=3, without_usage=1), token_total(0, calls=2, without_usage=2)
    (120, None)
    """
    return None if without_usage and without_usage >= calls else known


def sum_usage(parts: Iterable[Mapping[str, Any]], *, calls: str = "n_llm_calls"
              ) -> dict[str, int | None]:
    """`calls`, the token totals and `n_calls_without_usage` over `parts` (records, summaries,
    usage dicts; the count of answered calls under the key `calls`), by the module's rule.

    >>> sum_usage([{"prompt_tokens": 5, "n_llm_calls": 1},
    ...            {"prompt_tokens": None, "n_llm_calls": 1, "n_calls_without_usage": 1}])
    {'n_llm_calls': 2, 'prompt_tokens': 5, 'completion_tokens': 0, 'n_calls_without_usage': 1}
    """
    n_calls = without = 0
    known = dict.fromkeys(TOKEN_KEYS, 0)
    for part in parts:
        n_calls += count(part.get(calls))
        without += count(part.get(WITHOUT_USAGE))
        for key in TOKEN_KEYS:
            known[key] += count(part.get(key))
    totals = {key: token_total(value, calls=n_calls, without_usage=without)
              for key, value in known.items()}
    return {calls: n_calls, **totals, WITHOUT_USAGE: without}


def tokens_text(total: int | None, without_usage: int = 0, *,
                shown: Callable[[int], str] = "{:,}".format) -> str:
    """A token total as a text view shows it: "unknown" when every call is unknown, else the
    known sum (`shown`), followed by "+ unknown" when some calls reported no usage.

    >>> tokens_text(None, 2), tokens_text(1200, 1), tokens_text(1200)
    ('unknown', '1,200 + unknown', '1,200')
    """
    if total is None:
        return "unknown"
    return shown(total) + (" + unknown" if without_usage else "")


@dataclass(frozen=True)
class CallTag:
    """Who made a model call: the problem, the team, the role (prompt slot), the agent instance
    (e.g. `coder_2` for the third replica; equal to the role in one-agent roles) and its turn."""

    problem_id: str
    team: str
    role: str
    agent: str
    turn: int


@dataclass(frozen=True)
class Usage:
    """Counts that add up: per call, per role, per team run or per batch. The token fields are
    known sums; `to_record` gives them as the module's rule shows them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    n_llm_calls: int = 0
    n_tool_calls: int = 0
    n_retries: int = 0
    n_calls_without_usage: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    @classmethod
    def of_call(cls, record: CallRecord) -> Usage:
        """One call's counts: answered or not, its known tokens, and whether it had none."""
        answered = record.error is None
        return cls(prompt_tokens=record.prompt_tokens or 0,
                   completion_tokens=record.completion_tokens or 0,
                   n_llm_calls=int(answered),
                   n_retries=max(record.attempts - 1, 0),  # a cache hit or miss sent nothing
                   n_calls_without_usage=int(answered and not record.has_usage))

    def to_record(self) -> dict[str, int | None]:
        """The counts as written: a token total is None when every answered call is unknown."""
        record: dict[str, int | None] = dict(asdict(self))
        for key in TOKEN_KEYS:
            record[key] = token_total(getattr(self, key), calls=self.n_llm_calls,
                                      without_usage=self.n_calls_without_usage)
        return record


@dataclass(frozen=True)
class CallRecord:
    """One model call as made: usage of the answer, attempts (1 + retries), time and seed.
    `error` is set when every attempt failed (then its tokens are 0: no answer was used). The
    tokens are None when the server answered without reporting usage. `finish_reason` is the
    server's word on why the answer ended ("stop", "length", "tool_calls", ...; None when it
    gave none or the call failed), `truncated` is True when it is "length" (cut at max_tokens),
    `reasoning_tokens` the server's count of thinking tokens (None when it reports none).
    `cached` marks an answer served by the response cache (`lcb.agents.cache`): no request
    was sent (`attempts` 0), and the tokens are those the original answer reported."""

    tag: CallTag
    prompt_tokens: int | None
    completion_tokens: int | None
    attempts: int
    latency_s: float
    seed: int | None
    error: str | None = None
    finish_reason: str | None = None
    truncated: bool = False
    reasoning_tokens: int | None = None
    cached: bool = False

    def to_record(self) -> dict:
        return asdict(self)

    @property
    def has_usage(self) -> bool:
        """False for an answer whose server reported no usage (a failed call has 0 tokens)."""
        return self.prompt_tokens is not None and self.completion_tokens is not None


@dataclass
class UsageLedger:
    """Counts per role, optionally keeping every `CallRecord` and forwarding to a parent."""

    keep_calls: bool = True
    parent: UsageLedger | None = None
    calls: list[CallRecord] = field(default_factory=list)
    _by_role: dict[str, Usage] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_call(self, record: CallRecord) -> None:
        """Record one model call (successful or not) under its role."""
        self._add(record.tag.role, Usage.of_call(record))
        if self.keep_calls:
            self.calls.append(record)
        if self.parent is not None:
            self.parent.add_call(record)

    def add_tool_calls(self, role: str, n: int = 1) -> None:
        """Record `n` tool calls made by `role`'s agent."""
        self._add(role, Usage(n_tool_calls=n))
        if self.parent is not None:
            self.parent.add_tool_calls(role, n)

    def _add(self, role: str, usage: Usage) -> None:
        with self._lock:
            self._by_role[role] = self._by_role.get(role, Usage()) + usage

    def total(self) -> Usage:
        with self._lock:
            return sum(self._by_role.values(), Usage())

    def by_role(self) -> dict[str, dict[str, int | None]]:
        """Role -> usage record (`Usage.to_record`); `sum_usage` of them is `total()`'s."""
        with self._lock:
            return {role: usage.to_record() for role, usage in self._by_role.items()}

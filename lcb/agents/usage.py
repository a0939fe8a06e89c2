"""Token and call accounting, counted by lcb itself from each response's usage numbers.

LangChain's own counters can double count (its response cache re-reports usage on a hit), so
every model call is recorded here once, by the call wrapper (`lcb.agents.llm`), tagged with the
problem, team, role and agent that made it.

Contract:
- A `UsageLedger` belongs to one team run (one problem); it may forward every entry to a parent
  ledger (one per batch) that keeps totals only, so a long batch does not grow without bound.
- `by_role()` values always hold the keys `prompt_tokens`, `completion_tokens`, `n_llm_calls`,
  `n_tool_calls`, `n_retries`; summed over roles they equal `total()`.
- Used from one event loop; the lock only guards against a parent shared across threads.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field


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
    """Counts that add up: per call, per role, per team run or per batch."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    n_llm_calls: int = 0
    n_tool_calls: int = 0
    n_retries: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_record(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class CallRecord:
    """One model call as made: usage of the answer, attempts (1 + retries), time and seed.
    `error` is set when every attempt failed (then no tokens are known). `finish_reason` is the
    server's word on why the answer ended ("stop", "length", "tool_calls", ...; None when it
    gave none or the call failed), `truncated` is True when it is "length" (cut at max_tokens),
    `reasoning_tokens` the server's count of thinking tokens (None when it reports none).
    `cached` marks an answer served by the response cache (`lcb.agents.cache`): no request
    was sent (`attempts` 0), and the tokens are those the original answer reported."""

    tag: CallTag
    prompt_tokens: int
    completion_tokens: int
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
        answered = record.error is None
        usage = Usage(
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            n_llm_calls=1 if answered else 0,
            n_retries=max(record.attempts - 1, 0),  # a cache hit or miss sent nothing
        )
        self._add(record.tag.role, usage)
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

    def by_role(self) -> dict[str, dict[str, int]]:
        """Role -> usage record; sums to `total()`."""
        with self._lock:
            return {role: usage.to_record() for role, usage in self._by_role.items()}

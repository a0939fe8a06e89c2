"""The budget ledger: counts usable full-team rollouts, so a job never overshoots its budget.

Contract:
- A unit of budget is one usable rollout: one problem through the whole team, graded. The total
  is fixed at construction (600 in the standard protocol).
- `reserve(n)` before dispatch takes up to `n` units out of what is left and returns a
  `Reservation` of `granted` units (fewer than `n` when the budget is nearly spent; with
  `exact=True`, all or nothing). When nothing is left it raises `BudgetExhausted`. Since
  in-flight units are held by reservations, `charged + in flight <= total` at every moment, so
  concurrent dispatch can never overshoot.
- Each reserved unit ends exactly once: `commit(res)` charges it (a usable rollout: right,
  wrong or malformed answer alike) and `refund(res)` returns it (an infrastructure failure:
  connection, timeout, HTTP 5xx, no model call, grader exception; or a unit not used).
  `close(res)` refunds whatever a reservation still holds.
- `run_rollout(attempt)` / `arun_rollout(attempt)` wrap one rollout: reserve one unit, call
  `attempt()`; an `InfraFailure` raised by it is recorded, not charged, and the same `attempt`
  (hence the same seeds) is retried up to `INFRA_RETRIES` (2) more times; after that the unit is
  refunded and `None` returned. Any other exception refunds the unit and propagates.
- Reflection / proposal / judge calls are never charged; `record_uncharged(...)` adds their calls
  and tokens to the ledger's usage, per kind.
- `state()` is JSON-able and `BudgetLedger.from_state(state)` restores it for checkpoints.
  In-flight reservations are not part of the state: a rollout cut off by an interruption was
  never committed, so it is not charged.
- Thread- and asyncio-safe: every mutation holds one `threading.Lock` for a few instructions
  (never across an await or a rollout).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
INFRA_RETRIES = 2
STANDARD_BUDGET = 600
_USAGE_KEYS = ("calls", "prompt_tokens", "completion_tokens")


class BudgetError(RuntimeError):
    """A ledger misuse (unknown or over-settled reservation, bad state)."""


class BudgetExhausted(BudgetError):
    """No unit of budget is left to reserve."""


class InfraFailure(Exception):
    """Raised by a rollout attempt when infrastructure, not the team's answer, failed.

    Examples: connection refused, timeout, HTTP 5xx after the client's retries, a rollout that
    made no model call, an exception inside the grader. Such a rollout is not charged.
    """


def infra_reason(*, error: str | None, n_llm_calls: int) -> str | None:
    """Why a finished team run counts as an infrastructure failure, or None when it is usable.

    The team contract (`lcb.teams.TeamResult`) sets `error` only when the run could not finish
    (a model call failed after the client's retries, or the team code crashed): neither is the
    answer's fault. A run that made no model call has no answer to charge. A run without an
    error is usable even when its answer is missing, wrong or malformed.
    """
    if n_llm_calls == 0:
        return "no model call" + (f" ({error})" if error else "")
    return error or None


@dataclass
class Reservation:
    """Units held for dispatch. `remaining` drops as units are committed or refunded."""

    id: int
    granted: int
    remaining: int = field(init=False)

    def __post_init__(self) -> None:
        self.remaining = self.granted


class BudgetLedger:
    """See the module docstring.

    Example:
        >>> ledger = BudgetLedger(2)
        >>> res = ledger.reserve(5)
        >>> res.granted, ledger.available
        (2, 0)
        >>> ledger.commit(res); ledger.refund(res); ledger.charged, ledger.available
        (1, 1)
    """

    def __init__(self, total: int, *, retries: int = INFRA_RETRIES) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError(f"budget total must be an integer >= 0, got {total!r}")
        self.total = total
        self.retries = retries
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._open: dict[int, Reservation] = {}
        self.charged = 0
        self.infra_failures = 0
        self.abandoned = 0  # rollouts refunded after every retry failed
        self.uncharged: dict[str, dict[str, int]] = {}

    # --- counters -------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        with self._lock:
            return sum(res.remaining for res in self._open.values())

    @property
    def available(self) -> int:
        """Units that a `reserve` could still grant."""
        return self.total - self.charged - self.in_flight

    @property
    def exhausted(self) -> bool:
        return self.charged >= self.total

    # --- reservations ---------------------------------------------------------------------
    def reserve(self, n: int = 1, *, exact: bool = False) -> Reservation:
        """Hold up to `n` units (all `n` or nothing with `exact`); raises `BudgetExhausted`."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"reserve needs a positive integer, got {n!r}")
        with self._lock:
            free = self.total - self.charged - sum(r.remaining for r in self._open.values())
            if free <= 0 or (exact and free < n):
                raise BudgetExhausted(f"budget of {self.total} rollouts: {self.charged} charged, "
                                      f"{self.total - self.charged - free} in flight, "
                                      f"{n} requested")
            reservation = Reservation(next(self._ids), min(n, free))
            self._open[reservation.id] = reservation
            return reservation

    def commit(self, reservation: Reservation) -> None:
        """Charge one unit of `reservation` (a usable rollout)."""
        with self._lock:
            self._take(reservation)
            self.charged += 1

    def refund(self, reservation: Reservation) -> None:
        """Return one unit of `reservation` uncharged."""
        with self._lock:
            self._take(reservation)

    def close(self, reservation: Reservation) -> int:
        """Refund every unit `reservation` still holds; returns how many."""
        with self._lock:
            left = reservation.remaining
            reservation.remaining = 0
            self._open.pop(reservation.id, None)
            return left

    def _take(self, reservation: Reservation) -> None:
        if self._open.get(reservation.id) is not reservation or reservation.remaining < 1:
            raise BudgetError(f"reservation {reservation.id} holds no open unit")
        reservation.remaining -= 1
        if reservation.remaining == 0:
            del self._open[reservation.id]

    # --- rollouts with retries ----------------------------------------------------------
    def run_rollout(self, attempt: Callable[[], T]) -> T | None:
        """One budgeted rollout, retried on `InfraFailure` (see the module docstring)."""
        with _Unit(self) as unit:
            while unit.next_try():
                with unit.trying():
                    return unit.charge(attempt())
        return None

    async def arun_rollout(self, attempt: Callable[[], Awaitable[T]]) -> T | None:
        """The asyncio twin of `run_rollout`."""
        with _Unit(self) as unit:
            while unit.next_try():
                with unit.trying():
                    return unit.charge(await attempt())
        return None

    def _count(self, counter: str) -> None:
        with self._lock:
            setattr(self, counter, getattr(self, counter) + 1)

    # --- uncharged calls ------------------------------------------------------------------
    def record_uncharged(self, kind: str, *, calls: int = 1, prompt_tokens: int = 0,
                         completion_tokens: int = 0) -> None:
        """Record reflection/proposal/judge/probe usage (`kind` names it); never charged."""
        if not kind:
            raise ValueError("record_uncharged needs a kind such as 'reflection'")
        values = (calls, prompt_tokens, completion_tokens)
        if any(not isinstance(v, int) or v < 0 for v in values):
            raise ValueError(f"usage counts must be integers >= 0, got {values}")
        with self._lock:
            usage = self.uncharged.setdefault(kind, dict.fromkeys(_USAGE_KEYS, 0))
            for key, value in zip(_USAGE_KEYS, values, strict=True):
                usage[key] += value

    # --- checkpoints ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """A JSON-able snapshot (in-flight units excluded: they are not charged)."""
        with self._lock:
            return {"total": self.total, "charged": self.charged, "retries": self.retries,
                    "infra_failures": self.infra_failures, "abandoned": self.abandoned,
                    "uncharged": {k: dict(v) for k, v in self.uncharged.items()}}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BudgetLedger:
        """Rebuild a ledger from `state()`; raises `BudgetError` naming a bad field."""
        try:
            ledger = cls(state["total"], retries=state.get("retries", INFRA_RETRIES))
            charged = state["charged"]
            if not isinstance(charged, int) or not 0 <= charged <= ledger.total:
                raise BudgetError(f"ledger state: charged={charged!r} outside 0..{ledger.total}")
            ledger.charged = charged
            ledger.infra_failures = int(state.get("infra_failures", 0))
            ledger.abandoned = int(state.get("abandoned", 0))
            for kind, usage in state.get("uncharged", {}).items():
                ledger.record_uncharged(kind, **{k: int(usage.get(k, 0)) for k in _USAGE_KEYS})
        except (KeyError, TypeError, ValueError) as exc:
            raise BudgetError(f"ledger state is malformed: {exc!r}") from None
        return ledger


class _Unit:
    """One reserved unit and its tries: charged once, else refunded when the `with` ends."""

    def __init__(self, ledger: BudgetLedger) -> None:
        self.ledger = ledger
        self.tries_left = 1 + ledger.retries

    def __enter__(self) -> _Unit:
        self.reservation = self.ledger.reserve(1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.ledger.close(self.reservation)  # refunds the unit unless it was charged

    def next_try(self) -> bool:
        if self.tries_left == 0:
            self.ledger._count("abandoned")
            return False
        self.tries_left -= 1
        return True

    @contextlib.contextmanager
    def trying(self) -> Iterator[None]:
        """Swallow (and count) an `InfraFailure`, so the caller's loop tries again."""
        try:
            yield
        except InfraFailure:
            self.ledger._count("infra_failures")

    def charge(self, result: T) -> T:
        self.ledger.commit(self.reservation)
        return result

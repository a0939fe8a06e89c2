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
  wrong or malformed answer alike, a request the server refused) and `refund(res)` returns it
  (an infrastructure failure: connection, timeout, HTTP 5xx, no model call, grader exception;
  or a unit not used). `close(res)` refunds what a reservation still holds.
- A rollout that comes back `free` (`Rollout.free`: a masked run that sent no request, every
  call answered by the whole team's run of its row, or an abstaining coalition) is usable and
  returned, but its unit is refunded and counted in `free`, not `charged`; the refusal watch
  does not see it. `count_free()` counts a journaled one retraced.
- `run_rollout(attempt)` / `arun_rollout(attempt)` wrap one rollout: reserve one unit, call
  `attempt()`; an `InfraFailure` raised by it is recorded, not charged, and the same `attempt`
  (hence the same seeds) is retried up to `INFRA_RETRIES` (2) more times; after that the unit is
  refunded and `None` returned. Any other exception refunds the unit and propagates.
- Refusals (`lcb.optimize.outcomes`): an attempt that raises `Refused` (the server refused the
  request, HTTP 400) is not retried: its unit is charged and `Refused.result` returned, and the
  ledger's `RefusalWatch` sees it (a usable rollout that made a model call confirms the
  endpoint and ends a streak; an abstaining team does neither). When the watch trips (the
  job's first rollouts all refused, or 10 distinct rows refused in a row), every refusal of
  the streak is refunded at once (`charged` drops by their number) and `Misconfigured` is
  raised to that caller; from then on every `reserve`/`run_rollout`, and every rollout still
  in flight (its unit refunded), raises it too. So a misconfigured job ends having charged
  nothing for its refusals, and the budget is never exceeded.
- Tokens of failed attempts: an `InfraFailure` carries the usage its attempt spent (`usage`);
  it is added to `failed_attempt_tokens` (`calls`, `prompt_tokens`, `completion_tokens`) at
  once, except for a team run kept for a re-grade (`kept=True`): its tokens count only if the
  rollout is finally abandoned, since a successful re-grade returns them in the rollout.
- Reflection / proposal / judge calls are never charged; `record_uncharged(...)` adds their calls
  and tokens to the ledger's usage, per kind. Except with `uncharged_rate` R > 0
  (`--uncharged-cost R`, a compute-matched variant of the protocol): every such call, answered
  or failed, then takes R units out of what rollouts may use (`call_units` = ceil(R x calls),
  so a part of a unit takes a whole one), and `units` = charged + call_units is what the job
  spent. Rollouts already in flight are never taken back; calls made once no unit is left are
  counted, not refused.
- Tokens a server did not report (`lcb.agents.usage`): `failed_attempt_tokens` and each kind's
  usage also count `n_calls_without_usage`, and a token total is None when every call it
  covers is unknown; `sum_usage` adds them up. A state without that key reads as 0 of them.
- `state()` is JSON-able and `BudgetLedger.from_state(state)` restores it for checkpoints:
  `total, charged, retries, uncharged_rate, infra_failures, abandoned, refused, free,
  failed_attempt_tokens, refusal_watch, uncharged`. In-flight reservations are not part of the
  state: a rollout cut off by an interruption was never committed, so it is not charged.
- Thread- and asyncio-safe: every mutation holds one `threading.Lock` for a few instructions
  (never across an await or a rollout).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lcb.agents.usage import WITHOUT_USAGE, count, sum_usage
from lcb.optimize.outcomes import (  # re-exported: how an attempt ends
    InfraFailure,
    Misconfigured,
    RefusalWatch,
    Refused,
    infra_reason,
)

T = TypeVar("T")
INFRA_RETRIES = 2
STANDARD_BUDGET = 600
_USAGE_KEYS = ("calls", "prompt_tokens", "completion_tokens", WITHOUT_USAGE)

__all__ = ["INFRA_RETRIES", "STANDARD_BUDGET", "BudgetError", "BudgetExhausted", "BudgetLedger",
           "InfraFailure", "Misconfigured", "Refused", "Reservation", "infra_reason"]


class BudgetError(RuntimeError):
    """A ledger misuse (unknown or over-settled reservation, bad state)."""


class BudgetExhausted(BudgetError):
    """No unit of budget is left to reserve."""


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

    def __init__(self, total: int, *, retries: int = INFRA_RETRIES,
                 watch: RefusalWatch | None = None, uncharged_rate: float = 0.0) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError(f"budget total must be an integer >= 0, got {total!r}")
        if not 0 <= uncharged_rate < math.inf:
            raise ValueError(f"uncharged_rate must be a number >= 0, got {uncharged_rate!r}")
        self.total, self.uncharged_rate = total, float(uncharged_rate)
        self.retries = retries
        self.watch = watch or RefusalWatch()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._open: dict[int, Reservation] = {}
        self.running = 0  # rollouts inside run_rollout/arun_rollout now
        self.charged = 0
        self.infra_failures = 0
        self.abandoned = 0  # rollouts refunded after every retry failed
        self.refused = 0  # charged rollouts whose request the server refused
        self.free = 0  # usable rollouts that sent no request (`Rollout.free`): not charged
        # calls: answered ones in failed_attempt_tokens; every call (failed too) in uncharged
        self.failed_attempt_tokens: dict[str, int | None] = dict.fromkeys(_USAGE_KEYS, 0)
        self.uncharged: dict[str, dict[str, int | None]] = {}

    # --- counters -------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        with self._lock:
            return sum(res.remaining for res in self._open.values())

    @property
    def call_units(self) -> int:
        """Units the uncharged calls took (0 at the standard rate 0; module docstring)."""
        with self._lock:
            return self._call_units_locked()

    @property
    def units(self) -> int:
        """Units spent: charged rollouts and what uncharged calls took."""
        return self.charged + self.call_units

    @property
    def available(self) -> int:
        """Units that a `reserve` could still grant."""
        return max(0, self.total - self.units - self.in_flight)

    @property
    def exhausted(self) -> bool:
        return self.units >= self.total

    # --- reservations ---------------------------------------------------------------------
    def reserve(self, n: int = 1, *, exact: bool = False) -> Reservation:
        """Hold up to `n` units (all `n` or nothing with `exact`); raises `BudgetExhausted`."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"reserve needs a positive integer, got {n!r}")
        with self._lock:
            if self.watch.tripped is not None:
                raise self.watch.tripped
            held = sum(r.remaining for r in self._open.values())
            free = self.total - self.charged - self._call_units_locked() - held
            if free <= 0 or (exact and free < n):
                raise BudgetExhausted(f"budget of {self.total} rollouts: {self.charged} charged, "
                                      f"{held} in flight, {self._call_units_locked()} taken by "
                                      f"uncharged calls, {n} requested")
            reservation = Reservation(next(self._ids), min(n, free))
            self._open[reservation.id] = reservation
            return reservation

    def _call_units_locked(self) -> int:
        if not self.uncharged_rate:
            return 0
        calls = sum(count(usage.get("calls")) for usage in self.uncharged.values())
        return math.ceil(self.uncharged_rate * calls - 1e-9)

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
                try:
                    return unit.charge(attempt())
                except InfraFailure as exc:
                    unit.failed(exc)
                except Refused as exc:
                    return unit.refused(exc)
        return None

    async def arun_rollout(self, attempt: Callable[[], Awaitable[T]]) -> T | None:
        """The asyncio twin of `run_rollout`."""
        with _Unit(self) as unit:
            while unit.next_try():
                try:
                    return unit.charge(await attempt())
                except InfraFailure as exc:
                    unit.failed(exc)
                except Refused as exc:
                    return unit.refused(exc)
        return None

    def commit_replayed(self, row: str, *, refusal: str | None = None,
                        answered: bool = True, result: Any = None) -> None:
        """Charge one journaled rollout again (a resumed job retracing its path) and show the
        watch its outcome: usable (`answered`: it made a model call), or refused with the
        server's words `refusal` (`result`: the journaled rollout, handed back in
        `Misconfigured.refunded` if the streak trips). Only the streak rule applies (the
        original run's concurrency is not replayed). Raises `BudgetExhausted` or
        `Misconfigured` as `reserve` does, or when the streak trips."""
        outcome = None if refusal is None else Refused(refusal, result=result, row=row)
        self._charge(self.reserve(1, exact=True), refusal=outcome, answered=answered,
                     replay=True)

    def _charge(self, reservation: Reservation, *, refusal: Refused | None, answered: bool,
                replay: bool = False) -> None:
        """Charge one unit of `reservation` and show the watch the outcome; raises the
        watch's `Misconfigured` (refunding the streak) when it has tripped."""
        with self._lock:
            tripped = self.watch.tripped
            if tripped is None:
                self._take(reservation)
                self.charged += 1
                if refusal is None and answered:
                    self.watch.usable()
                elif refusal is not None:
                    self.refused += 1
                    tripped = self.watch.refused(
                        refusal.row, refusal.message, result=refusal.result,
                        others_running=None if replay else self.running - 1)
            if tripped is not None:
                self._refund_streak()
        if tripped is not None:
            raise tripped

    def _refund_streak(self) -> None:
        """The streak's refusals were charged as they came: give their units back (once: the
        watch forgets them). Holds the lock."""
        self.charged -= len(self.watch.refusals)
        self.refused -= len(self.watch.refusals)
        self.watch.refusals = []

    # --- uncharged calls ------------------------------------------------------------------
    def record_uncharged(self, kind: str, *, calls: int = 1, prompt_tokens: int | None = 0,
                         completion_tokens: int | None = 0,
                         n_calls_without_usage: int = 0) -> None:
        """Record reflection/proposal/judge/probe usage (`kind` names it); never charged.
        Tokens are None when no call of it reported usage (`lcb.agents.usage`)."""
        if not kind:
            raise ValueError("record_uncharged needs a kind such as 'reflection'")
        values = (calls, prompt_tokens, completion_tokens, n_calls_without_usage)
        known_tokens = [v for v in (prompt_tokens, completion_tokens) if v is not None]
        if any(not isinstance(v, int) or v < 0
               for v in (calls, n_calls_without_usage, *known_tokens)):
            raise ValueError(f"usage counts must be integers >= 0, got {values}")
        with self._lock:
            usage = self.uncharged.get(kind, {})
            added = dict(zip(_USAGE_KEYS, values, strict=True))
            self.uncharged[kind] = sum_usage([usage, added], calls="calls")

    # --- checkpoints ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """A JSON-able snapshot (in-flight units excluded: they are not charged)."""
        with self._lock:
            return {"total": self.total, "charged": self.charged, "retries": self.retries,
                    "uncharged_rate": self.uncharged_rate,
                    "infra_failures": self.infra_failures, "abandoned": self.abandoned,
                    "refused": self.refused, "free": self.free,
                    "failed_attempt_tokens": dict(self.failed_attempt_tokens),
                    "refusal_watch": self.watch.state(),
                    "uncharged": {k: dict(v) for k, v in self.uncharged.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        """Take every counter of `state()` in place (a checkpoint's fast-forward); objects
        holding this ledger keep it. Raises `BudgetError` as `from_state` does."""
        restored = BudgetLedger.from_state(state)
        with self._lock:
            if self._open:
                raise BudgetError("load_state with reservations open")
            for name in ("total", "retries", "charged", "infra_failures", "abandoned",
                         "refused", "free", "failed_attempt_tokens", "watch", "uncharged",
                         "uncharged_rate"):
                setattr(self, name, getattr(restored, name))

    def count_free(self) -> None:
        """A journaled free rollout retraced (module docstring): counted, never charged."""
        with self._lock:
            self.free += 1

    def count_abandoned(self, tries: int) -> None:
        """A journaled abandonment retraced: its failed tries and the abandonment itself."""
        with self._lock:
            self.infra_failures += tries
            self.abandoned += 1

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BudgetLedger:
        """Rebuild a ledger from `state()`; raises `BudgetError` naming a bad field."""
        try:
            ledger = cls(state["total"], retries=state.get("retries", INFRA_RETRIES),
                         uncharged_rate=float(state.get("uncharged_rate", 0.0)))
            charged = state["charged"]
            if not isinstance(charged, int) or not 0 <= charged <= ledger.total:
                raise BudgetError(f"ledger state: charged={charged!r} outside 0..{ledger.total}")
            ledger.charged = charged
            for counter in ("infra_failures", "abandoned", "refused", "free"):
                setattr(ledger, counter, int(state.get(counter, 0)))
            failed = state.get("failed_attempt_tokens", {})
            ledger.failed_attempt_tokens = sum_usage([failed], calls="calls")
            ledger.watch.restore(state.get("refusal_watch", {}))
            for kind, usage in state.get("uncharged", {}).items():
                ledger.record_uncharged(kind, **{k: usage.get(k, 0) for k in _USAGE_KEYS})
        except (KeyError, TypeError, ValueError) as exc:
            raise BudgetError(f"ledger state is malformed: {exc!r}") from None
        return ledger


class _Unit:
    """One reserved unit and its tries: charged once, else refunded when the `with` ends.
    Every settlement holds the ledger's lock, so the watch sees outcomes one at a time."""

    def __init__(self, ledger: BudgetLedger) -> None:
        self.ledger = ledger
        self.tries_left = 1 + ledger.retries
        self.last: InfraFailure | None = None

    def __enter__(self) -> _Unit:
        self.reservation = self.ledger.reserve(1)
        with self.ledger._lock:
            self.ledger.running += 1
        return self

    def __exit__(self, *exc: object) -> None:
        ledger = self.ledger
        with ledger._lock:
            ledger.running -= 1
        ledger.close(self.reservation)  # refunds the unit unless it was charged

    def next_try(self) -> bool:
        if self.tries_left > 0:
            self.tries_left -= 1
            return True
        ledger = self.ledger
        with ledger._lock:
            ledger.abandoned += 1
            if self.last is not None and self.last.kept:  # the kept run is given up now
                _add_tokens(ledger.failed_attempt_tokens, self.last.usage)
            tripped = ledger.watch.check(others_running=ledger.running - 1)
            if tripped is not None:
                ledger._refund_streak()
        if tripped is not None:
            raise tripped
        return False

    def failed(self, exc: InfraFailure) -> None:
        ledger = self.ledger
        with ledger._lock:
            ledger.infra_failures += 1
            if not exc.kept:
                _add_tokens(ledger.failed_attempt_tokens, exc.usage)
        self.last = exc

    def charge(self, result: T) -> T:
        """A usable rollout: charged, unless it is `free` (module docstring); the endpoint is
        confirmed unless the result shows it made no model call."""
        if getattr(result, "free", False):
            ledger = self.ledger
            with ledger._lock:
                ledger._take(self.reservation)
                ledger.free += 1
            return result
        calls = getattr(getattr(result, "team", None), "n_llm_calls", 1)
        self.ledger._charge(self.reservation, refusal=None, answered=calls != 0)
        return result

    def refused(self, exc: Refused) -> Any:
        """A refused request: charged as a failed rollout, unless the watch trips."""
        self.ledger._charge(self.reservation, refusal=exc, answered=True)
        return exc.result


def _add_tokens(into: dict[str, int | None], usage: Mapping[str, int | None]) -> None:
    """Add a failed attempt's usage (`usage_of`: `n_llm_calls` counts its calls)."""
    into.update(sum_usage([into, {**usage, "calls": usage.get("n_llm_calls")}], calls="calls"))

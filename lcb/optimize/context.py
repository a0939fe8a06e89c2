"""The optimize phase's `OptimizeContext`: charged rollouts with replay, uncharged calls, history.

Contract (`lcb.optimize.method` states what methods may rely on):
- `JobContext.rollout` refuses any problem outside `ctx.data` (a test id raises `SplitLeak`) and
  any bundle that does not keep exactly the seed's roles (`BundleError`). It seeds the team run
  from (optimizer seed, optimize phase, iteration, row) (`lcb.optimize.seeds.optimize_scope`).
- Replay (`lcb.optimize.journal`): a rollout key (bundle, row, iteration, mask) already in the
  journal is never run again. The first time this process asks for a journaled key (a resumed
  job retracing its path) the journaled rollout is charged again in the ledger, which a
  resumed job rebuilds from zero, so every journaled rollout is counted exactly once; any
  further request for a key this process has seen is a replay: uncharged, no model call
  (`replay=True`, counted in `replays`). Identical requests in flight at once run once.
- A new key goes through `BudgetLedger.arun_rollout`: one unit reserved before dispatch,
  charged for a usable run, refunded for an infrastructure failure (retried with the same seed);
  `None` means nothing was charged. Each charged rollout is journaled (line + transcript).
- `reflect` / `judge` / `probe` are `lcb.optimize.calls.ModelCalls` (uncharged, journaled).
- `record_candidate` / `record_proposal` append to the history through a `HistoryLog`, which
  leaves the entries of a retraced path as they are on disk.
- `checkpoint(state)` writes `DIR/checkpoint.json` atomically: the method's state, the
  iteration, the ledger, and how many journal lines and history entries it covers.
  `restore()` returns the last state (None on a fresh job). `restore(fast_forward=True)` also
  moves the ledger, the journal and the history to that point, for a method that skips the
  iterations before it instead of retracing them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from lcb.data.problems import Problem
from lcb.optimize.artifacts import HistoryEntry
from lcb.optimize.budget import BudgetExhausted, BudgetLedger
from lcb.optimize.bundle import (
    Bundle,
    BundleError,
    bundle_hash,
    check_bundle,
    freeze,
    validate_bundle,
)
from lcb.optimize.calls import CallKind, ModelCalls, probe_messages, prompt_messages
from lcb.optimize.journal import HistoryLog, RolloutJournal, rollout_key
from lcb.optimize.method import Rollout
from lcb.optimize.outcomes import Misconfigured
from lcb.optimize.seeds import optimize_scope
from lcb.optimize.splits import OptimizerData
from lcb.optimize.teamrun import TeamCell, TeamRunner, refusal_of
from lcb.runs.rundir import now_iso, write_json

CHECKPOINT_FILE = "checkpoint.json"


class JobContext:
    """The `OptimizeContext` of one job's optimize phase (see the module docstring)."""

    def __init__(self, *, cell: TeamCell, seed_bundle: Mapping[str, str], data: OptimizerData,
                 ledger: BudgetLedger, optimizer_seed: int, runner: TeamRunner,
                 calls: ModelCalls, job_dir: Path) -> None:
        self.cell, self.data, self.ledger = cell, data, ledger
        self.seed_bundle = freeze(seed_bundle)
        self.optimizer_seed = optimizer_seed
        self.runner, self.calls, self.job_dir = runner, calls, Path(job_dir)
        self.journal = RolloutJournal(self.job_dir)
        self.history = HistoryLog(self.job_dir)
        self.last_iteration = 0
        self.replays = 0
        self._claimed: set[str] = set()
        self._in_flight: dict[str, asyncio.Future[Rollout | None]] = {}
        self._embedder: Any = None
        self._graph: Any = None

    # --- the cell -----------------------------------------------------------------------
    @property
    def topology(self) -> str:
        return self.cell.topology

    @property
    def team_size(self) -> int:
        return self.cell.size

    @property
    def communication(self) -> str:
        return self.cell.communication

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.seed_bundle)

    @property
    def agents(self) -> tuple[str, ...]:
        return self.cell.agents

    @property
    def graph(self) -> Any:
        if self._graph is None:
            from lcb.optimize.graph import team_graph

            self._graph = team_graph(self.cell)
        return self._graph

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._embedder is None:
            from lcb.optimize.embed import Embedder

            self._embedder = Embedder()  # $LCB_EMBEDDINGS picks the backend (default MiniLM)
        return self._embedder.embed(list(texts))

    # --- rollouts -----------------------------------------------------------------------
    async def rollout(self, bundle: Mapping[str, str], problem: Problem, *, iteration: int,
                      active: frozenset[str] | None = None) -> Rollout | None:
        """One rollout of `bundle` on a train/validation `problem` (module docstring)."""
        self.data.problem(problem.id)  # raises SplitLeak for a test row, KeyError for others
        problems = check_bundle(bundle, seed=self.seed_bundle)
        if problems:
            raise BundleError(problems)
        frozen = dict(bundle)
        self.last_iteration = max(self.last_iteration, iteration)
        key = rollout_key(bundle_hash(frozen), problem.id, iteration, active)
        while key in self._in_flight:  # the same requests are on their way: share the answer
            shared = self._in_flight[key]
            try:
                return self._as_replay(await asyncio.shield(shared))
            except asyncio.CancelledError:
                if not shared.cancelled():
                    raise  # this task was cancelled
                # the task running it was cancelled, not this one: run it here
        if key in self._claimed:
            line = self.journal.lookup(key)
            return self._as_replay(self.journal.load(line)) if line else None
        future: asyncio.Future[Rollout | None] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = future
        try:
            result = await self._first(key, frozen, problem, iteration=iteration, active=active)
            future.set_result(result)
            return result
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: sharers re-raise it, nobody else must
            raise
        finally:
            del self._in_flight[key]

    def _as_replay(self, rollout: Rollout | None) -> Rollout | None:
        if rollout is None:
            return None
        self.replays += 1
        return replace(rollout, replay=True)

    async def _first(self, key: str, bundle: dict[str, str], problem: Problem, *,
                     iteration: int, active: frozenset[str] | None) -> Rollout | None:
        """The first request for `key` in this process: from the journal, or a real run."""
        line = self.journal.lookup(key)
        if line is not None:
            journaled = self.journal.load(line)
            try:  # counted again, and shown to the refusal watch as it was the first time
                self.ledger.commit_replayed(journaled.problem_id, refusal=refusal_of(journaled),
                                            answered=journaled.team.n_llm_calls > 0,
                                            result=journaled)
            except BudgetExhausted:
                return None
            self._claimed.add(key)
            return journaled
        abandoned = self.journal.abandonment(key)
        if abandoned is not None:  # every try failed the first time: None again, uncharged
            self.ledger.count_abandoned(int(abandoned["tries"]))
            self._claimed.add(key)
            return None
        if self.ledger.available <= 0:
            return None
        scope = optimize_scope(optimizer_seed=self.optimizer_seed, iteration=iteration,
                               row=problem.id)
        started = time.monotonic()

        def attempt() -> Any:
            return self.runner.attempt(bundle, problem, seed=scope.rollout, iteration=iteration,
                                       active=active)

        try:
            rollout = await self.ledger.arun_rollout(attempt)
        except BudgetExhausted:  # another rollout took the last unit since the check above
            return None
        self._claimed.add(key)
        if rollout is None:  # refunded after every try failed for infrastructure
            self.journal.append_abandoned(key, row=problem.id, iteration=iteration,
                                          tries=1 + self.ledger.retries)
            return None
        rollout = replace(rollout, latency_s=time.monotonic() - started)
        self.journal.append(rollout, charged=self.ledger.charged)
        return rollout

    async def rollouts(self, bundle: Mapping[str, str], problems: Sequence[Problem], *,
                       iteration: int) -> list[Rollout | None]:
        """Concurrent `rollout`s (the runner bounds them); earlier problems reserve first."""
        return list(await asyncio.gather(
            *(self.rollout(bundle, problem, iteration=iteration) for problem in problems)))

    # --- uncharged calls ----------------------------------------------------------------
    async def reflect(self, prompt: str, *, purpose: str, temperature: float | None = None,
                      max_tokens: int | None = None) -> str:
        return await self.calls.ask(CallKind.REFLECT, prompt_messages(prompt), purpose=purpose,
                                    temperature=temperature, max_tokens=max_tokens)

    async def judge(self, prompt: str, *, purpose: str, temperature: float = 0.0,
                    max_tokens: int | None = None) -> str:
        return await self.calls.ask(CallKind.JUDGE, prompt_messages(prompt), purpose=purpose,
                                    temperature=temperature, max_tokens=max_tokens)

    async def probe(self, role: str, system_prompt: str, messages: Sequence[Mapping[str, str]],
                    *, purpose: str, temperature: float | None = None,
                    max_tokens: int | None = None) -> str:
        if role not in self.seed_bundle:
            raise KeyError(f"probe: {role!r} is not a role of this team ({', '.join(self.roles)})")
        return await self.calls.ask(CallKind.PROBE, probe_messages(system_prompt, messages),
                                    purpose=f"{purpose}|{role}", temperature=temperature,
                                    max_tokens=max_tokens)

    # --- the history --------------------------------------------------------------------
    def _entry(self, bundle: Mapping[str, str], iteration: int | None,
               **fields: Any) -> HistoryEntry:
        return HistoryEntry(bundle=dict(bundle), charged=self.ledger.charged,
                            iteration=self.last_iteration if iteration is None else iteration,
                            uncharged=self.ledger.state()["uncharged"], **fields)

    def record_candidate(self, bundle: Mapping[str, str], *, scores: Mapping[str, float],
                         note: str = "", iteration: int | None = None,
                         parent: str | None = None) -> None:
        self.history.append(self._entry(bundle, iteration, kind="candidate", parent=parent,
                                        scores={k: float(v) for k, v in scores.items()},
                                        note=note))

    def record_proposal(self, bundle: Mapping[str, str], *, parent: str | None,
                        roles: Sequence[str], accepted: bool,
                        scores: Mapping[str, float] | None = None, scored_on: str | None = None,
                        rejected_by: str | None = None, reason: str = "",
                        iteration: int | None = None) -> None:
        if accepted and rejected_by is not None:
            raise ValueError("an accepted proposal has no rejected_by")
        self.history.append(self._entry(
            bundle, iteration, kind="proposal", parent=parent, roles=list(roles),
            accepted=accepted, scores={k: float(v) for k, v in (scores or {}).items()},
            scored_on=scored_on, rejected_by=rejected_by, reason=reason))

    def validate(self, bundle: Mapping[str, object]) -> Bundle:
        return validate_bundle(bundle, seed=self.seed_bundle)

    # --- checkpoints --------------------------------------------------------------------
    def checkpoint(self, state: Mapping[str, object]) -> None:
        payload = {"state": json.loads(json.dumps(dict(state))),
                   "iteration": self.last_iteration, "ledger": self.ledger_state(),
                   "journal_lines": len(self.journal), "claimed": sorted(self._claimed),
                   "history_entries": self.history.position, "calls": self.calls.position(),
                   "time": now_iso()}
        write_json(self.job_dir / CHECKPOINT_FILE, payload)

    def restore(self, *, fast_forward: bool = False) -> dict | None:
        path = self.job_dir / CHECKPOINT_FILE
        if not path.exists():
            return None
        saved = json.loads(path.read_text(encoding="utf-8"))
        if fast_forward:  # everything the skipped iterations did, as it stood at the checkpoint
            self.ledger.load_state(saved["ledger"])
            self.replays = int(saved["ledger"].get("replays", 0))
            self._claimed.update(saved["claimed"])
            self.history.skip(saved["history_entries"])
            self.calls.skip_to(saved["calls"])
            self.last_iteration = int(saved["iteration"])
        return dict(saved["state"])

    def forget_refunded(self, tripped: Misconfigured) -> int:
        """Drop from the journal the rollouts a misconfiguration refunded (this session's and
        retraced ones alike), so a rerun with a working endpoint runs them afresh."""
        return self.journal.drop(
            rollout_key(r.bundle_hash, r.problem_id, r.iteration, r.active)
            for r in tripped.refunded if isinstance(r, Rollout))

    def ledger_state(self) -> dict[str, Any]:
        return {**self.ledger.state(), "replays": self.replays}

"""The optimize phase's `Evaluator` (`lcb.optimize.method`): charged rollouts with replay.

Contract:
- `JobEvaluator.rollout` refuses any problem outside `data` (a test id raises `SplitLeak`)
  and any bundle that does not keep exactly the seed's roles (`BundleError`). It seeds the
  team run from (optimizer seed, optimize phase, iteration, row)
  (`lcb.optimize.seeds.optimize_scope`).
- What the method gets back (`lcb.optimize.sealing`): the team runs and is graded on the
  labelled row (`labelled`, which only the protocol holds; the method's problems of its
  selection set carry no hidden tests). A rollout on a selection-set row, and every rollout
  when `feedback="verdict"`, comes back `verdict_only`: the score, the verdict and the error,
  never the failing test's input or expected output (on a selection-set row the error keeps
  only the exception's name). The journal keeps the whole rollout; it and the labelled rows
  are the protocol's (`JobContext` holds this evaluator privately).
- Replay (`lcb.optimize.journal`): a rollout key (bundle, row, iteration, mask) already in the
  journal is never run again. The first time this process asks for a journaled key (a resumed
  job retracing its path) the journaled rollout is charged again in the ledger, which a
  resumed job rebuilds from zero, so every journaled rollout is counted exactly once; any
  further request for a key this process has seen is a replay: uncharged, no model call
  (`replay=True`, counted in `replays`). Identical requests in flight at once run once.
- A new key goes through `BudgetLedger.arun_rollout`: one unit reserved before dispatch,
  charged for a usable run, refunded for an infrastructure failure (retried with the same seed);
  `None` means nothing was charged. Each usable rollout is journaled (line + transcript).
- Masked rollouts asked with `reuse=True` (`active` given: hivemind's coalitions) share answers
  (`lcb.agents.shared`) through the job's store `DIR/coalitions/` (a `ResponseCache`): a
  rollout of the whole team (every agent active) stores the answers of the try that became
  the rollout; a smaller coalition takes from the store each call whose request the whole
  team made (same prompt, same messages, same request seed, same run seed: the same row and
  iteration), and sends the others. A coalition that sent nothing, over all its tries, comes
  back `free` (its `reused` usage counted) and is not charged (`BudgetLedger`); a journaled
  free rollout retraced is counted free again. One the team's rule expects to be free
  (`TeamCell.whole_team_answers`) is first run on the stored answers alone with no unit
  reserved (`_free_try`); a call they lack fails at once, nothing sent, and it then runs as
  any rollout. The store lives in the job folder, so a resumed job's coalitions find what the
  interrupted session's whole-team runs stored. Run the whole team's coalition first: a smaller
  one in flight beside it finds nothing yet and sends (and pays for) its calls.
- `position()` is what a checkpoint holds of it (the latest iteration, the ledger, the
  journal's length, the keys claimed); `fast_forward(saved)` moves it back to such a position,
  for a method that skips the iterations before it instead of retracing them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from lcb.agents.cache import ResponseCache
from lcb.agents.shared import SharedAnswers
from lcb.data.problems import Problem
from lcb.optimize.budget import BudgetExhausted, BudgetLedger, InfraFailure, Refused
from lcb.optimize.bundle import BundleError, bundle_hash, check_bundle
from lcb.optimize.journal import COALITIONS, RolloutJournal, rollout_key
from lcb.optimize.method import Rollout
from lcb.optimize.outcomes import Misconfigured
from lcb.optimize.seeds import optimize_scope
from lcb.optimize.splits import OptimizerData
from lcb.optimize.teamrun import TeamRunner, refusal_of, verdict_only


class JobEvaluator:
    """The `Evaluator` of one job's optimize phase (see the module docstring)."""

    def __init__(self, *, seed_bundle: Mapping[str, str], data: OptimizerData,
                 labelled: Mapping[str, Problem], ledger: BudgetLedger, optimizer_seed: int,
                 runner: TeamRunner, job_dir: Path, feedback: str = "full") -> None:
        self.seed_bundle, self.data, self.ledger = seed_bundle, data, ledger
        self._labelled, self.feedback = labelled, feedback
        self._selection = frozenset(problem.id for problem in data.validation)
        self.optimizer_seed, self.runner = optimizer_seed, runner
        self.journal = RolloutJournal(Path(job_dir))
        self._coalitions: ResponseCache | None = None  # made at the first masked rollout
        self.last_iteration = 0
        self.replays = 0
        self._claimed: set[str] = set()
        self._in_flight: dict[str, asyncio.Future[Rollout | None]] = {}

    async def rollout(self, bundle: Mapping[str, str], problem: Problem, *, iteration: int,
                      active: frozenset[str] | None = None,
                      reuse: bool = False) -> Rollout | None:
        """One rollout of `bundle` on a train/validation `problem` (module docstring)."""
        self.data.problem(problem.id)  # raises SplitLeak for a test row, KeyError for others
        labelled = self._labelled[problem.id]
        result = await self._rollout(bundle, labelled, iteration=iteration, active=active,
                                     reuse=reuse)
        return self._shown(result, labelled)

    def _shown(self, rollout: Rollout | None, problem: Problem) -> Rollout | None:
        """What the method may see of `rollout` (module docstring)."""
        if rollout is None:
            return None
        sealed = problem.id in self._selection
        if sealed or self.feedback == "verdict":
            return verdict_only(rollout, tests_of=self.runner.tests_of(problem), sealed=sealed)
        return rollout

    async def _rollout(self, bundle: Mapping[str, str], problem: Problem, *, iteration: int,
                       active: frozenset[str] | None, reuse: bool = False) -> Rollout | None:
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
            result = await self._first(key, frozen, problem, iteration=iteration, active=active,
                                       reuse=reuse)
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

    async def rollouts(self, bundle: Mapping[str, str], problems: Sequence[Problem], *,
                       iteration: int) -> list[Rollout | None]:
        """Concurrent `rollout`s (the runner bounds them); earlier problems reserve first."""
        return list(await asyncio.gather(
            *(self.rollout(bundle, problem, iteration=iteration) for problem in problems)))

    def _as_replay(self, rollout: Rollout | None) -> Rollout | None:
        if rollout is None:
            return None
        self.replays += 1
        return replace(rollout, replay=True)

    async def _first(self, key: str, bundle: dict[str, str], problem: Problem, *,
                     iteration: int, active: frozenset[str] | None,
                     reuse: bool) -> Rollout | None:
        """The first request for `key` in this process: from the journal, or a real run."""
        if self.journal.lookup(key) is not None or self.journal.abandonment(key) is not None:
            return self._retraced(key)
        scope = optimize_scope(optimizer_seed=self.optimizer_seed, iteration=iteration,
                               row=problem.id)
        started = time.monotonic()
        if reuse and active is not None and self._answered_by_whole_team(active):
            free = await self._free_try(bundle, problem, seed=scope.rollout,
                                        iteration=iteration, active=active)
            if free is not None:
                self.ledger.count_free()
                return self._journaled(key, free, started)
        if self.ledger.available <= 0:
            return None
        shared = self._shared(active, scope.rollout) if reuse and active is not None else None

        async def attempt() -> Rollout:
            rollout = await self.runner.attempt(bundle, problem, seed=scope.rollout,
                                                iteration=iteration, active=active,
                                                shared=shared)
            if shared is None:
                return rollout
            return replace(rollout, free=shared.sent_nothing, reused=shared.reused_usage)

        try:
            rollout = await self.ledger.arun_rollout(attempt)
        except BudgetExhausted:  # another rollout took the last unit since the check above
            return None
        if rollout is not None and shared is not None:
            shared.commit()  # the whole team's answers, for the coalitions after it
        if rollout is None:  # refunded after every try failed for infrastructure
            self._claimed.add(key)
            self.journal.append_abandoned(key, row=problem.id, iteration=iteration,
                                          tries=1 + self.ledger.retries)
            return None
        return self._journaled(key, rollout, started)

    def _journaled(self, key: str, rollout: Rollout, started: float) -> Rollout:
        self._claimed.add(key)
        rollout = replace(rollout, latency_s=time.monotonic() - started)
        self.journal.append(rollout, charged=self.ledger.charged)
        return rollout

    def _retraced(self, key: str) -> Rollout | None:
        """A key the journal holds (a resumed job retracing its path): its rollout, counted as
        the first time (charged again, or free again), or None again for an abandoned one."""
        line = self.journal.lookup(key)
        if line is None:  # every try failed the first time: None again, uncharged
            self.ledger.count_abandoned(int(self.journal.abandonment(key)["tries"]))
            self._claimed.add(key)
            return None
        journaled = self.journal.load(line)
        if journaled.free:  # it cost nothing the first time either
            self.ledger.count_free()
        else:
            try:  # counted again, and shown to the refusal watch as it was the first time
                self.ledger.commit_replayed(journaled.problem_id, refusal=refusal_of(journaled),
                                            answered=journaled.team.n_llm_calls > 0,
                                            result=journaled)
            except BudgetExhausted:
                return None
        self._claimed.add(key)
        return journaled

    def _answered_by_whole_team(self, active: frozenset[str]) -> bool:
        """A coalition smaller than the team whose calls the whole team's run makes."""
        cell = self.runner.cell
        return not active >= set(cell.agents) and cell.whole_team_answers(active)

    async def _free_try(self, bundle: dict[str, str], problem: Problem, *, seed: int,
                        iteration: int, active: frozenset[str]) -> Rollout | None:
        """A coalition the whole team's run should answer, run on those answers alone with no
        unit reserved: the rollout, free; None when a call was not among them (nothing was
        sent) or grading failed: it then runs as any rollout."""
        view = self._shared(active, seed, only_reuse=True)
        try:  # not kept: a failed try's run is never graded as the coalition's rollout
            rollout = await self.runner.attempt(bundle, problem, seed=seed, iteration=iteration,
                                                active=active, shared=view, keep=False)
        except (InfraFailure, Refused):
            return None
        if view.missed or not view.sent_nothing:
            return None
        return replace(rollout, free=True, reused=view.reused_usage)

    def _shared(self, active: frozenset[str], run_seed: int, *,
                only_reuse: bool = False) -> SharedAnswers:
        """A masked rollout's view of the coalitions' answers (module docstring), scoped by
        its run seed (the row and iteration, even with request seeds off)."""
        if self._coalitions is None:
            self._coalitions = ResponseCache(self.journal.dir / COALITIONS)
        config = self.runner.runtime.config
        whole = active >= set(self.runner.cell.agents)
        return SharedAnswers(self._coalitions, scope=str(run_seed),
                             writes=whole and not only_reuse, model=config.model_id,
                             purpose=self.runner.runtime.gateway.purpose, only_reuse=only_reuse)

    def close(self) -> None:
        if self._coalitions is not None:
            self._coalitions.close()

    # --- positions (checkpoints) and misconfiguration -----------------------------------
    def ledger_state(self) -> dict[str, Any]:
        return {**self.ledger.state(), "replays": self.replays}

    def position(self) -> dict[str, Any]:
        """What a checkpoint holds of the rollouts so far (module docstring)."""
        return {"iteration": self.last_iteration, "ledger": self.ledger_state(),
                "journal_lines": len(self.journal), "claimed": sorted(self._claimed)}

    def fast_forward(self, saved: Mapping[str, Any]) -> None:
        """Back to a checkpoint's `position()`: its ledger, replays, claimed keys, iteration."""
        self.ledger.load_state(saved["ledger"])
        self.replays = int(saved["ledger"].get("replays", 0))
        self._claimed.update(saved["claimed"])
        self.last_iteration = int(saved["iteration"])

    def forget_refunded(self, tripped: Misconfigured) -> int:
        """Drop from the journal the rollouts a misconfiguration refunded (this session's and
        retraced ones alike), so a rerun with a working endpoint runs them afresh."""
        return self.journal.drop(_keys(tripped.refunded))


def _keys(refunded: Iterable[object]) -> Iterable[str]:
    return (rollout_key(r.bundle_hash, r.problem_id, r.iteration, r.active)
            for r in refunded if isinstance(r, Rollout))

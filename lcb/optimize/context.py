"""The optimize phase's `OptimizeContext` (`lcb.optimize.method`): four parts in one object.

Contract:
- `JobContext` is what a method gets. It holds the cell and the seed bundle (`TeamSpec`:
  topology, size, communication, roles, agents, the team graph, `validate`) and composes the
  other three parts, each its own object (the evaluator and the recorder are held privately:
  the evaluator holds the labelled rows and the journal of whole rollouts, which a method must
  not read; `lcb.optimize.sealing`):
  - `_evaluator` (`lcb.optimize.evaluator.JobEvaluator`): `data`, `ledger`, `rollout(s)`,
    the charged rollouts with replay from the journal;
  - `models` (`JobModels`, below): `reflect` / `judge` / `probe` (`lcb.optimize.calls`:
    uncharged, ledgered per kind, journaled) and `embed`;
  - `_recorder` (`lcb.optimize.recorder.JobRecorder`): `record_candidate`, `record_proposal`,
    `checkpoint`, `restore`.
  Its methods of those parts are theirs, forwarded: the object is one `OptimizeContext`.
- For the protocol (`lcb.optimize.phases`) it also exposes the journal's length
  (`journaled`), the history, the latest iteration, the replays, `ledger_state()` and
  `forget_refunded(...)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lcb.data.problems import Problem
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.bundle import Bundle, freeze, validate_bundle
from lcb.optimize.calls import CallKind, ModelCalls, probe_messages, prompt_messages
from lcb.optimize.cell import TeamFacts
from lcb.optimize.evaluator import JobEvaluator
from lcb.optimize.journal import HistoryLog
from lcb.optimize.method import Rollout
from lcb.optimize.outcomes import Misconfigured
from lcb.optimize.recorder import JobRecorder
from lcb.optimize.splits import OptimizerData
from lcb.optimize.teamrun import TeamCell, TeamRunner


class JobModels:
    """The `LanguageModels` of one job: uncharged calls through `ModelCalls`, and embeddings."""

    def __init__(self, calls: ModelCalls, roles: Sequence[str]) -> None:
        self.calls, self.roles = calls, tuple(roles)
        self._embedder: Any = None

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
        if role not in self.roles:
            raise KeyError(f"probe: {role!r} is not a role of this team ({', '.join(self.roles)})")
        return await self.calls.ask(CallKind.PROBE, probe_messages(system_prompt, messages),
                                    purpose=f"{purpose}|{role}", temperature=temperature,
                                    max_tokens=max_tokens)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._embedder is None:
            from lcb.optimize.embed import Embedder

            self._embedder = Embedder()  # $LCB_EMBEDDINGS picks the backend (default MiniLM)
        return self._embedder.embed(list(texts))


class JobContext(TeamFacts):
    """The `OptimizeContext` of one job's optimize phase (see the module docstring)."""

    def __init__(self, *, cell: TeamCell, seed_bundle: Mapping[str, str], data: OptimizerData,
                 labelled: Iterable[Problem], ledger: BudgetLedger, optimizer_seed: int,
                 runner: TeamRunner, calls: ModelCalls, job_dir: Path,
                 feedback: str = "full") -> None:
        self.cell, self.data, self.ledger = cell, data, ledger
        self.seed_bundle = freeze(seed_bundle)
        self.optimizer_seed = optimizer_seed
        self._evaluator = JobEvaluator(seed_bundle=self.seed_bundle, data=data,
                                      labelled={problem.id: problem for problem in labelled},
                                      ledger=ledger, optimizer_seed=optimizer_seed,
                                      runner=runner, job_dir=job_dir, feedback=feedback)
        self.models = JobModels(calls, self.roles)
        self._recorder = JobRecorder(job_dir, evaluator=self._evaluator, calls=calls)

    # --- TeamSpec: TeamFacts ---------------------------------------------------------
    def validate(self, bundle: Mapping[str, object]) -> Bundle:
        return validate_bundle(bundle, seed=self.seed_bundle)

    # --- Evaluator ----------------------------------------------------------------------
    async def rollout(self, bundle: Mapping[str, str], problem: Problem, *, iteration: int,
                      active: frozenset[str] | None = None,
                      reuse: bool = False) -> Rollout | None:
        return await self._evaluator.rollout(bundle, problem, iteration=iteration, active=active,
                                             reuse=reuse)

    async def rollouts(self, bundle: Mapping[str, str], problems: Sequence[Problem], *,
                       iteration: int) -> list[Rollout | None]:
        return await self._evaluator.rollouts(bundle, problems, iteration=iteration)

    # --- LanguageModels -----------------------------------------------------------------
    async def reflect(self, prompt: str, *, purpose: str, temperature: float | None = None,
                      max_tokens: int | None = None) -> str:
        return await self.models.reflect(prompt, purpose=purpose, temperature=temperature,
                                         max_tokens=max_tokens)

    async def judge(self, prompt: str, *, purpose: str, temperature: float = 0.0,
                    max_tokens: int | None = None) -> str:
        return await self.models.judge(prompt, purpose=purpose, temperature=temperature,
                                       max_tokens=max_tokens)

    async def probe(self, role: str, system_prompt: str, messages: Sequence[Mapping[str, str]],
                    *, purpose: str, temperature: float | None = None,
                    max_tokens: int | None = None) -> str:
        return await self.models.probe(role, system_prompt, messages, purpose=purpose,
                                       temperature=temperature, max_tokens=max_tokens)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.models.embed(texts)

    # --- Recorder -----------------------------------------------------------------------
    def record_candidate(self, bundle: Mapping[str, str], *, scores: Mapping[str, float],
                         note: str = "", iteration: int | None = None,
                         parent: str | None = None) -> None:
        self._recorder.record_candidate(bundle, scores=scores, note=note, iteration=iteration,
                                       parent=parent)

    def record_proposal(self, bundle: Mapping[str, str], *, parent: str | None,
                        roles: Sequence[str], accepted: bool,
                        scores: Mapping[str, float] | None = None, scored_on: str | None = None,
                        rejected_by: str | None = None, reason: str = "",
                        iteration: int | None = None) -> None:
        self._recorder.record_proposal(bundle, parent=parent, roles=roles, accepted=accepted,
                                      scores=scores, scored_on=scored_on,
                                      rejected_by=rejected_by, reason=reason,
                                      iteration=iteration)

    def checkpoint(self, state: Mapping[str, object]) -> None:
        self._recorder.checkpoint(state)

    def restore(self, *, fast_forward: bool = False) -> dict | None:
        return self._recorder.restore(fast_forward=fast_forward)

    # --- for the protocol ---------------------------------------------------------------
    @property
    def journaled(self) -> int:
        """Usable rollouts in the journal (a resumed job replays them)."""
        return len(self._evaluator.journal)

    @property
    def history(self) -> HistoryLog:
        return self._recorder.history

    @property
    def last_iteration(self) -> int:
        return self._evaluator.last_iteration

    @property
    def replays(self) -> int:
        return self._evaluator.replays

    def ledger_state(self) -> dict[str, Any]:
        return self._evaluator.ledger_state()

    def close(self) -> None:
        """Release what the rollouts hold open (the coalitions' answer store)."""
        self._evaluator.close()

    def forget_refunded(self, tripped: Misconfigured) -> int:
        """Drop from the journal the rollouts a misconfiguration refunded, so a rerun with a
        working endpoint runs them afresh (`JobEvaluator.forget_refunded`)."""
        return self._evaluator.forget_refunded(tripped)

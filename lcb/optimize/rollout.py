"""The optimize phase's `OptimizeContext`: charged rollouts, the reflection model, the history.

Contract (`lcb.optimize.method` states what methods may rely on):
- `JobContext.rollout` refuses any problem outside `ctx.data` (a test id raises `SplitLeak`) and
  any bundle that does not keep exactly the seed's roles (`BundleError`). It seeds the team run
  from (optimizer seed, optimize phase, iteration, row) (`lcb.optimize.seeds.optimize_scope`),
  so the same call twice sends the same requests: a method that wants a second sample of one
  (bundle, row) passes another iteration. It goes through `BudgetLedger.arun_rollout`: one unit
  is reserved before dispatch, charged for a usable run, refunded for an infrastructure failure
  (retried twice with the same seed); `None` means nothing was charged.
- Every charged rollout is appended to `DIR/rollouts.jsonl` (id, iteration, bundle hash, seed,
  score, usage, charged count): the budget is auditable line by line.
- `Reflector` is the reflection model: `REFLECTION_MODEL_BASE_URL` / `REFLECTION_MODEL_ID` /
  `REFLECTION_MODEL_API_KEY` (default: the task endpoint, model and key) and
  `REFLECTION_MODEL_VLLM_EXTRAS` (0 for a hosted API; default: as the task model), with its own
  sampling (`REFLECTION_SAMPLING`). Its calls are never charged; their calls and tokens are
  recorded in the ledger under the call's purpose, and so reach every history entry.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage

from lcb.agents.llm import ModelCallError, ModelGateway
from lcb.agents.models import ModelConfig, resolve_model
from lcb.agents.usage import CallTag, UsageLedger
from lcb.data.problems import Problem
from lcb.optimize.artifacts import HistoryEntry, append_history
from lcb.optimize.budget import BudgetExhausted, BudgetLedger
from lcb.optimize.bundle import Bundle, BundleError, check_bundle, freeze, validate_bundle
from lcb.optimize.method import ReflectionError, Rollout
from lcb.optimize.seeds import Phase, optimize_scope, request_seed
from lcb.optimize.splits import OptimizerData
from lcb.optimize.teamrun import TeamCell, TeamRunner

ROLLOUT_LOG = "rollouts.jsonl"
REFLECTION_SAMPLING: dict[str, Any] = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 4096}
_UNSAFE_ROLE = re.compile(r"[^A-Za-z0-9_.-]+")


def reflection_config(task: ModelConfig, *, environ: Mapping[str, str] | None = None
                      ) -> ModelConfig:
    """The reflection model's config: the `REFLECTION_MODEL_*` variables over the task model."""
    env = os.environ if environ is None else environ
    base_url = (env.get("REFLECTION_MODEL_BASE_URL") or task.base_url).rstrip("/")
    model_id = resolve_model(env.get("REFLECTION_MODEL_ID") or task.model_id)
    api_key = env.get("REFLECTION_MODEL_API_KEY") or task.api_key
    extras = _env_flag(env, "REFLECTION_MODEL_VLLM_EXTRAS", default=task.vllm_extras)
    return replace(task, base_url=base_url, model_id=model_id, api_key=api_key,
                   vllm_extras=extras, **REFLECTION_SAMPLING)


def _env_flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    """A yes/no environment variable (1/0, true/false, yes/no); `default` when unset."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"environment variable {name}={raw!r}: expected 1/0, true/false or yes/no")


class Reflector:
    """Uncharged calls to the reflection model (one user message in, its text out)."""

    def __init__(self, config: ModelConfig, *, ledger: BudgetLedger, optimizer_seed: int) -> None:
        self.config, self.ledger, self.optimizer_seed = config, ledger, optimizer_seed
        self.gateway = ModelGateway(config)
        self.usage = UsageLedger(keep_calls=False)
        self._counts: Counter[str] = Counter()

    async def ask(self, prompt: str, *, purpose: str) -> str:
        """The answer to `prompt`; usage recorded under `purpose`; `ReflectionError` on failure."""
        if not prompt.strip() or not purpose:
            raise ValueError("reflect needs a non-empty prompt and purpose")
        slot = _UNSAFE_ROLE.sub("_", purpose) or "reflection"
        index = self._counts[slot]
        self._counts[slot] += 1
        seed = request_seed(optimizer_seed=self.optimizer_seed, phase=Phase.OPTIMIZE,
                            iteration=index, row="reflection", role=slot, turn=0)
        # This call's own ledger (forwarding to the reflector's totals): calls may overlap, so
        # a difference of the shared totals would count a neighbour's tokens too.
        usage = UsageLedger(keep_calls=False, parent=self.usage)
        try:
            reply = await self.gateway.call([HumanMessage(prompt)], ledger=usage, seed=seed,
                                            tag=CallTag("reflection", "reflection", slot, slot,
                                                        index))
        except ModelCallError as exc:
            self.ledger.record_uncharged(purpose, calls=1)
            raise ReflectionError(f"the reflection model {self.config.model_id!r} at "
                                  f"{self.config.base_url} failed: {exc}") from exc
        spent = usage.total()
        self.ledger.record_uncharged(purpose, prompt_tokens=spent.prompt_tokens,
                                     completion_tokens=spent.completion_tokens)
        return reply.content if isinstance(reply.content, str) else reply.text

    async def aclose(self) -> None:
        await self.gateway.aclose()


class JobContext:
    """The `OptimizeContext` of one job's optimize phase (see the module docstring)."""

    def __init__(self, *, cell: TeamCell, seed_bundle: Mapping[str, str], data: OptimizerData,
                 ledger: BudgetLedger, optimizer_seed: int, runner: TeamRunner,
                 reflector: Reflector, job_dir: Path) -> None:
        self.cell, self.data, self.ledger = cell, data, ledger
        self.seed_bundle = freeze(seed_bundle)
        self.optimizer_seed = optimizer_seed
        self.runner, self.reflector, self.job_dir = runner, reflector, Path(job_dir)
        self.last_iteration = 0
        self._log_lock = asyncio.Lock()

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

    async def rollout(self, bundle: Mapping[str, str], problem: Problem, *, iteration: int,
                      active: frozenset[str] | None = None) -> Rollout | None:
        """One charged rollout of `bundle` on a train/validation `problem` (module docstring)."""
        self.data.problem(problem.id)  # raises SplitLeak for a test row, KeyError for others
        problems = check_bundle(bundle, seed=self.seed_bundle)
        if problems:
            raise BundleError(problems)
        frozen = dict(bundle)
        scope = optimize_scope(optimizer_seed=self.optimizer_seed, iteration=iteration,
                               row=problem.id)
        self.last_iteration = max(self.last_iteration, iteration)
        if self.ledger.available <= 0:
            return None

        def attempt() -> Any:
            return self.runner.attempt(frozen, problem, seed=scope.rollout, iteration=iteration,
                                       active=active)

        try:
            rollout = await self.ledger.arun_rollout(attempt)
        except BudgetExhausted:  # another rollout took the last unit since the check above
            return None
        if rollout is not None:
            await self._log(rollout)
        return rollout

    async def rollouts(self, bundle: Mapping[str, str], problems: Sequence[Problem], *,
                       iteration: int) -> list[Rollout | None]:
        """Concurrent `rollout`s (the runner bounds them); earlier problems reserve first."""
        return list(await asyncio.gather(
            *(self.rollout(bundle, problem, iteration=iteration) for problem in problems)))

    async def reflect(self, prompt: str, *, purpose: str) -> str:
        return await self.reflector.ask(prompt, purpose=purpose)

    def record_candidate(self, bundle: Mapping[str, str], *, scores: Mapping[str, float],
                         note: str = "", iteration: int | None = None,
                         parent: str | None = None) -> None:
        entry = HistoryEntry(kind="candidate", bundle=dict(bundle), parent=parent,
                             iteration=self.last_iteration if iteration is None else iteration,
                             scores={k: float(v) for k, v in scores.items()},
                             charged=self.ledger.charged,
                             uncharged=self.ledger.state()["uncharged"], note=note)
        append_history(self.job_dir, entry)

    def validate(self, bundle: Mapping[str, object]) -> Bundle:
        return validate_bundle(bundle, seed=self.seed_bundle)

    async def _log(self, rollout: Rollout) -> None:
        team = rollout.team
        line = {"id": rollout.problem_id, "iteration": rollout.iteration,
                "bundle_hash": rollout.bundle_hash, "seed": rollout.seed, "score": rollout.score,
                "active": sorted(rollout.active) if rollout.active is not None else None,
                "n_llm_calls": team.n_llm_calls, "prompt_tokens": team.prompt_tokens,
                "completion_tokens": team.completion_tokens, "charged": self.ledger.charged}
        async with self._log_lock:
            with (self.job_dir / ROLLOUT_LOG).open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")

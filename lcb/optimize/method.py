"""The interface between the protocol and an optimizer method.

Contract:
- A method is a factory in `lcb.optimize.methods.OPTIMIZERS` (key -> factory). The factory,
  called with keyword settings only (none are required), returns an object with a `key` and
  `async optimize(ctx) -> dict[str, str]`: the incumbent bundle, a NEW dict keeping exactly the
  seed's roles. It never mutates `ctx.seed_bundle` (a read-only mapping anyway).
- The context (`OptimizeContext`) is four parts in one object; a method's pieces take the
  part they use, typed as that part:
  - `TeamSpec`: the cell (topology, size, communication, roles, agents, graph), the seed
    bundle, the optimizer seed, and `validate` (the bundle check). Free.
  - `Evaluator`: `data` (train and validation problems only: test rows are not loaded while
    the method runs), `ledger` (the budget), `rollout` / `rollouts` (the only charged calls).
  - `LanguageModels`: `reflect`, `judge`, `probe`, `embed`. Uncharged, ledgered per kind.
  - `Recorder`: `record_candidate`, `record_proposal`, `checkpoint`, `restore`.
  `Uncharged` is `TeamSpec` and `LanguageModels` together: what a judge or a proposer needs.
- `ctx.rollout(...)` runs one problem through the whole team with a candidate bundle and grades
  the submitted program on the hidden tests (fail-fast; the first `--opt-tests` tests when set).
  Each call that returns a `Rollout` was charged one unit of `ctx.ledger`, except a *replay*: a
  rollout whose (bundle, row, iteration, mask) already ran in this job sends the same requests,
  so it is served from the job's journal, uncharged, with no model call; and except a *free*
  coalition: a masked rollout asked with `reuse=True` whose every call the whole team's run of
  the row and iteration (also asked with `reuse=True`, and run before it) already made
  (`Rollout.free`; `lcb.optimize.evaluator`). `None` means nothing
  was charged: the budget is spent, or infrastructure failed on every try. A method must stop
  asking once `ctx.ledger.exhausted` (or once it gets `None` with `ctx.ledger.available == 0`).
- `ctx.reflect` / `ctx.judge` (reflection model) and `ctx.probe` (task model, one agent) are
  never charged and always recorded, per kind, in the ledger and `calls.jsonl.gz`.
- `ctx.record_candidate(...)` / `ctx.record_proposal(...)` append to the job's `history.jsonl`.
  The protocol writes the final entry itself.
- Resume: a rerun of an interrupted job serves every journaled rollout and model answer again
  (uncharged the second time), so a deterministic method retraces its path; `ctx.checkpoint`
  / `ctx.restore` let a method skip ahead instead.
- Shared strategies (`lcb.optimize.strategies`): seeded batch sampling and the paired gate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lcb.data.problems import Problem
from lcb.grading import Grade
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.splits import OptimizerData

if TYPE_CHECKING:
    from lcb.optimize.graph import RoleTurn, TeamGraph
    from lcb.teams.common import TeamResult

Bundle = dict[str, str]


@dataclass(frozen=True)
class Rollout:
    """One problem through the whole team with one bundle, graded (fail-fast, hidden tests).

    `score` is 1.0 when the submitted program passed every hidden test, else 0.0. `feedback` is
    the grader's text about the first failing test ("" when passed), or why there was no program.
    `team` carries the source-tagged transcript, `usage_by_role` and the per-role outputs in
    `fields`. `seed` is the run seed handed to the team (`lcb.optimize.seeds`). `grade` is the
    grader's `Grade` (`.to_record()` for JSON), None when there was no program to grade.
    """

    problem_id: str
    score: float
    feedback: str
    team: TeamResult
    seed: int
    iteration: int = 0
    bundle_hash: str = ""
    active: frozenset[str] | None = None
    grade: Grade | None = field(default=None, compare=False)
    latency_s: float = field(default=0.0, compare=False)
    replay: bool = field(default=False, compare=False)  # served from the journal, uncharged
    # A masked run that sent no request (every call answered by the whole team's run of this
    # row and iteration, or none made: `lcb.agents.shared`): not charged. `reused` counts the
    # calls (and their tokens) it took from that run; None outside such runs.
    free: bool = field(default=False, compare=False)
    reused: Mapping[str, int | None] | None = field(default=None, compare=False)

    @property
    def passed(self) -> bool:
        return self.score >= 1.0

    @property
    def role_io(self) -> dict[str, list[RoleTurn]]:
        """Each role's invocations in this run: input context, output, tool calls
        (`lcb.optimize.graph.role_io`; roles that did not run are absent)."""
        from lcb.optimize.graph import role_io

        return role_io(self.team.transcript)


class TeamSpec(Protocol):
    """What is optimized: the team's cell, its seed bundle and the job's seed. Free to read.

    Attributes:
        topology: the team (`single`, `independent`, `sequential`, `centralized`,
            `decentralized`).
        team_size: the team's size, resolved (1 for `single`).
        communication: the inter-agent message format (`freeform`, ...).
        seed_bundle: role -> seed prompt text (read-only).
        roles: the team's prompt slots, in team order (the keys of `seed_bundle`).
        agents: the team's agent ids in layout order (what `active` masks name); for `single`,
            `("solver",)`.
        optimizer_seed: the job's seed (0, 1, 2, ...); seed any RNG of the method from it
            (`lcb.optimize.strategies.batches.seeded_rng`).
    """

    topology: str
    team_size: int
    communication: str
    seed_bundle: Mapping[str, str]
    roles: tuple[str, ...]
    agents: tuple[str, ...]
    optimizer_seed: int

    @property
    def graph(self) -> TeamGraph:
        """The team graph: roles, their edges, agent ids (`lcb.optimize.graph`)."""
        ...

    def whole_team_answers(self, active: frozenset[str]) -> bool:
        """True when the whole team's run makes every call of the team masked to `active`
        (`lcb.teams.reuse`): a coalition rollout asked with `reuse=True` then costs nothing."""
        ...

    def validate(self, bundle: Mapping[str, object]) -> Bundle:
        """A trimmed copy of `bundle`; raises `lcb.optimize.bundle.BundleError` when it drops or
        adds a role, leaves a role empty, an unclosed fence, or an unfilled template slot."""
        ...


class Evaluator(Protocol):
    """Charged rollouts on the train and validation rows, and the budget they draw on.

    Attributes:
        data: train and validation problems only (test rows are not loaded).
        ledger: the job's budget ledger (read `available`, `charged`, `exhausted`, `total`).
    """

    data: OptimizerData
    ledger: BudgetLedger

    async def rollout(self, bundle: Mapping[str, str], problem: Problem, *, iteration: int,
                      active: frozenset[str] | None = None,
                      reuse: bool = False) -> Rollout | None:
        """One charged rollout (see the module docstring). `active` masks the team: only those
        agent ids run (None: all). Request seeds come from (optimizer seed, iteration, row).
        `reuse` (masked rollouts only): share answers with the whole team's masked run."""
        ...

    async def rollouts(self, bundle: Mapping[str, str], problems: Sequence[Problem], *,
                       iteration: int) -> list[Rollout | None]:
        """`rollout` for each problem, concurrently (bounded); results in the order given."""
        ...


class LanguageModels(Protocol):
    """Model calls outside the team run: never charged, always ledgered per kind and kept
    whole in `calls.jsonl.gz` (a resumed job gets the same answers back)."""

    async def reflect(self, prompt: str, *, purpose: str, temperature: float | None = None,
                      max_tokens: int | None = None) -> str:
        """The reflection model's answer (think-stripped) to one user message `prompt`.

        Uncharged (kind "reflect"); `purpose` labels the call in `calls.jsonl.gz`. Sampling:
        the reflection model's unless `temperature` / `max_tokens` are given. Raises
        `ReflectionError` when the reflection endpoint fails after retries.
        """
        ...

    async def judge(self, prompt: str, *, purpose: str, temperature: float = 0.0,
                    max_tokens: int | None = None) -> str:
        """An LLM-judge answer from the reflection model (kind "judge"; greedy by default)."""
        ...

    async def probe(self, role: str, system_prompt: str, messages: Sequence[Mapping[str, str]],
                    *, purpose: str, temperature: float | None = None,
                    max_tokens: int | None = None) -> str:
        """One single-agent call on the *task* model (kind "probe"): `system_prompt` (a
        candidate prompt of `role`) then `messages` (`{"role": "user"|"assistant", "content"}`).
        Uncharged; the task model's sampling unless overridden."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length sentence embeddings of `texts` (`lcb.optimize.embed`; no call is
        ledgered: the model runs locally)."""
        ...


class Recorder(Protocol):
    """The job's record of what the method did: `history.jsonl` and `checkpoint.json`."""

    def record_candidate(self, bundle: Mapping[str, str], *, scores: Mapping[str, float],
                         note: str = "", iteration: int | None = None,
                         parent: str | None = None) -> None:
        """Append `bundle` with its `scores` (e.g. {"train": 0.4, "val_minibatch": 0.6}) to the
        history, with the rollouts charged so far and the uncharged usage so far."""
        ...

    def record_proposal(self, bundle: Mapping[str, str], *, parent: str | None,
                        roles: Sequence[str], accepted: bool,
                        scores: Mapping[str, float] | None = None, scored_on: str | None = None,
                        rejected_by: str | None = None, reason: str = "",
                        iteration: int | None = None) -> None:
        """Append one proposal to the history: the proposed bundle (even a rejected one), its
        parent's hash, the role(s) it changed, where it was scored, and whether it was kept;
        a rejected one names the stage (`minibatch`, `validator`, `gate`) and the reason."""
        ...

    def checkpoint(self, state: Mapping[str, object]) -> None:
        """Save the method's JSON-able state after an iteration (with the ledger and the
        artifacts' positions), atomically, so a rerun can `restore()` it."""
        ...

    def restore(self, *, fast_forward: bool = False) -> dict | None:
        """The state of the last `checkpoint` of an interrupted run of this job, else None.

        Without `fast_forward` nothing else changes: the method retraces its path from the
        start (every journaled rollout and answer is served again) and may use the state to
        check that it reached the same point. With `fast_forward` the ledger, the journal's
        claimed rollouts, the uncharged calls' positions and the history move to the
        checkpoint, for a method that resumes from the state instead of retracing."""
        ...


class Uncharged(TeamSpec, LanguageModels, Protocol):
    """The parts that spend no budget: the team's facts and the uncharged model calls. A piece
    typed with it (a judge, a proposer) cannot run a rollout or write the history."""


@runtime_checkable
class OptimizeContext(TeamSpec, Evaluator, LanguageModels, Recorder, Protocol):
    """What a method gets: one object that is all four parts (`TeamSpec`, `Evaluator`,
    `LanguageModels`, `Recorder`). A method's `optimize` takes it whole; the pieces of a
    method take the part they use, typed as that part, so their signatures say what they
    can spend (only an `Evaluator` charges the budget) and a test can hand them a fake of
    that part alone."""


class ReflectionError(RuntimeError):
    """The reflection model could not answer (after retries). The message names the endpoint."""


class Optimizer(Protocol):
    """A prompt optimizer: `optimize` returns a new bundle (the incumbent)."""

    key: str

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        ...


OptimizerFactory = Callable[..., Optimizer]

"""`mamut_gepa`: the MAMUT recipe (Herrera et al., arXiv 2603.03565): one joint GEPA search
over every role prompt, reflecting on whole-team transcripts.

Contract:
- The search is gepa's own run (`gepa_method.GepaRun`, the `gepa` library through our
  adapter): one candidate holds every role prompt, each role is a component, round-robin over
  them; Pareto candidate selection over validation items; merge on (at most
  `max_merge_invocations`); reflection minibatches of `minibatch` training problems;
  strict-improvement acceptance. What differs from `gepa` is what the reflection sees and the
  metric-call cap:
- Reflection (`TeamReflector`): each record is one problem of the minibatch
  (`team_transcript.team_record`): the task, the global score and the grader's feedback, and
  the WHOLE team transcript in time order (a centralized worker's run right after the
  manager's call that started it), source-tagged (who said what, every tool call with its
  arguments: delegations, code sent to `python_exec`; every tool result), with the reflected
  role's own turns marked; each message clipped, the record capped
  (`TeamReflectionSettings`), failures first, at most `records_per_reflection` records. Our
  prompt (`team_proposal_prompt`) asks for a new prompt for that one role that keeps its
  responsibilities in the team and its output contract; it is sent at `temperature` (0.7)
  as `ctx.reflect(purpose="mamut_gepa:reflect:<role>")`. The reply is parsed strictly
  (`reflection.parse_proposal`) and validated; a truncated or invalid one is recorded as
  rejected and never adopted. So is one our own checks drop (`TeamReflector.check`,
  `rejected_by="validator"`, the reason saying which): an echo of the answer template (its
  placeholder wording `TEMPLATE_WORDING`, whatever the case), a text shorter than
  `MIN_KEPT` (30 %) of the current role text, or one longer than `GROWTH` (4) × the seed's
  role text + `SLACK` (2000) characters.
- Budget: `max_metric_calls = min(max_metric_calls setting (B = 600), the job's budget)`;
  gepa counts each (candidate, row) evaluation as one metric call, which is one charged
  rollout (or a free replay: never more than charged). No plateau stop. Within that cap,
  gepa's budget gate holds: an iteration starts only when what is left along the path pays
  for its worst case (`2 × minibatch + |validation|`), so an accepted child is always
  validated and the ledger is never overdrawn.
- History, checkpoints and resume are gepa's (`gepa_records.GepaRecorder`, method key
  `mamut_gepa`): every candidate and every proposal is recorded, a checkpoint after every
  iteration; a resumed job retraces from the start (every rollout and answer comes from the
  journal) and must match the checkpoint (`ResumeDivergence` otherwise).
- `single` is refused (a one-agent team has no team transcript: use `gepa`). The result is a
  NEW dict: the best fully validated candidate, else a copy of the seed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lcb.optimize.method import Bundle, OptimizeContext
from lcb.optimize.methods.gepa_method import GepaRun, first_proposal_cost
from lcb.optimize.methods.reflection import (
    TEMPLATE_WORDING,
    assemble_request,
    proposal_problem,
)
from lcb.optimize.methods.team_transcript import OWN_TAG, TeamReflectionSettings, team_record

if TYPE_CHECKING:
    from lcb.optimize.methods.gepa_adapter import Trace

KEY = "mamut_gepa"


@dataclass(frozen=True)
class MamutGepaSettings:
    """The method's knobs (the reference values of METHODS.md are the defaults)."""

    minibatch: int = 3
    use_merge: bool = True
    max_merge_invocations: int = 5
    max_metric_calls: int = 600  # B: gepa's cap is min(B, the job's budget)
    temperature: float = 0.7
    reflection: TeamReflectionSettings = field(default_factory=TeamReflectionSettings)

    def __post_init__(self) -> None:
        for name in ("minibatch", "max_metric_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"mamut_gepa setting {name} must be an integer >= 1, "
                                 f"got {value!r}")
        merges = self.max_merge_invocations
        if isinstance(merges, bool) or not isinstance(merges, int) or merges < 0:
            raise ValueError(f"mamut_gepa setting max_merge_invocations must be an integer "
                             f">= 0, got {merges!r}")
        heat = self.temperature
        if isinstance(heat, bool) or not isinstance(heat, int | float) or not 0 <= heat <= 2:
            raise ValueError(f"mamut_gepa setting temperature must be a number in [0, 2], "
                             f"got {heat!r}")


SETTINGS = MamutGepaSettings  # `--set` keys and job.json's method_settings


_INTRO = (
    "You are revising one prompt of a team of language-model agents that write Python "
    "programs for competitive-programming problems. A problem counts as solved only when the "
    "team's final program passes every hidden test.\n\n"
    "The team's topology is '{topology}'; its roles are {roles}. The prompt under revision "
    "belongs to the role '{role}'. For each problem below you see the whole team run: every "
    "agent's messages tagged with the agent that sent them, the tool calls with their "
    "arguments (instructions delegated to teammates, code sent to be run) and the tools' "
    "replies. The turns of the agents that hold the role '{role}' are marked with '>>>' and "
    "'{own_tag}'. The harness appends its own output-format rules to every prompt, so do not "
    "restate them.\n"
)
_TASK = (
    "Trace how the team reached its final program and what the role '{role}' contributed: "
    "what its teammates gave it, what it made of that, and what it handed on. Find where its "
    "own turns helped or hurt the outcome (a misread task, a missed edge case, a slow "
    "algorithm, untested code, an unclear or incomplete hand-off, a teammate's correct point "
    "ignored), apart from teammates' mistakes it could not have prevented. Then write an "
    "improved prompt for the role '{role}' only:\n"
    "- keep the role's responsibilities in the team: the job it does, what it takes from its "
    "teammates and what it gives them; do not make it another role or the whole team;\n"
    "- keep its output contract: the form of what it hands on (a complete program, when the "
    "current prompt asks for one) as the current prompt states it;\n"
    "- add concrete, general guidance that would have prevented the failures, keep what "
    "worked, and never mention these particular problems.\n"
    "{keep_note}Write the complete prompt, not a diff.\n\n"
    "Answer with the new prompt between the two marker lines below, each on a line of its "
    "own, and nothing after the second marker:\n{begin}\n(" + TEMPLATE_WORDING + ")\n{end}\n"
)


def team_proposal_prompt(*, topology: str, roles: Sequence[str], role: str, current: str,
                         records: Sequence[Mapping[str, str]],
                         placeholders: Sequence[str] = ()) -> str:
    """Our reflection prompt for one role of a team (see the module docstring). Each record
    maps a heading (problem, task, score, feedback, team transcript) to its text."""
    listing = ", ".join(f"'{name}'" for name in roles)
    intro = _INTRO.format(topology=topology, roles=listing, role=role, own_tag=OWN_TAG)
    return assemble_request(intro, _TASK, role=role, current=current,
                            heading="## What happened on some training problems (whole team "
                                    "runs)", records=records, placeholders=placeholders)


@dataclass(frozen=True)
class TeamReflector:
    """The adapter's reflector for mamut_gepa: whole-team records, our team prompt."""

    settings: TeamReflectionSettings
    roles: tuple[str, ...]
    temperature: float | None = 0.7
    key: str = KEY

    @property
    def records_per_reflection(self) -> int:
        return self.settings.records_per_reflection

    def record(self, trace: Trace, role: str) -> dict[str, str]:
        assert trace.rollout is not None
        return team_record(trace.problem, trace.rollout, role, self.settings)

    def prompt(self, *, topology: str, role: str, current: str,
               records: Sequence[Mapping[str, str]], placeholders: Sequence[str]) -> str:
        return team_proposal_prompt(topology=topology, roles=self.roles, role=role,
                                    current=current, records=records,
                                    placeholders=placeholders)

    def check(self, text: str, *, current: str, seed: str) -> str | None:
        return proposal_problem(text, current=current, seed=seed)


@dataclass(frozen=True)
class MamutGepa:
    """See the module docstring."""

    settings: MamutGepaSettings = field(default_factory=MamutGepaSettings)
    key: str = KEY

    def minimum_budget(self, ctx: OptimizeContext) -> tuple[int, str]:
        return first_proposal_cost(self.settings.minibatch, ctx)

    async def optimize(self, ctx: OptimizeContext) -> Bundle:
        """The incumbent bundle after one joint gepa run within `ctx`'s budget (a new dict)."""
        if ctx.topology == "single":
            raise ValueError("mamut_gepa optimizes multi-agent teams; topology 'single' has "
                             "no team transcript (use gepa, mipro or identity)")
        s = self.settings
        cap = s.max_metric_calls
        run = GepaRun(key=KEY, minibatch=s.minibatch, use_merge=s.use_merge,
                      max_merge_invocations=s.max_merge_invocations,
                      max_metric_calls=lambda _n_train, _n_val, budget: min(cap, budget),
                      reflector=TeamReflector(s.reflection, tuple(ctx.roles),
                                              temperature=s.temperature))
        return await run.optimize(ctx)


def make(**settings: object) -> MamutGepa:
    """The factory of `OPTIMIZERS["mamut_gepa"]`: keyword settings of `MamutGepaSettings`.

    >>> make(minibatch=2).settings.minibatch
    2
    """
    return MamutGepa(settings=MamutGepaSettings(**settings))  # type: ignore[arg-type]

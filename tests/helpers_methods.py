"""A fake `OptimizeContext` for the optimizer-method tests: no model, no grader, no network.

- Rollouts are deterministic: a problem is solved iff the bundle's `target_role` prompt holds
  `KEYWORD`, or the problem is one of the `easy` ids (so scores differ across problems). They
  are charged on a real `BudgetLedger`; `None` comes back when the ledger is spent. Ids in
  `infra_fail` raise `InfraFailure` on every try (never charged).
- `reflect` answers through a script `(prompt, purpose) -> str`; the default proposes the
  current text of the role under revision plus the keyword, between the reflection markers.
- Every rollout, reflection and recorded candidate is logged, with the thread it ran on, so
  tests can check the budget, the seeds' iterations and the sync/async bridge.
- `ReflectingModel` is a script for the scripted HTTP server (end-to-end jobs): reflection
  requests (ours or DSPy's) get a proposal holding `fix`; team requests go to a
  `tests.helpers_optimize.TeamModel` (system prompts reduced to whether they hold `FIX`:
  rendered demos quote other problems, which would confuse its problem lookup), which solves
  its `wrong` problems only when the request holds `FIX`.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from lcb.optimize.budget import BudgetExhausted, BudgetLedger, InfraFailure
from lcb.optimize.bundle import validate_bundle
from lcb.optimize.method import Rollout
from lcb.optimize.methods.reflection import BEGIN_MARK, END_MARK
from lcb.problems import Mode, Problem
from lcb.teams import TeamResult

KEYWORD = "ALWAYS-CHECK-EDGE-CASES"
_ROLE_IN_PROMPT = re.compile(r"belongs to the role '([a-z_]+)'")
_CURRENT = re.compile(r"## The current prompt\n(.*?)\n\n## What happened", re.DOTALL)


def make_problem(index: int, *, prefix: str = "p") -> Problem:
    """A small stdin problem with one hidden test."""
    return Problem(
        id=f"{prefix}{index}", title=f"Problem {index}", statement=f"Print {index}.",
        starter_code="", mode=Mode.STDIN, fn_name=None, public_tests=(),
        private_tests=(), difficulty="easy", platform="atcoder", contest_id="c1",
        contest_date="2023-05-01T00:00:00",
    )


@dataclass
class FakeData:
    train: tuple[Problem, ...]
    validation: tuple[Problem, ...]


def keyword_proposal(prompt: str, _purpose: str) -> str:
    """The default reflection script: the current text plus the keyword, properly marked."""
    current = _CURRENT.search(prompt)
    text = current.group(1).strip() if current else "Solve it."
    return f"Here is my revision.\n{BEGIN_MARK}\n{text}\n{KEYWORD}\n{END_MARK}\n"


def team_result(bundle: Mapping[str, str], problem: Problem, *, solved: bool) -> TeamResult:
    """A transcript in the teams' format: each role's system, user and assistant messages."""
    transcript = []
    for role, text in bundle.items():
        agent = f"{role}_0"
        transcript += [
            {"source": agent, "role": role, "type": "system", "content": text},
            {"source": agent, "role": role, "type": "user",
             "content": f"[{role}] task for {problem.id}: {problem.statement}"},
            {"source": agent, "role": role, "type": "assistant",
             "content": f"[{role}] answer for {problem.id}\n```python\nprint({problem.id!r})\n```",
             "tool_calls": []},
        ]
    return TeamResult(code="print(1)" if solved else None, final_text="done",
                      transcript=transcript, prompt_tokens=10, completion_tokens=5,
                      n_llm_calls=len(bundle), n_tool_calls=0, usage_by_role={}, fields={})


@dataclass
class FakeContext:
    """See the module docstring."""

    seed_bundle: Mapping[str, str]
    data: FakeData
    budget: int
    target_role: str = "coder"
    easy: frozenset[str] = frozenset()
    infra_fail: frozenset[str] = frozenset()
    script: Callable[[str, str], str] = keyword_proposal
    topology: str = "sequential"
    team_size: int = 1
    communication: str = "freeform"
    optimizer_seed: int = 0
    delay_s: float = 0.0  # how long each rollout takes
    ledger: BudgetLedger = field(init=False)
    calls: list[dict] = field(default_factory=list)
    reflections: list[dict] = field(default_factory=list)
    candidates: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.seed_bundle = MappingProxyType(dict(self.seed_bundle))
        self.roles = tuple(self.seed_bundle)
        self.agents = tuple(f"{role}_0" for role in self.roles)
        self.ledger = BudgetLedger(self.budget)
        self.loop_thread = threading.get_ident()

    def solves(self, bundle: Mapping[str, str], problem: Problem) -> bool:
        return KEYWORD in bundle[self.target_role] or problem.id in self.easy

    async def rollout(self, bundle: Mapping[str, str], problem: Problem, *, iteration: int,
                      active: frozenset[str] | None = None) -> Rollout | None:
        assert problem in self.data.train or problem in self.data.validation
        frozen = dict(bundle)
        validate_bundle(frozen, seed=self.seed_bundle)  # only valid bundles ever run

        async def attempt() -> Rollout:
            await asyncio.sleep(self.delay_s)
            if problem.id in self.infra_fail:
                raise InfraFailure("connection refused")
            solved = self.solves(frozen, problem)
            self.calls.append({"problem": problem.id, "bundle": frozen, "iteration": iteration,
                               "thread": threading.get_ident(), "solved": solved})
            return Rollout(problem_id=problem.id, score=float(solved),
                           feedback="" if solved else f"wrong answer on test 0 of {problem.id}",
                           team=team_result(frozen, problem, solved=solved), seed=iteration)

        try:
            return await self.ledger.arun_rollout(attempt)
        except BudgetExhausted:
            return None

    async def rollouts(self, bundle: Mapping[str, str], problems: Sequence[Problem], *,
                       iteration: int) -> list[Rollout | None]:
        return list(await asyncio.gather(*(self.rollout(bundle, p, iteration=iteration)
                                           for p in problems)))

    async def reflect(self, prompt: str, *, purpose: str) -> str:
        reply = self.script(prompt, purpose)
        self.reflections.append({"prompt": prompt, "purpose": purpose, "reply": reply,
                                 "thread": threading.get_ident()})
        self.ledger.record_uncharged(purpose.split(":")[0] or "reflection")
        return reply

    def record_candidate(self, bundle: Mapping[str, str], *, scores: Mapping[str, float],
                         note: str = "", iteration: int | None = None,
                         parent: str | None = None) -> None:
        self.candidates.append({"bundle": dict(bundle), "scores": dict(scores), "note": note,
                                "iteration": iteration, "parent": parent,
                                "charged": self.ledger.charged,
                                "thread": threading.get_ident()})

    def validate(self, bundle: Mapping[str, object]) -> dict[str, str]:
        return validate_bundle(bundle, seed=self.seed_bundle)


SEED = {"analyzer": "Read the problem and list its constraints.",
        "coder": "Write a correct Python program for the problem."}


def cancel_midway(optimizer: object, ctx: FakeContext, *, after_s: float = 0.3) -> float:
    """Start `optimizer.optimize(ctx)`, cancel it after `after_s`; return the seconds until
    `asyncio.run` came back (it waits for the worker thread, so a stuck thread hangs here)."""
    import time

    async def main() -> None:
        task = asyncio.create_task(optimizer.optimize(ctx))  # type: ignore[attr-defined]
        await asyncio.sleep(after_s)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("the optimizer finished before it was cancelled")

    start = time.monotonic()
    asyncio.run(main())
    return time.monotonic() - start


def fake_context(*, budget: int, n_train: int = 6, n_val: int = 4, **kw: object) -> FakeContext:
    """A two-role context with `n_train` train and `n_val` validation problems."""
    data = FakeData(train=tuple(make_problem(i) for i in range(n_train)),
                    validation=tuple(make_problem(i, prefix="v") for i in range(n_val)))
    return FakeContext(seed_bundle=dict(kw.pop("seed_bundle", SEED)), data=data,
                       budget=budget, **kw)  # type: ignore[arg-type]


_OUTPUT_LIST = re.compile(r"Your output fields are:\n((?:\d+\. `\w+`.*\n?)+)")
_BASIC = re.compile(r"\[\[ ## basic_instruction ## \]\]\n(.*?)\n\n\[\[", re.DOTALL)


def dspy_script(instruction: Callable[[str], str] = lambda basic: f"{basic} {KEYWORD}"
                ) -> Callable[[str, str], str]:
    """A reflection script for DSPy's prompts: each requested output field gets a value in
    DSPy's chat format; `proposed_instruction` is `instruction(current instruction)`."""

    def answer(prompt: str, _purpose: str) -> str:
        found = _OUTPUT_LIST.search(prompt)
        names = re.findall(r"`(\w+)`", found.group(1)) if found else []
        current = _BASIC.findall(prompt)
        values = {name: f"a note about {name}" for name in names}
        if "proposed_instruction" in values:
            values["proposed_instruction"] = instruction(current[-1].strip() if current else "")
        body = "\n\n".join(f"[[ ## {name} ## ]]\n{value}" for name, value in values.items())
        return body + "\n\n[[ ## completed ## ]]"

    return answer


FIX = "Before answering, re-derive the expected output of every example by hand."


@dataclass
class ReflectingModel:
    """See the module docstring: `team` is a `TeamModel` whose `fixed_by` is `FIX`."""

    team: Callable[[dict], object]
    reflections: list[str] = field(default_factory=list)

    def __call__(self, request: dict) -> object:
        from tests.scripted_server import message_text

        text = message_text(request)
        if BEGIN_MARK in text:  # our reflection prompt: keep the current text, add the fix
            self.reflections.append("gepa")
            current = _CURRENT.search(text)
            body = current.group(1).strip() if current else "Solve the problem."
            return f"{BEGIN_MARK}\n{body}\n{FIX}\n{END_MARK}"
        if "Your output fields are:" in text:  # DSPy's proposal prompts
            self.reflections.append("dspy")
            return dspy_script(lambda basic: f"{basic} {FIX}")(text, "")
        return self.team(_without_demos(request))


def _without_demos(request: dict) -> dict:
    """The request as the team model should read it: rendered demos quote other problems'
    statements, so the system prompt is reduced to whether it holds `FIX`."""
    messages = []
    for message in request.get("messages", []):
        if message.get("role") == "system":
            message = {**message, "content": FIX if FIX in str(message.get("content")) else ""}
        messages.append(message)
    return {**request, "messages": messages}

"""A fake `OptimizeContext` for the optimizer-method tests: no model, no grader, no network.

- Rollouts are deterministic: a problem is solved iff the bundle's `target_role` prompt holds
  `KEYWORD`, or the problem is one of the `easy` ids (so scores differ across problems). They
  are charged on a real `BudgetLedger`; `None` comes back when the ledger is spent. Ids in
  `infra_fail` raise `InfraFailure` on every try (never charged).
- `reflect` answers through a script `(prompt, purpose) -> str`; the default proposes the
  current text of the role under revision plus the keyword, between the reflection markers.
- Every rollout, reflection and recorded candidate is logged, with the thread it ran on, so
  tests can check the budget, the seeds' iterations and the sync/async bridge.
- As the job's context does, a rollout of a (bundle, row, iteration, mask) already run is a
  replay: the first result again (`replay=True`), uncharged, counted in `replays`; one that
  infrastructure lost on every try comes back None again. `judge`,
  `probe`, `record_proposal`, `checkpoint` and `restore` (hands back `restored`) are recorded.
- `ReflectingModel` is a script for the scripted HTTP server (end-to-end jobs): reflection
  requests (ours or DSPy's) get a proposal holding `fix`; team requests go to a
  `tests.helpers_optimize.TeamModel` (system prompts reduced to whether they hold `FIX`:
  rendered demos quote other problems, which would confuse its problem lookup), which solves
  its `wrong` problems only when the request holds `FIX`. It keeps every team request as sent.
- `run_method_job` runs one such job (optimize -> validate -> test) and `check_three_phases`
  checks what every job must hold: the budget, the sealing of the selection before the test
  rows, and artifacts that agree with each other and with the records.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lcb.agents.prompts import seed_bundle
from lcb.data.problems import Mode, Problem
from lcb.optimize.artifacts import (
    JobResult,
    TestReport,
    read_evaluations,
    read_history,
    read_model,
    read_selection,
)
from lcb.optimize.budget import BudgetExhausted, BudgetLedger, InfraFailure
from lcb.optimize.bundle import bundle_hash, validate_bundle
from lcb.optimize.curves import incumbent as curve_incumbent
from lcb.optimize.job import run_job
from lcb.optimize.journal import ROLLOUT_LOG
from lcb.optimize.method import Rollout
from lcb.optimize.methods.reflection import BEGIN_MARK, END_MARK
from lcb.optimize.splits import Splits
from lcb.optimize.teamrun import TeamCell
from lcb.teams.common import TeamResult
from tests.helpers_optimize import TeamModel, job_config, sample_problems, sample_splits
from tests.scripted_server import message_text

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
    restored: dict | None = None  # what `restore()` hands back (a resumed job's checkpoint)
    ledger: BudgetLedger = field(init=False)
    calls: list[dict] = field(default_factory=list)
    reflections: list[dict] = field(default_factory=list)
    candidates: list[dict] = field(default_factory=list)
    proposals: list[dict] = field(default_factory=list)
    checkpoints: list[dict] = field(default_factory=list)
    replays: int = 0
    _journal: dict[tuple, Rollout | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.seed_bundle = MappingProxyType(dict(self.seed_bundle))
        self.roles = tuple(self.seed_bundle)
        self.agents = tuple(f"{role}_0" for role in self.roles)
        self.ledger = BudgetLedger(self.budget)
        self.loop_thread = threading.get_ident()

    def solves(self, bundle: Mapping[str, str], problem: Problem) -> bool:
        return KEYWORD in bundle[self.target_role] or problem.id in self.easy

    def whole_team_answers(self, active: frozenset[str]) -> bool:
        return False  # a fake team shares no answers: every coalition is charged

    async def rollout(self, bundle: Mapping[str, str], problem: Problem, *, iteration: int,
                      active: frozenset[str] | None = None,
                      reuse: bool = False) -> Rollout | None:
        assert problem in self.data.train or problem in self.data.validation
        frozen = dict(bundle)
        validate_bundle(frozen, seed=self.seed_bundle)  # only valid bundles ever run

        key = (bundle_hash(frozen), problem.id, iteration,
               None if active is None else tuple(sorted(active)))
        if key in self._journal:  # the same requests again: a replay, uncharged (as the job's)
            journaled = self._journal[key]
            if journaled is None:  # abandoned to infrastructure the first time: None again
                return None
            self.replays += 1
            return replace(journaled, replay=True)

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
            result = await self.ledger.arun_rollout(attempt)
        except BudgetExhausted:
            return None
        self._journal.setdefault(key, result)  # None: abandoned, journaled as the job does
        return result

    async def rollouts(self, bundle: Mapping[str, str], problems: Sequence[Problem], *,
                       iteration: int) -> list[Rollout | None]:
        return list(await asyncio.gather(*(self.rollout(bundle, p, iteration=iteration)
                                           for p in problems)))

    async def reflect(self, prompt: str, *, purpose: str, temperature: float | None = None,
                      max_tokens: int | None = None) -> str:
        return self._answer("reflect", prompt, purpose, temperature=temperature,
                            max_tokens=max_tokens)

    async def judge(self, prompt: str, *, purpose: str, temperature: float = 0.0,
                    max_tokens: int | None = None) -> str:
        return self._answer("judge", prompt, purpose, temperature=temperature,
                            max_tokens=max_tokens)

    async def probe(self, role: str, system_prompt: str, messages: Sequence[Mapping[str, str]],
                    *, purpose: str, temperature: float | None = None,
                    max_tokens: int | None = None) -> str:
        text = "\n\n".join([system_prompt, *(m["content"] for m in messages)])
        return self._answer("probe", text, purpose, temperature=temperature,
                            max_tokens=max_tokens, role=role)

    def _answer(self, kind: str, prompt: str, purpose: str, **extra: object) -> str:
        reply = self.script(prompt, purpose)
        self.reflections.append({"kind": kind, "prompt": prompt, "purpose": purpose,
                                 "reply": reply, "thread": threading.get_ident(), **extra})
        self.ledger.record_uncharged(kind)
        return reply

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        from lcb.optimize.embed import HashingEmbedder

        return HashingEmbedder().embed(list(texts))

    @property
    def graph(self) -> Any:
        from lcb.optimize.graph import team_graph

        return team_graph(TeamCell(self.topology, None if self.topology == "single"
                                   else max(self.team_size, 2)))

    def record_proposal(self, bundle: Mapping[str, str], *, parent: str | None,
                        roles: Sequence[str], accepted: bool,
                        scores: Mapping[str, float] | None = None, scored_on: str | None = None,
                        rejected_by: str | None = None, reason: str = "",
                        iteration: int | None = None) -> None:
        self.proposals.append({"bundle": dict(bundle), "parent": parent, "roles": list(roles),
                               "accepted": accepted, "scores": dict(scores or {}),
                               "scored_on": scored_on, "rejected_by": rejected_by,
                               "reason": reason, "iteration": iteration,
                               "charged": self.ledger.charged})

    def checkpoint(self, state: Mapping[str, object]) -> None:
        self.checkpoints.append({"state": json.loads(json.dumps(state)),
                                 "ledger": self.ledger.state()})

    def restore(self, *, fast_forward: bool = False) -> dict | None:
        if fast_forward and self.restored is not None:
            raise NotImplementedError("FakeContext does not fast-forward: test it on JobContext")
        return self.restored

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
    team_requests: list[dict] = field(default_factory=list)  # as received, in arrival order

    def __call__(self, request: dict) -> object:
        text = message_text(request)
        if BEGIN_MARK in text:  # our reflection prompt: keep the current text, add the fix
            self.reflections.append("gepa")
            current = _CURRENT.search(text)
            body = current.group(1).strip() if current else "Solve the problem."
            return f"{BEGIN_MARK}\n{body}\n{FIX}\n{END_MARK}"
        if "Your output fields are:" in text:  # DSPy's proposal prompts
            self.reflections.append("dspy")
            return dspy_script(lambda basic: f"{basic} {FIX}")(text, "")
        self.team_requests.append(request)
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


REFLECTION_ENV = ("REFLECTION_MODEL_BASE_URL", "REFLECTION_MODEL_ID", "REFLECTION_MODEL_API_KEY")


@dataclass
class MethodJob:
    """A finished end-to-end job (`run_method_job`) and what the scripted server saw."""

    out: Path
    budget: int
    splits: Splits
    team: TeamModel
    model: ReflectingModel
    summary: dict[str, Any]


def run_method_job(scripted: Callable[..., Any], tmp_path: Path, monkeypatch: Any, *,
                   method: str, budget: int, wrong: Iterable[str], **config: Any) -> MethodJob:
    """Run a `method` job on the sample splits through the scripted server (a
    `ReflectingModel` over a `TeamModel` that gets the `wrong` ids wrong unless the answering
    prompt holds `FIX`), with the reflection model taken from the task model; then
    `check_three_phases`. `config` goes to `job_config` (topology, team_size, ...)."""
    for name in REFLECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "job"
    team = TeamModel(sample_problems(), wrong=frozenset(wrong), fixed_by=FIX, job_dir=out)
    model = ReflectingModel(team)
    server = scripted(model)
    summary = asyncio.run(run_job(job_config(server.base_url, out, method=method,
                                             budget=budget, **config)))
    assert not server.script_errors, server.script_errors[0]
    job = MethodJob(out=out, budget=budget, splits=sample_splits(), team=team, model=model,
                    summary=summary)
    check_three_phases(job)
    return job


def check_three_phases(job: MethodJob) -> None:
    """What every finished job must hold, whatever the method found:
    - budget: `rollouts.jsonl` has one line per charged rollout, as many as `ledger.json`, the
      history and the summary say were charged, never more than the budget; every team run of
      the optimize phase (sampled, so temperature != 0) is one of them;
    - rollouts only on train/validation rows; test rows reach the model only once
      `selection.json` exists, and no other row is sent after it (but validation rows for
      the learning curve, `--curve`, which is scored after the seal);
    - `selection.json` follows the validation records and the rule (strictly better);
    - `result.json`, `test.json` and the summary agree with the test records;
    - the learning curve's rule for the method (`lcb.optimize.curves.RULES`) reads the method's
      final incumbent from its history, so the curve's points are the method's own choices."""
    out, budget, splits, summary = job.out, job.budget, job.splits, job.summary
    assert summary["status"] == "complete", summary
    assert summary["phases_run"] in (["optimize", "validate", "test"],
                                     ["optimize", "validate", "test", "curve"])
    cell = TeamCell(summary["topology"], summary["team_size"])
    seed = seed_bundle(cell.topology, cell.roles)

    # optimize: the budget, line by line
    ledger = json.loads((out / "ledger.json").read_text())
    log_file = out / ROLLOUT_LOG  # absent when nothing was charged
    logged = [json.loads(line) for line in log_file.read_text().splitlines()] \
        if log_file.exists() else []
    assert ledger["total"] == budget
    charged_lines = [line for line in logged if not line["free"]]
    assert len(charged_lines) == ledger["charged"] == summary["charged"] <= budget
    assert len(logged) - len(charged_lines) == ledger["free"]  # coalitions that sent nothing
    assert all(0 < line["charged"] <= budget for line in charged_lines)
    assert all(line["reused"] is not None for line in logged if line["free"])
    assert (ledger["infra_failures"], ledger["abandoned"]) == (0, 0)
    history = read_history(out)
    charged = [entry.charged for entry in history]
    assert charged == sorted(charged) and charged[-1] == ledger["charged"]
    assert history[0].bundle == seed and history[-1].kind == "final"
    assert [entry.kind for entry in history].count("final") == 1
    optimizable = set(splits.train) | set(splits.validation)
    assert {line["id"] for line in logged} <= optimizable
    team_runs = [r for r in job.model.team_requests
                 if job.team.problem_of(_without_demos(r)) is not None]
    sampled = [r for r in team_runs if r.get("temperature") != 0.0]
    sent = [line["n_llm_calls"] - (line["reused"] or {"calls": 0})["calls"] for line in logged]
    assert len(sampled) == sum(sent) > 0  # a coalition's reused calls were never sent

    # validate, then the seal, then test
    test_ids = set(splits.test)
    sent_test = [sealed for pid, sealed in job.team.seen if pid in test_ids]
    assert sent_test and all(sent_test), "a test row reached the model before the seal"
    after = set(splits.validation) if "curve" in summary["phases_run"] else set()
    assert not any(sealed for pid, sealed in job.team.seen if pid not in test_ids | after)
    assert {pid for pid, _ in job.team.seen} <= optimizable | test_ids
    selection = read_selection(out)
    incumbent = history[-1].bundle
    val_seed = read_evaluations(out, phase="validate", label="seed")
    same = bundle_hash(incumbent) == bundle_hash(seed)
    val_inc = val_seed if same else read_evaluations(out, phase="validate", label="incumbent")
    assert list(val_seed) and set(val_seed) == set(val_inc) == set(splits.validation)

    def rate(records: Mapping[str, Mapping[str, Any]]) -> float:
        return sum(int(r["em"]) for r in records.values()) / len(records)

    assert (selection.seed_score, selection.incumbent_score, selection.n_items) == (
        rate(val_seed), rate(val_inc), len(splits.validation))
    assert (selection.seed_hash, selection.incumbent_hash) == (bundle_hash(seed),
                                                               bundle_hash(incumbent))
    ruled = curve_incumbent(history[:-1], method=summary["method"])
    assert (ruled.bundle if ruled else seed) == incumbent, (summary["method"], ruled)
    better = not same and selection.incumbent_score > selection.seed_score
    assert selection.deployed == ("incumbent" if better else "seed")
    assert selection.deployed_bundle == (incumbent if better else seed)
    test_seed = read_evaluations(out, phase="test", label="seed")
    test_dep = read_evaluations(out, phase="test", label="deployed") if better else test_seed
    assert set(test_seed) == set(test_dep) == test_ids
    assert {r["bundle"] for r in test_seed.values()} == {"seed"}
    assert {r["bundle"] for r in test_dep.values()} == {"deployed" if better else "seed"}
    selection_time = (out / "selection.json").stat().st_mtime_ns
    test_files = (out / "evals").glob("test_*.jsonl")
    assert all(selection_time <= path.stat().st_mtime_ns for path in test_files)

    result = read_model(out / "result.json", JobResult)
    assert result.deployed_label == selection.deployed
    assert [(i.id, i.baseline, i.deployed) for i in result.items] == [
        (pid, int(test_seed[pid]["em"]), int(test_dep[pid]["em"])) for pid in splits.test]
    assert (result.baseline, result.deployed) == (rate(test_seed), rate(test_dep))
    assert abs(result.delta_points - 100 * (result.deployed - result.baseline)) < 1e-9
    assert summary["result"] == {"baseline": result.baseline, "deployed": result.deployed,
                                 "delta_points": result.delta_points, "n": len(splits.test)}
    report = read_model(out / "test.json", TestReport)
    assert (report.seed.bundle_hash, report.deployed.bundle_hash) == (
        bundle_hash(seed), bundle_hash(selection.deployed_bundle))
    assert (report.seed.passed, report.deployed.passed) == (
        sum(i.baseline for i in result.items), sum(i.deployed for i in result.items))

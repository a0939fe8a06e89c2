"""The planted-improvement harness: does a method find a fix that is there, and only then?

The scenario (`run_planted`): a whole optimizer job (optimize -> validate -> test) on the sample
set through the scripted server, the real team, grader and protocol. The task model gets the
`WRONG` rows wrong unless the request it answers holds the planted instruction `FIX` (every
request an agent sends carries its system prompt, so a role prompt holding `FIX` flips those
rows to passing). The seed prompts lack it. Uncharged calls are answered by *responders*: a
responder reads one request's text and returns an answer, or None when the request is not its
format. The default ones propose `FIX`:
- `marked_responder` (our reflection prompts, `lcb.optimize.methods.reflection`): the current
  prompt plus `FIX`, but only when the prompt shows a failure ("not solved"); otherwise the
  current prompt unchanged. A method that never shows the reflector a failure cannot find it.
- `dspy_responder` (DSPy's proposal prompts, MIPRO): every requested field, with `FIX` added to
  the proposed instruction; MIPRO must still score and select it.
A new method whose judge / probe / reflection prompts have another format adds its responder
to `RESPONDERS` (or passes `responders=`) and a row to its test's budget table: a few lines.

The control (`control=True`) is the same job where `FIX` changes nothing (no prompt helps). The
two checks every method must pass: `assert_fix_deployed` (the deployed bundle holds `FIX` in the
answering role, validation strictly better, within the budget) and `assert_seed_kept` (the
method's own incumbent is the seed, and so is the deployed bundle: nothing was better).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcb.optimize.artifacts import JobResult, read_history, read_model, read_selection
from lcb.optimize.job import run_job
from lcb.optimize.methods.reflection import BEGIN_MARK, END_MARK
from tests.helpers_methods import (
    FIX,
    REFLECTION_ENV,
    MethodJob,
    _without_demos,
    check_three_phases,
    dspy_script,
)
from tests.helpers_optimize import TeamModel, job_config, sample_problems, sample_splits
from tests.scripted_server import message_text

Responder = Callable[[str], str | None]
_CURRENT = re.compile(r"## The current prompt\n(.*?)\n\n## What happened", re.DOTALL)


def marked_responder(text: str) -> str | None:
    if BEGIN_MARK not in text:
        return None
    current = _CURRENT.search(text)
    body = current.group(1).strip() if current else "Solve the problem."
    shown_failure = "not solved" in text
    return f"{BEGIN_MARK}\n{body}\n{FIX if shown_failure else ''}\n{END_MARK}"


def dspy_responder(text: str) -> str | None:
    if "Your output fields are:" not in text:
        return None
    return dspy_script(lambda basic: f"{basic} {FIX}")(text, "")


RESPONDERS: list[Responder] = [marked_responder, dspy_responder]

SPLITS = sample_splits()
# Wrong without the fix: most train rows, two of three validation rows, one test row.
WRONG = frozenset({*SPLITS.train[:6], *SPLITS.validation[:2], SPLITS.test[0]})


@dataclass
class PlantedModel:
    """The scripted server's script: responders first, else the team model."""

    team: TeamModel
    responders: Sequence[Responder]
    uncharged: list[str] = field(default_factory=list)
    team_requests: list[dict] = field(default_factory=list)
    uncharged_texts: list[str] = field(default_factory=list)

    def __call__(self, request: dict) -> object:
        text = message_text(request)
        for responder in self.responders:
            answer = responder(text)
            if answer is not None:
                self.uncharged.append(responder.__name__)
                self.uncharged_texts.append(text)
                return answer
        self.team_requests.append(request)
        return self.team(_without_demos(request))


@dataclass
class PlantedOutcome:
    job: MethodJob
    answering_role: str
    control: bool


def run_planted(scripted: Callable[..., Any], tmp_path: Path, monkeypatch: Any, *, method: str,
                topology: str, budget: int, answering_role: str, control: bool = False,
                team_size: int | None = None, responders: Sequence[Responder] = (),
                settings: dict[str, Any] | None = None) -> PlantedOutcome:
    """One planted (or control) job; `answering_role` is the role whose answer is submitted."""
    for name in REFLECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / f"{method}-{topology}-{'control' if control else 'planted'}"
    team = TeamModel(sample_problems(), wrong=WRONG, fixed_by=None if control else FIX,
                     job_dir=out)
    model = PlantedModel(team, [*responders, *RESPONDERS])
    server = scripted(model)
    config = job_config(server.base_url, out, method=method, budget=budget, topology=topology,
                        team_size=team_size, method_settings=dict(settings or {}), curve=True)
    summary = asyncio.run(run_job(config))
    assert not server.script_errors, server.script_errors[0]
    job = MethodJob(out=out, budget=budget, splits=SPLITS, team=team, model=model,  # type: ignore[arg-type]
                    summary=summary)
    check_three_phases(job)
    check_validation_sealed(model.uncharged_texts)
    check_curve(job)
    return PlantedOutcome(job, answering_role, control)


def check_validation_sealed(asked: Sequence[str]) -> None:
    """No reflect, judge or probe request of the job quotes a validation row's hidden test:
    its input or its expected output, as a failing test's feedback would show them."""
    validation = {p.id: p for p in sample_problems() if p.id in SPLITS.validation}
    quoted = [f"input:\n{test.input[:60]}" for p in validation.values()
              for test in p.private_tests]
    quoted += [f"expected output:\n{test.output[:60]}" for p in validation.values()
               for test in p.private_tests if len(test.output.strip()) >= 8]
    leaks = [q for q in quoted for text in asked if q in text]
    assert not leaks, leaks[:2]


def check_curve(job: MethodJob) -> None:
    """`--curve` drew the method's curve: four budget fractions, the last one the incumbent
    the gate scored, the baseline the seed's validation score."""
    curve = json.loads((job.out / "curve.json").read_text())
    selection = read_selection(job.out)
    assert [p["fraction"] for p in curve["points"]] == [0.1, 0.25, 0.5, 1.0]
    assert curve["seed"] == selection.seed_score
    assert curve["points"][-1]["score"] == selection.incumbent_score
    assert curve["points"][-1]["bundle_hash"] == selection.incumbent_hash


def assert_fix_deployed(outcome: PlantedOutcome) -> None:
    """The fix was found, validated strictly better, deployed, and helps on test."""
    job = outcome.job
    assert job.summary["charged"] <= job.budget
    assert job.model.uncharged, "the method asked the reflection model nothing"
    selection = read_selection(job.out)
    assert selection.deployed == "incumbent", (selection.seed_score, selection.incumbent_score)
    assert FIX in selection.deployed_bundle[outcome.answering_role]
    assert selection.incumbent_score > selection.seed_score
    result = read_model(job.out / "result.json", JobResult)
    assert result.delta_points > 0


def assert_seed_kept(outcome: PlantedOutcome) -> None:
    """No prompt change helps: the method itself keeps the seed (its incumbent, before the
    validate phase's strictly-better rule could hide a wrong choice), so the seed is deployed
    and Δ is 0."""
    job = outcome.job
    history = read_history(job.out)
    assert history[-1].kind == "final" and history[-1].bundle == history[0].bundle
    selection = read_selection(job.out)
    assert selection.deployed == "seed"
    result = read_model(job.out / "result.json", JobResult)
    assert result.delta_points == 0.0

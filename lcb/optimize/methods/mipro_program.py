"""The DSPy side of `mipro`: our team as a DSPy program, the reflection model as a DSPy LM.

Contract:
- `TeamProgram` holds one `dspy.Predict` per role; a predictor's signature instructions are
  the role prompt and its demos are few-shot examples. `bundle()` renders them into the role
  prompt texts (`render_role`, our own format, demos fenced so the bundle validator never
  reads them as prose). `forward(problem_id, question)` runs the whole team on that problem
  through `ctx.rollout` with exactly that bundle at the program's `iteration`, and returns
  `score` (the metric) and `feedback`. Under a DSPy trace (bootstrapping) it adds, for each
  role, what the role's first agent was given and what it answered: the demos' source.
- `TeamRunner` is shared by every copy of the program: the context, the loop bridge, the
  problems by id, and the spend. It validates every bundle before it runs, counts a rollout
  whose (bundle, row, iteration) it has not asked for before as one unit (`units`) and any
  other as a replay, refuses new rollouts while bootstrapping once `bootstrap_cap` units went
  to it (the row scores 0, nothing is charged), and raises `BudgetSpent` when the ledger is
  spent (MIPRO scores such an evaluation 0, so it never wins). Instruction candidates pass
  through `screen`: each is recorded as a proposal; an invalid one is never adopted.
- `ReflectionEngine` is a DSPy engine (`dspy.LM(engine=...)`, the 3.4 custom-model API)
  whose single call is `ctx.reflect`: MIPRO's proposal calls never reach a live endpoint of
  their own. A reply without DSPy's field markers is wrapped as the one requested field.
- MIPRO's search itself (`dspy.MIPROv2` with our hooks) is in `mipro_search`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import dspy
from dspy.lm15 import Message, Response

from lcb.data.problems import Problem
from lcb.optimize.bundle import BundleError, bundle_hash
from lcb.optimize.method import LanguageModels, OptimizeContext, ReflectionError, Rollout
from lcb.optimize.methods.reflection import LoopBridge, first_and_last
from lcb.text import clip

log = logging.getLogger(__name__)
ATTR_PREFIX = "role__"
DEMO_INTRO = ("Worked examples: what this role was given and what it answered on other "
              "problems, in runs whose final program passed every hidden test.")
_FENCE = "~~~~~"
_TILDE_LINE = re.compile(r"^[ \t]{0,3}~{3,}", re.MULTILINE)
_OUTPUT_FIELDS = re.compile(r"Your output fields are:\n((?:\d+\. `\w+`.*\n?)+)")
_FIELD_NAME = re.compile(r"\d+\. `(\w+)`")


class BudgetSpent(Exception):
    """The ledger is spent: the running evaluation cannot finish."""


def _fenced(label: str, text: str) -> str:
    safe = _TILDE_LINE.sub(lambda m: "    " + m.group(0), text.strip())
    return f"{_FENCE} {label}\n{safe}\n{_FENCE}"


def render_role(instructions: str, demos: Sequence[Any], *, demo_chars: int) -> str:
    """A role prompt: the instructions, then each demo's task and response, fenced."""
    text = instructions.strip()
    if not demos:
        return text
    blocks = [text, "", DEMO_INTRO]
    for index, demo in enumerate(demos, start=1):
        blocks += ["", f"Example {index}:",
                   _fenced("given", clip(str(demo.get("task", "")), demo_chars)),
                   _fenced("answered", clip(str(demo.get("response", "")), demo_chars))]
    return "\n".join(blocks)


def role_signature(instructions: str) -> type[dspy.Signature]:
    """The signature of every role: `task -> response`, with the role prompt as instructions."""
    return dspy.make_signature(
        {"task": (str, dspy.InputField(desc="what the role is given")),
         "response": (str, dspy.OutputField(desc="what the role answers"))},
        instructions)


class TeamRunner:
    """See the module docstring. Never deep-copied: every program copy shares it."""

    def __init__(self, ctx: OptimizeContext, bridge: LoopBridge, problems: Sequence[Problem],
                 *, demo_chars: int, bootstrap_cap: int) -> None:
        self.ctx, self.bridge, self.demo_chars = ctx, bridge, demo_chars
        self.problems = {p.id: p for p in problems}
        self.rejected: list[str] = []
        self.fatal: BaseException | None = None
        self.bootstrapping, self.bootstrap_cap = True, bootstrap_cap
        self.units = self.bootstrap_units = self.replays = self.skipped = 0
        self._asked: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> TeamRunner:
        return self

    def rollout(self, bundle: Mapping[str, str], problem_id: str, *,
                iteration: int) -> Rollout | None:
        """One rollout of `bundle` (validated first); None when nothing came back (the
        bootstrap cap, or infrastructure); raises `BudgetSpent`."""
        try:
            checked = self.ctx.validate(bundle)
        except BundleError as err:
            self._fail(err)
            raise
        key = (bundle_hash(checked), problem_id, iteration)
        with self._lock:
            fresh = key not in self._asked
            if fresh and self.bootstrapping and self.bootstrap_units >= self.bootstrap_cap:
                self.skipped += 1
                return None
        try:
            result = self.bridge.run(self.ctx.rollout(checked, self.problems[problem_id],
                                                      iteration=iteration))
        except Exception as err:  # DSPy would score it 0 and go on: keep it, end the search
            self._fail(err)
            raise
        if result is None:
            if self.ctx.ledger.available == 0:
                raise BudgetSpent("the rollout budget is spent")
            return None
        with self._lock:
            if key in self._asked:
                self.replays += 1
            else:
                self._asked.add(key)
                self.units += 1
                self.bootstrap_units += self.bootstrapping
        return result

    def _fail(self, err: BaseException) -> None:
        with self._lock:
            self.fatal = self.fatal or err

    def screen(self, texts: Mapping[str, str], role: str, candidates: list[str]) -> list[str]:
        """`candidates` for `role` with every invalid one replaced by the first (current);
        each proposed one (all but the first) is recorded as a proposal."""
        kept, parent = [candidates[0]], bundle_hash(self.ctx.seed_bundle)
        for text in candidates[1:]:
            proposed = {**texts, role: text}
            try:
                proposed = self.ctx.validate(proposed)
                verdict: dict[str, Any] = {"accepted": True}
            except BundleError as err:
                self.rejected.append(f"{role}: {err}")
                log.warning("mipro: instruction for role %r rejected: %s", role, err)
                verdict = {"accepted": False, "rejected_by": "validator", "reason": str(err)}
            kept.append(proposed[role] if verdict["accepted"] else candidates[0])
            self.bridge.call(self.ctx.record_proposal, proposed, parent=parent, roles=[role],
                             iteration=0, **verdict)
        return kept


class TeamProgram(dspy.Module):
    """See the module docstring."""

    def __init__(self, seed_bundle: Mapping[str, str], runner: TeamRunner) -> None:
        super().__init__()
        self.role_names = tuple(seed_bundle)
        self.runner = runner
        self.iteration = 0
        for role, text in seed_bundle.items():
            setattr(self, ATTR_PREFIX + role, dspy.Predict(role_signature(text)))

    def predictor(self, role: str) -> dspy.Predict:
        return getattr(self, ATTR_PREFIX + role)

    def instructions(self) -> dict[str, str]:
        return {role: self.predictor(role).signature.instructions for role in self.role_names}

    def bundle(self) -> dict[str, str]:
        """The role prompts this program runs with (instructions + rendered demos)."""
        return {role: render_role(self.predictor(role).signature.instructions,
                                  self.predictor(role).demos, demo_chars=self.runner.demo_chars)
                for role in self.role_names}

    def forward(self, problem_id: str, question: str = "") -> dspy.Prediction:
        rollout = self.runner.rollout(self.bundle(), problem_id, iteration=self.iteration)
        if rollout is None:  # the bootstrap cap, or infrastructure: not charged, scores 0
            return dspy.Prediction(score=0.0, feedback="not run")
        trace = dspy.settings.trace
        if trace is not None:
            for role in self.role_names:
                pair = first_and_last(rollout.team.transcript, role)
                if pair is not None:
                    limit = self.runner.demo_chars
                    trace.append((self.predictor(role), {"task": clip(pair[0], limit)},
                                  dspy.Prediction(response=clip(pair[1], limit))))
        return dspy.Prediction(score=rollout.score, feedback=rollout.feedback)


def rollout_metric(_example: Any, prediction: Any, _trace: Any = None) -> float:
    """MIPRO's metric: the rollout's score (1 solved, 0 not)."""
    return float(prediction.score)


class ReflectionEngine:
    """A DSPy engine whose one call is `ctx.reflect` (see the module docstring)."""

    def __init__(self, ctx: LanguageModels, bridge: LoopBridge, runner: TeamRunner, *,
                 purpose: str = "mipro:propose") -> None:
        self.ctx, self.bridge, self.runner, self.purpose = ctx, bridge, runner, purpose

    def complete(self, request: Any) -> Response:
        prompt = flatten_request(request)
        try:
            reply = self.bridge.run(self.ctx.reflect(prompt, purpose=self.purpose))
        except ReflectionError as err:
            self.runner._fail(err)
            raise
        return Response(id=None, model="lcb-reflection",
                        message=Message.assistant(with_field_markers(reply, prompt)),
                        finish_reason="stop", usage=_empty_usage())

    def stream(self, request: Any) -> Any:
        raise NotImplementedError("the reflection engine does not stream")

    def close(self) -> None:
        return None


def _empty_usage() -> Any:
    from dspy._vendor.lm15.types import Usage  # ctx.reflect records the real usage

    return Usage()


def flatten_request(request: Any) -> str:
    """One prompt text from a DSPy request: the system text, then each message's text."""
    parts = []
    if request.system:
        system = request.system
        parts.append(system if isinstance(system, str)
                     else "\n".join(getattr(p, "text", "") for p in system))
    for message in request.messages:
        text = "\n".join(getattr(part, "text", "") for part in message.parts)
        parts.append(text if len(request.messages) == 1 else f"[{message.role}]\n{text}")
    return "\n\n".join(p for p in parts if p)


def with_field_markers(reply: str, prompt: str) -> str:
    """`reply`, wrapped as the single requested output field when it carries no markers."""
    if "[[ ## " in reply:
        return reply
    match = _OUTPUT_FIELDS.search(prompt)
    names = _FIELD_NAME.findall(match.group(1)) if match else []
    if len(names) != 1:
        return reply
    return f"[[ ## {names[0]} ## ]]\n{reply.strip()}\n\n[[ ## completed ## ]]"

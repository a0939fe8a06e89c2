"""The DSPy side of `mipro`: our team as a DSPy program, the reflection model as a DSPy LM.

Contract:
- `TeamProgram` holds one `dspy.Predict` per role; a predictor's signature instructions are
  the role prompt and its demos are few-shot examples. `bundle()` renders them into the role
  prompt texts (`render_role`, our own format, demos fenced so the bundle validator never
  reads them as prose). `forward(problem_id, question)` runs the whole team on that problem
  through `ctx.rollout` with exactly that bundle, and returns `score` (the metric) and
  `feedback`. Under a DSPy trace (bootstrapping) it adds, for each role, what the role's
  first agent was given and what it answered: the (input, output) pairs demos come from.
- `TeamRunner` is shared by every copy of the program: the context, the loop bridge, the
  problems by id. It validates every bundle before it runs and raises `BudgetSpent` when the
  ledger is spent (MIPRO scores such an evaluation 0, so it never wins).
- `ReflectionEngine` is a DSPy engine (`dspy.LM(engine=...)`, the 3.4 custom-model API)
  whose single call is `ctx.reflect`: MIPRO's proposal calls never reach a live endpoint of
  their own. A reply without DSPy's field markers is wrapped as the one requested field.
- `LcbMipro` is `dspy.MIPROv2` with three hooks: instruction candidates are validated (an
  invalid one is replaced by the role's current text, never adopted), every trial's program
  carries its trial number (the rollouts' iteration), and every evaluation is recorded.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import dspy
from dspy.lm15 import Message, Response
from dspy.teleprompt import MIPROv2

from lcb.data.problems import Problem
from lcb.optimize.bundle import BundleError
from lcb.optimize.method import OptimizeContext, ReflectionError, Rollout
from lcb.optimize.methods.reflection import LoopBridge, clip, first_and_last

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
                 *, demo_chars: int) -> None:
        self.ctx, self.bridge, self.demo_chars = ctx, bridge, demo_chars
        self.problems = {p.id: p for p in problems}
        self.rejected: list[str] = []
        self.spent = False
        self.fatal: BaseException | None = None
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict) -> TeamRunner:
        return self

    def rollout(self, bundle: Mapping[str, str], problem_id: str, *, iteration: int) -> Rollout:
        """One charged rollout of `bundle` (validated first); raises `BudgetSpent`."""
        try:
            checked = self.ctx.validate(bundle)
        except BundleError as err:
            self._fail(err)
            raise
        result = self.bridge.run(self.ctx.rollout(checked, self.problems[problem_id],
                                                  iteration=iteration))
        if result is None and self.ctx.ledger.available == 0:
            self.spent = True
            raise BudgetSpent("the rollout budget is spent")
        return result

    def _fail(self, err: BaseException) -> None:
        with self._lock:
            self.fatal = self.fatal or err

    def screen(self, texts: Mapping[str, str], role: str, candidates: list[str]) -> list[str]:
        """`candidates` for `role` with every invalid one replaced by the first (current)."""
        kept = [candidates[0]]
        for text in candidates[1:]:
            try:
                kept.append(self.ctx.validate({**texts, role: text})[role])
            except BundleError as err:
                self.rejected.append(f"{role}: {err}")
                log.warning("mipro: instruction for role %r rejected: %s", role, err)
                kept.append(candidates[0])
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
        if rollout is None:  # infrastructure failed on every try: not charged, scores 0
            return dspy.Prediction(score=0.0, feedback="infrastructure failure")
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

    def __init__(self, ctx: OptimizeContext, bridge: LoopBridge, runner: TeamRunner, *,
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


class LcbMipro(MIPROv2):
    """`dspy.MIPROv2` with our hooks (see the module docstring)."""

    def __init__(self, *, runner: TeamRunner, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runner = runner

    def _propose_instructions(self, program: Any, *args: Any, **kwargs: Any) -> dict:
        candidates = super()._propose_instructions(program, *args, **kwargs)
        texts = program.instructions()
        for index, (name, _) in enumerate(program.named_predictors()):
            role = name.removeprefix(ATTR_PREFIX)
            candidates[index] = self.runner.screen(texts, role, list(candidates[index]))
        return candidates

    def _select_and_insert_instructions_and_demos(self, candidate_program: Any, *args: Any,
                                                  **kwargs: Any) -> Any:
        chosen = super()._select_and_insert_instructions_and_demos(candidate_program, *args,
                                                                   **kwargs)
        candidate_program.iteration = int(kwargs.get("trial_num", args[-1] if args else 0))
        return chosen

    def _optimize_prompt_parameters(self, program: Any, instruction_candidates: Any,
                                    demo_candidates: Any, evaluate: Any, *args: Any,
                                    **kwargs: Any) -> Any:
        recording = RecordingEvaluate(evaluate, self.runner)
        return super()._optimize_prompt_parameters(program, instruction_candidates,
                                                   demo_candidates, recording, *args, **kwargs)


class RecordingEvaluate:
    """Wraps MIPRO's `Evaluate`: each finished evaluation is recorded as a candidate."""

    def __init__(self, evaluate: Any, runner: TeamRunner) -> None:
        self.evaluate, self.runner = evaluate, runner

    def __call__(self, program: Any, *args: Any, **kwargs: Any) -> Any:
        result = self.evaluate(program, *args, **kwargs)
        devset = kwargs.get("devset", args[0] if args else [])
        kind = (kwargs.get("callback_metadata") or {}).get("metric_key", "eval")
        split = "val" if kind == "eval_full" else "val_minibatch"
        outcomes = [float(item[-1]) for item in getattr(result, "results", None) or []]
        score = sum(outcomes) / len(outcomes) if outcomes else float(result.score) / 100.0
        self.runner.bridge.call(
            self.runner.ctx.record_candidate, program.bundle(), scores={split: score},
            note=f"mipro {kind} on {len(devset)} problem(s)", iteration=program.iteration)
        return result

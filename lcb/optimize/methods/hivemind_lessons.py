"""`hivemind`'s lessons: our reflection prompt, its strict LESSONS parser, the prompt they make.

Contract:
- `lessons_prompt(...)` is the reflection request (purpose "hivemind:lessons"): the target
  role, why it was chosen, every role's credit, the role's seed prompt and the lessons it
  already follows, then up to `failures_shown` failures (score < `failure_below`) and
  `successes_shown` successes of the full coalition (grader feedback and, from
  `Rollout.role_io`, the role's first two and last two turns, clipped to `clip_chars`), then
  the request for 1 to `lessons_per_reflection` lessons in a LESSONS block.
- `parse_lessons(reply, limit=...)` reads the last LESSONS block strictly: a missing end marker
  (a truncated reply), a line that is not a "- " bullet, an empty block, more than `limit`
  lessons, a lesson over `MAX_LESSON_CHARS` or holding a code fence raise `LessonsError` (the
  message says why); such a reply is never adopted.
- `with_lessons(text, lessons, cap=...)`: a role's seed prompt + its latest `cap` lessons.
The prompts are ours (not the paper's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from lcb.optimize.method import Rollout
from lcb.text import clip

LESSONS_BEGIN = "=== LESSONS ==="
LESSONS_END = "=== END OF LESSONS ==="
LESSONS_HEADER = "Lessons from earlier attempts (follow them):"
MAX_LESSON_CHARS = 400
TURNS_SHOWN = 4  # per record: the role's first two and last two invocations


class LessonKnobs(Protocol):
    """The settings the prompt reads (`HivemindSettings` has them; read-only)."""

    @property
    def failure_below(self) -> float: ...
    @property
    def failures_shown(self) -> int: ...
    @property
    def successes_shown(self) -> int: ...
    @property
    def clip_chars(self) -> int: ...
    @property
    def lessons_per_reflection(self) -> int: ...


class LessonsError(ValueError):
    """A reflection reply that holds no well-formed LESSONS block (the message says why)."""


def parse_lessons(reply: str, *, limit: int) -> list[str]:
    """The lessons of the last LESSONS block of `reply`: 1 to `limit` lines, each "- text".

    >>> parse_lessons(LESSONS_BEGIN + "\\n- Test n = 1.\\n" + LESSONS_END, limit=3)
    ['Test n = 1.']
    """
    start = reply.rfind(LESSONS_BEGIN)
    if start < 0:
        raise LessonsError(f"no {LESSONS_BEGIN} line")
    body = reply[start + len(LESSONS_BEGIN):]
    end = body.find(LESSONS_END)
    if end < 0:
        raise LessonsError(f"no {LESSONS_END} line after the block (truncated?)")
    lessons = []
    for number, line in enumerate(body[:end].strip().splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if not line.startswith("- ") or not line[2:].strip():
            raise LessonsError(f"line {number} of the block is not a '- ' lesson: {line[:80]!r}")
        lesson = line[2:].strip()
        if len(lesson) > MAX_LESSON_CHARS or "```" in lesson:
            raise LessonsError(f"lesson {len(lessons) + 1} is over {MAX_LESSON_CHARS} "
                               "characters or holds a code fence")
        lessons.append(lesson)
    if not lessons:
        raise LessonsError("the LESSONS block is empty")
    if len(lessons) > limit:
        raise LessonsError(f"{len(lessons)} lessons; at most {limit} per reflection")
    return lessons


def with_lessons(text: str, lessons: Sequence[str], *, cap: int) -> str:
    """A role's seed prompt followed by its latest `cap` lessons (the seed alone if none)."""
    kept = list(lessons)[-cap:]
    if not kept:
        return text
    return text.rstrip() + "\n\n" + LESSONS_HEADER + "\n" + "\n".join(f"- {x}" for x in kept)


_LESSONS_TASK = (
    "You are coaching one member of a team of language-model agents that write Python "
    "programs for competitive-programming problems; a problem counts as solved only when the "
    "team's program passes every hidden test.\n\n"
    "The team's topology is '{topology}'. The member under study is the role '{role}', "
    "chosen because of its {why}. Credit per role (the Shapley value of its agents' "
    "contributions to the team's solve rate, from runs with every subset of agents): "
    "{credit}.\n"
)
_LESSONS_ASK = (
    "## Your task\n"
    "Write 1 to {limit} new lessons for the role '{role}': short, general, actionable rules "
    "that would have prevented the failures above and keep what worked in the successes. Do "
    "not repeat a lesson the role already follows and never mention these particular "
    "problems. Answer with the block below, one lesson per line starting with \"- \", and "
    "nothing after its last line:\n{begin}\n- (a lesson)\n{end}\n"
)


def _turns(run: Rollout, role: str, limit: int) -> str:
    turns = run.role_io.get(role, [])
    if len(turns) > TURNS_SHOWN:
        turns = [*turns[:TURNS_SHOWN // 2], *turns[-(TURNS_SHOWN // 2):]]
    if not turns:
        return f"(the role '{role}' took no turn on this problem)"
    parts = []
    for turn in turns:
        calls = "".join(f"\n[tool call {name}] {clip(str(args), limit // 2)}"
                        for name, args in turn.tool_calls)
        parts.append(f"--- {turn.agent} was given ---\n{clip(turn.input, limit)}\n"
                     f"--- {turn.agent} answered ---\n{clip(turn.output, limit)}{calls}")
    return "\n".join(parts)


def lessons_prompt(*, topology: str, role: str, why: str, credit: Mapping[str, float],
                   seed_text: str, lessons: Sequence[str], runs: Sequence[Rollout],
                   settings: LessonKnobs) -> str:
    """Our reflection prompt: the role's prompt and lessons, then its failures and successes
    in the full coalition (score < `failure_below`: a failure), then the LESSONS request."""
    s = settings
    failures = [r for r in runs if r.score < s.failure_below][:s.failures_shown]
    successes = [r for r in runs if r.score >= s.failure_below][:s.successes_shown]
    shown = ", ".join(f"{name} {value:.3f}" for name, value in credit.items())
    parts = [_LESSONS_TASK.format(topology=topology, role=role, why=why, credit=shown),
             "## The role's prompt\n" + seed_text.strip() + "\n",
             "## Lessons it already follows\n"
             + ("\n".join(f"- {x}" for x in lessons) if lessons else "(none yet)") + "\n"]
    for title, group in (("Failure", failures), ("Success", successes)):
        if not group:
            parts.append(f"## {title}s of the whole team\n(none on this batch)\n")
            continue
        parts.append(f"## {title}s of the whole team")
        for index, run in enumerate(group, start=1):
            feedback = clip(run.feedback, s.clip_chars) or "(all hidden tests passed)"
            parts.append(f"### {title} {index}: problem {run.problem_id} (score "
                         f"{run.score:g})\nGrader feedback:\n{feedback}\n"
                         f"{_turns(run, role, s.clip_chars)}\n")
    parts.append(_LESSONS_ASK.format(limit=s.lessons_per_reflection, role=role,
                                     begin=LESSONS_BEGIN, end=LESSONS_END))
    return "\n".join(parts)

"""`maspob`'s variant pools: our style template, the strict reply parser, one role's pool.

Contract:
- `variants_prompt(...)` asks the reflection model for `k` rewrites of one role's seed text,
  one per style line (`STYLES`, ours, cycled from `offset`), as one JSON object.
- `parse_variants(reply)` is strict (its docstring); a reply it rejects is never used.
- `variant_problem(text, seed_text)` says why a variant cannot enter a pool (an echo of our
  template, too short or too long against the seed text of its role), or None.
- `PoolBuilder.build()` returns one role's pool, variant 0 = the seed text (its docstring).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from lcb.optimize.bundle import BundleError, bundle_hash, thaw, updated
from lcb.optimize.method import Recorder, Uncharged

PURPOSE = "maspob:variants"
GENERATION_HEADER = "## Styles, one per version"
STYLES = (
    "Terse: the same duties in as few words as possible, as short imperative lines.",
    "A numbered procedure the agent follows from reading the task to its final answer.",
    "A checklist of things to verify before answering, after a one-line statement of duty.",
    "Put constraints, limits and edge cases (empty input, extremes, ties) first.",
    "Ask the agent to restate the task and plan in a few sentences before it answers.",
    "Written as a senior engineer briefing a colleague: direct, practical, no filler.",
    "Stress time and memory complexity against the input limits before writing code.",
    "Stress checking the answer against the examples given in the task, line by line.",
    "Stress exact input parsing and output formatting (whitespace, order, precision).",
    "Split into short sections with headings: role, inputs, method, output.",
    "Warn about the most common mistakes in this role and how to avoid each.",
    "Keep the original wording, but reorder it so the most important duty comes first.",
    "Ask for small, verifiable steps and a final self-review of the result.",
    "Emphasise correctness over cleverness: prefer the simplest approach that is fast enough.",
    "Describe how this agent's output will be used by the rest of the team.",
    "Use plain, friendly language with concrete examples of good behaviour.",
    "Emphasise robustness: handle unexpected or malformed input without crashing.",
    "Frame the duties as questions the agent must answer for itself before replying.",
    "Merge the duties into one dense paragraph of precise instructions.",
)
_FENCED = re.compile(r"\A```(?:json)?\n(.*)\n```\Z", re.DOTALL)
# What our request itself says: a variant holding one of these (absent from the seed text)
# echoes the template instead of rewriting the prompt.
PLACEHOLDER = "<version 1>"
_PLACEHOLDER = re.compile(r"<\s*version\b[^>]*>", re.IGNORECASE)
TEMPLATE_MARKERS = ("## The current prompt", "## What to write", GENERATION_HEADER,
                    "## Answer format", '{"variants":')
MIN_SHARE = 0.3  # a variant shorter than this share of the seed text is rejected
MAX_FACTOR, MAX_EXTRA = 4, 2000  # ... and one longer than 4 x the seed text + 2000 chars


class VariantsRejected(ValueError):
    """A reply that is not the requested JSON object (the message says why)."""


def variants_prompt(*, role: str, topology: str, seed_text: str, k: int, offset: int) -> str:
    """Our request for `k` variants of `role`'s prompt, styles from position `offset` on."""
    styles = "\n".join(f"{i + 1}. {STYLES[(offset + i) % len(STYLES)]}" for i in range(k))
    return (
        f"You rewrite the system prompt of one agent in a {topology} team of language-model "
        f"agents that solve competitive-programming problems. The agent holds the role "
        f"'{role}'.\n\n## The current prompt\n{seed_text}\n\n## What to write\n"
        f"Write {k} alternative versions of this prompt. Every version keeps the role's duties "
        f"and any output format the prompt asks for, stays self-contained, and has no "
        f"placeholders. Each follows the style given on its line.\n\n"
        f"{GENERATION_HEADER}\n{styles}\n\n## Answer format\n"
        f'Answer with one JSON object and nothing else: {{"variants": ["{PLACEHOLDER}", ...]}} '
        f"holding exactly {k} strings, in the order of the styles above.")


def parse_variants(reply: str) -> list[str]:
    """The variants of a reply, strictly: the reply is one JSON object `{"variants": [str,
    ...]}` and nothing else (one surrounding ```json fence allowed); all its strings (the
    caller checks the count). Raises `VariantsRejected` otherwise (a truncated reply, prose
    around it, a non-string)."""
    text = reply.strip()
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise VariantsRejected(f"not one JSON object ({err.msg} at char {err.pos})") from None
    except (ValueError, RecursionError):  # an integer too long to convert; nested too deeply
        raise VariantsRejected("not one usable JSON object (too deep or too long)") from None
    if not isinstance(data, dict) or set(data) != {"variants"}:
        raise VariantsRejected('expected an object with the one key "variants"')
    items = data["variants"]
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise VariantsRejected('"variants" must be a list of strings')
    return items


def variant_problem(text: str, seed_text: str) -> str | None:
    """Why `text` cannot be a variant of `seed_text` (an echo of our request's placeholder or
    sections, shorter than `MIN_SHARE` or longer than `MAX_FACTOR` x + `MAX_EXTRA` of the
    seed text's length), or None."""
    echo = _PLACEHOLDER.search(text)
    if echo and not _PLACEHOLDER.search(seed_text):
        return f"echoes the answer template's placeholder {echo.group(0)!r}"
    for marker in TEMPLATE_MARKERS:
        if marker in text and marker not in seed_text:
            return f"echoes the request's template ({marker!r})"
    if len(text) < MIN_SHARE * len(seed_text):
        return (f"too short: {len(text)} chars, under {MIN_SHARE:.0%} of the seed text's "
                f"{len(seed_text)}")
    if len(text) > MAX_FACTOR * len(seed_text) + MAX_EXTRA:
        return (f"too long: {len(text)} chars, over {MAX_FACTOR} x the seed text's "
                f"{len(seed_text)} + {MAX_EXTRA}")
    return None


@dataclass
class PoolBuilder:
    """One role's pool: the seed text, then accepted variants in the order they came.

    Calls ask for at most `per_call` variants each, in turn (purpose `maspob:variants:<role>`).
    A variant is rejected (a proposal, `rejected_by="validator"`) when it repeats the seed or
    an earlier variant, fails `variant_problem` (template echo, length) or `ctx.validate`
    (empty text, open fence, template slot); a rejected reply is recorded once with its
    reason and none of it is used. A reply holding other than `k` strings is also recorded as
    rejected ("reply held N of k", extras dropped), its first `k` strings go on. A round that
    leaves the pool short is followed by one asking for the missing count, `rounds` in all;
    then the pool stays smaller. Accepted variants are kept proposals (no score yet)."""

    ctx: Uncharged
    role: str
    size: int
    per_call: int
    rounds: int
    temperature: float
    records: list[dict[str, Any]] = field(default_factory=list)

    def flush(self, recorder: Recorder) -> None:
        """Record the pool's proposals (held back while pools of several roles are built at
        once, so that the history's order does not depend on which reply came first)."""
        for record in self.records:
            recorder.record_proposal(**record)
        self.records.clear()

    async def build(self) -> list[str]:
        seed = thaw(self.ctx.seed_bundle)
        pool, asked = [seed[self.role]], 0
        for _ in range(self.rounds):
            missing = self.size - len(pool)
            while missing > 0:
                k = min(self.per_call, missing)
                await self._one_call(pool, seed, k=k, offset=asked)
                asked, missing = asked + k, missing - k
        return pool

    async def _one_call(self, pool: list[str], seed: dict[str, str], *, k: int,
                        offset: int) -> None:
        prompt = variants_prompt(role=self.role, topology=self.ctx.topology,
                                 seed_text=seed[self.role], k=k, offset=offset)
        reply = await self.ctx.reflect(prompt, purpose=f"{PURPOSE}:{self.role}",
                                       temperature=self.temperature)
        parent = bundle_hash(seed)
        try:
            texts = parse_variants(reply)
        except VariantsRejected as err:
            self._record(updated(seed, {self.role: reply[:2000]}), parent, accepted=False,
                         reason=f"variants reply rejected: {err}")
            return
        if len(texts) != k:
            extra = f"; {len(texts) - k} extra dropped" if len(texts) > k else ""
            self._record(updated(seed, {self.role: reply[:2000]}), parent, accepted=False,
                         reason=f"variants reply held {len(texts)} of {k}{extra}")
        for text in texts[:k]:
            self._admit(pool, seed, text.strip(), parent)

    def _admit(self, pool: list[str], seed: dict[str, str], text: str, parent: str) -> None:
        bundle = updated(seed, {self.role: text})
        problem = variant_problem(text, pool[0])
        if text in pool:
            reason = "repeats the seed" if text == pool[0] else "repeats an earlier variant"
        elif problem is not None:
            reason = problem
        else:
            try:
                bundle = self.ctx.validate(bundle)
            except BundleError as err:
                reason = str(err)
            else:
                pool.append(bundle[self.role])
                self._record(bundle, parent, accepted=True,
                             reason=f"pool variant {len(pool) - 1} of {self.role}")
                return
        self._record(bundle, parent, accepted=False, reason=reason)

    def _record(self, bundle: dict[str, str], parent: str, *, accepted: bool,
                reason: str) -> None:
        self.records.append({"bundle": bundle, "parent": parent, "roles": [self.role],
                             "accepted": accepted, "reason": reason, "iteration": 0,
                             "rejected_by": None if accepted else "validator"})


"""`tavo`'s update step and gate: the overlay, the per-role rewrite, the merge fallback.

Contract:
- `propose(...)` is the policy update of one round (`tavo:update`, reflect) and returns an
  `Update`: the candidate bundle (None when nothing usable came back), the bundle that was
  proposed (recorded when the round is rejected; None when no bundle was written), why it was
  dropped, and the overlay rules the candidate carries.
- Overlay: a role's prompt is always rebuilt as its base text (the seed's, kept in the state)
  plus the block `OVERLAY_BEGIN` ... `OVERLAY_END` of the rules, so no rule text can cut into
  an earlier block. A rule is dropped (`rule_problem`) when it holds either marker, is longer
  than `RULE_CHARS`, or would make some role invalid (`role_problems`: template slots such as
  `{n}` or `<your ...>`, unclosed fences); fewer than `min_rules` left: no candidate.
- Rewrite: each role's rewrite is checked alone (`role_problems` against its seed text); a
  role whose reply has no closed marked prompt or whose rewrite is invalid keeps the chain's
  text, and the reason is recorded; no role left: no candidate.
- `paired_gate` compares only validation rows where the seed, the best so far and the
  candidate all produced a rollout; none such: the candidate is not adopted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lcb.agents.prompts import placeholders_in
from lcb.optimize.bundle import role_problems
from lcb.optimize.method import Bundle, Uncharged
from lcb.optimize.methods import tavo_prompts as tp
from lcb.optimize.strategies.gates import pair
from lcb.text import clip

if TYPE_CHECKING:
    from lcb.optimize.methods.tavo import TavoSettings

OVERLAY_BEGIN, OVERLAY_END = "[tavo team rules]", "[/tavo team rules]"
RULE_CHARS = 300  # a team rule longer than this is dropped
REPLY_CHARS = 600  # an unusable reply, as shown in the history
EPS = 1e-9  # scores are fractions of the batch: compare them with a hair of slack
Rows = Mapping[str, float | None]  # problem id -> score, None when no rollout came back


# --- merging edits ------------------------------------------------------------------------
def _norm(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".;:,!").strip()


def merge_fallback(edit_sets: Sequence[Mapping[str, Sequence[str]]],
                   caps: Mapping[str, int]) -> tp.Edits:
    """The deterministic merge: items equal after `_norm` (case-folded, whitespace collapsed,
    trailing .;:,! dropped) are one item, shown as first written; its support is the number of
    edit sets naming it. An item both added and removed stays only on the side with more
    support (a tie drops both). Each kind is sorted by support (descending), then first
    appearance, and cut to its cap."""
    found: dict[str, dict[str, list[Any]]] = {kind: {} for kind in tp.EDIT_KINDS}
    order = 0
    for edits in edit_sets:
        for kind in tp.EDIT_KINDS:
            named: dict[str, str] = {}  # this set's items, once each, as first written
            for item in edits.get(kind, ()):
                named.setdefault(_norm(item), item.strip())
            for key, text in named.items():
                if key:
                    found[kind].setdefault(key, [text, 0, order])[1] += 1
                    order += 1
    for key in set(found["add"]) & set(found["remove"]):
        added, removed = found["add"][key][1], found["remove"][key][1]
        if added <= removed:
            del found["add"][key]
        if removed <= added:
            del found["remove"][key]
    return {kind: [text for text, _, _ in sorted(found[kind].values(),
                                                 key=lambda s: (-s[1], s[2]))][:caps[kind]]
            for kind in tp.EDIT_KINDS}


def pick_sources(sources: Sequence[tuple[float, str, tp.Edits]],
                 limit: int) -> list[tuple[str, tp.Edits]]:
    """At most `limit` (label, edits) of `(credit score, label, edits)`: the lowest credit
    first (the agents most in need of a fix; ties by order), shown in their original order."""
    chosen = sorted(sorted(range(len(sources)), key=lambda i: (sources[i][0], i))[:limit])
    return [(sources[i][1], sources[i][2]) for i in chosen]


# --- the overlay --------------------------------------------------------------------------
def overlay_rules(text: str) -> list[str]:
    """The rules of the (last) overlay block in `text` (none: [])."""
    start = text.rfind(OVERLAY_BEGIN)
    stop = text.find(OVERLAY_END, start)
    if start < 0 or stop < 0:
        return []
    body = text[start + len(OVERLAY_BEGIN):stop]
    return [line.strip()[2:].strip() for line in body.splitlines() if line.strip()[:2] == "- "]


def with_overlay(base: str, rules: Sequence[str]) -> str:
    """`base` (a role's text without any block) and then the block of `rules`."""
    block = "\n".join([OVERLAY_BEGIN, *(f"- {rule}" for rule in rules), OVERLAY_END])
    return f"{base.rstrip()}\n\n{block}"


def rule_problem(rule: str, base: Mapping[str, str], seed: Mapping[str, str]) -> str | None:
    """Why `rule` cannot go into the block (None: it can)."""
    folded = rule.casefold()
    if OVERLAY_BEGIN.casefold() in folded or OVERLAY_END.casefold() in folded:
        return "holds an overlay marker"
    if len(rule) > RULE_CHARS:
        return f"longer than {RULE_CHARS} characters"
    problems = [p for role in seed
                for p in role_problems(role, with_overlay(base[role], [rule]), seed[role])]
    return "; ".join(problems) or None


# --- the update ---------------------------------------------------------------------------
@dataclass
class Update:
    """What one policy update produced (see the module docstring)."""

    bundle: Bundle | None
    proposed: Bundle | None = None
    why: str = ""
    rules: list[str] = field(default_factory=list)


async def propose(ctx: Uncharged, settings: TavoSettings, *, chain: Bundle,
                  base: Mapping[str, str], rules: Sequence[str], edits: Mapping[str, tp.Edits],
                  evidence: dict[str, Any]) -> Update:
    """The policy update of one round (`settings.update_mode`): uncharged reflect calls."""
    pooled = [(role, e) for role, e in edits.items() if any(e.values())]
    if not pooled:
        return Update(None, why="no editing instructions for any role")
    if settings.update_mode == "truce_overlay":
        return await _overlay(ctx, settings, base=base, rules=rules, pooled=pooled,
                              evidence=evidence)
    return await _rewrite(ctx, settings, chain=chain, pooled=pooled, evidence=evidence)


async def _overlay(ctx: Uncharged, s: TavoSettings, *, base: Mapping[str, str],
                   rules: Sequence[str], pooled: list[tuple[str, tp.Edits]],
                   evidence: dict[str, Any]) -> Update:
    bounds = (s.min_rules, s.max_rules)
    reply = await ctx.reflect(tp.overlay_prompt(topology=ctx.topology, current_rules=rules,
                                                pooled=pooled, bounds=bounds),
                              purpose="tavo:update", temperature=s.update_temperature)
    written = tp.parse_rules(reply, bounds=bounds)
    if written is None:
        evidence["reply"] = clip(reply, REPLY_CHARS)
        return Update(None, why=f"overlay reply unusable (no marked block of {bounds} rules)")
    proposed = {role: with_overlay(text, written) for role, text in base.items()}
    problems = [(rule, rule_problem(rule, base, ctx.seed_bundle)) for rule in written]
    kept = [rule for rule, problem in problems if problem is None]
    evidence["rules"] = kept
    dropped = [[clip(rule, 200), problem] for rule, problem in problems if problem is not None]
    if dropped:
        evidence["dropped_rules"] = dropped
    if len(kept) < s.min_rules:
        return Update(None, proposed, f"{len(dropped)} of {len(written)} rules dropped; "
                                      f"fewer than {s.min_rules} left")
    return Update({role: with_overlay(text, kept) for role, text in base.items()}, proposed,
                  rules=kept)


async def _rewrite(ctx: Uncharged, s: TavoSettings, *, chain: Bundle,
                   pooled: list[tuple[str, tp.Edits]], evidence: dict[str, Any]) -> Update:
    seed = ctx.seed_bundle
    prompts = [tp.rewrite_prompt(role=role, topology=ctx.topology, current=chain[role], edits=e,
                                 placeholders=sorted(placeholders_in(seed[role])))
               for role, e in pooled]
    replies = await asyncio.gather(*(ctx.reflect(p, purpose="tavo:update",
                                                 temperature=s.update_temperature)
                                     for p in prompts))
    changes: dict[str, str] = {}
    written: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for (role, _), reply in zip(pooled, replies, strict=True):
        text = tp.marked(reply, tp.PROMPT_BEGIN, tp.PROMPT_END)
        if text is None:
            dropped[role] = "no closed marked prompt: " + clip(reply, REPLY_CHARS // 2)
            continue
        written[role] = text
        problems = role_problems(role, text, seed[role])
        if problems:
            dropped[role] = "; ".join(problems)
        else:
            changes[role] = text
    evidence["rewritten"] = sorted(changes)
    if dropped:
        evidence["dropped_roles"] = dropped
    proposed = {**chain, **written} if written else None
    if not changes:
        why = ("no rewrite reply held a closed marked prompt" if not written
               else "every rewritten role was invalid")
        return Update(None, proposed, why)
    return Update({**chain, **changes}, proposed)


# --- the gate -----------------------------------------------------------------------------
def gate(score: float, *, seed: float, best: float, margin: float) -> bool:
    """Adopt a candidate: at least `margin` above the seed and no worse than the best so far."""
    return score >= seed + margin - EPS and score >= best - EPS


def paired_gate(candidate: Rows, *, seed: Rows, best: Rows, margin: float
                ) -> tuple[bool, dict[str, Any]]:
    """The gate over the rows where the seed, the best and the candidate all ran
    (`lcb.optimize.strategies.gates.pair`, in the candidate's row order)."""
    paired = pair(candidate, seed, best)
    numbers: dict[str, Any] = {"paired": len(paired.rows), "margin": margin,
                               "missing": list(paired.missing)}
    if not paired.rows:
        return False, numbers
    numbers.update(score=paired.mean(0), seed=paired.mean(1), best=paired.mean(2))
    return gate(numbers["score"], seed=numbers["seed"], best=numbers["best"],
                margin=margin), numbers

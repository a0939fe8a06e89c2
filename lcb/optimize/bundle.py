"""Prompt bundles: `{role: prompt text}`, the candidate every optimizer searches over.

Contract:
- A bundle is a plain `dict[str, str]` (GEPA's candidate shape). Optimizers receive a read-only
  view (`freeze`) and return a new dict (`updated`, `thaw`): an input bundle is never mutated.
- `bundle_hash(bundle)` is a stable content hash (sha256 of the canonical JSON, 16 hex digits):
  the same roles and texts give the same hash in any process and any key order.
- `validate_bundle(candidate, seed=...)` accepts a proposed bundle only when it keeps exactly the
  seed's roles, every text is a non-empty string, every code fence is closed, the known
  placeholders (`lcb.agents.prompts.PLACEHOLDERS`) of each seed role are kept, and no unknown or
  unfilled template marker is left (`{name}` or `{{name}}` outside code that the seed role did
  not already hold, `<name>`-style slots such as `<new instruction>`, `[INSERT ...]`). It
  raises `BundleError` listing every problem, and returns a fresh, whitespace-trimmed copy.
  The output contract is not part of a bundle (it is appended by the team code), so a bundle
  that tries to carry it is fine but redundant: it is not checked here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from types import MappingProxyType

from lcb.agents.prompts import PLACEHOLDERS, placeholders_in

Bundle = dict[str, str]

_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})", re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_BRACE_SLOT = re.compile(r"\{\{?\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}?\}")
_ANGLE_SLOT = re.compile(r"<\s*(new|current|curr|updated|proposed|your|insert)[ _a-z]*>",
                         re.IGNORECASE)
_BRACKET_SLOT = re.compile(r"\[\s*(INSERT|TODO|PLACEHOLDER|FILL)[^\]]*\]", re.IGNORECASE)


class BundleError(ValueError):
    """A bundle that cannot be used. The message lists every problem, role by role."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid prompt bundle: " + "; ".join(problems))


def freeze(bundle: Mapping[str, str]) -> Mapping[str, str]:
    """A read-only snapshot of `bundle` (a copy: later changes to `bundle` do not show)."""
    return MappingProxyType(dict(bundle))


def thaw(bundle: Mapping[str, str]) -> Bundle:
    """A new, mutable copy of `bundle`."""
    return dict(bundle)


def updated(bundle: Mapping[str, str], changes: Mapping[str, str]) -> Bundle:
    """A new bundle with the texts of `changes` replacing those roles; `bundle` is untouched.

    Raises `BundleError` when `changes` names a role the bundle does not have.
    """
    unknown = sorted(set(changes) - set(bundle))
    if unknown:
        raise BundleError([f"unknown role(s) {unknown}; the bundle has {sorted(bundle)}"])
    return {**bundle, **changes}


def bundle_hash(bundle: Mapping[str, str]) -> str:
    """Stable content hash: 16 hex digits of sha256 over the sorted-key JSON of the bundle."""
    canonical = json.dumps(dict(bundle), sort_keys=True, ensure_ascii=False,
                           separators=(",", ":"))
    # surrogatepass: a proposed prompt may hold a lone surrogate; other text hashes as UTF-8
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def unclosed_fence(text: str) -> bool:
    """True when a ``` or ~~~ code fence is opened and never closed."""
    open_fence: str | None = None
    for match in _FENCE.finditer(text):
        marker = match.group(1)
        if open_fence is None:
            open_fence = marker
        elif marker[0] == open_fence[0] and len(marker) >= len(open_fence):
            open_fence = None
    return open_fence is not None


def _prose(text: str) -> str:
    """`text` without fenced blocks and inline code (where braces are code, not slots)."""
    kept, inside = [], None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if match and (inside is None or match.group(1)[0] == inside):
            inside = None if inside else match.group(1)[0]
            continue
        if inside is None:
            kept.append(_INLINE_CODE.sub("", line))
    return "\n".join(kept)


def template_slots(text: str) -> set[str]:
    """Template markers in the prose of `text`: `{x}`, `{{x}}`, `<new ...>`, `[INSERT ...]`."""
    prose = _prose(text)
    slots = {match.group(0) for match in _BRACE_SLOT.finditer(prose)}
    slots |= {match.group(0) for regex in (_ANGLE_SLOT, _BRACKET_SLOT)
              for match in regex.finditer(prose)}
    return slots


def role_problems(role: str, text: object, seed_text: str) -> list[str]:
    """What is wrong with `text` as the prompt of `role`, whose seed text is `seed_text`."""
    if not isinstance(text, str):
        return [f"{role}: text must be a string, got {type(text).__name__}"]
    if not text.strip():
        return [f"{role}: text is empty"]
    problems = []
    if unclosed_fence(text):
        problems.append(f"{role}: a code fence is opened and never closed (truncated output?)")
    dropped = sorted(placeholders_in(seed_text) - placeholders_in(text))
    if dropped:
        problems.append(f"{role}: placeholder(s) {dropped} of the seed prompt were removed")
    allowed = template_slots(seed_text) | {f"{{{name}}}" for name in placeholders_in(seed_text)}
    stray = sorted(template_slots(text) - allowed)
    if stray:
        known = sorted(PLACEHOLDERS)
        problems.append(f"{role}: unknown or unfilled template marker(s) {stray} (placeholders "
                        f"this role may hold: {sorted(placeholders_in(seed_text)) or 'none'}; "
                        f"known: {known})")
    return problems


def check_bundle(candidate: Mapping[str, object], *, seed: Mapping[str, str]) -> list[str]:
    """Every problem of `candidate` against `seed` (empty when it is valid)."""
    if not isinstance(candidate, Mapping):
        return [f"a bundle must be a mapping of role -> text, got {type(candidate).__name__}"]
    problems = []
    missing, extra = sorted(set(seed) - set(candidate)), sorted(set(candidate) - set(seed))
    if missing:
        problems.append(f"missing role(s) {missing}")
    if extra:
        problems.append(f"unknown role(s) {extra}; the seed has {sorted(seed)}")
    for role in seed:
        if role in candidate:
            problems.extend(role_problems(role, candidate[role], seed[role]))
    return problems


def validate_bundle(candidate: Mapping[str, object], *, seed: Mapping[str, str]) -> Bundle:
    """A trimmed copy of `candidate` in the seed's role order; raises `BundleError` if invalid.

    Example:
        >>> validate_bundle({"solver": " Be careful. "}, seed={"solver": "Solve it."})
        {'solver': 'Be careful.'}
    """
    problems = check_bundle(candidate, seed=seed)
    if problems:
        raise BundleError(problems)
    return {role: str(candidate[role]).strip() for role in seed}

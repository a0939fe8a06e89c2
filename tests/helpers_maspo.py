"""The planted scenario's scripted answers for `maspo` (its own prompt and judge formats): a pure
function of each request's text, shared by its tests and `bench/optimize.py`."""

from __future__ import annotations

import json
import re

from lcb.optimize.methods import maspo_prompts as mp
from tests.helpers_methods import FIX
from tests.helpers_optimize import WRONG_PROGRAM

SMALL = {"minibatch": 4, "steps_per_turn": 1, "max_depth": 1}
PLANTED_BUDGET = 16  # docs/optimizers/maspo.md: minibatch 4, one depth step per role
_CURRENT = re.compile(r"## Current instructions of '[a-z_]+'\n(.*?)\n\n## Samples", re.DOTALL)
_ROLE = re.compile(r"plays the role '([a-z_]+)'")


def _sides(text: str) -> tuple[str, str]:
    """Version A's and B's sections (whole lines: a shown input may hold "### Question:")."""
    versions = text.split("\n## Version A\n", 1)[1].rsplit("\n## Question\n", 1)[0]
    a, b = versions.split("\n## Version B\n", 1)
    return a, b


def _prefer(text: str, token: str) -> str:
    a, b = _sides(text)
    verdict = "tie" if (token in a) == (token in b) else ("A" if token in a else "B")
    return json.dumps({"verdict": verdict, "reason": "the outputs differ"})


def _prefer_fewer(text: str, token: str) -> str:
    a, b = (side.count(token) for side in _sides(text))
    verdict = "tie" if a == b else ("A" if a < b else "B")
    return json.dumps({"verdict": verdict, "reason": "fewer wrong programs"})


def _propose(text: str, token: str, *, roles: tuple[str, ...] | None = None) -> str:
    current = _CURRENT.search(text)
    body = current.group(1).strip() if current else "Solve the problem."
    role = _ROLE.search(text)
    wanted = roles is None or (role is not None and role.group(1) in roles)
    add = token if wanted and "(outcome: FAILED)" in text and token not in body else ""
    return f"{mp.BEGIN}\n{body}\n{add}\n{mp.END}"


def maspo_responder(text: str) -> str | None:
    """The planted harness's answers to maspo's requests (a pure function of the text): a
    proposal adds `FIX` only when a shown sample failed; a judge, shown only inputs and
    outputs, prefers the side that holds fewer wrong programs (`WRONG_PROGRAM`: what the task
    model writes for a planted row without `FIX`), else answers tie."""
    if mp.JUDGE_TITLE in text:
        return _prefer_fewer(text, WRONG_PROGRAM)
    if mp.BEGIN in text and "## Current instructions of" in text:
        return _propose(text, FIX)
    return None

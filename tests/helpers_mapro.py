"""The planted scenario's scripted answers for `mapro` (its mutation and judge formats): a pure
function of each request's text, shared by its tests and `bench/optimize.py`."""

from __future__ import annotations

import json
import re

from lcb.optimize.methods import mapro_prompts as P
from tests.helpers_methods import FIX


def candidate_of(text: str) -> str:
    found = re.search(r"## Candidate prompt[^\n]*\n(.*?)\n## ", text, re.DOTALL)
    return found.group(1) if found else ""


_CURRENT = re.compile(r"## The current prompt\n(.*?)\n\n## What this role did", re.DOTALL)


def mapro_responder(text: str) -> str | None:
    """mapro's prompts in the planted scenario: a mutation adds FIX only when it shows a
    failure; node and edge judges score a candidate prompt holding FIX 9, else 4; blame is
    neutral. A pure function of the request text."""
    if P.BEGIN_MARK in text and "## The current prompt" in text:
        body = _CURRENT.search(text).group(1).strip()
        if "Outcome:\nFAILED" in text and FIX not in body:
            body = f"{body}\n{FIX}"
        return f"{P.BEGIN_MARK}\n{body}\n{P.END_MARK}"
    if '"parent_blame"' in text:
        return '{"parent_blame": 5, "critique": "State the constraints you relied on."}'
    if '{"score"' in text and "## Candidate prompt" in text:
        return json.dumps({"score": 9 if FIX in candidate_of(text) else 4, "reason": "judged"})
    return None

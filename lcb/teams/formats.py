"""Communication formats: the report every agent message must open with, and its checker.

Formats (`--communication`):
- `freeform`: no contract; every message complies.
- `semi_structured`: the message opens with a tagged report, one `[TAG]` per line start, each
  followed by its text (on the same line or the next ones, up to the next tag). Required tags:
  `[STATUS] [SUMMARY] [EVIDENCE_OR_TESTS] [CONFIDENCE] [NEXT]`; optional:
  `[APPROACH] [COMPLEXITY] [EDGE_CASES] [CODE_STATUS]`. Any final program follows the report.
- `structured_soft`: the message opens with a `JSON_REPORT:` line, a JSON object, then a line
  `END_JSON_REPORT`. The object holds `status, summary, confidence, next` and `payload`, an
  object meant for `approach, complexity, edge_cases, tests, code_status`. "Soft": the format
  is asked for in the prompt, not forced by constrained decoding.

Contract:
- `format_contract(fmt)` is the text appended to every role prompt (empty for freeform); it is
  added by code, after the editable prompt, like the output contract.
- `compliance(text, fmt)` checks one message as the agent wrote it, after `<think>` is
  stripped. Leading whitespace is allowed; anything else before the report is not.
  semi_structured: the report is the text before the first code fence; a tag may be wrapped in
  `**` and followed by `:`; every required tag must be present with non-empty text.
  structured_soft: the JSON may sit inside a ```json fence; it must parse to an object with the
  four text keys present and `payload` an object (its keys are not checked).
- `compliance_share(texts, fmt)` is the measured share of compliant messages (None: no messages).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from enum import StrEnum

from lcb.extract import strip_think
from lcb.registry import COMMUNICATIONS

# `CommFormat.FREEFORM`, `.SEMI_STRUCTURED`, `.STRUCTURED_SOFT`: the formats `lcb.registry` names.
CommFormat = StrEnum("CommFormat", {name.upper(): name for name in COMMUNICATIONS},
                     module=__name__)


REQUIRED_TAGS = ("STATUS", "SUMMARY", "EVIDENCE_OR_TESTS", "CONFIDENCE", "NEXT")
OPTIONAL_TAGS = ("APPROACH", "COMPLEXITY", "EDGE_CASES", "CODE_STATUS")
REPORT_KEYS = ("status", "summary", "confidence", "next")
PAYLOAD_KEYS = ("approach", "complexity", "edge_cases", "tests", "code_status")
JSON_OPEN, JSON_CLOSE = "JSON_REPORT:", "END_JSON_REPORT"

_TAG_NAMES = "|".join(REQUIRED_TAGS + OPTIONAL_TAGS)
_TAG_LINE = re.compile(rf"^[ \t]*(?:\*\*)?\[({_TAG_NAMES})\](?:\*\*)?[ \t]*:?(.*)$", re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
_JSON_BLOCK = re.compile(
    rf"\A{re.escape(JSON_OPEN)}[ \t]*\n?(?P<body>.*?)^[ \t]*{JSON_CLOSE}[ \t]*$",
    re.DOTALL | re.MULTILINE,
)
_JSON_FENCE = re.compile(r"\A\s*(?:```|~~~)[a-zA-Z]*[ \t]*\n(?P<inner>.*?)\n[ \t]*(?:```|~~~)\s*\Z",
                         re.DOTALL)

_SEMI_CONTRACT = f"""\
Communication format (set by the harness): begin every message with a tagged report, one tag \
at the start of a line followed by its text:
[STATUS] done, in progress or blocked
[SUMMARY] what you did or found, in one or two sentences
[EVIDENCE_OR_TESTS] the runs, examples or reasoning that back it up
[CONFIDENCE] high, medium or low
[NEXT] what should happen next
You may add {' '.join(f'[{tag}]' for tag in OPTIONAL_TAGS)} lines. Put any program after \
the report."""

_JSON_CONTRACT = f"""\
Communication format (set by the harness): begin every message with a JSON report between \
a line `{JSON_OPEN}` and a line `{JSON_CLOSE}`, holding one JSON object:
{JSON_OPEN}
{{"status": "done | in_progress | blocked", "summary": "...", "confidence": "high | medium | \
low", "next": "...", "payload": {{"approach": "...", "complexity": "...", "edge_cases": \
["..."], "tests": ["..."], "code_status": "none | draft | tested | final"}}}}
{JSON_CLOSE}
Put any program after the report."""

_CONTRACTS = {
    CommFormat.FREEFORM: "",
    CommFormat.SEMI_STRUCTURED: _SEMI_CONTRACT,
    CommFormat.STRUCTURED_SOFT: _JSON_CONTRACT,
}


def parse_format(value: str | CommFormat) -> CommFormat:
    """`value` as a `CommFormat`; ValueError naming the choices for anything else."""
    try:
        return CommFormat(value)
    except ValueError:
        choices = ", ".join(f.value for f in CommFormat)
        raise ValueError(f"unknown communication format {value!r}; choose one of: {choices}") \
            from None


def format_contract(fmt: str | CommFormat) -> str:
    """The contract text for `fmt` (empty for freeform)."""
    return _CONTRACTS[parse_format(fmt)]


def with_format(prompt: str, fmt: str | CommFormat) -> str:
    """`prompt` followed by the format contract (unchanged for freeform)."""
    contract = format_contract(fmt)
    return f"{prompt.rstrip()}\n\n{contract}" if contract else prompt


def _semi_complies(text: str) -> bool:
    fence = _FENCE.search(text)
    report = text[: fence.start()] if fence else text
    tags = list(_TAG_LINE.finditer(report))
    if not tags or tags[0].start() != 0:
        return False
    filled: set[str] = set()
    for tag, following in zip(tags, [*tags[1:], None], strict=True):
        end = following.start() if following else len(report)
        body = tag.group(2) + report[tag.end(): end]
        if body.strip():
            filled.add(tag.group(1))
    return all(tag in filled for tag in REQUIRED_TAGS)


def _json_complies(text: str) -> bool:
    block = _JSON_BLOCK.match(text)
    if block is None:
        return False
    body = block["body"]
    fenced = _JSON_FENCE.match(body)
    try:
        report = json.loads(fenced["inner"] if fenced else body)
    except (ValueError, RecursionError):  # RecursionError: a reply nested too deeply
        return False
    return (isinstance(report, dict) and all(key in report for key in REPORT_KEYS)
            and isinstance(report.get("payload"), dict))


def compliance(text: str, fmt: str | CommFormat) -> bool:
    """Whether `text` (one agent message, as written) opens with `fmt`'s report."""
    fmt = parse_format(fmt)
    if fmt is CommFormat.FREEFORM:
        return True
    body = strip_think(text)
    return _semi_complies(body) if fmt is CommFormat.SEMI_STRUCTURED else _json_complies(body)


def compliance_share(texts: Iterable[str], fmt: str | CommFormat) -> float | None:
    """The share of `texts` that comply with `fmt`; None when there are none."""
    checks = [compliance(text, fmt) for text in texts]
    return sum(checks) / len(checks) if checks else None

"""Communication formats: contract texts and compliance measured on what agents wrote."""

from __future__ import annotations

import json

import pytest

from lcb.teams.formats import (
    JSON_CLOSE,
    JSON_OPEN,
    OPTIONAL_TAGS,
    PAYLOAD_KEYS,
    REPORT_KEYS,
    REQUIRED_TAGS,
    CommFormat,
    compliance,
    compliance_share,
    format_contract,
    parse_format,
    with_format,
)

SEMI, JSON_FMT = CommFormat.SEMI_STRUCTURED, CommFormat.STRUCTURED_SOFT
PROGRAM = "```python\nprint(int(input()) * 2)\n```"
SEMI_REPORT = """[STATUS] done
[SUMMARY] doubled the input
[EVIDENCE_OR_TESTS]
ran the example: 2 -> 4
[CONFIDENCE] high
[NEXT] submit
"""
REPORT = {"status": "done", "summary": "doubled", "confidence": "high", "next": "submit",
          "payload": {"approach": "arithmetic", "tests": ["2 -> 4"]}}


def json_message(report: object = REPORT, *, fence: bool = False) -> str:
    body = json.dumps(report, indent=1)
    if fence:
        body = f"```json\n{body}\n```"
    return f"{JSON_OPEN}\n{body}\n{JSON_CLOSE}\n\nThe program:\n{PROGRAM}"


def test_freeform_has_no_contract_and_everything_complies():
    assert format_contract("freeform") == ""
    assert with_format("Role prompt.", "freeform") == "Role prompt."
    assert compliance("anything at all", "freeform")


def test_contracts_name_every_tag_and_key():
    semi, soft = format_contract(SEMI), format_contract(JSON_FMT)
    assert all(f"[{tag}]" in semi for tag in REQUIRED_TAGS + OPTIONAL_TAGS)
    assert all(f'"{key}"' in soft for key in REPORT_KEYS + PAYLOAD_KEYS + ("payload",))
    assert with_format("Role prompt.\n", SEMI) == f"Role prompt.\n\n{semi}"


@pytest.mark.parametrize("fmt", [SEMI, JSON_FMT])
def test_a_message_shaped_like_the_contract_example_complies(fmt):
    contract = format_contract(fmt)
    if fmt is SEMI:
        example = "\n".join(line for line in contract.splitlines() if line.startswith("["))
    else:
        start = contract.index(f"\n{JSON_OPEN}\n") + 1
        end = contract.index(f"\n{JSON_CLOSE}\n") + len(JSON_CLOSE) + 1
        example = contract[start:end]
    assert compliance(example + "\n" + PROGRAM, fmt)


def test_semi_structured_report_then_program_complies():
    assert compliance(SEMI_REPORT + "\n" + PROGRAM, SEMI)
    assert compliance("<think>plan first</think>\n" + SEMI_REPORT, SEMI)
    optional = "[APPROACH] math\n" + SEMI_REPORT + "[CODE_STATUS] tested\n"
    assert compliance(optional, SEMI)


def test_semi_structured_accepts_bold_tags_with_colons():
    bold = SEMI_REPORT.replace("[STATUS] done", "**[STATUS]**: done")
    assert compliance(bold, SEMI)


@pytest.mark.parametrize("tag", REQUIRED_TAGS)
def test_semi_structured_needs_every_required_tag(tag):
    lines = [line for line in SEMI_REPORT.splitlines() if not line.startswith(f"[{tag}]")]
    if tag == "EVIDENCE_OR_TESTS":
        lines.remove("ran the example: 2 -> 4")
    assert not compliance("\n".join(lines), SEMI)


def test_semi_structured_report_must_come_first():
    assert not compliance("Here is my report.\n" + SEMI_REPORT, SEMI)
    assert not compliance(PROGRAM + "\n" + SEMI_REPORT, SEMI)


def test_semi_structured_tags_need_text():
    assert not compliance(SEMI_REPORT.replace("[NEXT] submit", "[NEXT]   "), SEMI)


def test_semi_structured_tags_inside_code_do_not_count():
    head = "[STATUS] done\n[SUMMARY] s\n"
    tail = "```text\n[EVIDENCE_OR_TESTS] x\n[CONFIDENCE] high\n[NEXT] y\n```"
    assert not compliance(head + tail, SEMI)


def test_structured_soft_report_complies_plain_or_fenced():
    assert compliance(json_message(), JSON_FMT)
    assert compliance(json_message(fence=True), JSON_FMT)
    assert compliance("<think>x</think>" + json_message(), JSON_FMT)


@pytest.mark.parametrize("key", [*REPORT_KEYS, "payload"])
def test_structured_soft_needs_every_key(key):
    report = {k: v for k, v in REPORT.items() if k != key}
    assert not compliance(json_message(report), JSON_FMT)


def test_structured_soft_rejects_bad_payload_bad_json_and_misplaced_blocks():
    assert not compliance(json_message({**REPORT, "payload": "none"}), JSON_FMT)
    assert not compliance(json_message([REPORT]), JSON_FMT)
    broken = json_message().replace('"status"', "status")
    assert not compliance(broken, JSON_FMT)
    assert not compliance("Report below.\n" + json_message(), JSON_FMT)
    assert not compliance(json_message().replace(JSON_CLOSE, ""), JSON_FMT)


def test_formats_do_not_accept_each_other():
    assert not compliance(json_message(), SEMI)
    assert not compliance(SEMI_REPORT, JSON_FMT)


def test_compliance_share_is_measured():
    texts = [SEMI_REPORT, "no report", SEMI_REPORT + PROGRAM, "[STATUS] only"]
    assert compliance_share(texts, SEMI) == 0.5
    assert compliance_share([], SEMI) is None


def test_unknown_format_names_the_choices():
    with pytest.raises(ValueError, match="semi_structured"):
        parse_format("yaml")
    with pytest.raises(ValueError, match="'xml'"):
        compliance("x", "xml")

"""What `lcb score` and `lcb report` take from a line they read: an input line's fields are
carried, never a grade or an agreement; odd values in them never end a command; one unreadable
line of a results file does not stop a report."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from helpers_report import write_results
from typer.testing import CliRunner

from lcb.cli import app
from lcb.data.datasets import load_problems
from lcb.grading import Grade
from lcb.grading.grades import Feedback, TestOutcome
from lcb.grading.verdicts import Verdict
from lcb.runs.records import summarize
from lcb.runs.scoring import (
    RESERVED,
    ScoreConfig,
    _score_one,
    parse_line,
    summarize_scores,
    summary_path,
)

PROBLEM = next(p for p in load_problems("sample").problems if p.id == "lcbs_abc901_a")
FORGED_GRADE = {"pass": 9, "total": 9, "pass_rate": 1.0, "em": 1, "tests_run": 9,
                "verdicts": ["passed"] * 9, "feedback": None, "grader": "official",
                "wall_s": "x", "cpu_s": -1}
FORGED_AGREEMENT = {"official": {**FORGED_GRADE, "em": 1}, "agree": False,
                    "divergence": "atexit_output"}


class WrongEverywhere:
    """A pool whose every grade is a wrong answer at test 0 (nothing runs)."""

    async def grade(self, problem, code, *, grader="default", **_):
        outcome = TestOutcome(index=0, verdict=Verdict.WRONG_ANSWER, wall_s=0.0, cpu_s=0.0)
        feedback = Feedback(test_index=0, verdict=Verdict.WRONG_ANSWER, input="", expected="",
                            actual="0", error="")
        return Grade.from_outcomes((outcome,), total=len(problem.hidden_tests),
                                   feedback=feedback, grader=grader, wall_s=0.0)


def _scored(text: str, grader: str = "default") -> dict:
    prediction = parse_line(text, 1)
    return asyncio.run(_score_one(WrongEverywhere(), prediction, {PROBLEM.id: PROBLEM},
                                  ScoreConfig(grader=grader)))


def test_a_result_line_keeps_no_grade_or_agreement_from_its_input():
    # A results file of `--grader both` scored again with the default grader, or a forged line.
    line = _scored(json.dumps({"id": PROBLEM.id, "code": "print(0)", "tag": "kept",
                               **FORGED_GRADE, **FORGED_AGREEMENT}))
    assert line["tag"] == "kept" and line["code"] == "print(0)"
    assert (line["em"], line["pass"], line["grader"], line["verdicts"]) == (
        0, 0, "default", ["wrong_answer"])
    assert not {"official", "agree", "divergence"} & set(line)
    summary = summarize_scores([line])
    assert "agreement" not in summary and "em_official" not in summary and summary["em"] == 0


def test_an_error_line_keeps_no_grade_or_agreement_from_its_input():
    line = _scored(json.dumps({"id": "no_such_problem", "code": "print(0)",
                               **FORGED_GRADE, **FORGED_AGREEMENT}))
    assert "no_such_problem" in line["error"] and line["em"] == 0 and line["verdicts"] == []
    assert not {"official", "agree", "divergence", "grader", "wall_s"} & set(line)


def test_with_both_graders_the_agreement_is_this_scorings_own():
    line = _scored(json.dumps({"id": PROBLEM.id, "code": "print(0)", **FORGED_AGREEMENT}),
                   grader="both")
    assert line["official"]["verdicts"] == ["wrong_answer"]
    assert (line["agree"], line["divergence"]) == (True, None)


def test_every_key_a_result_line_sets_is_reserved():
    line = _scored(json.dumps({"id": PROBLEM.id, "code": "print(0)"}), grader="both")
    assert set(line) - {"code"} <= RESERVED


ODD_COUNTS = ['"many"', "1e400", "-1e400", "NaN", "-3", "2.5", "true", "[1]", "null",
              "1" + "0" * 30]
ODD_SECONDS = ['"many"', "1e400", "-1e400", "NaN", "-3", "true", "[1]", "null",
               "1" + "0" * 400]  # an int too large for a float


@pytest.mark.parametrize("odd", ODD_COUNTS)
def test_an_odd_count_counts_nothing(odd):
    rows = [parse_line(f'{{"id": "a", "em": 1, "{key}": {odd}}}', 1).fields
            for key in ("prompt_tokens", "completion_tokens", "n_llm_calls", "n_tool_calls")]
    rows.append({"id": "a", "em": 0, "prompt_tokens": 7, "completion_tokens": 2.0})
    summary = summarize(rows, unique=False)
    assert (summary["prompt_tokens"], summary["completion_tokens"]) == (7, 2)
    assert (summary["n_llm_calls"], summary["n_tool_calls"]) == (0, 0)


@pytest.mark.parametrize("odd", ODD_SECONDS)
def test_an_odd_latency_counts_nothing(odd):
    rows = [parse_line(f'{{"id": "a", "em": 1, "latency_s": {odd}}}', 1).fields,
            {"id": "a", "em": 0, "latency_s": 1.5}, {"id": "b", "em": 0, "latency_s": 2}]
    summary = summarize(rows, unique=False)
    assert summary["latency_s"] == 3.5 and math.isfinite(summary["latency_s"])


@pytest.mark.slow
def test_lcb_score_summarizes_lines_with_forged_grades_and_odd_numbers(tmp_path):
    lines = [json.dumps({"id": PROBLEM.id, "code": "print(0)", **FORGED_GRADE,
                         **FORGED_AGREEMENT}),
             f'{{"id": "{PROBLEM.id}", "code": "print(0)", "prompt_tokens": "many", '
             '"latency_s": NaN}',
             f'{{"id": "{PROBLEM.id}", "code": "print(0)", "prompt_tokens": 1e400, '
             '"completion_tokens": 5}']
    pred, out = tmp_path / "pred.jsonl", tmp_path / "results.jsonl"
    pred.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--only", PROBLEM.id,
                                      "--predictions", str(pred), "--out", str(out),
                                      "--jobs", "1"])
    assert result.exit_code == 0, result.output
    summary = json.loads(summary_path(out).read_text())
    assert "agreement" not in summary and "em_official" not in summary
    assert (summary["n"], summary["em"], summary["prompt_tokens"],
            summary["completion_tokens"], summary["latency_s"]) == (3, 0.0, 0, 5, 0.0)
    assert "agreement" not in result.output


def test_lcb_report_leaves_out_an_unreadable_results_line_and_names_it(tmp_path):
    results = write_results(tmp_path / "scores" / "r.jsonl", {"a": 1, "b": 0}, grader="default")
    with results.open("a") as handle:  # a 5000-digit int: more than Python's json reads
        handle.write('{"line": 3, "id": "c", "em": 1, "big": ' + "9" * 5000 + "}\n")
        handle.write("{not json\n")
    result = CliRunner().invoke(app, ["report", str(tmp_path / "scores"), "--out",
                                      str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (condition,) = report["conditions"]
    assert condition["scores"]["n"] == 2
    said = result.stderr.splitlines()
    assert "left out 2 line(s)" in said[0]
    assert f"{results}:3: not a JSON record" in said[1] and "digits" in said[1]
    assert f"{results}:4: not a JSON record" in said[2]


def test_lcb_report_compares_graders_past_a_results_line_with_an_odd_line_number(tmp_path):
    # Two graders' results of one predictions file are compared line by line; a hand-made
    # line whose "line" is not a line number is left out of that comparison, not a traceback.
    predictions = tmp_path / "pred.jsonl"
    predictions.write_text("")
    for grader in ("default", "official"):
        results = write_results(tmp_path / "scores" / f"{grader}.jsonl", {"a": 1, "b": 0},
                                grader=grader, predictions=str(predictions))
        with results.open("a") as handle:
            handle.write('{"line": "x", "id": "c", "em": 1, "difficulty": "easy"}\n')
    result = CliRunner().invoke(app, ["report", str(tmp_path / "scores"), "--out",
                                      str(tmp_path / "out")])
    assert result.exit_code == 0, result.output

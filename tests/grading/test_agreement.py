"""The divergence classifier (`lcb.grading.agreement`), one class per test, and `lcb score
--grader both` end to end.

Programs come from the differential probes (`tests/probes`), each labelled with its class; the
grade records given with them have the shape and the words the graders give (as seen in the
differential suite, whose `test_the_agreement_classifier_names_the_documented_class` runs the
same classifier on the probes' real grades). A rule must need both kinds of evidence: the
program doing the thing, and the verdicts the class predicts, in its direction.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from lcb.grading.agreement import (
    CLASSES,
    PUBLIC_TESTS,
    UNEXPLAINED,
    compare,
    first_failure,
    summarize_agreement,
)
from tests.probes.programs import ALL_PROBES

CODE = {probe.name: probe.code for probe in ALL_PROBES}
PLAIN = "n = int(input())\nprint(sum(map(int, input().split())))\n"


def passed(n: int = 5) -> dict:
    return {"em": 1, "verdicts": ["passed"] * n, "feedback": None}


def failed(verdict: str, error: str = "", *, at: int = 0) -> dict:
    return {"em": 0, "verdicts": ["passed"] * at + [verdict],
            "feedback": {"test_index": at, "verdict": verdict, "error": error, "actual": ""}}


RE_BUFFER = "Runtime Error AttributeError(\"'_io.StringIO' object has no attribute 'buffer'\")"
RE_GUARD = "Runtime Error TypeError(\"'NoneType' object is not callable\")"
WA_EMPTY = "Wrong answer at output_line_idx=0:  != 6"
CASES = [
    ("stdin_buffer", "stdin_buffer", "stdin", passed(), failed("runtime_error", RE_BUFFER)),
    ("global_statement", "top_level_global", "stdin", passed(),
     failed("runtime_error", "Runtime Error NameError(\"name 'total' is not defined\")")),
    ("from_sys_import_stdout", "imported_stdout", "stdin", passed(),
     failed("wrong_answer", WA_EMPTY)),
    ("main_guard_not_last", "main_guard", "stdin", passed(), failed("wrong_answer", WA_EMPTY)),
    ("main_guard_reversed", "main_guard", "stdin", passed(), failed("wrong_answer", WA_EMPTY)),
    ("exit_one_after_output", "exit_code", "stdin", failed("runtime_error", "exit code 1"),
     passed()),
    ("raise_systemexit_message", "exit_code", "stdin", failed("runtime_error", "done\n"),
     passed()),
    ("os_exit_after_flush", "hard_exit", "stdin", passed(), failed(
        "runtime_error", "the grading process exited without a result (exit, crash or signal)")),
    ("open_zero", "open_zero", "stdin", passed(), failed("wrong_answer", "0 != 6")),
    ("uses_getcwd", "reliability_guard", "stdin", passed(), failed("runtime_error", RE_GUARD)),
    ("quit_after_output", "reliability_guard", "stdin", passed(),
     failed("runtime_error", RE_GUARD)),
    ("imports_resource", "reliability_guard", "stdin", passed(), failed(
        "runtime_error", "Error during testing: import of resource halted; None in sys.modules")),
    ("stdout_closed_after_answer", "closed_stdout", "stdin", passed(),
     failed("runtime_error", "Runtime Error TypeError(\"Capturing.__enter__ …\")")),
    ("fd1_closed_after_flush", "closed_stdout", "stdin", passed(),
     failed("runtime_error", "Runtime Error OSError(9, 'Bad file descriptor')", at=1)),
    ("atexit_prints_answer", "atexit_output", "stdin", passed(),
     failed("wrong_answer", WA_EMPTY)),
    ("open_fd1_never_flushed", "open_stdout", "stdin", passed(),
     failed("wrong_answer", WA_EMPTY)),
    ("del_in_a_cycle_prints_answer", "teardown_output", "stdin", passed(),
     failed("wrong_answer", WA_EMPTY)),
    ("thread_still_running", "lingering_thread", "stdin",
     failed("time_limit", "the test ran past its time limit"), passed()),
    ("converts_a_long_integer", "int_digits", "stdin", failed(
        "runtime_error", "ValueError: Exceeds the limit (4300 digits) for integer string "
                         "conversion: value has 4401 digits"), passed()),
    ("always_equal_value", "non_data_return", "functional",
     failed("wrong_answer", "the function returned a tmp_sol.Anything, which is not plain data"),
     passed(4)),
    ("returns_a_numpy_array", "non_data_return", "functional", failed(
        "wrong_answer", "the function returned a numpy.ndarray, which is not plain data"),
     failed("runtime_error", "Runtime Error ValueError('The truth value …')", at=1)),
]


@pytest.mark.parametrize(("probe", "kind", "mode", "default", "official"), CASES,
                         ids=[f"{c[1]}-{c[0]}" for c in CASES])
def test_each_documented_class_is_named_on_its_evidence(probe, kind, mode, default, official):
    assert compare(CODE[probe], mode=mode, default=default, official=official).divergence == kind


def test_every_class_has_a_case_here_or_is_a_fallback():
    covered = {kind for _, kind, *_ in CASES}
    assert set(CLASSES) - covered == {PUBLIC_TESTS, UNEXPLAINED}


# non_data_return's and int_digits' evidence is the default grader's own words (about the
# returned value; Python's refusal to convert a long integer).
BY_PROGRAM = [case for case in CASES if case[1] not in ("non_data_return", "int_digits")]


@pytest.mark.parametrize(("probe", "kind", "mode", "default", "official"), BY_PROGRAM,
                         ids=[f"{c[1]}-{c[0]}" for c in BY_PROGRAM])
def test_the_verdicts_alone_are_not_evidence(probe, kind, mode, default, official):
    # A program that does none of these things, with the same two grades: no class fits.
    assert compare(PLAIN, mode=mode, default=default, official=official).divergence == UNEXPLAINED


@pytest.mark.parametrize(("probe", "kind", "mode", "default", "official"), CASES,
                         ids=[f"{c[1]}-{c[0]}" for c in CASES])
def test_the_program_alone_is_not_evidence(probe, kind, mode, default, official):
    # The same program, the graders' roles swapped: the class predicts the other direction.
    got = compare(CODE[probe], mode=mode, default=official, official=default).divergence
    assert got != kind


def test_agreeing_grades_agree_and_infra_is_not_compared():
    code = CODE["stdin_buffer"]
    same = compare(code, mode="stdin", default=failed("wrong_answer", at=2),
                   official=failed("runtime_error", at=2))
    assert (same.agree, same.divergence) == (True, None)
    lost = failed("infra", "the program's host went away")
    assert compare(code, mode="stdin", default=lost, official=passed()).agree is None
    assert compare(code, mode="stdin", default=passed(), official=lost).agree is None


def test_official_indices_are_shifted_by_the_public_tests():
    # Two public tests run first in the official grader: its test 3 is the default's test 1.
    at_one = compare(PLAIN, mode="stdin", default=failed("wrong_answer", at=1),
                     official=failed("wrong_answer", at=3), n_public=2)
    assert at_one.agree is True
    # Failing on a public test, which the default grader never runs: agrees if the default
    # grader failed too, else it is the public tests' doing.
    both_fail = compare(PLAIN, mode="stdin", default=failed("wrong_answer", at=0),
                        official=failed("wrong_answer", at=1), n_public=2)
    assert both_fail.agree is True
    public = compare(PLAIN, mode="stdin", default=passed(), official=failed("wrong_answer"),
                     n_public=2)
    assert (public.agree, public.divergence) == (False, PUBLIC_TESTS)


# The classes in which the official grader fails a test the default grader passed.
OFFICIAL_FAILS = [case for case in CASES if case[3]["em"] == 1 and case[4]["em"] == 0]
# A public test's failure is explained by the official grader's words, or by no output at all
# where the class loses the output: a plain verdict there is evidence of nothing.
ON_ITS_WORDS = {"stdin_buffer", "top_level_global", "hard_exit", "reliability_guard",
                "imported_stdout", "main_guard", "atexit_output", "open_stdout",
                "teardown_output"}


def _on_public_test(official: dict, **changed: str) -> dict:
    feedback = {**official["feedback"], **changed}
    return {**failed(feedback["verdict"], feedback["error"], at=0),
            "feedback": {**feedback, "test_index": 0}}


@pytest.mark.parametrize(("probe", "kind", "mode", "default", "official"), OFFICIAL_FAILS,
                         ids=[f"{c[1]}-{c[0]}" for c in OFFICIAL_FAILS])
def test_a_public_test_failure_keeps_its_class_only_on_its_own_evidence(
        probe, kind, mode, default, official):
    # The same official failure on the one public test, which the default grader never runs.
    got = compare(CODE[probe], mode=mode, default=default, official=_on_public_test(official),
                  n_public=1)
    assert (got.agree, got.divergence) == (False, kind if kind in ON_ITS_WORDS else PUBLIC_TESTS)


@pytest.mark.parametrize(("probe", "kind", "mode", "default", "official"), OFFICIAL_FAILS,
                         ids=[f"{c[1]}-{c[0]}" for c in OFFICIAL_FAILS])
def test_a_wrong_answer_on_a_public_test_is_public_tests_whatever_the_program_does(
        probe, kind, mode, default, official):
    # The red team's case: a program wrong on the public test only (it printed 0), which
    # merely imports atexit, names sys.stdout or os.getcwd, ...
    wrong = _on_public_test(official, verdict="wrong_answer", actual="0\n",
                            error="Wrong answer at output_line_idx=0: 0 != 15")
    got = compare(CODE[probe], mode=mode, default=default, official=wrong, n_public=1)
    assert (got.agree, got.divergence) == (False, PUBLIC_TESTS)


def test_first_failure_reads_feedback_or_verdicts():
    assert first_failure(passed()) is None
    assert first_failure(failed("wrong_answer", at=3)) == 3
    assert first_failure({"em": 0, "verdicts": ["passed", "time_limit"], "feedback": None}) == 1


def test_the_agreement_block_counts_every_class():
    lines = [{"id": "a", "line": 1, "em": 1, "verdicts": ["passed"], "agree": True,
              "divergence": None, "official": {"em": 1, "verdicts": ["passed"]}},
             {"id": "b", "line": 2, "em": 1, "verdicts": ["passed"], "agree": False,
              "divergence": "stdin_buffer",
              "official": {"em": 0, "verdicts": ["runtime_error"]}},
             {"id": "c", "line": 3, "em": 0, "verdicts": ["infra"], "agree": None,
              "divergence": None, "official": {"em": 1, "verdicts": ["passed"]}},
             {"id": "d", "line": 4, "em": 0, "verdicts": []}]  # graded by one grader only
    block = summarize_agreement(lines)
    assert (block["n"], block["n_agree"], block["rate"], block["same_em_rate"]) == (2, 1, 0.5, 0.5)
    assert block["n_not_compared"] == 1 and list(block["by_class"]) == list(CLASSES)
    assert block["by_class"]["stdin_buffer"] == 1 and sum(block["by_class"].values()) == 1
    assert block["disagreements"] == [{"line": 2, "id": "b", "class": "stdin_buffer",
                                       "default": ["passed"], "official": ["runtime_error"]}]
    assert summarize_agreement(lines[3:]) is None


@pytest.mark.slow
def test_score_with_both_graders_writes_agreement_and_classes(tmp_path):
    from lcb.cli import app
    from lcb.data.samples import reference_solution
    from lcb.runs.scoring import summary_path

    stdin, functional = "lcbs_abc901_a", "lcbs_9001"
    right = reference_solution(stdin)
    lines = [{"id": stdin, "code": right},
             {"id": stdin, "code": "import io, sys\nsys.stdin = io.TextIOWrapper(sys.stdin.buffer)"
                                   "\n" + right},
             {"id": stdin, "code": right + "\nimport sys\nsys.exit(3)\n"},
             {"id": stdin, "code": "print('no')\n"},
             {"id": functional, "code": reference_solution(functional)}]
    pred, out = tmp_path / "pred.jsonl", tmp_path / "results.jsonl"
    pred.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions", str(pred),
                                      "--out", str(out), "--grader", "both", "--jobs", "2"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["grader"] for r in rows] == ["default"] * 5  # the line's grade is the default's
    assert [r["em"] for r in rows] == [1, 1, 0, 0, 1]
    assert [r["official"]["em"] for r in rows] == [1, 0, 1, 0, 1]
    assert [r["agree"] for r in rows] == [True, False, False, True, True]
    assert [r["divergence"] for r in rows] == [None, "stdin_buffer", "exit_code", None, None]
    summary = json.loads(summary_path(out).read_text())
    block = summary["agreement"]
    assert (block["n"], block["n_agree"], block["rate"]) == (5, 3, 0.6)
    assert block["by_class"]["stdin_buffer"] == block["by_class"]["exit_code"] == 1
    assert [d["line"] for d in block["disagreements"]] == [2, 3]
    assert summary["em"] == 0.75 and summary["em_official"] == 0.75
    assert "agreement 60.0%" in result.output and "stdin_buffer 1" in result.output

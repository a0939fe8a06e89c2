"""`lcb score` on the bundled sample set: grades, per-line errors, order, summary, samples,
missing predictions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lcb.cli import app
from lcb.data.samples import reference_solution, sample_ids
from lcb.runs.scoring import parse_line, summarize_scores, summary_path

WRONG = "print('certainly not the answer')\n"


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines),
                    encoding="utf-8")
    return path


def _invoke(tmp_path: Path, lines: list[object], *extra: str):
    pred = _write(tmp_path / "pred.jsonl", lines)
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions", str(pred),
                                      "--out", str(out), "--jobs", "2", *extra])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return rows, json.loads(summary_path(out).read_text()), result


def _score(tmp_path: Path, lines: list[object], *extra: str) -> tuple[list[dict], dict, str]:
    rows, summary, result = _invoke(tmp_path, lines, *extra)
    return rows, summary, result.output


def test_reference_solutions_all_pass_in_input_order(tmp_path):
    ids = sample_ids()
    lines = [{"id": i, "code": reference_solution(i), "sample": n} for n, i in enumerate(ids)]
    rows, summary, printed = _score(tmp_path, lines)
    assert [r["id"] for r in rows] == ids and [r["sample"] for r in rows] == list(range(len(ids)))
    assert all(r["em"] == 1 and r["pass"] == r["total"] > 0 and r["error"] is None for r in rows)
    assert all(r["grader"] == "default" and r["difficulty"] and r["platform"] for r in rows)
    assert summary["em"] == 1.0 and summary["pass_at_k"] == {"1": 1.0}
    assert summary["n"] == summary["n_problems"] == summary["n_extracted"] == len(ids)
    assert (summary["n_missing"], summary["missing_ids"], summary["n_invalid"]) == (0, [], 0)
    assert summary["ci"]["low"] == summary["ci"]["high"] == 1.0
    assert set(summary["by_difficulty"]) <= {"easy", "medium", "hard"}
    assert sum(b["n"] for b in summary["by_platform"].values()) == len(ids)
    assert "pass@1" in printed and "with extracted code" in printed
    assert "line(s) not graded" not in printed


def test_bad_lines_become_error_records_and_others_are_graded(tmp_path):
    good, other = sample_ids()[:2]
    lines = [
        {"id": good, "code": reference_solution(good), "tag": "right"},
        "{not json",
        {"id": "no_such_problem", "code": "print(1)"},
        {"id": good, "tag": "no code"},
        [1, 2],
        {"code": "print(1)"},
        {"id": good, "code": WRONG, "tag": "wrong"},
        {"id": other, "predicted_code": reference_solution(other)},
    ]
    rows, summary, result = _invoke(tmp_path, lines)
    assert [r["line"] for r in rows] == list(range(1, 9))
    errors = {r["line"]: r["error"] for r in rows if r["error"]}
    assert set(errors) == {2, 3, 4, 5, 6}
    assert "line 2" in errors[2] and "JSON" in errors[2]
    assert "no_such_problem" in errors[3] and "line 4" in errors[4] and "code" in errors[4]
    assert "object" in errors[5] and "id" in errors[6]
    assert [r["em"] for r in rows] == [1, 0, 0, 0, 0, 0, 0, 1]
    assert rows[0]["tag"] == "right" and rows[6]["tag"] == "wrong" and rows[6]["feedback"]
    assert summary["n_invalid"] == 4 and summary["n_lines"] == 8
    assert (summary["n"], summary["n_problems"], summary["n_errors"]) == (4, 2, 1)
    assert summary["em"] == pytest.approx((1 / 3 + 1) / 2)
    assert summary["extracted_em"] == pytest.approx((1 / 2 + 1) / 2)
    # Every line that was not graded is named on stderr, with its number and reason.
    said = result.stderr.splitlines()
    assert said[0] == "5 line(s) not graded:"
    assert said[1].startswith("  line 2: not valid JSON")
    assert said[2] == "  line 3: id 'no_such_problem' is not among the selected problems"
    assert said[3] == "  line 4: no program: 'code' must be a non-empty string"
    assert said[4] == "  line 5: expected a JSON object, got list"
    assert said[5] == "  line 6: no 'id' (a question_id)"
    assert len(said) == 6  # no missing problem: the predictions name the selection


def test_a_line_that_is_not_utf8_is_an_error_line_and_the_rest_is_graded(tmp_path):
    first = sample_ids()[0]
    good = json.dumps({"id": first, "code": reference_solution(first)}).encode()
    pred = tmp_path / "pred.jsonl"
    pred.write_bytes(b'{"id": "x", "code": "print(\xff)"}\n' + good + b"\n")
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions", str(pred),
                                      "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    bad, graded = (json.loads(line) for line in out.read_text().splitlines())
    assert bad["line"] == 1 and "line 1: not valid UTF-8" in bad["error"] and bad["em"] == 0
    assert graded["line"] == 2 and graded["em"] == 1


def test_existing_results_are_refused_not_appended_to(tmp_path):
    out = tmp_path / "results.jsonl"
    out.write_text('{"earlier": true}\n')
    first = sample_ids()[0]
    pred = _write(tmp_path / "pred.jsonl", [{"id": first, "code": reference_solution(first)}])
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions", str(pred),
                                      "--out", str(out)])
    assert result.exit_code == 2 and str(out) in result.output
    assert "already holds results" in result.output
    assert out.read_text() == '{"earlier": true}\n'
    assert not summary_path(out).exists()
    out.write_text("")  # an empty file is a fresh start
    rows, summary, _ = _score(tmp_path, [{"id": first, "code": reference_solution(first)}])
    assert [r["em"] for r in rows] == [1] and summary["n_lines"] == 1


def test_official_grader_and_all_tests(tmp_path):
    first, second = sample_ids()[:2]
    lines = [{"id": first, "code": reference_solution(first)}, {"id": second, "code": WRONG}]
    rows, summary, _ = _score(tmp_path, lines, "--grader", "official", "--all-tests")
    assert [r["grader"] for r in rows] == ["official", "official"]
    assert rows[0]["em"] == 1 and rows[1]["em"] == 0
    assert rows[1]["tests_run"] == rows[1]["total"] and summary["grader"] == "official"


def test_missing_official_package_exits_with_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "livecodebench.evaluation", None)
    pred = _write(tmp_path / "pred.jsonl", [{"id": "x", "code": "print(1)"}])
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions", str(pred),
                                      "--out", str(tmp_path / "r.jsonl"), "--grader", "official"])
    assert result.exit_code == 2 and "nvidia-livecodebench" in result.output
    assert not (tmp_path / "r.jsonl").exists()


def test_missing_bubblewrap_exits_with_advice(tmp_path, monkeypatch):
    import lcb.sandbox.launch as launch

    monkeypatch.setattr(launch.shutil, "which", lambda name: None)
    pred = _write(tmp_path / "pred.jsonl", [{"id": "x", "code": "print(1)"}])
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions", str(pred),
                                      "--out", str(tmp_path / "r.jsonl"), "--sandbox", "bwrap"])
    assert result.exit_code == 2 and "bwrap" in result.output
    assert not (tmp_path / "r.jsonl").exists()


def test_parse_line_and_summary_units():
    assert parse_line('{"id": 7, "code": "x"}', 3).id == "7"
    assert parse_line('{"id": true, "code": "x"}', 1).invalid.startswith("line 1")
    assert parse_line('{"id": "a", "code": 5}', 1).code is None
    rows = [{"id": "a", "em": 1, "difficulty": "hard", "platform": "p", "has_code": True},
            {"id": "b", "em": 0, "difficulty": "easy", "platform": "p", "has_code": False},
            {"id": None, "em": 0, "difficulty": None, "error": "line 3: bad"}]
    summary = summarize_scores(rows)
    assert summary["em"] == 0.5 and summary["extracted_em"] == 1.0
    assert list(summary["by_difficulty"]) == ["easy", "hard"] and summary["n_invalid"] == 1
    assert (summary["n_selected"], summary["n_missing"]) == (2, 0)


def test_several_predictions_per_id_are_samples_with_pass_at_k(tmp_path):
    first, second = sample_ids()[:2]
    lines = ([{"id": first, "code": reference_solution(first)}]
             + [{"id": first, "code": WRONG}] * 5 + [{"id": second, "code": WRONG}] * 6)
    rows, summary, printed = _score(tmp_path, lines)
    assert [r["em"] for r in rows] == [1] + [0] * 11
    # first: n=6, c=1: pass@1 = 1/6, pass@5 = 1 - C(5,5)/C(6,5) = 5/6; second: 0 and 0.
    assert summary["pass_at_k"] == {"1": (1 / 6) / 2, "5": (5 / 6) / 2}
    assert summary["em"] == (1 / 6) / 2
    assert (summary["n"], summary["n_problems"], summary["samples_per_problem"]) == (12, 2, 6)
    assert "pass@5 0.417" in printed and "problems" in printed


def test_selected_problems_without_a_prediction_are_named_and_left_out(tmp_path):
    ids = sample_ids()[:8]
    lines = [{"id": ids[0], "code": reference_solution(ids[0])},
             {"id": ids[1], "code": reference_solution(ids[1])}, {"id": ids[1], "code": WRONG}]
    _, summary, result = _invoke(tmp_path, lines, "--limit", "8")
    assert summary["missing_ids"] == ids[2:] and summary["n_missing"] == 6
    assert (summary["n_selected"], summary["n_problems"], summary["n"]) == (8, 2, 3)
    assert summary["em"] == (1 + 1 / 2) / 2 and summary["missing_as_fail"] is False
    named = ", ".join(ids[2:7])
    assert result.stderr.splitlines() == [
        f"6 of 8 selected problem(s) have no prediction: {named} and 1 more; left out of "
        "pass@1 (--missing-as-fail counts them as failures)."]


def test_missing_as_fail_counts_each_missing_problem_as_one_failure(tmp_path):
    ids = sample_ids()[:8]
    lines = [{"id": ids[0], "code": reference_solution(ids[0])},
             {"id": ids[1], "code": reference_solution(ids[1])}, {"id": ids[1], "code": WRONG}]
    rows, summary, result = _invoke(tmp_path, lines, "--limit", "8", "--missing-as-fail")
    assert len(rows) == 3  # the missing problems get no result line
    assert (summary["n"], summary["n_problems"], summary["n_missing"]) == (9, 8, 6)
    assert summary["em"] == (1 + 1 / 2 + 0 * 6) / 8 and summary["n_extracted"] == 3
    assert summary["missing_as_fail"] is True
    assert "; counted as failures (--missing-as-fail)." in result.stderr


def test_run_and_score_summaries_share_one_schema(tmp_path):
    from lcb.runs.records import SUMMARY_KEYS, summarize

    first, second = sample_ids()[:2]
    lines = [{"id": first, "code": reference_solution(first)}, {"id": second, "code": WRONG}]
    rows, scored, _ = _score(tmp_path, lines)
    record_rows = [{**row, "predicted_code": row["code"]} for row in rows]
    run = summarize(record_rows)
    for name in SUMMARY_KEYS:  # every schema key in both, with the same meaning
        assert name in scored and name in run, name
        assert scored[name] == run[name], name
    assert {"n_selected", "n_missing"} <= set(scored)
    assert set(scored["by_difficulty"]["easy"]) == set(run["by_difficulty"]["easy"]) == {
        "n", "n_problems", "solved", "em", "n_truncated"}
    assert "pass@1" not in scored and "with_code" not in scored  # the old score-only names


def test_references_grade_the_bundled_solutions_with_no_predictions_file(tmp_path):
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--references", "--out",
                                      str(out), "--jobs", "2", "--limit", "5"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    summary = json.loads(summary_path(out).read_text())
    assert [r["id"] for r in rows] == sample_ids()[:5]
    assert [r["line"] for r in rows] == list(range(1, 6))
    assert all(r["programs"] == "reference" and r["em"] == 1 and r["error"] is None
               for r in rows)
    assert rows[0]["code"] == reference_solution(rows[0]["id"])
    assert summary["programs"] == "reference" and summary["predictions"] is None
    assert summary["em"] == 1.0 and summary["n"] == 5 and summary["n_missing"] == 0
    assert "reference solutions (NOT model output)" in result.output


def test_a_predictions_file_is_marked_as_such_in_the_summary(tmp_path):
    first = sample_ids()[0]
    rows, summary, _ = _score(tmp_path, [{"id": first, "code": reference_solution(first)}])
    assert summary["programs"] == "predictions" and "programs" not in rows[0]


@pytest.mark.parametrize(("args", "needle"), [
    (["--data", "sample", "--references", "--predictions", "PRED"], "not both"),
    (["--data", "sample"], "--references with --data sample"),
    (["--references"], "add --data sample"),
    (["--references", "--data", "ROWS"], "add --data sample"),
])
def test_references_refuse_a_predictions_file_and_other_data(tmp_path, args, needle):
    pred = _write(tmp_path / "pred.jsonl", [{"id": "x", "code": "print(1)"}])
    rows = _write(tmp_path / "rows.jsonl", [])
    argv = [str(pred) if a == "PRED" else str(rows) if a == "ROWS" else a for a in args]
    out = tmp_path / "r.jsonl"
    result = CliRunner().invoke(app, ["score", *argv, "--out", str(out)])
    assert result.exit_code == 2 and needle in result.output, result.output
    assert "Traceback" not in result.output and not out.exists()


def test_a_report_pairs_no_model_run_with_the_reference_solutions(tmp_path):
    from lcb.report.aggregates import build
    from lcb.report.collect import collect
    from tests.helpers_report import write_results

    write_results(tmp_path / "a_refs.jsonl", {"p": 1, "q": 1}, programs="reference")
    write_results(tmp_path / "b_model.jsonl", {"p": 1, "q": 0}, programs="predictions")
    write_results(tmp_path / "c_model.jsonl", {"p": 0, "q": 0})
    report = build(collect([tmp_path]))
    assert report["baseline"] == "b_model"  # not the first condition, the references
    assert [p["other"] for p in report["flips"]["pairs"]] == ["c_model"]
    assert set(report["flips"]["matrix"]["p"]) == {"a_refs", "b_model", "c_model"}

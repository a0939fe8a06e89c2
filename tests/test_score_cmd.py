"""`lcb score` on the bundled sample set: grades, per-line errors, order, summary."""

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


def _score(tmp_path: Path, lines: list[object], *extra: str) -> tuple[list[dict], dict, str]:
    pred = _write(tmp_path / "pred.jsonl", lines)
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(app, ["score", "--data", "sample", "--predictions", str(pred),
                                      "--out", str(out), "--jobs", "2", *extra])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return rows, json.loads(summary_path(out).read_text()), result.output


def test_reference_solutions_all_pass_in_input_order(tmp_path):
    ids = sample_ids()
    lines = [{"id": i, "code": reference_solution(i), "sample": n} for n, i in enumerate(ids)]
    rows, summary, printed = _score(tmp_path, lines)
    assert [r["id"] for r in rows] == ids and [r["sample"] for r in rows] == list(range(len(ids)))
    assert all(r["em"] == 1 and r["pass"] == r["total"] > 0 and r["error"] is None for r in rows)
    assert all(r["grader"] == "default" and r["difficulty"] and r["platform"] for r in rows)
    assert summary["pass@1"] == 1.0 and summary["with_code"]["n_problems"] == len(ids)
    assert set(summary["by_difficulty"]) <= {"easy", "medium", "hard"}
    assert sum(b["n_predictions"] for b in summary["by_platform"].values()) == len(ids)
    assert "pass@1" in printed and "overall" in printed


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
    rows, summary, _ = _score(tmp_path, lines)
    assert [r["line"] for r in rows] == list(range(1, 9))
    errors = {r["line"]: r["error"] for r in rows if r["error"]}
    assert set(errors) == {2, 3, 4, 5, 6}
    assert "line 2" in errors[2] and "JSON" in errors[2]
    assert "no_such_problem" in errors[3] and "line 4" in errors[4] and "code" in errors[4]
    assert "object" in errors[5] and "id" in errors[6]
    assert [r["em"] for r in rows] == [1, 0, 0, 0, 0, 0, 0, 1]
    assert rows[0]["tag"] == "right" and rows[6]["tag"] == "wrong" and rows[6]["feedback"]
    assert summary["n_invalid"] == 4 and summary["n_lines"] == 8
    assert summary["n_problems"] == 2 and summary["pass@1"] == pytest.approx((1 / 3 + 1) / 2)
    assert summary["with_code"]["pass@1"] == pytest.approx((1 / 2 + 1) / 2)


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
    import lcb.grading.launch as launch

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
    assert summary["pass@1"] == 0.5 and summary["with_code"]["pass@1"] == 1.0
    assert list(summary["by_difficulty"]) == ["easy", "hard"] and summary["n_invalid"] == 1

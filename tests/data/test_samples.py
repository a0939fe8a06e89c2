"""The bundled sample set: provenance, format, coverage, and correctness by the official grader.

The oracle for correctness is LiveCodeBench's own grader (`check_correctness`, which forks and
calls `testing_util.run_test` exactly as LiveCodeBench's evaluation does), run on public then
private tests, the official order.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from lcb.data.problems import Mode, Problem, decode_row, decode_test_cases
from lcb.data.samples import (
    DEMO_IDS,
    SAMPLE_ROWS,
    SOLUTIONS_DIR,
    UnknownSampleError,
    reference_solution,
    sample_ids,
)

ROOT = Path(__file__).resolve().parents[2]
OFFICIAL_TIMEOUT_S = 6


def read_rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


ROWS = read_rows(SAMPLE_ROWS)
PROBLEMS = {problem.id: problem for problem in map(decode_row, ROWS)}


def with_decoded_private(row: dict) -> dict:
    decoded = decode_test_cases(row["private_test_cases"], row_id=row["question_id"],
                                field="private_test_cases")
    return {**row, "private_test_cases": decoded}


def test_rows_file_is_what_the_build_script_writes(tmp_path):
    # Compared after decoding private tests: the zlib bytes may differ across zlib builds,
    # the content may not.
    subprocess.run([sys.executable, str(ROOT / "tools" / "build_samples.py"), "--out",
                    str(tmp_path)], check=True, capture_output=True, cwd=ROOT, timeout=120)
    rebuilt = read_rows(tmp_path / "test.jsonl")
    assert [r["question_id"] for r in rebuilt] == [r["question_id"] for r in ROWS]
    for shipped, fresh in zip(ROWS, rebuilt, strict=True):
        assert list(shipped) == list(fresh), "field order differs"
        assert with_decoded_private(shipped) == with_decoded_private(fresh), (
            f"{shipped['question_id']}: stale rows file; run tools/build_samples.py")


def test_rows_have_the_official_field_formats():
    fields = ["question_title", "question_content", "platform", "question_id", "contest_id",
              "contest_date", "starter_code", "difficulty", "public_test_cases",
              "private_test_cases", "metadata"]
    for row in ROWS:
        assert list(row) == fields
        assert all(isinstance(row[name], str) for name in fields)
        metadata = json.loads(row["metadata"])
        testtype = "functional" if row["starter_code"] else "stdin"
        assert metadata == ({"func_name": metadata["func_name"]} if row["starter_code"] else {})
        assert {case["testtype"] for case in json.loads(row["public_test_cases"])} == {testtype}
        assert not row["private_test_cases"].lstrip().startswith("[")  # encoded, not JSON
        private = with_decoded_private(row)["private_test_cases"]
        assert {case["testtype"] for case in private} == {testtype}


def test_ids_are_unique_ours_and_listed_in_order():
    ids = [row["question_id"] for row in ROWS]
    assert len(ids) >= 14
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"lcbs_[0-9A-Za-z_]+", i) for i in ids)
    assert sample_ids() == ids
    assert sorted(path.stem for path in SOLUTIONS_DIR.glob("*.py")) == sorted(ids)


def test_coverage_of_modes_difficulties_platforms_and_dates():
    problems = PROBLEMS.values()
    modes = Counter(p.mode for p in problems)
    assert min(modes[Mode.STDIN], modes[Mode.FUNCTIONAL]) >= len(PROBLEMS) // 2 - 1
    assert {p.difficulty for p in problems} == {"easy", "medium", "hard"}
    assert {p.platform for p in problems} == {"atcoder", "codeforces", "leetcode"}
    for p in problems:
        assert (p.platform == "leetcode") == (p.mode is Mode.FUNCTIONAL), p.id
        if p.mode is Mode.FUNCTIONAL:
            assert p.starter_code.startswith("class Solution:\n"), p.id
    dates = [datetime.fromisoformat(p.contest_date) for p in problems]
    assert {d.year for d in dates} == {2023, 2024}
    assert len({(d.year, d.month) for d in dates}) >= 6


def test_test_counts_per_problem():
    for p in PROBLEMS.values():
        assert 1 <= len(p.public_tests) <= 2, p.id
        assert 3 <= len(p.private_tests) <= 12, p.id


def starter_arity(starter_code: str) -> int:
    tree = ast.parse(starter_code + "pass\n")
    method = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    return len(method.args.args) - 1  # without self


def test_functional_tests_hold_one_json_value_per_argument():
    functional = [p for p in PROBLEMS.values() if p.mode is Mode.FUNCTIONAL]
    for p in functional:
        for test in p.public_tests + p.private_tests:
            assert not test.input.endswith("\n"), p.id  # a trailing newline breaks LCB parsing
            values = [json.loads(line) for line in test.input.split("\n")]
            assert len(values) == starter_arity(p.starter_code), p.id
            json.loads(test.output)


def all_tests(p: Problem) -> tuple:
    return p.public_tests + p.private_tests


def test_sample_set_holds_cases_that_stress_grading():
    stdin = [t for p in PROBLEMS.values() if p.mode is Mode.STDIN for t in all_tests(p)]
    functional = [(p, t) for p in PROBLEMS.values() if p.mode is Mode.FUNCTIONAL
                  for t in all_tests(p)]
    assert any(re.search(r"\d\.\d*0(\s|$)", t.output) for t in stdin), "decimal trailing zeros"
    assert any(len(t.output.strip().split("\n")) >= 3 for t in stdin), "multi-line output"
    assert any(re.search(r"[^\s] +\n", t.output) for t in stdin), "trailing whitespace"
    assert any(len(t.input.split()) >= 200_000 for t in stdin), "large input"
    assert any(starter_arity(p.starter_code) >= 3 for p, _ in functional), "3+ arguments"
    returned = {type(json.loads(t.output)) for _, t in functional}
    assert {list, bool, str, int} <= returned


def test_demo_problems_are_one_stdin_and_one_functional():
    stdin_demo, functional_demo = (PROBLEMS[i] for i in DEMO_IDS)
    assert stdin_demo.mode is Mode.STDIN and functional_demo.mode is Mode.FUNCTIONAL
    assert stdin_demo.difficulty == functional_demo.difficulty == "easy"


def test_unknown_sample_id_is_a_clear_error():
    with pytest.raises(UnknownSampleError, match=r"'lcbs_nope'.*lcbs_"):
        reference_solution("lcbs_nope")
    with pytest.raises(UnknownSampleError):
        reference_solution("../samples")


def test_reference_solutions_appear_in_no_row_field():
    text_fields = ["question_title", "question_content", "starter_code", "public_test_cases",
                   "metadata"]
    for row in ROWS:
        shown = "\n".join(row[name] for name in text_fields)
        source = reference_solution(row["question_id"])
        distinctive = [line.strip() for line in source.splitlines()
                       if len(line.strip()) >= 20 and line.strip() not in row["starter_code"]]
        assert distinctive, row["question_id"]
        leaked = [line for line in distinctive if line in shown]
        assert not leaked, f"{row['question_id']}: solution lines in the row: {leaked}"


# Runs in a fresh interpreter: importing LiveCodeBench's metrics module changes process-wide
# state (the int-to-str digit limit), which must not leak into other tests. Results go to a
# file because the official grader prints to stdout.
OFFICIAL_SCRIPT = """
import json, sys
from livecodebench.evaluation.compute_code_generation_metrics import check_correctness
jobs = json.load(sys.stdin)
results = [list(check_correctness(job["sample"], job["code"], job["timeout"], debug=False)[0])
           for job in jobs]
with open(sys.argv[1], "w") as handle:
    json.dump(results, handle)
"""


def official_results(jobs: list[tuple[Problem, str]], out: Path) -> list[list]:
    """Per-test results of LiveCodeBench's grader for each (problem, program): True, False or
    a negative error code, for public then private tests (a prefix after the first failure)."""
    payload = []
    for problem, code in jobs:
        tests = all_tests(problem)
        io = {"inputs": [t.input for t in tests], "outputs": [t.output for t in tests],
              "fn_name": problem.fn_name}
        payload.append({"sample": {"input_output": json.dumps(io)}, "code": code,
                        "timeout": OFFICIAL_TIMEOUT_S})
    subprocess.run([sys.executable, "-c", OFFICIAL_SCRIPT, str(out)], input=json.dumps(payload),
                   text=True, check=True, capture_output=True, timeout=600)
    return json.loads(out.read_text())


# (problem, text in the reference solution, replacement that makes it wrong)
WRONG_VARIANTS = [
    ("lcbs_abc901_a", "score >= threshold", "score > threshold"),
    ("lcbs_abc901_b", "(low + high) / 2", "(low + high) // 2"),
    ("lcbs_9901_A", ".strip().lower()", ".strip()"),
    ("lcbs_9902_D", "MOD = 998244353", "MOD = 998244853"),  # only the wrapping count differs
    ("lcbs_9002", 'return "00" not in s and "11" not in s', 'return "00" not in s'),
    ("lcbs_9004", "day - earlier <= k", "day - earlier < k"),
]


def wrong_variant(problem_id: str, old: str, new: str) -> str:
    source = reference_solution(problem_id)
    assert old in source, f"{problem_id}: the wrong variant no longer applies"
    return source.replace(old, new)


@pytest.fixture(scope="module")
def official(tmp_path_factory) -> dict[tuple[str, str], list]:
    """Official results, keyed by (problem id, "reference" or the replaced text)."""
    keys = [(i, "reference") for i in sorted(PROBLEMS)] + [(i, old) for i, old, _ in WRONG_VARIANTS]
    programs = [reference_solution(i) for i in sorted(PROBLEMS)]
    programs += [wrong_variant(*variant) for variant in WRONG_VARIANTS]
    jobs = [(PROBLEMS[key[0]], code) for key, code in zip(keys, programs, strict=True)]
    results = official_results(jobs, tmp_path_factory.mktemp("official") / "results.json")
    return dict(zip(keys, results, strict=True))


@pytest.mark.parametrize("problem_id", sorted(PROBLEMS))
def test_reference_solution_passes_every_test_under_the_official_grader(official, problem_id):
    expected = [True] * len(all_tests(PROBLEMS[problem_id]))
    assert official[problem_id, "reference"] == expected


@pytest.mark.parametrize(("problem_id", "old", "new"), WRONG_VARIANTS)
def test_a_wrong_variant_fails_under_the_official_grader(official, problem_id, old, new):
    results = official[problem_id, old]
    assert results and results[-1] is not True, results

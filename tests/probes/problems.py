"""Small probe problems of our own, two stdin and three functional, with their tests.

Each problem has one public test and several private ones. The differential suite grades every
probe against `public + private` with both graders, so a failing-test index means the same test
in both. Test order is chosen so that wrong programs can fail at different indices.
"""

from __future__ import annotations

import json

from lcb.data.problems import Mode, Problem, Test


def _problem(pid: str, mode: Mode, cases: list[tuple[str, str]], *, fn_name: str | None = None,
             starter: str = "") -> Problem:
    tests = tuple(Test(input=given, output=wanted, mode=mode) for given, wanted in cases)
    return Problem(id=pid, title=pid, statement=f"probe problem {pid}", starter_code=starter,
                   mode=mode, fn_name=fn_name, public_tests=tests[:1], private_tests=tests[1:],
                   difficulty="easy", platform="atcoder" if mode is Mode.STDIN else "leetcode",
                   contest_id="probe", contest_date="2024-01-01T00:00:00")


def _starter(signature: str) -> str:
    return f"class Solution:\n    def {signature}:\n        "


def _args(*values: object) -> str:
    """Functional input: one JSON value per line, no trailing newline."""
    return "\n".join(json.dumps(value) for value in values)


# Sum: first line N, second line N integers; print their sum.
SUM = _problem("probe-sum", Mode.STDIN, [
    ("3\n1 2 3\n", "6\n"),
    ("1\n5\n", "5\n"),
    ("4\n10 20 30 40\n", "100\n"),
    ("5\n-1 -2 -3 -4 -5\n", "-15\n"),
    ("2\n1000000000000 1\n", "1000000000001\n"),
])

# Mean: first line N, second line N integers; print their mean (decimal comparison).
MEAN = _problem("probe-mean", Mode.STDIN, [
    ("2\n1 2\n", "1.5\n"),
    ("4\n1 2 3 4\n", "2.5\n"),
    ("1\n7\n", "7\n"),
    ("3\n1 1 2\n", "1.3333333333\n"),
])

# Count: first line N; print 1..N, one number per line.
COUNT = _problem("probe-count", Mode.STDIN, [
    ("1\n", "1\n"),
    ("3\n", "1\n2\n3\n"),
    ("5\n", "1\n2\n3\n4\n5\n"),
])

# minMax(nums) -> [min, max]
MINMAX = _problem("probe-minmax", Mode.FUNCTIONAL, [
    (_args([3, 1, 2]), "[1, 3]"),
    (_args([5]), "[5, 5]"),
    (_args([4, 4, 9, -2]), "[-2, 9]"),
    (_args([7, 8, 9, 10, 11, 12]), "[7, 12]"),
], fn_name="minMax", starter=_starter("minMax(self, nums: List[int]) -> List[int]"))

# pairUp(nums, k) -> consecutive chunks of length k (the last may be shorter)
PAIRS = _problem("probe-pairs", Mode.FUNCTIONAL, [
    (_args([1, 2, 3, 4], 2), "[[1, 2], [3, 4]]"),
    (_args([1, 2, 3], 2), "[[1, 2], [3]]"),
    (_args([9], 3), "[[9]]"),
    (_args([], 1), "[]"),
], fn_name="pairUp", starter=_starter("pairUp(self, nums: List[int], k: int) -> List[List[int]]"))

# average(nums) -> float, compared with == (exact)
AVERAGE = _problem("probe-average", Mode.FUNCTIONAL, [
    (_args([1, 2]), "1.5"),
    (_args([2, 2]), "2.0"),
    (_args([1, 1, 2]), "1.3333333333333333"),
    (_args([10, 0]), "5"),
], fn_name="average", starter=_starter("average(self, nums: List[int]) -> float"))

PROBLEMS = {p.id: p for p in (SUM, MEAN, COUNT, MINMAX, PAIRS, AVERAGE)}

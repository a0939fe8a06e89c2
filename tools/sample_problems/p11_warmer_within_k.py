"""Warmer Within K Days (LeetCode-style, medium, functional): two arguments, a list return."""

from random import Random

from ._kit import SampleProblem, date, explained, fn_cases

BODY = """\
You are given an integer array temps, where temps[i] is the temperature on day i, and an
integer k.
For each day i, find the smallest d >= 1 such that temps[i + d] > temps[i] and d <= k. If no
such d exists (no strictly warmer day within the next k days), use 0.

Return an array answer of the same length as temps, where answer[i] is the value for day i."""

CONSTRAINTS = """\
1 <= temps.length <= 10^5
-100 <= temps[i] <= 100
1 <= k <= 10^5"""

STARTER = """\
class Solution:
    def warmerWithin(self, temps: List[int], k: int) -> List[int]:
        """


def oracle(temps: list[int], k: int) -> list[int]:
    answer = []
    for i, today in enumerate(temps):
        window = temps[i + 1 : i + 1 + k]
        answer.append(next((d for d, t in enumerate(window, start=1) if t > today), 0))
    return answer


def build() -> SampleProblem:
    rng = Random(1111)
    public = fn_cases(oracle, [([3, 1, 2, 5, 4, 6], 2), ([10, 9, 8], 5)])
    public = (explained(public[0], "Day 0 (3) first warms up on day 3, which is 3 days later, "
                        "more than k = 2, so answer[0] = 0."), public[1])
    arg_lists = [([5], 1), ([1, 2], 1), ([2, 2, 2, 3], 3), ([2, 2, 2, 3], 2),
                 ([rng.randint(-100, 100) for _ in range(50)], 3),
                 ([rng.randint(-5, 5) for _ in range(2000)], 7),
                 ([rng.randint(-100, 100) for _ in range(3000)], 100_000)]
    return SampleProblem(
        id="lcbs_9004", title="Warmer Within K Days", platform="leetcode",
        contest_id="lcbs-weekly-2", contest_date=date("2023-11-12"), difficulty="medium",
        body=BODY, constraints=CONSTRAINTS, public=public,
        private=fn_cases(oracle, arg_lists), starter_code=STARTER, func_name="warmerWithin",
    )

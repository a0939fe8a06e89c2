"""Budget Windows (LeetCode-style, medium, functional): three arguments."""

from bisect import bisect_left, bisect_right
from itertools import accumulate
from random import Random

from ._kit import SampleProblem, date, explained, fn_cases

BODY = """\
You are given an array costs of positive integers and two integers low and high.
A window is a non-empty contiguous subarray of costs. A window fits the budget if the sum of
its elements is at least low and at most high.

Return the number of windows that fit the budget."""

CONSTRAINTS = """\
1 <= costs.length <= 10^5
1 <= costs[i] <= 10^4
1 <= low <= high <= 10^9"""

STARTER = """\
class Solution:
    def countWindows(self, costs: List[int], low: int, high: int) -> int:
        """


def oracle(costs: list[int], low: int, high: int) -> int:
    """Prefix sums are strictly increasing, so each window end is a range of starts."""
    prefix = [0, *accumulate(costs)]
    total = 0
    for end in range(1, len(prefix)):
        first = bisect_left(prefix, prefix[end] - high, 0, end)
        last = bisect_right(prefix, prefix[end] - low, 0, end)
        total += max(0, last - first)
    return total


def build() -> SampleProblem:
    rng = Random(1212)
    public = fn_cases(oracle, [([2, 1, 3, 2], 3, 4)])
    public = (explained(public[0], "Three windows fit: [2,1] and [3] with sum 3, and [1,3] "
                        "with sum 4."),)
    arg_lists = [([5], 5, 5), ([5], 6, 10), ([1, 1, 1, 1], 1, 4), ([1, 1, 1, 1], 10, 20),
                 ([rng.randint(1, 10) for _ in range(60)], 10, 25),
                 ([rng.randint(1, 10**4) for _ in range(5000)], 10**5, 10**6),
                 ([rng.randint(1, 10**4) for _ in range(3000)], 1, 10**9)]
    return SampleProblem(
        id="lcbs_9005", title="Budget Windows", platform="leetcode",
        contest_id="lcbs-biweekly-1", contest_date=date("2024-03-09"), difficulty="medium",
        body=BODY, constraints=CONSTRAINTS, public=public,
        private=fn_cases(oracle, arg_lists), starter_code=STARTER, func_name="countWindows",
    )

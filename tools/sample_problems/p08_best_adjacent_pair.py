"""Best Adjacent Pair (LeetCode-style, easy, functional): the built-in functional demo."""

from random import Random

from ._kit import SampleProblem, date, explained, fn_cases

BODY = """\
You are given an integer array nums of length at least 2.
Return the largest value of nums[i] + nums[i + 1] over all valid indices i."""

CONSTRAINTS = """\
2 <= nums.length <= 1000
-1000 <= nums[i] <= 1000"""

STARTER = """\
class Solution:
    def maxAdjacentSum(self, nums: List[int]) -> int:
        """


def oracle(nums: list[int]) -> int:
    return max(a + b for a, b in zip(nums, nums[1:], strict=False))


def build() -> SampleProblem:
    rng = Random(808)
    public = fn_cases(oracle, [([4, -1, 7, 2, 3],), ([-5, -3],)])
    public = (explained(public[0], "The adjacent pair 7 and 2 has the largest sum, 9."),
              public[1])
    arg_lists = [([0, 0],), ([-1000, -1000, -999],), ([1, 2, 3, 4, 5],), ([5, 4, 3, 2, 1],),
                 ([rng.randint(-1000, 1000) for _ in range(1000)],),
                 ([rng.randint(-50, 50) for _ in range(30)],)]
    return SampleProblem(
        id="lcbs_9001", title="Best Adjacent Pair", platform="leetcode",
        contest_id="lcbs-weekly-1", contest_date=date("2023-06-04"), difficulty="easy",
        body=BODY, constraints=CONSTRAINTS, public=public,
        private=fn_cases(oracle, arg_lists), starter_code=STARTER, func_name="maxAdjacentSum",
    )

"""Alternating Signal (LeetCode-style, easy, functional): a bool return value."""

from random import Random

from ._kit import SampleProblem, date, explained, fn_cases

BODY = """\
A signal is recorded as a string s of the characters '0' and '1'.
The signal is called alternating if no two adjacent characters of s are equal.
Return true if s is alternating, and false otherwise."""

CONSTRAINTS = """\
1 <= s.length <= 10^5
s consists only of the characters '0' and '1'."""

STARTER = """\
class Solution:
    def isAlternating(self, s: str) -> bool:
        """


def oracle(s: str) -> bool:
    return all(s[i] != s[i - 1] for i in range(1, len(s)))


def build() -> SampleProblem:
    rng = Random(909)
    public = fn_cases(oracle, [("0101",), ("0110",)])
    public = (public[0], explained(public[1], "The characters at indices 1 and 2 are both 1."))
    long_good = "10" * 50_000
    arg_lists = [("0",), ("1",), ("00",), ("10",), (long_good,), (long_good[:-1] + "1",),
                 ("".join(rng.choice("01") for _ in range(12)),), ("0101010",)]
    return SampleProblem(
        id="lcbs_9002", title="Alternating Signal", platform="leetcode",
        contest_id="lcbs-weekly-1", contest_date=date("2023-06-04"), difficulty="easy",
        body=BODY, constraints=CONSTRAINTS, public=public,
        private=fn_cases(oracle, arg_lists), starter_code=STARTER, func_name="isAlternating",
    )

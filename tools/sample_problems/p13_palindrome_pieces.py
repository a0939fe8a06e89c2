"""Palindrome Pieces (LeetCode-style, hard, functional): interval DP."""

from functools import cache
from random import Random

from ._kit import SampleProblem, date, explained, fn_cases

BODY = """\
You are given a string s of lowercase English letters and an integer k.
Split s into exactly k non-empty contiguous pieces. Then, in each piece, you may change any
characters to other lowercase letters so that every piece becomes a palindrome.

Return the minimum total number of character changes needed."""

CONSTRAINTS = """\
1 <= k <= s.length <= 200
s consists of lowercase English letters."""

STARTER = """\
class Solution:
    def minChanges(self, s: str, k: int) -> int:
        """


def oracle(s: str, k: int) -> int:
    @cache
    def fix(start: int, end: int) -> int:
        piece = s[start:end]
        return sum(a != b for a, b in zip(piece, reversed(piece), strict=True)) // 2

    @cache
    def best(start: int, pieces: int) -> int:
        if pieces == 1:
            return fix(start, len(s))
        return min(fix(start, end) + best(end, pieces - 1)
                   for end in range(start + 1, len(s) - pieces + 2))

    return best(0, k)


def _word(rng: Random, length: int, letters: str) -> str:
    return "".join(rng.choice(letters) for _ in range(length))


def build() -> SampleProblem:
    rng = Random(1313)
    public = fn_cases(oracle, [("abcab", 2), ("racecar", 1)])
    public = (explained(public[0], "Split into \"a\" and \"bcab\", then change the last "
                        "letter but one of \"bcab\" to get \"bccb\": one change in total."),
              public[1])
    arg_lists = [("z", 1), ("ab", 1), ("ab", 2), ("abcdef", 6), ("abcdef", 1),
                 (_word(rng, 30, "ab"), 4), (_word(rng, 60, "abc"), 7),
                 (_word(rng, 80, "abcdefgh"), 3), (_word(rng, 80, "xy"), 40)]
    return SampleProblem(
        id="lcbs_9006", title="Palindrome Pieces", platform="leetcode",
        contest_id="lcbs-weekly-3", contest_date=date("2024-08-17"), difficulty="hard",
        body=BODY, constraints=CONSTRAINTS, public=public,
        private=fn_cases(oracle, arg_lists), starter_code=STARTER, func_name="minChanges",
    )

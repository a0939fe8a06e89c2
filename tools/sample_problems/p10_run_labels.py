"""Run Labels (LeetCode-style, easy, functional): a string return value."""

from itertools import groupby
from random import Random

from ._kit import SampleProblem, date, explained, fn_cases

BODY = """\
A warehouse labels each shelf with a string s of lowercase English letters. To save space, the
label is shortened as follows: every maximal block of equal consecutive letters is replaced by
the letter followed by the length of the block, except that the length is omitted when the
block has length 1.

Return the shortened label."""

CONSTRAINTS = """\
1 <= s.length <= 10^4
s consists of lowercase English letters."""

STARTER = """\
class Solution:
    def shortenLabel(self, s: str) -> str:
        """


def oracle(s: str) -> str:
    parts = []
    for letter, block in groupby(s):
        size = len(list(block))
        parts.append(letter if size == 1 else f"{letter}{size}")
    return "".join(parts)


def build() -> SampleProblem:
    rng = Random(1010)
    public = fn_cases(oracle, [("aaabccdddd",), ("xyz",)])
    public = (explained(public[0], "The blocks are aaa, b, cc and dddd."), public[1])
    arg_lists = [("a",), ("zzzzzzzzzzzz",), ("abba",), ("q" * 10_000,),
                 ("".join(rng.choice("ab") for _ in range(60)),),
                 ("".join(rng.choice("abc") * rng.randint(1, 15) for _ in range(40)),)]
    return SampleProblem(
        id="lcbs_9003", title="Run Labels", platform="leetcode",
        contest_id="lcbs-weekly-2", contest_date=date("2023-11-12"), difficulty="easy",
        body=BODY, constraints=CONSTRAINTS, public=public,
        private=fn_cases(oracle, arg_lists), starter_code=STARTER, func_name="shortenLabel",
    )

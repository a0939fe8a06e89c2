"""Weighted Bookings (LeetCode-style, hard, functional): a list-of-lists argument."""

from random import Random

from ._kit import SampleProblem, date, explained, fn_cases

BODY = """\
A studio receives booking requests. bookings[i] = [start_i, end_i, pay_i] asks for the studio
during the half-open time interval [start_i, end_i) and pays pay_i if accepted.
Two accepted bookings must not overlap; a booking may start exactly when another one ends.

Return the maximum total pay the studio can earn."""

CONSTRAINTS = """\
1 <= bookings.length <= 5 * 10^4
0 <= start_i < end_i <= 10^9
1 <= pay_i <= 10^4"""

STARTER = """\
class Solution:
    def maxPay(self, bookings: List[List[int]]) -> int:
        """


def oracle(bookings: list[list[int]]) -> int:
    """DP over the sorted distinct time points: best pay using only time before each point."""
    times = sorted({t for start, end, _ in bookings for t in (start, end)})
    index = {t: i for i, t in enumerate(times)}
    ending: list[list[tuple[int, int]]] = [[] for _ in times]
    for start, end, pay in bookings:
        ending[index[end]].append((index[start], pay))
    best = [0] * len(times)
    for i in range(1, len(times)):
        best[i] = max([best[i - 1]] + [best[s] + pay for s, pay in ending[i]])
    return best[-1]


def _random(rng: Random, n: int, horizon: int, longest: int) -> list[list[int]]:
    out = []
    for _ in range(n):
        start = rng.randint(0, horizon - 1)
        out.append([start, min(horizon, start + rng.randint(1, longest)), rng.randint(1, 10**4)])
    return out


def build() -> SampleProblem:
    rng = Random(1414)
    public = fn_cases(oracle, [([[1, 3, 50], [3, 5, 20], [2, 4, 100], [4, 6, 70]],)])
    public = (explained(public[0], "Accept [2,4) and [4,6) for 100 + 70 = 170."),)
    arg_lists = [([[0, 1, 5]],), ([[0, 10, 7], [0, 5, 3], [5, 10, 3]],),
                 ([[0, 10, 5], [0, 5, 3], [5, 10, 3]],), ([[5, 6, 1]] * 4,),
                 (_random(rng, 40, 100, 30),), (_random(rng, 2000, 10**9, 10**6),),
                 (_random(rng, 10_000, 10**6, 500),)]
    return SampleProblem(
        id="lcbs_9007", title="Weighted Bookings", platform="leetcode",
        contest_id="lcbs-weekly-3", contest_date=date("2024-08-17"), difficulty="hard",
        body=BODY, constraints=CONSTRAINTS, public=public,
        private=fn_cases(oracle, arg_lists), starter_code=STARTER, func_name="maxPay",
    )

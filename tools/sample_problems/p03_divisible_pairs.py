"""Divisible Pairs (AtCoder-style, medium, stdin): includes a 2 * 10^5-number input."""

from collections import Counter
from random import Random

from ._kit import SampleProblem, date, explained, lines, stdin_cases

BODY = """\
You are given a sequence of N positive integers A_1, A_2, \\ldots, A_N and a positive
integer K.
Count the pairs of indices (i, j) with 1 \\leq i < j \\leq N such that A_i + A_j is a
multiple of K.

Input

The input is given from Standard Input in the following format:
N K
A_1 A_2 \\ldots A_N

Output

Print the number of such pairs."""

CONSTRAINTS = """\
- 2 \\leq N \\leq 2 \\times 10^5
- 1 \\leq K \\leq 10^9
- 1 \\leq A_i \\leq 10^9
- All input values are integers."""


def oracle(text: str) -> str:
    tokens = [int(token) for token in text.split()]
    k, values = tokens[1], tokens[2:]
    residues = Counter(value % k for value in values)
    total = 0
    for residue, count in residues.items():
        partner = (k - residue) % k
        if partner == residue:
            total += count * (count - 1) // 2
        elif residue < partner:
            total += count * residues.get(partner, 0)
    return f"{total}\n"


def _random(rng: Random, n: int, k: int, top: int) -> str:
    return lines((n, k), [rng.randint(1, top) for _ in range(n)])


def build() -> SampleProblem:
    rng = Random(303)
    example = stdin_cases(oracle, [lines((5, 3), (1, 2, 3, 4, 5))])[0]
    example = explained(example, "The pairs (1, 2), (1, 5), (2, 4) and (4, 5) qualify: "
                        "their sums are 3, 6, 6 and 9.")
    inputs = [
        lines((2, 1), (7, 9)),
        lines((4, 2), (2, 4, 6, 8)),
        lines((3, 10**9), (10**9 - 1, 1, 10**9)),
        _random(rng, 50, 7, 100),
        _random(rng, 3000, 1000, 10**9),
        _random(rng, 200_000, 97, 10**6),  # the large input: 2 * 10^5 numbers
    ]
    return SampleProblem(
        id="lcbs_abc902_c", title="Divisible Pairs", platform="atcoder",
        contest_id="lcbs_abc902", contest_date=date("2023-09-16"), difficulty="medium",
        body=BODY, constraints=CONSTRAINTS, public=(example,),
        private=stdin_cases(oracle, inputs),
    )

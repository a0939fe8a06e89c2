"""Passing Total (AtCoder-style, easy, stdin): the built-in stdin demo problem."""

from random import Random

from ._kit import SampleProblem, date, explained, lines, stdin_cases

BODY = """\
A quiz club held N rounds. In round i, Mia scored A_i points.
Only rounds in which she scored at least P points count toward her season total.
Find her season total.

Input

The input is given from Standard Input in the following format:
N P
A_1 A_2 \\ldots A_N

Output

Print the sum of the A_i that are at least P. Print 0 if no round counts."""

CONSTRAINTS = """\
- 1 \\leq N \\leq 100
- 0 \\leq P \\leq 100
- 0 \\leq A_i \\leq 100
- All input values are integers."""


def oracle(text: str) -> str:
    first, second = text.strip().split("\n")
    threshold = int(first.split()[1])
    return f"{sum(a for a in map(int, second.split()) if a >= threshold)}\n"


def build() -> SampleProblem:
    rng = Random(101)
    example = explained(stdin_cases(oracle, [lines((5, 60), (72, 40, 60, 95, 59))])[0],
                        "Rounds 1, 3 and 4 count: 72 + 60 + 95 = 227.")
    randoms = [lines((n, rng.randint(0, 100)), [rng.randint(0, 100) for _ in range(n)])
               for n in (7, 40, 100)]
    fixed = [lines((1, 0), (0,)), lines((3, 100), (99, 100, 100)), lines((4, 50), (1, 2, 3, 4))]
    return SampleProblem(
        id="lcbs_abc901_a", title="Passing Total", platform="atcoder",
        contest_id="lcbs_abc901", contest_date=date("2023-05-13"), difficulty="easy",
        body=BODY, constraints=CONSTRAINTS, public=(example,),
        private=stdin_cases(oracle, fixed + randoms),
    )

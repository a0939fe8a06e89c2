"""Spiral Grid (Codeforces-style, medium, stdin): a multi-line grid per test case."""

from random import Random

from ._kit import Case, SampleProblem, date, explained, lines, stdin_cases

BODY = """\
Write the numbers $1, 2, \\ldots, n \\cdot m$ into a grid with $n$ rows and $m$ columns as
follows. Start in the top-left cell and move right. Whenever the next cell in the current
direction is outside the grid or already filled, turn clockwise (right, then down, then left,
then up, and so on). Each visited cell receives the next number.

Print the filled grid for each test case.

Input

The first line contains a single integer $t$ ($1 \\le t \\le 100$) — the number of test cases.

Each of the next $t$ lines contains two integers $n$ and $m$ ($1 \\le n, m \\le 50$).

Output

For each test case, print $n$ lines with $m$ integers each: the filled grid. Separate the
numbers in a row by single spaces. Print nothing between test cases."""


def _grid(n: int, m: int) -> list[list[int]]:
    """Fill ring by ring: each ring is its top row, right column, bottom row, left column."""
    grid = [[0] * m for _ in range(n)]
    value, top, left, bottom, right = 1, 0, 0, n - 1, m - 1
    while top <= bottom and left <= right:
        ring = [(top, c) for c in range(left, right + 1)]
        ring += [(r, right) for r in range(top + 1, bottom + 1)]
        if top < bottom:
            ring += [(bottom, c) for c in range(right - 1, left - 1, -1)]
        if left < right:
            ring += [(r, left) for r in range(bottom - 1, top, -1)]
        for r, c in ring:
            grid[r][c] = value
            value += 1
        top, left, bottom, right = top + 1, left + 1, bottom - 1, right - 1
    return grid


def oracle(text: str) -> str:
    tokens = [int(token) for token in text.split()]
    rows = []
    for i in range(tokens[0]):
        rows += _grid(tokens[1 + 2 * i], tokens[2 + 2 * i])
    return lines(*rows)


def build() -> SampleProblem:
    rng = Random(606)
    sample = lines(2, (3, 4), (1, 2))
    public = (explained(Case(sample, oracle(sample)), "In the first test case the numbers "
                        "go right along the top row, down the last column, back along the "
                        "bottom row and up to the middle row."),)
    shapes = [[(1, 1)], [(4, 1), (1, 5)], [(2, 2), (5, 5), (6, 3)],
              [(rng.randint(1, 50), rng.randint(1, 50)) for _ in range(8)], [(50, 50)]]
    inputs = [lines(len(shape), *shape) for shape in shapes]
    return SampleProblem(
        id="lcbs_9901_B", title="Spiral Grid", platform="codeforces",
        contest_id="lcbs_9901", contest_date=date("2023-07-22"), difficulty="medium",
        body=BODY, constraints="", public=public,
        private=stdin_cases(oracle, inputs),
    )

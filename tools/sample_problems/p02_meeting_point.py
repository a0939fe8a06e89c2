"""Meeting Point (AtCoder-style, easy, stdin): decimal output compared as numbers."""

from decimal import Decimal
from random import Random

from ._kit import SampleProblem, date, explained, lines, stdin_cases

BODY = """\
N hikers stand on a straight trail; hiker i is at coordinate X_i.
They want to meet at a single point p on the trail (p may be any real number) so that the
longest distance any hiker has to walk is as small as possible.
Print the meeting point p and that longest distance D.

Input

The input is given from Standard Input in the following format:
N
X_1 X_2 \\ldots X_N

Output

Print p and D separated by a space. Both values are exact multiples of 0.5; any number of
digits after the decimal point is accepted as long as the printed value is exact."""

CONSTRAINTS = """\
- 1 \\leq N \\leq 2 \\times 10^5
- -10^9 \\leq X_i \\leq 10^9
- All input values are integers."""


def oracle(text: str) -> str:
    xs = [int(token) for token in text.split()[1:]]
    low, high = min(xs), max(xs)
    half = Decimal("0.5")
    # Two decimals on purpose: a program printing 2.5 must still match 2.50.
    return f"{(low + high) * half:.2f} {(high - low) * half:.2f}\n"


def build() -> SampleProblem:
    rng = Random(202)
    public = stdin_cases(oracle, [lines(3, (1, 8, 4)), lines(1, (-7,))])
    public = (explained(public[0], "Meeting at 4.5, the hikers at 1 and 8 both walk 3.5."),
              public[1])
    spread = 10**9
    randoms = [lines(n, [rng.randint(-spread, spread) for _ in range(n)]) for n in (5, 1000)]
    fixed = [lines(2, (-3, 3)), lines(2, (-4, -1)), lines(4, (0, 0, 0, 0)),
             lines(2, (-spread, spread)), lines(3, (spread, spread - 1, 999999990))]
    return SampleProblem(
        id="lcbs_abc901_b", title="Meeting Point", platform="atcoder",
        contest_id="lcbs_abc901", contest_date=date("2023-05-13"), difficulty="easy",
        body=BODY, constraints=CONSTRAINTS, public=public,
        private=stdin_cases(oracle, fixed + randoms),
    )

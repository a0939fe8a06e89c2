"""Counting Longest Climbs (Codeforces-style, hard, stdin): count the longest increasing
subsequences modulo a prime."""

from random import Random

from ._kit import Case, SampleProblem, date, explained, lines, stdin_cases

MOD = 998244353

BODY = """\
A hiking route passes $n$ checkpoints with altitudes $a_1, a_2, \\ldots, a_n$. A climb is a
choice of indices $i_1 < i_2 < \\ldots < i_k$ with strictly increasing altitudes
$a_{i_1} < a_{i_2} < \\ldots < a_{i_k}$. Let $L$ be the largest possible length $k$ of a climb.

Find $L$ and the number of different climbs of length $L$. Two climbs are different if their
sets of indices differ. As the number can be large, print it modulo $998\\,244\\,353$.

Input

The first line contains a single integer $t$ ($1 \\le t \\le 10^4$) — the number of test cases.

The first line of each test case contains an integer $n$ ($1 \\le n \\le 2 \\cdot 10^5$).
The second line contains $n$ integers $a_1, \\ldots, a_n$ ($1 \\le a_i \\le 10^9$).

The sum of $n$ over all test cases does not exceed $2 \\cdot 10^5$.

Output

For each test case, print two integers: $L$ and the number of climbs of length $L$ modulo
$998\\,244\\,353$."""


def _count(values: list[int]) -> tuple[int, int]:
    """Quadratic DP: the longest climb ending at each index and how many there are."""
    length, ways = [1] * len(values), [1] * len(values)
    for j, high in enumerate(values):
        for i in range(j):
            if values[i] < high:
                if length[i] + 1 > length[j]:
                    length[j], ways[j] = length[i] + 1, ways[i]
                elif length[i] + 1 == length[j]:
                    ways[j] = (ways[j] + ways[i]) % MOD
    best = max(length)
    return best, sum(w for ln, w in zip(length, ways, strict=True) if ln == best) % MOD


def oracle(text: str) -> str:
    tokens = [int(token) for token in text.split()]
    answers, pos = [], 1
    for _ in range(tokens[0]):
        n = tokens[pos]
        answers.append(_count(tokens[pos + 1 : pos + 1 + n]))
        pos += 1 + n
    return lines(*answers)


def _tests(*arrays: list[int]) -> str:
    rows: list[object] = [len(arrays)]
    for values in arrays:
        rows += [len(values), values]
    return lines(*rows)


def build() -> SampleProblem:
    rng = Random(707)
    sample = _tests([1, 3, 2, 4], [5, 5, 5], [2, 9, 4, 7])
    public = (explained(Case(sample, oracle(sample)), "In the first test case, L = 3 and the "
                        "climbs are 1, 3, 4 and 1, 2, 4 (by altitude)."),)
    inputs = [
        _tests([7]),
        _tests(list(range(1, 41)), list(range(40, 0, -1))),
        # 20 descending blocks of 3: 3^20 longest climbs, so the count wraps around MOD.
        _tests([1, 2] * 30, [3 * block + 3 - i for block in range(20) for i in range(3)]),
        _tests(*[[rng.randint(1, 10) for _ in range(rng.randint(1, 30))] for _ in range(40)]),
        _tests([rng.randint(1, 10**9) for _ in range(1200)],
               [rng.randint(1, 40) for _ in range(1200)]),
    ]
    return SampleProblem(
        id="lcbs_9902_D", title="Counting Longest Climbs", platform="codeforces",
        contest_id="lcbs_9902", contest_date=date("2024-12-14"), difficulty="hard",
        body=BODY, constraints="", public=public, private=stdin_cases(oracle, inputs),
    )

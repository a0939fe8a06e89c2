"""Toll Roads with a Pass (AtCoder-style, hard, stdin): shortest path with one free edge."""

import heapq
from random import Random

from ._kit import SampleProblem, date, explained, lines, stdin_cases

BODY = """\
The kingdom has N towns numbered 1 to N and M two-way roads. Road i connects towns U_i and
V_i and charges a toll of C_i coins each time it is used.
You hold a single free pass: you may use it on at most one road of your journey, and that
road then costs nothing.
Find the minimum number of coins needed to travel from town 1 to town N. If town N cannot be
reached, print -1.

Input

The input is given from Standard Input in the following format:
N M
U_1 V_1 C_1
U_2 V_2 C_2
\\vdots
U_M V_M C_M

Output

Print the answer."""

CONSTRAINTS = """\
- 2 \\leq N \\leq 2 \\times 10^5
- 0 \\leq M \\leq 2 \\times 10^5
- 1 \\leq U_i, V_i \\leq N
- 1 \\leq C_i \\leq 10^9
- Roads may form loops or connect the same pair of towns more than once.
- All input values are integers."""


def _distances(n: int, adjacency: list[list[tuple[int, int]]], source: int) -> list[float]:
    dist = [float("inf")] * (n + 1)
    dist[source] = 0
    heap = [(0, source)]
    while heap:
        d, town = heapq.heappop(heap)
        if d > dist[town]:
            continue
        for other, cost in adjacency[town]:
            if d + cost < dist[other]:
                dist[other] = d + cost
                heapq.heappush(heap, (d + cost, other))
    return dist


def oracle(text: str) -> str:
    """Best of: no pass, or the pass on one road u-v joining a path 1..u and v..N."""
    tokens = [int(token) for token in text.split()]
    n, m = tokens[0], tokens[1]
    roads = [tuple(tokens[2 + 3 * i : 5 + 3 * i]) for i in range(m)]
    adjacency: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
    for u, v, cost in roads:
        adjacency[u].append((v, cost))
        adjacency[v].append((u, cost))
    from_start, from_end = _distances(n, adjacency, 1), _distances(n, adjacency, n)
    best = from_start[n]
    for u, v, _ in roads:
        best = min(best, from_start[u] + from_end[v], from_start[v] + from_end[u])
    return f"{best if best != float('inf') else -1}\n"


def _random_graph(rng: Random, n: int, m: int, top: int) -> str:
    roads = [(rng.randint(1, n), rng.randint(1, n), rng.randint(1, top)) for _ in range(m)]
    return lines((n, m), *roads)


def build() -> SampleProblem:
    rng = Random(404)
    example = stdin_cases(oracle, [lines((4, 4), (1, 2, 5), (2, 4, 7), (1, 3, 2), (3, 4, 9))])
    example = explained(example[0], "Travel 1 -> 3 -> 4 and use the pass on the road from "
                        "3 to 4: you pay only 2 coins.")
    inputs = [
        lines((2, 0)),
        lines((3, 1), (1, 2, 10)),
        lines((2, 2), (1, 2, 10**9), (2, 2, 1)),
        lines((5, 5), (1, 2, 1), (2, 3, 1), (3, 4, 1), (4, 5, 1), (1, 5, 100)),
        _random_graph(rng, 30, 60, 50),
        _random_graph(rng, 2000, 3000, 10**9),
        _random_graph(rng, 20_000, 40_000, 10**6),
    ]
    return SampleProblem(
        id="lcbs_abc903_e", title="Toll Roads with a Pass", platform="atcoder",
        contest_id="lcbs_abc903", contest_date=date("2024-10-05"), difficulty="hard",
        body=BODY, constraints=CONSTRAINTS, public=(example,),
        private=stdin_cases(oracle, inputs),
    )

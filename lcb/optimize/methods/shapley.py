"""Shapley values of a coalition game: exact over the power set, or by sampled permutations.

Contract:
- A game is a set of `players` (ids, in a fixed order) and a value function given as a mapping
  `frozenset(players) -> float` (`Values`). `v(empty)` may be any number: efficiency holds
  against `v(N) - v(empty)`.
- `power_set(players)` lists every coalition, by size, then by the players' order.
- `exact_shapley(players, values)` is the weighted-subset formula
  phi_i = sum over S not holding i of |S|! (n-|S|-1)! / n! * (v(S + i) - v(S));
  every coalition must be in `values` (KeyError names the missing one).
- `sample_permutations(players, rng, count=..., max_coalitions=..., free=...)` draws up to
  `count` random orders of the players, one at a time, and stops before the order that would
  make the coalitions to evaluate (every prefix of a drawn order, minus the `free` ones whose
  value is known without a run) more than `max_coalitions`. The first order is always kept,
  so at least one comes back (the caller sizes `max_coalitions` >= n + 1 for that to fit).
- `permutation_shapley(orders, values)` is the Monte-Carlo estimate: the mean, over the
  orders, of each player's marginal contribution v(prefix + i) - v(prefix). Each order's
  contributions add up to v(N) - v(empty), so the estimate is efficient exactly, not only on
  average. Its error for player i is about sd_i / sqrt(len(orders)), sd_i being the spread of
  i's marginal contributions (at most max |v(S + i) - v(S)|).
- `prefixes(orders)` gives the coalitions the orders visit, in first-visit order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations

Coalition = frozenset[str]
Values = Mapping[Coalition, float]


def power_set(players: Sequence[str]) -> list[Coalition]:
    """Every coalition of `players`, the empty one first, then by size and player order.

    >>> [sorted(c) for c in power_set(["a", "b"])]
    [[], ['a'], ['b'], ['a', 'b']]
    """
    return [frozenset(chosen) for size in range(len(players) + 1)
            for chosen in combinations(players, size)]


def _value(values: Values, coalition: Coalition) -> float:
    if coalition not in values:
        raise KeyError(f"no value for the coalition {{{', '.join(sorted(coalition))}}}")
    return float(values[coalition])


def exact_shapley(players: Sequence[str], values: Values) -> dict[str, float]:
    """Each player's Shapley value, from the value of every coalition.

    >>> v = {frozenset(): 0.0, frozenset("a"): 1.0, frozenset("b"): 0.0, frozenset("ab"): 1.0}
    >>> exact_shapley(["a", "b"], v)
    {'a': 1.0, 'b': 0.0}
    """
    n = len(players)
    shapley = {}
    for player in players:
        others = [p for p in players if p != player]
        total = 0.0
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for chosen in combinations(others, size):
                coalition = frozenset(chosen)
                total += weight * (_value(values, coalition | {player})
                                   - _value(values, coalition))
        shapley[player] = total
    return shapley


def prefixes(orders: Iterable[Sequence[str]]) -> list[Coalition]:
    """The coalitions a set of player orders visits (each order's prefixes, the empty one and
    the whole team included), each once, in first-visit order."""
    seen: dict[Coalition, None] = {}
    for order in orders:
        for size in range(len(order) + 1):
            seen.setdefault(frozenset(order[:size]), None)
    return list(seen)


def sample_permutations(players: Sequence[str], rng: random.Random, *, count: int,
                        max_coalitions: int,
                        free: Iterable[Coalition] = ()) -> list[tuple[str, ...]]:
    """Up to `count` random orders of `players` whose visited coalitions that need a run
    (not in `free`) number at most `max_coalitions`; at least one order."""
    known = set(free)
    to_run: set[Coalition] = set()
    orders: list[tuple[str, ...]] = []
    for _ in range(count):
        order = list(players)
        rng.shuffle(order)
        new = {c for c in prefixes([order]) if c not in known and c not in to_run}
        if orders and len(to_run) + len(new) > max_coalitions:
            break
        orders.append(tuple(order))
        to_run |= new
    return orders


def permutation_shapley(orders: Sequence[Sequence[str]], values: Values) -> dict[str, float]:
    """The Monte-Carlo Shapley estimate over `orders` (each a full order of the players).

    >>> v = {frozenset(): 0.0, frozenset("a"): 1.0, frozenset("b"): 0.0, frozenset("ab"): 1.0}
    >>> permutation_shapley([("b", "a")], v)
    {'b': 0.0, 'a': 1.0}
    """
    if not orders:
        raise ValueError("permutation_shapley needs at least one order")
    totals: dict[str, float] = dict.fromkeys(orders[0], 0.0)
    for order in orders:
        before = _value(values, frozenset())
        for size in range(1, len(order) + 1):
            after = _value(values, frozenset(order[:size]))
            totals[order[size - 1]] += after - before
            before = after
    return {player: total / len(orders) for player, total in totals.items()}


def role_credit(shapley: Mapping[str, float], roles_of: Mapping[str, str]) -> dict[str, float]:
    """Each role's credit: the sum of its players' Shapley values (replicas sharing one
    prompt pool their credit onto that prompt), roles in first-player order."""
    credit: dict[str, float] = {}
    for player, value in shapley.items():
        role = roles_of[player]
        credit[role] = credit.get(role, 0.0) + value
    return credit

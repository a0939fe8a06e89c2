"""DAG-Shapley (HiveMind, Xia et al. 2512.06432): Shapley credit on a workflow DAG, running only
the coalitions the workflow can execute.

Contract:
- `ancestors(players, roles_of, edges)`: per player, the players upstream of it: those whose
  role reaches its role along the role edges (`lcb.optimize.graph.TeamGraph.edges`).
- `core(coalition, upstream)`: the largest part of `coalition` the workflow can run: the
  players whose every upstream player is in the coalition. It is itself viable (closed under
  "upstream"), and it is the coalition when the coalition is viable.
- `viable(coalition, upstream)`: the coalition equals its core. On a chain the viable
  coalitions are its prefixes (n + 1 of the 2^n); on a star, the empty one and those holding
  the hub (2^(n-1) + 1); with no edges, all of them (DAG-Shapley is then full Shapley).
- `complete(players, measured, upstream)`: the value of every coalition from the measured
  values of the viable ones: a non-viable coalition is worth its core (what the workflow runs
  of it: an agent whose input never comes contributes nothing). `shapley.exact_shapley` over
  the result is DAG-Shapley. A viable coalition missing from `measured` raises KeyError naming
  it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from lcb.optimize.methods.shapley import Coalition, Values, power_set

Upstream = Mapping[str, frozenset[str]]


def ancestors(players: Sequence[str], roles_of: Mapping[str, str],
              edges: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    """Each player's upstream players (module docstring)."""
    parents: dict[str, set[str]] = {}
    for parent, child in edges:
        if parent != child:
            parents.setdefault(child, set()).add(parent)

    def upstream_roles(role: str, seen: frozenset[str] = frozenset()) -> set[str]:
        found: set[str] = set()
        for parent in parents.get(role, ()):
            if parent not in seen:
                found |= {parent, *upstream_roles(parent, seen | {role})}
        return found

    return {p: frozenset(q for q in players if roles_of[q] in upstream_roles(roles_of[p]))
            for p in players}


def core(coalition: Coalition, upstream: Upstream) -> Coalition:
    """The runnable part of `coalition` (module docstring)."""
    return frozenset(p for p in coalition if upstream[p] <= coalition)


def viable(coalition: Coalition, upstream: Upstream) -> bool:
    return core(coalition, upstream) == coalition


def complete(players: Sequence[str], measured: Values,
             upstream: Upstream) -> dict[Coalition, float]:
    """Every coalition's value from the viable ones' (module docstring)."""
    values: dict[Coalition, float] = {}
    for coalition in power_set(players):
        runnable = core(coalition, upstream)
        if runnable not in measured:
            names = ", ".join(sorted(runnable))
            raise KeyError(f"no value for the viable coalition {{{names}}}")
        values[coalition] = float(measured[runnable])
    return values

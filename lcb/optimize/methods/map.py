"""Exact max-product MAP over a team graph, in log space (the numerics of `mapro`).

Contract:
- Variables are roles; role r takes one of its pool's K_r members (index 0 is the seed).
  `node[r]` holds r's node potentials (positive; shape (K_r,)); `edges[(p, c)]` the edge
  potentials (shape (K_p, K_c)) of the parent -> child pair. MAP maximizes the product of an
  assignment's node and edge potentials, as the sum of their logarithms.
- Logarithms are quantized to integers (`quantize`: multiples of 2**-32) before any sum, so
  sums are exact in any order. A rational potential (`Fraction` or int: what judge means are)
  gets an exact-consistent logarithm: the sum of its prime factors' quantized logarithms (a
  homomorphism), so two assignments whose potentials have EQUAL PRODUCTS tie exactly, even
  with different factors (0.2 * 0.9 = 0.3 * 0.6). A float gets its rounded logarithm (equal
  only when the terms are the same numbers). Tie-breaking: among the maximizers, the
  lexicographically smallest assignment in topological role order (parents first, then team
  order): the lower pool index wins, so the seed wins every tie it is part of.
- `solve_map(roles, node, edges, kind=...)`:
  * `chain` and `star` (and any forest: each role has at most one parent) — one tree dynamic
    program: messages from the leaves up (max over the child's members of edge + child's
    belief), then a decode in topological order, each role taking the first member that
    reaches the maximum given its parent's choice. That decode returns the lexicographically
    smallest maximizer: given the roles decided before it, a role's term is independent of
    every undecided role outside its own subtree.
  * `shared` / `single` — one tied variable (one role, several agents): its score is its node
    potential plus the diagonal of its self-edge `edges[(r, r)]` when there is one (both ends
    hold the same prompt).
  A role with two parents, an edge naming an unknown role, or a shape that does not match the
  pools raises ValueError.
- `joint(assignment, node, edges)` is the quantized joint log potential (what MAP maximizes;
  a self-edge counts its diagonal entry).
- A potential that is not positive and finite raises ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import cache
from numbers import Rational

import numpy as np

SCALE = 2.0 ** 32
Assignment = dict[str, int]


def quantize(potentials: object) -> np.ndarray:
    """The quantized logarithms of `potentials` (any shape) as int64 multiples of 2**-32."""
    values = np.asarray(potentials, dtype=object)
    return np.vectorize(_quantized_log, otypes=[np.int64])(values) if values.size else \
        np.zeros(values.shape, dtype=np.int64)


def _quantized_log(value: object) -> int:
    if isinstance(value, Rational) and not isinstance(value, bool):
        ratio = Fraction(value)
        if ratio <= 0:
            raise ValueError(f"potentials must be positive and finite, got {value!r}")
        return _integer_log(ratio.numerator) - _integer_log(ratio.denominator)
    number = float(value)  # type: ignore[arg-type]
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(f"potentials must be positive and finite, got {value!r}")
    return round(math.log(number) * SCALE)


@cache
def _integer_log(number: int) -> int:
    """The sum of the quantized logarithms of `number`'s prime factors (with multiplicity)."""
    total, factor = 0, 2
    while factor * factor <= number:
        while number % factor == 0:
            total, number = total + _prime_log(factor), number // factor
        factor += 1
    return total + (_prime_log(number) if number > 1 else 0)


@cache
def _prime_log(prime: int) -> int:
    return round(math.log(prime) * SCALE)


def _checked(roles: Sequence[str], node: Mapping[str, object],
             edges: Mapping[tuple[str, str], object]
             ) -> tuple[dict[str, np.ndarray], dict[tuple[str, str], np.ndarray]]:
    if set(node) != set(roles):
        raise ValueError(f"node potentials for {sorted(node)}; the roles are {list(roles)}")
    q_node = {r: quantize(node[r]).reshape(-1) for r in roles}
    if any(len(v) == 0 for v in q_node.values()):
        raise ValueError("every role needs at least one pool member")
    q_edges = {}
    for (parent, child), values in edges.items():
        if parent not in q_node or child not in q_node:
            raise ValueError(f"edge ({parent!r}, {child!r}) names a role not in {list(roles)}")
        matrix = quantize(values)
        shape = (len(q_node[parent]), len(q_node[child]))
        if matrix.shape != shape:
            raise ValueError(f"edge ({parent!r}, {child!r}) has shape {matrix.shape}; the "
                             f"pools give {shape}")
        q_edges[(parent, child)] = matrix
    return q_node, q_edges


def joint(assignment: Mapping[str, int], node: Mapping[str, object],
          edges: Mapping[tuple[str, str], object]) -> int:
    """The quantized joint log potential of `assignment`."""
    q_node, q_edges = _checked(list(node), node, edges)
    total = sum(int(q_node[r][assignment[r]]) for r in q_node)
    return total + sum(int(m[assignment[p], assignment[c]]) for (p, c), m in q_edges.items())


def _order(roles: Sequence[str], parent: Mapping[str, str]) -> list[str]:
    """Topological order (parents first); ties keep the order of `roles`."""
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(roles):
        ready = [r for r in roles if r not in placed and parent.get(r, r) in placed | {r}]
        if not ready:
            raise ValueError(f"the edges among {list(roles)} have a cycle")
        order.append(ready[0])
        placed.add(ready[0])
    return order


def solve_map(roles: Sequence[str], node: Mapping[str, object],
              edges: Mapping[tuple[str, str], object], *, kind: str) -> Assignment:
    """The MAP assignment role -> pool index (see the module docstring)."""
    q_node, q_edges = _checked(roles, node, edges)
    if kind in ("shared", "single"):
        if len(roles) != 1:
            raise ValueError(f"a {kind} graph has one tied role, got {list(roles)}")
        [role] = roles
        score = q_node[role].copy()
        if (role, role) in q_edges:
            score += np.diagonal(q_edges[(role, role)])
        stray = [e for e in q_edges if e != (role, role)]
        if stray:
            raise ValueError(f"a {kind} graph has no edge but the diagonal, got {stray}")
        return {role: int(np.argmax(score))}  # argmax: the first maximum
    if kind not in ("chain", "star"):
        raise ValueError(f"unknown graph kind {kind!r}; expected chain, star, shared or single")
    return _tree_map(list(roles), q_node, q_edges)


def _tree_map(roles: list[str], node: dict[str, np.ndarray],
              edges: dict[tuple[str, str], np.ndarray]) -> Assignment:
    parent: dict[str, str] = {}
    for p, c in edges:
        if p == c:
            raise ValueError(f"a tree has no self-edge, got ({p!r}, {c!r})")
        if c in parent:
            raise ValueError(f"role {c!r} has two parents ({parent[c]!r}, {p!r}): not a tree")
        parent[c] = p
    order = _order(roles, parent)
    belief = {r: node[r].copy() for r in roles}  # node + the messages of the role's children
    for child in reversed(order):  # leaves first: each child's message goes to its parent
        if child in parent:
            p = parent[child]
            belief[p] += np.max(edges[(p, child)] + belief[child][None, :], axis=1)
    chosen: Assignment = {}
    for role in order:
        score = belief[role]
        if role in parent:
            score = score + edges[(parent[role], role)][chosen[parent[role]]]
        chosen[role] = int(np.argmax(score))
    return {role: chosen[role] for role in roles}

"""Batch sampling with an injected RNG: the rows a native method runs.

Contract:
- `seeded_rng(*parts)` is `random.Random(":".join(map(str, parts)))`: how a method seeds an
  RNG from its key, the optimizer seed and a label (`seeded_rng("tavo", 0)` is
  `Random("tavo:0")`). A string seed is hashed with SHA-512, so the draws are the same on
  every platform and in every process (no `PYTHONHASHSEED` dependence).
- Every sampler takes the RNG as an argument and consumes it exactly as the Python call it
  names, so a method that moves to it draws the same rows for the same seed:
  - `draw(rows, k, rng)`: `rng.sample(rows, min(k, len(rows)))`, k distinct rows in draw
    order; `draw(rows, len(rows), rng)` is a random order of all of them.
  - `shuffled(rows, rng)`: a copy shuffled by `rng.shuffle`. Also a random order, but not the
    one `draw` gives from the same RNG state: a method keeps the one it started with.
  - `ordered_subset(rows, k, rng)`: k rows chosen by a draw of their indices, kept in their
    original order; every row, with the RNG untouched, when `k` is None or >= len(rows).
  - `fill(first, rows, size, rng)`: the rows `first` (chosen by the caller, e.g. mined
    cases), then `size - len(first)` draws from the rows whose id is not among them.
- `Rotation.over(order, size)`: a rotating pass over a fixed order; `at(start)` is the
  `size` rows from position `start` on (wrapping around), `batch(k)` the k-th batch
  (k = 0, 1, ...). `size` is capped at len(order); an empty order gives empty batches.
- Inputs are never mutated; every result is a new list.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class HasId(Protocol):
    """A row with an id (a `Problem`)."""

    @property
    def id(self) -> str: ...


R = TypeVar("R", bound=HasId)


def seeded_rng(*parts: object) -> random.Random:
    """`random.Random` seeded with the parts joined by ':'.

    >>> seeded_rng("tavo", 0).random() == random.Random("tavo:0").random()
    True
    """
    return random.Random(":".join(str(part) for part in parts))


def draw(rows: Sequence[T], k: int, rng: random.Random) -> list[T]:
    """`min(k, len(rows))` distinct rows, in the order `rng.sample` draws them."""
    return rng.sample(list(rows), min(k, len(rows)))


def shuffled(rows: Sequence[T], rng: random.Random) -> list[T]:
    """A copy of `rows` shuffled in place by `rng.shuffle`."""
    order = list(rows)
    rng.shuffle(order)
    return order


def ordered_subset(rows: Sequence[T], k: int | None, rng: random.Random) -> list[T]:
    """`k` rows drawn by index, in their order in `rows`; all of them when `k` is None or
    at least len(rows) (then `rng` is not used)."""
    if k is None or k >= len(rows):
        return list(rows)
    return [rows[i] for i in sorted(rng.sample(range(len(rows)), k))]


def fill(first: Sequence[R], rows: Sequence[R], size: int, rng: random.Random) -> list[R]:
    """`first`, then `size - len(first)` rows drawn from those of `rows` whose id is not in
    `first` (`first` must be at most `size` rows)."""
    taken = {row.id for row in first}
    rest = [row for row in rows if row.id not in taken]
    return [*first, *rng.sample(rest, size - len(first))]


@dataclass(frozen=True)
class Rotation(Generic[T]):
    """A rotating pass over `order`, `size` rows at a time (module docstring)."""

    order: tuple[T, ...]
    size: int

    @classmethod
    def over(cls, order: Sequence[T], size: int) -> Rotation[T]:
        """Batches of `size` rows (at most len(order)) over a copy of `order`."""
        return cls(tuple(order), min(size, len(order)))

    def at(self, start: int) -> list[T]:
        """The `size` rows from position `start` on, wrapping around the end."""
        n = len(self.order)
        return [self.order[(start + j) % n] for j in range(self.size)]

    def batch(self, k: int) -> list[T]:
        """The k-th batch (k = 0, 1, ...): the rows from position k * size on."""
        return self.at(k * self.size)

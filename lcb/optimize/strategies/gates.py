"""The paired gate: a candidate replaces the incumbent only when it is strictly better on the
same rows.

Contract:
- Scores are per row: `Scores` maps a row id to its score; a row that is absent or None got
  no rollout (infrastructure lost it, or it was never run there) and is no evidence either
  way. `scores_of(rows, results)` builds one from results lined up with their rows (a None
  result stays None).
- `pair(*sides, order=None)` keeps the rows of `order` (default: the first side's rows, in
  its order) that every side scored, in that order: `Paired.rows`, each side's values on
  them (`values[i]`), each side's mean (`mean(i)`, summed in row order; 0.0 when no row is
  paired) and the rows of `order` left out (`missing`).
- `strictly_better(candidate, incumbent, order=None)` is the gate: `Gate.adopted` only when
  at least one row is paired and the candidate's mean there is strictly higher than the
  incumbent's. No margin and no tolerance: a tie keeps the incumbent. Rows only one side
  has never count, so neither row luck nor a lost rollout can make a candidate win.
- A method with another acceptance rule (tavo: a margin above the seed and no worse than the
  best) still pairs its rows with `pair`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

Scores = Mapping[str, float | None]


class Scored(Protocol):
    """A result with a score (a `Rollout`)."""

    @property
    def score(self) -> float: ...


class Identified(Protocol):
    """A row with an id (a `Problem`)."""

    @property
    def id(self) -> str: ...


def scores_of(rows: Sequence[Identified], results: Sequence[Scored | None]
              ) -> dict[str, float | None]:
    """Each row's score, None where no result came back (rows and results lined up)."""
    return {row.id: None if result is None else result.score
            for row, result in zip(rows, results, strict=True)}


@dataclass(frozen=True)
class Paired:
    """The rows every side scored, and each side's values on them (module docstring)."""

    rows: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]
    missing: tuple[str, ...]

    def mean(self, side: int) -> float:
        """Side `side`'s mean over the paired rows (0.0 when there is none)."""
        found = self.values[side]
        return sum(found) / len(found) if found else 0.0


def pair(*sides: Scores, order: Iterable[str] | None = None) -> Paired:
    """The rows of `order` (default: the first side's) that every side scored, in order."""
    ids = list(sides[0] if order is None else order)
    rows = tuple(i for i in ids if all(side.get(i) is not None for side in sides))
    values = tuple(tuple(float(side[i]) for i in rows) for side in sides)  # type: ignore[arg-type]
    return Paired(rows, values, tuple(i for i in ids if i not in rows))


@dataclass(frozen=True)
class Gate:
    """The verdict of `strictly_better`: adopted or not, and the pairing behind it
    (side 0 the candidate, side 1 the incumbent)."""

    adopted: bool
    paired: Paired

    @property
    def candidate(self) -> float:
        return self.paired.mean(0)

    @property
    def incumbent(self) -> float:
        return self.paired.mean(1)


def strictly_better(candidate: Scores, incumbent: Scores, *,
                    order: Iterable[str] | None = None) -> Gate:
    """Adopt `candidate` only when strictly better than `incumbent` on the rows both scored.

    >>> strictly_better({"a": 1.0, "b": 0.0}, {"a": 0.0, "b": None}).adopted
    True
    >>> strictly_better({"a": 1.0}, {"a": 1.0}).adopted  # a tie keeps the incumbent
    False
    """
    paired = pair(candidate, incumbent, order=order)
    return Gate(bool(paired.rows) and paired.mean(0) > paired.mean(1), paired)

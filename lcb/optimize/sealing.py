"""What a method may learn of the rows it optimizes on: validation labels sealed, feedback modes,
and the selection set carved from train (`--selection train`).

Contract:
- `HiddenTests(count)` stands where a sealed problem's private tests were. Iterating, indexing,
  `len` or truth of it raises `LabelsHidden` (a `LookupError`) naming the rule; `repr`, `==` and
  `hash` work, so a sealed problem stays a frozen, hashable `Problem`.
- `seal(problem)` is the problem with its private tests hidden: what a method gets for a row of
  its selection set (the validation split, or the carved set under `--selection train`). The
  protocol keeps the labelled rows apart (`lcb.optimize.evaluator` grades with them).
- A rollout on such a row, and every rollout under `--feedback verdict`, reaches the method
  with the failing test's verdict and the program's error text only
  (`lcb.optimize.teamrun.verdict_only`; the evaluator applies it).
- `carve_selection(train, size)`: the `--selection train` split of the train ids: a shuffle
  seeded with `SELECTION_SEED` (fixed: every method and optimizer seed gets the same split, so
  jobs stay paired), its first `size` ids the selection set, the rest train, each in the
  split file's order. `selection_size(n_train, n_validation)` = min(n_validation, n_train // 2):
  50 of the standard 150 (train 100), as large as the validation split it stands for.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import NoReturn

from lcb.data.problems import Problem

SELECTION_SEED = 20250600  # fixed: the same carve for every method and optimizer seed
_RULE = ("the hidden tests of a selection-set row are not the method's to read: it scores "
         "such rows only through rollouts, which return the score and the verdict")


class LabelsHidden(LookupError):
    """A method reached for the hidden tests of a sealed row."""


class HiddenTests(Sequence):
    """Where a sealed problem's private tests were (module docstring)."""

    def __init__(self, count: int) -> None:
        self._count = count

    def _refuse(self, *_: object) -> NoReturn:
        raise LabelsHidden(_RULE)

    __getitem__ = __len__ = __bool__ = _refuse

    def __iter__(self) -> Iterator:
        self._refuse()

    def __repr__(self) -> str:
        return f"HiddenTests({self._count})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HiddenTests) and other._count == self._count

    def __hash__(self) -> int:
        return hash(("HiddenTests", self._count))


def seal(problem: Problem) -> Problem:
    """`problem` with its private tests hidden (module docstring)."""
    return replace(problem, private_tests=HiddenTests(len(problem.private_tests)))


def selection_size(n_train: int, n_validation: int) -> int:
    return min(n_validation, n_train // 2)


def carve_selection(train: Sequence[str], size: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(train ids left, selection ids): the `--selection train` split (module docstring)."""
    order = list(train)
    random.Random(SELECTION_SEED).shuffle(order)
    chosen = set(order[:size])
    return (tuple(i for i in train if i not in chosen), tuple(i for i in train if i in chosen))

"""`maspob`'s bandit: LinUCB over feature vectors, coordinate ascent, the incumbent rule.

Contract (torch, float64; import it after `maspob_requires.require_torch`):
- `Posterior.fit(features, rewards, lam)`: ridge regression as LinUCB keeps it,
  A = lam * I + sum phi phi^T, b = sum r phi, theta = A^-1 b. `mean(phi)` = theta . phi (the
  posterior mean), `ucb(phi, alpha)` = mean + alpha * sqrt(phi^T A^-1 phi).
- `argmax_first(values)`: the index of the largest value; values within `TIE` of the largest
  count as equal and the lowest index wins (a variant's index is its pool position, 0 = seed).
- `coordinate_ascent(start, sizes, score, order, sweeps)`: from `start`, for each coordinate
  in `order`, every value of that coordinate is scored with the others fixed (`score` gets
  the list of candidate combinations, returns one number each) and the argmax is taken
  (`argmax_first`: on a tie the lowest variant index); sweeps repeat until one changes
  nothing or `sweeps` ran. Returns the combination and the score it reached.
- `incumbent(combos, means, seed)`: the combination with the highest posterior mean; on a tie
  (within `TIE`) the seed combination when it is among the tied, else the lowest one in
  lexicographic order of the variant indices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

TIE = 1e-9
Combo = tuple[int, ...]


@dataclass(frozen=True)
class Posterior:
    """LinUCB's ridge posterior (module docstring)."""

    a_inv: torch.Tensor
    theta: torch.Tensor

    @classmethod
    def fit(cls, features: Sequence[Sequence[float]], rewards: Sequence[float], *,
            lam: float) -> Posterior:
        phi = torch.tensor(features, dtype=torch.float64)
        r = torch.tensor(rewards, dtype=torch.float64)
        a_inv = torch.linalg.inv(lam * torch.eye(phi.shape[1], dtype=torch.float64)
                                 + phi.T @ phi)
        return cls(a_inv=a_inv, theta=a_inv @ (phi.T @ r))

    def mean(self, features: Sequence[Sequence[float]]) -> list[float]:
        return (torch.tensor(features, dtype=torch.float64) @ self.theta).tolist()

    def ucb(self, features: Sequence[Sequence[float]], *, alpha: float) -> list[float]:
        phi = torch.tensor(features, dtype=torch.float64)
        spread = torch.einsum("ij,jk,ik->i", phi, self.a_inv, phi).clamp(min=0.0).sqrt()
        return (phi @ self.theta + alpha * spread).tolist()


def argmax_first(values: Sequence[float]) -> int:
    """The lowest index whose value is within `TIE` of the largest."""
    top = max(values)
    return next(i for i, v in enumerate(values) if v >= top - TIE)


def coordinate_ascent(start: Sequence[int], sizes: Sequence[int],
                      score: Callable[[list[Combo]], Sequence[float]], *,
                      order: Sequence[int], sweeps: int) -> tuple[Combo, float]:
    """Coordinate-wise argmax of `score` from `start` (module docstring)."""
    combo = tuple(start)
    best = float(score([combo])[0])
    for _ in range(sweeps):
        changed = False
        for coordinate in order:
            candidates = [combo[:coordinate] + (v,) + combo[coordinate + 1:]
                          for v in range(sizes[coordinate])]
            values = score(candidates)
            pick = argmax_first(values)
            if candidates[pick] != combo:
                combo, changed = candidates[pick], True
            best = float(values[pick])
        if not changed:
            break
    return combo, best


def incumbent(combos: Sequence[Combo], means: Sequence[float], *, seed: Combo) -> Combo:
    """The observed combination with the highest posterior mean (ties: module docstring)."""
    top = max(means)
    tied = sorted({c for c, m in zip(combos, means, strict=True) if m >= top - TIE})
    return seed if seed in tied else tied[0]

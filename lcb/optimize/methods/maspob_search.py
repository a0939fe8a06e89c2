"""`maspob`'s search state and its bandit: what a checkpoint holds, and the surrogate with
LinUCB over it (`lcb.optimize.methods.maspob` has the algorithm).

Contract:
- `Pull`: one charged pull, a combination (one variant index per role, in graph order) on
  some train rows and their scores; `mean` is its score.
- `Search`: the pool plan (`maspob_cover.PoolPlan`, None in a checkpoint written before it
  existed), the pools, the pulls, the row cursor, the incumbent and the next combination, and
  each surrogate fit's seconds; `state()` / `from_state()` round-trip it through JSON (the
  checkpoint a fast-forwarded rerun restores).
- `Bandit(roles, edges, embeddings, settings)`: `refit(pulls, seed=...)` fits a fresh GATv2
  surrogate (`surrogate.fit`) and the LinUCB posterior (`linucb.Posterior`, features = the
  surrogate's last-layer features and a constant 1) on every pull; `means` and `ucb` score
  combinations. torch is imported when a `Bandit` is made.
- `listed(combo)`: a combination as JSON (a list, None kept).
- `row_scores(pulls, combo)`: row id -> the scores `combo` (None: the seed) got there, rows in
  first-pulled order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lcb.optimize.methods.maspob_cover import PoolPlan

if TYPE_CHECKING:
    from lcb.optimize.methods.maspob import MaspobSettings

Combo = tuple[int, ...]  # one variant index per role, in graph order

@dataclass
class Pull:
    """One charged pull: a combination on some train rows, and the rows' scores."""

    combo: Combo
    rows: list[str]
    scores: list[float]

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores)

    def to_json(self) -> dict[str, Any]:
        return {"combo": list(self.combo), "rows": self.rows, "scores": self.scores}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Pull:
        return cls(tuple(data["combo"]), list(data["rows"]), [float(s) for s in data["scores"]])


@dataclass
class Search:
    """Everything a rerun needs to go on (the checkpoint state)."""

    pools: dict[str, list[str]]
    pulls: list[Pull] = field(default_factory=list)
    cursor: int = 0
    incumbent: Combo | None = None
    next: Combo | None = None
    fit_seconds: list[float] = field(default_factory=list)
    plan: PoolPlan | None = None

    @property
    def train_s(self) -> float:
        return sum(self.fit_seconds)

    def state(self) -> dict[str, Any]:
        return {"pools": self.pools, "pulls": [p.to_json() for p in self.pulls],
                "cursor": self.cursor, "incumbent": listed(self.incumbent),
                "next": listed(self.next), "fit_seconds": self.fit_seconds,
                "surrogate_train_s": self.train_s,
                "pool_plan": None if self.plan is None else self.plan.to_json()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Search:
        return cls(pools={r: list(p) for r, p in state["pools"].items()},
                   pulls=[Pull.from_json(p) for p in state["pulls"]],
                   cursor=int(state["cursor"]), incumbent=_combo(state["incumbent"]),
                   next=_combo(state["next"]),
                   fit_seconds=[float(v) for v in state["fit_seconds"]],
                   plan=None if state.get("pool_plan") is None
                   else PoolPlan.from_json(state["pool_plan"]))


def listed(combo: Combo | None) -> list[int] | None:
    return None if combo is None else list(combo)


def _combo(data: list[int] | None) -> Combo | None:
    return None if data is None else tuple(int(v) for v in data)


class Bandit:
    """The surrogate and LinUCB over one search's pools (module docstring)."""

    def __init__(self, roles: Sequence[str], edges: Sequence[tuple[str, str]],
                 embeddings: list[list[list[float]]], settings: MaspobSettings) -> None:
        import torch

        from lcb.optimize.methods import linucb, surrogate

        self.surrogate, self.linucb, self.settings = surrogate, linucb, settings
        self.embeddings = [torch.tensor(e, dtype=surrogate.DTYPE) for e in embeddings]
        self.adj = surrogate.adjacency(roles, edges)
        self.model: Any = None
        self.posterior: Any = None

    def features(self, combos: Sequence[Combo]) -> list[list[float]]:
        x = self.surrogate.node_features(self.embeddings, combos)
        return [[*phi, 1.0] for phi in self.surrogate.predict_features(self.model, x, self.adj)]

    def refit(self, pulls: Sequence[Pull], *, seed: int) -> dict[str, float]:
        """A fresh surrogate and posterior on `pulls`; the fit's report."""
        import torch

        s = self.settings
        combos = [p.combo for p in pulls]
        x = self.surrogate.node_features(self.embeddings, combos)
        y = torch.tensor([p.mean for p in pulls], dtype=self.surrogate.DTYPE)
        self.model, report = self.surrogate.fit(x, y, self.adj, hidden=s.hidden, lr=s.lr,
                                                epochs=s.epochs, patience=s.patience, seed=seed)
        self.posterior = self.linucb.Posterior.fit(self.features(combos), [p.mean for p in pulls],
                                              lam=s.ridge)
        return {**report.to_record(), "seconds": report.seconds}

    def means(self, combos: Sequence[Combo]) -> list[float]:
        assert self.posterior is not None
        return [float(v) for v in self.posterior.mean(self.features(combos))]

    def ucb(self, combos: list[Combo]) -> list[float]:
        assert self.posterior is not None
        return [float(v) for v in self.posterior.ucb(self.features(combos),
                                                     alpha=self.settings.alpha)]


def row_scores(pulls: Sequence[Pull], combo: Combo | None) -> dict[str, list[float]]:
    """Row id -> the scores `combo` (None: the seed) got on it, rows in first-pulled order."""
    rows: dict[str, list[float]] = {}
    for pull in pulls:
        if pull.combo == combo or (combo is None and not any(pull.combo)):
            for pid, score in zip(pull.rows, pull.scores, strict=True):
                rows.setdefault(pid, []).append(score)
    return rows

"""Whether the budget buys a method anything, checked before a job writes or spends a thing.

Contract:
- A method may define `minimum_budget(ctx) -> (rollouts, what they buy)`: the least budget
  that buys it one scored proposal or one full cycle at these sizes and settings (each
  method's page gives its rule). It reads only the team's facts, the data it would get and
  `ctx.ledger.total`: `SizingView` is that much of an optimize context, built from the job's
  input without a model, a grader or a job directory.
- `check_budget(optimizer, view, allow=...)`: when the budget is below the minimum it raises
  `BudgetTooSmall` naming the minimum (the job stops before it makes its folder, so the same
  command with a larger `--budget` starts clean), unless `allow` (`--allow-small-budget`):
  then it logs the same words and the method runs, keeping the seed as it always did. A
  method without `minimum_budget` (identity) is never refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from lcb.optimize.budget import BudgetLedger
from lcb.optimize.bundle import freeze
from lcb.optimize.cell import TeamCell, TeamFacts
from lcb.optimize.errors import BudgetTooSmall
from lcb.optimize.splits import OptimizerData

log = logging.getLogger("lcb.optimize")


@dataclass
class SizingView(TeamFacts):
    """What `minimum_budget(ctx)` may read (module docstring)."""

    cell: TeamCell
    seed_bundle: Any
    data: OptimizerData
    optimizer_seed: int
    budget: int
    ledger: BudgetLedger = field(init=False)

    def __post_init__(self) -> None:
        self.seed_bundle = freeze(self.seed_bundle)
        self.ledger = BudgetLedger(self.budget)


def check_budget(optimizer: Any, view: SizingView, *, allow: bool) -> None:
    """Refuse a budget that buys the method nothing (module docstring)."""
    minimum = getattr(optimizer, "minimum_budget", None)
    if minimum is None:
        return
    needed, what = minimum(view)
    if view.budget >= needed:
        return
    error = BudgetTooSmall(optimizer.key, needed=needed, budget=view.budget, what=what)
    if not allow:
        raise error
    log.warning("--allow-small-budget: %s", error)

"""`maspob`'s covering warm-up (setting `cover_arms`): size the pools from the budget so that
every arm is pulled at least once before LinUCB chooses, and list that warm-up.

Contract:
- An *arm* is one role's variant j >= 1. The covering warm-up varies every role in each pull:
  after the seed pull, pull i (1 .. k - 1 for pools of k) sets the role at rank p of the
  topological order to variant 1 + (i - 1 + p) mod (k_r - 1) of its pool of k_r texts (0 when
  the pool holds the seed alone). So pools of k take k pulls, the seed's included, whatever
  the number of roles, and no two roles sit at the same style line in one pull when the pools
  are long enough (variant j of every pool follows style j). An arm's warm-up score is shared
  with the other roles' arms of its pull; LinUCB's coordinate ascent, one role at a time from
  the incumbent, and the gate's paired rerun against the seed come after it.
- `affordable_pulls(available, rows=..., reserve=..., max_pulls=...)`: the pulls of `rows`
  rollouts that `available` pays for once `reserve` (the gate's) is set aside, at most
  `max_pulls` (None: no cap).
- `plan_pools(pulls=P, cap=m, cover=True)`: the `PoolPlan`. With `cover=True` the size is
  k = min(m, A), at least 2 (the seed and one variant), where A = P - P // 10 is the
  warm-up's allowance: every pull but a tenth, which LinUCB keeps to pull the best-looking
  arms again on new rows before the gate. With `cover=False` the size is m (the paper's
  fixed pools, a random warm-up). `cover="auto"` (the method's default) covers only when the
  whole pool fits (m <= A): a cut pool reaches no more arms than random pulls over a whole
  one, and loses the repeats those make (measured: docs/optimizers/maspob.md); else it is
  the paper's plan. The plan records `cover` as decided and `auto` for the log line.
- `covering_warmup(sizes, order)`: the combinations pulled after the seed's, in order (sizes
  and combinations by graph index, `order` the topological order of graph indices). A plan
  read from a checkpoint of the code before (no `rotate` key) resumes the warm-up it began:
  one role at a time (`rotate=False`).
- A `PoolPlan` is decided once, before the pools are written, and round-trips through JSON
  (`to_json` / `from_json`): the checkpoint holds it, so a resumed job never decides again
  from a budget that has been spent since. `note(roles)` is its one log line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

MIN_POOL = 2  # the seed and one variant: a pool that offers no choice is no pool
LINUCB_SHARE = 10  # LinUCB keeps one pull in this many for its own choices


@dataclass(frozen=True)
class PoolPlan:
    """How many texts each role's pool holds (the seed's included), and from what."""

    size: int  # texts per role, the seed's included
    pulls: int  # pulls the budget paid for beside the gate when the plan was made
    cap: int  # the `pool_size` setting
    cover: bool  # the covering warm-up runs (the `cover_arms` setting, decided)
    auto: bool = False  # decided by `cover_arms="auto"`
    rotate: bool = True  # every role varied in each pull (False: a plan of the code before)

    @property
    def allowance(self) -> int:
        """Pulls the covering warm-up may take: all but LinUCB's tenth."""
        return self.pulls - self.pulls // LINUCB_SHARE

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PoolPlan:
        return cls(size=int(data["size"]), pulls=int(data["pulls"]), cap=int(data["cap"]),
                   cover=bool(data["cover"]), auto=bool(data.get("auto", False)),
                   rotate=bool(data.get("rotate", False)))

    def note(self, roles: int) -> str:
        """The log line: the arms per role the budget lets the warm-up pull, and why."""
        arms, team = self.size - 1, _count(roles, "role")
        if not self.cover:
            why = "cover_arms=false"
            if self.auto:
                why = (f"cover_arms=auto: pulling every arm of pools of {self.cap} takes "
                       f"{covering_pulls(self.cap)} pulls, more than {self.allowance} of the "
                       f"{_count(self.pulls, 'pull')} the budget pays for beside the gate")
            return (f"maspob: pools of {self.size} per role ({_count(arms, 'arm')} each, "
                    f"{team}), a warm-up of random combinations ({why})")
        warmup = covering_pulls(self.size)
        vary = "every role varied in each pull" if roles > 1 else "one arm a pull"
        head = (f"maspob: {_count(arms, 'arm')} per role ({team}, pools of {self.size}), "
                f"pulled in the warm-up's first {warmup} pulls ({vary})")
        if self.size == self.cap:
            why = (f"the whole pool, of the {_count(self.pulls, 'pull')} the budget pays for "
                   f"beside the gate")
        elif warmup == self.pulls:
            why = (f"cut from {self.cap} to the {_count(self.pulls, 'pull')} the budget pays "
                   f"for beside the gate")
        elif warmup <= self.allowance:
            why = (f"cut from {self.cap} so that LinUCB keeps {self.pulls - warmup} of the "
                   f"{self.pulls} pulls the budget pays for beside the gate")
        else:
            why = (f"cut from {self.cap} to the seed and one variant: the budget pays for "
                   f"{_count(self.pulls, 'pull')} beside the gate")
        if warmup > self.pulls:
            why += f"; the budget ends the warm-up after {_count(self.pulls, 'pull')}"
        return f"{head}: {why}{' (cover_arms=auto)' if self.auto else ''}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def affordable_pulls(available: int, *, rows: int, reserve: int, max_pulls: int | None) -> int:
    """Pulls of `rows` rollouts that `available` pays for beside `reserve`, capped."""
    pulls = max(available - reserve, 0) // rows
    return pulls if max_pulls is None else min(pulls, max_pulls)


def covering_pulls(size: int) -> int:
    """Pulls of a covering warm-up over pools of `size`, the seed pull included."""
    return size


def plan_pools(*, pulls: int, cap: int, cover: bool | str = True) -> PoolPlan:
    """The `PoolPlan` for a budget of `pulls` pulls (module docstring)."""
    plan = PoolPlan(size=cap, pulls=pulls, cap=cap, cover=cover is True)
    if cover == "auto":
        plan = replace(plan, cover=cap <= plan.allowance, auto=True)
    if not plan.cover:
        return plan
    return replace(plan, size=max(MIN_POOL, min(cap, plan.allowance)))


def covering_warmup(sizes: Sequence[int], order: Sequence[int], *,
                    rotate: bool = True) -> list[tuple[int, ...]]:
    """Every arm at least once, after the seed pull, every role varied in each pull (with
    `rotate=False`, a checkpointed plan's of the code before: one role at a time, in `order`,
    each role's variants in pool order, the other roles at 0)."""
    if not rotate:
        return [tuple(variant if other == role else 0 for other in range(len(sizes)))
                for role in order for variant in range(1, sizes[role])]
    rank = {role: p for p, role in enumerate(order)}
    pulls = max(sizes, default=1) - 1
    return [tuple(0 if size < MIN_POOL else 1 + (i + rank[role]) % (size - 1)
                  for role, size in enumerate(sizes))
            for i in range(pulls)]

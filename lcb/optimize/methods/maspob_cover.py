"""`maspob`'s covering warm-up (setting `cover_arms`, off by default): size the pools from the
budget so that every arm is pulled once before LinUCB chooses, and list that warm-up.

Contract:
- An *arm* is one role's variant j >= 1 with every other role at variant 0 (the seed's text).
  Covering a team whose pools hold k_r texts each (the seed's included) takes
  1 + sum over roles of (k_r - 1) pulls: the seed combination, then every arm once.
- `affordable_pulls(available, rows=..., reserve=..., max_pulls=...)`: the pulls of `rows`
  rollouts that `available` pays for once `reserve` (the gate's) is set aside, at most
  `max_pulls` (None: no cap).
- `plan_pools(pulls=P, roles=n, cap=m, warmup=w, cover=True)`: the `PoolPlan`. With `cover`
  the size is the largest k <= m whose covering warm-up fits its allowance,
  1 + n (k - 1) <= A with A = max(P // 2, min(P, w)): half of the pulls, so that LinUCB is
  left at least as many as the warm-up used, but never fewer than the random warm-up's w
  pulls (the `warmup` setting, the paper's 6), so that a small budget explores no fewer arms
  than the paper's warm-up would. Never below 2 (the seed and one variant): under
  P = 1 + n the budget ends the warm-up before its last arm. Without `cover` the size is m
  (the paper's fixed pools).
- `covering_warmup(sizes, order)`: the combinations pulled after the seed's, in order: the
  roles in `order` (graph indices, topological), each role's variants 1 .. size - 1 in pool
  order, every other role at 0.
- A `PoolPlan` is decided once, before the pools are written, and round-trips through JSON
  (`to_json` / `from_json`): the checkpoint holds it, so a resumed job never decides again
  from a budget that has been spent since. `note(...)` is its one log line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

MIN_POOL = 2  # the seed and one variant: a pool that offers no choice is no pool


@dataclass(frozen=True)
class PoolPlan:
    """How many texts each role's pool holds (the seed's included), and from what."""

    size: int  # texts per role, the seed's included
    pulls: int  # pulls the budget paid for beside the gate when the plan was made
    cap: int  # the `pool_size` setting
    cover: bool  # the `cover_arms` setting
    warmup: int  # the `warmup` setting: the warm-up may take this many pulls, past half

    @property
    def allowance(self) -> int:
        """Pulls the covering warm-up may take: half of `pulls`, or `warmup` when more."""
        return max(self.pulls // 2, min(self.pulls, self.warmup))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PoolPlan:
        return cls(size=int(data["size"]), pulls=int(data["pulls"]), cap=int(data["cap"]),
                   cover=bool(data["cover"]), warmup=int(data["warmup"]))

    def note(self, roles: int) -> str:
        """The log line: the arms per role the budget lets the warm-up pull, and why."""
        arms = self.size - 1
        if not self.cover:
            return (f"maspob: pools of {self.size} per role ({_count(arms, 'arm')} each), a "
                    f"warm-up of random combinations (cover_arms=false)")
        warmup = covering_pulls(roles, self.size)
        if self.size == self.cap:
            why = f"the whole pool; the covering warm-up takes {warmup} of {self.pulls} pulls"
        elif 2 * warmup <= self.pulls:
            why = (f"cut from {self.cap} so that the seed pull and every arm once ({warmup} "
                   f"pulls) take at most half of the {self.pulls} pulls the budget pays for "
                   f"beside the gate")
        elif warmup <= self.allowance:
            why = (f"cut from {self.cap} so that the seed pull and every arm once ({warmup} "
                   f"pulls) take no more than a random warm-up would ({self.allowance} of the "
                   f"{self.pulls} pulls the budget pays for beside the gate)")
        else:
            why = (f"cut from {self.cap} to the seed and one variant: the budget pays for "
                   f"{self.pulls} pulls beside the gate")
        if warmup > self.pulls:
            why += f"; the budget ends the warm-up after {self.pulls} pulls"
        return (f"maspob: {_count(arms, 'arm')} per role ({_count(roles, 'role')}, pools of "
                f"{self.size}): {why}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def affordable_pulls(available: int, *, rows: int, reserve: int, max_pulls: int | None) -> int:
    """Pulls of `rows` rollouts that `available` pays for beside `reserve`, capped."""
    pulls = max(available - reserve, 0) // rows
    return pulls if max_pulls is None else min(pulls, max_pulls)


def covering_pulls(roles: int, size: int) -> int:
    """Pulls of a covering warm-up over `roles` pools of `size`: the seed's and each arm's."""
    return 1 + roles * (size - 1)


def plan_pools(*, pulls: int, roles: int, cap: int, warmup: int,
               cover: bool = True) -> PoolPlan:
    """The `PoolPlan` for a budget of `pulls` pulls (module docstring)."""
    plan = PoolPlan(size=cap, pulls=pulls, cap=cap, cover=cover, warmup=warmup)
    if not cover:
        return plan
    fits = 1 + (plan.allowance - 1) // roles  # the largest k with 1 + roles (k - 1) <= it
    return replace(plan, size=max(MIN_POOL, min(cap, fits)))


def covering_warmup(sizes: Sequence[int], order: Sequence[int]) -> list[tuple[int, ...]]:
    """Every arm once, after the seed pull: roles in `order`, variants in pool order."""
    seed = [0] * len(sizes)
    arms: list[tuple[int, ...]] = []
    for role in order:
        for variant in range(1, sizes[role]):
            combo = list(seed)
            combo[role] = variant
            arms.append(tuple(combo))
    return arms

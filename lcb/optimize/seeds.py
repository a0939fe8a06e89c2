"""Logical request seeds: every model request of an optimizer job carries a reproducible seed.

The rule (stable across processes, machines and Python versions; Python's `hash` is salted per
process, so it is never used):

    base  = int.from_bytes(blake2b("lcb-seed/v1|<phase>|<iteration>|<row>|<role>|<turn>",
                                   digest_size=8).digest(), "big") mod 2**31
    seed  = (base + SEED_STRIDE * optimizer_seed) mod 2**31          # SEED_STRIDE = 1000

So optimizer seeds 0/1/2 offset every request seed by 0/1000/2000: the optimizer seed is added
*after* hashing, never hashed, and a request of seed 1 has exactly the seed of the same request
of seed 0 plus 1000 (mod 2**31). Seeds are non-negative 31-bit integers, which every
OpenAI-compatible server accepts.

Evaluation phases (validate, test) hash iteration 0 and never the bundle: the seed depends on
(optimizer seed, phase, row, role, turn) only, so evaluating the seed bundle and a deployed
bundle that equals it sends identical requests, and the deployed seed bundle reproduces the
baseline. A bundle hash is deliberately not an input of any seed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

SEED_STRIDE = 1000
SEED_MODULUS = 2**31
_NAMESPACE = "lcb-seed/v1"


class Phase(StrEnum):
    """The protocol's phases; part of every request seed."""

    OPTIMIZE = "optimize"
    VALIDATE = "validate"
    TEST = "test"

    @property
    def is_evaluation(self) -> bool:
        """True for the uncharged, greedy phases whose seeds ignore the iteration."""
        return self is not Phase.OPTIMIZE


def _check_int(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value or "|" in value:
        raise ValueError(f"{name} must be a non-empty string without '|', got {value!r}")
    return value


def hash_base(*, phase: Phase | str, iteration: int, row: str, role: str, turn: int) -> int:
    """The optimizer-seed-free part of a request seed (a 31-bit blake2b hash)."""
    key = "|".join((_NAMESPACE, str(Phase(phase)), str(iteration), row, role, str(turn)))
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % SEED_MODULUS


def request_seed(*, optimizer_seed: int, phase: Phase | str, iteration: int, row: str,
                 role: str, turn: int) -> int:
    """The seed of one model request; see the module docstring for the rule.

    In evaluation phases the iteration must be 0 (evaluations are not iterations).

    Example:
        >>> a = request_seed(optimizer_seed=0, phase="test", iteration=0, row="1873_A",
        ...                  role="solver", turn=0)
        >>> b = request_seed(optimizer_seed=1, phase="test", iteration=0, row="1873_A",
        ...                  role="solver", turn=0)
        >>> (b - a) % 2**31
        1000
    """
    phase = Phase(phase)
    _check_int("optimizer_seed", optimizer_seed)
    _check_int("iteration", iteration)
    _check_int("turn", turn)
    if phase.is_evaluation and iteration != 0:
        raise ValueError(f"phase {phase} is an evaluation: iteration must be 0, got {iteration}")
    base = hash_base(phase=phase, iteration=iteration, row=_check_text("row", row),
                     role=_check_text("role", role), turn=turn)
    return (base + SEED_STRIDE * optimizer_seed) % SEED_MODULUS


@dataclass(frozen=True)
class SeedScope:
    """The seed coordinates shared by every request of one rollout (one row through the team).

    A team asks `scope.request(role, turn)` for each of its model calls; `scope.rollout` is a
    single seed for code that takes one seed per problem (`lcb.teams.solving.solve(seed=...)`).
    A retry after an infrastructure failure reuses the same scope, hence the same seeds.
    """

    optimizer_seed: int
    phase: Phase
    iteration: int
    row: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase", Phase(self.phase))
        # Validate once, eagerly, with the same rules as request_seed.
        self.request("rollout", 0)

    def request(self, role: str, turn: int) -> int:
        """The seed of turn `turn` (0-based) of role `role` in this rollout."""
        return request_seed(optimizer_seed=self.optimizer_seed, phase=self.phase,
                            iteration=self.iteration, row=self.row, role=role, turn=turn)

    @property
    def rollout(self) -> int:
        """One seed for the whole rollout (the pseudo-role `rollout`, turn 0)."""
        return self.request("rollout", 0)


def optimize_scope(*, optimizer_seed: int, iteration: int, row: str) -> SeedScope:
    """Seeds of a charged rollout at optimization iteration `iteration`."""
    return SeedScope(optimizer_seed, Phase.OPTIMIZE, iteration, row)


def evaluation_scope(*, optimizer_seed: int, phase: Phase | str, row: str) -> SeedScope:
    """Seeds of an evaluation rollout: the same for every bundle evaluated on `row`."""
    phase = Phase(phase)
    if not phase.is_evaluation:
        raise ValueError(f"evaluation_scope needs phase validate or test, got {phase}")
    return SeedScope(optimizer_seed, phase, 0, row)

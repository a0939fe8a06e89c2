"""Options of the multi-agent teams: size, communication format, active agents, debate rounds.

Contract:
- `TeamOptions()` is the default team. Unset fields take their defaults when a team resolves
  them: team size `INDEPENDENT_N_AGENTS` (independent) / `DECENTRALIZED_N_AGENTS`
  (decentralized), each 4 when unset, and 4 for sequential and centralized; debate rounds
  `DECENTRALIZED_N_ROUNDS` (2).
- An environment variable that is set but is not a positive integer raises ValueError naming
  it; so do bad field values (at construction).
- `active` is the mask: the ids of the agents allowed to run (None: all of them). Ids are
  checked against the team's layout when the team runs (`Layout.active`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lcb.teams.formats import CommFormat, parse_format
from lcb.teams.layouts import DEFAULT_TEAM_SIZE, Topology

SIZE_ENV = {Topology.INDEPENDENT: "INDEPENDENT_N_AGENTS",
            Topology.DECENTRALIZED: "DECENTRALIZED_N_AGENTS"}
ROUNDS_ENV = "DECENTRALIZED_N_ROUNDS"
DEFAULT_ROUNDS = 2


def env_int(name: str, default: int, *, environ: Mapping[str, str] | None = None) -> int:
    """The positive integer in environment variable `name`, or `default` when unset/empty."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"environment variable {name}={raw!r} must be a positive integer")
    return value


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"TeamOptions.{name} must be a positive integer or None, got {value!r}")


@dataclass(frozen=True)
class TeamOptions:
    """How to build a team (see the module docstring)."""

    team_size: int | None = None
    communication: CommFormat = CommFormat.FREEFORM
    active: frozenset[str] | None = None
    rounds: int | None = None

    def __post_init__(self) -> None:
        _positive("team_size", self.team_size)
        _positive("rounds", self.rounds)
        object.__setattr__(self, "communication", parse_format(self.communication))
        if self.active is not None:
            object.__setattr__(self, "active", _mask(self.active))

    def size_for(self, topology: str | Topology) -> int:
        """The team size for `topology`: the field, else the env default, else 4."""
        if self.team_size is not None:
            return self.team_size
        name = SIZE_ENV.get(Topology(topology))
        return env_int(name, DEFAULT_TEAM_SIZE) if name else DEFAULT_TEAM_SIZE

    def rounds_for(self) -> int:
        """Debate rounds (round 0 included): the field, else `DECENTRALIZED_N_ROUNDS`, else 2."""
        return self.rounds if self.rounds is not None else env_int(ROUNDS_ENV, DEFAULT_ROUNDS)

    def to_record(self) -> dict[str, Any]:
        return {"team_size": self.team_size, "communication": self.communication.value,
                "active": None if self.active is None else sorted(self.active),
                "rounds": self.rounds}


def _mask(active: Iterable[str]) -> frozenset[str]:
    if isinstance(active, str):
        raise TypeError("TeamOptions.active must be a collection of agent ids, not a single str")
    ids = frozenset(active)
    bad = [agent for agent in ids if not isinstance(agent, str) or not agent]
    if bad:
        raise ValueError(f"TeamOptions.active holds invalid agent ids: {bad!r}")
    return ids

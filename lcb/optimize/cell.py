"""The team of an optimizer job, checked before anything heavy loads.

Contract: `TeamCell(topology, team_size, communication)` names a job's team and knows its prompt
slots (`roles`) and agent ids (`agents`); an unknown topology, size or format raises
`ValueError` naming the bad value, at construction. `TeamFacts` gives a class holding a
`cell` and a `seed_bundle` the `TeamSpec` properties and `whole_team_answers`
(`lcb.optimize.method`).
`check_method_fits(method, topology)`
refuses a multi-agent method (`TEAM_METHODS`) on the single-agent team, naming the methods it
gets. `DEFAULT_RUN_TIMEOUT_S` bounds one team run
(`lcb.optimize.teamrun`). Imports the registry and the team layouts only (no model stack), so a
job can refuse a bad team at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from lcb.registry import SEED_ROLES, SINGLE, SINGLE_AGENT_METHODS, TEAM_METHODS, TOPOLOGIES
from lcb.teams.formats import parse_format
from lcb.teams.layouts import team_layout
from lcb.teams.options import TeamOptions
from lcb.teams.reuse import whole_team_answers

DEFAULT_RUN_TIMEOUT_S = 1800.0


def check_method_fits(method: str, topology: str) -> None:
    """Refuse a multi-agent method on the single-agent team, naming the methods it gets."""
    if topology == SINGLE and method in TEAM_METHODS:
        raise ValueError(f"method {method!r} optimizes multi-agent teams; topology 'single' gets "
                         f"{', '.join(SINGLE_AGENT_METHODS)}")


@dataclass(frozen=True)
class TeamCell:
    """The team of a job. `team_size` None means the team's default size."""

    topology: str
    team_size: int | None = None
    communication: str = "freeform"

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {self.topology!r}; known: {', '.join(TOPOLOGIES)}")
        object.__setattr__(self, "communication", parse_format(self.communication).value)
        if self.is_single and self.team_size not in (None, 1):
            raise ValueError(f"the single team has one agent; got team size {self.team_size}")
        _ = self.agents  # resolves the layout: a bad size fails here

    @property
    def is_single(self) -> bool:
        return self.topology == SINGLE

    def options(self, active: frozenset[str] | None = None) -> TeamOptions:
        return TeamOptions(team_size=self.team_size, communication=self.communication,
                           active=active)

    @cached_property
    def size(self) -> int:
        """The resolved team size (1 for `single`)."""
        return 1 if self.is_single else self.options().size_for(self.topology)

    @cached_property
    def agents(self) -> tuple[str, ...]:
        if self.is_single:
            return ("solver",)
        return team_layout(self.topology, self.size).ids

    def whole_team_answers(self, active: frozenset[str]) -> bool:
        """`lcb.teams.reuse.whole_team_answers` for this team (single: any mask, since its
        one agent either runs as in the whole team or does not run)."""
        if self.is_single:
            return True
        return whole_team_answers(team_layout(self.topology, self.size), active)

    @cached_property
    def roles(self) -> tuple[str, ...]:
        if self.is_single:
            return SEED_ROLES[SINGLE]
        return team_layout(self.topology, self.size).roles


class TeamFacts:
    """The `TeamSpec` facts of a job read from its `cell` and `seed_bundle` (set by the class
    that mixes this in): topology, team size, message format, roles, agents, the team graph."""

    cell: TeamCell
    seed_bundle: Mapping[str, str]

    @property
    def topology(self) -> str:
        return self.cell.topology

    @property
    def team_size(self) -> int:
        return self.cell.size

    @property
    def communication(self) -> str:
        return self.cell.communication

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.seed_bundle)

    @property
    def agents(self) -> tuple[str, ...]:
        return self.cell.agents

    def whole_team_answers(self, active: frozenset[str]) -> bool:
        return self.cell.whole_team_answers(active)

    @cached_property
    def graph(self) -> Any:
        from lcb.optimize.graph import team_graph  # the team layouts' graph: loaded when asked

        return team_graph(self.cell)

"""A team run's setup, resolved from its topology and options before any model is called.

Contract: `Team.resolve(topology, options, bundle=None)` gives the layout at the options' size,
the active agents (the options' mask) and the options; it raises ValueError (a configuration
error) for a bundle role the topology does not have (`lcb.registry.SEED_ROLES`), an unknown
agent id in the mask, or a bad team size. It imports no model stack, so a batch checks its
team before it loads one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lcb.registry import SEED_ROLES
from lcb.teams.layouts import Agent, Layout, team_layout
from lcb.teams.options import TeamOptions


@dataclass(frozen=True)
class Team:
    """One team run's setup: the layout at its size, the active agents, the options."""

    layout: Layout
    active: tuple[Agent, ...]
    options: TeamOptions

    @classmethod
    def resolve(cls, topology: str, options: TeamOptions | None,
                bundle: Mapping[str, str] | None = None) -> Team:
        """The team `options` describe; ValueError for a bundle role the topology lacks."""
        unknown = sorted(set(bundle or {}) - set(SEED_ROLES.get(topology, ())))
        if unknown:
            known = ", ".join(SEED_ROLES.get(topology, ()))
            raise ValueError(f"prompt bundle has role(s) {unknown} that the {topology} team "
                             f"does not have; its roles: {known}")
        options = options or TeamOptions()
        layout = team_layout(topology, options.size_for(topology))
        return cls(layout, layout.active(options.active), options)

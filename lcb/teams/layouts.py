"""Who is on each multi-agent team at each size, under which id, with which prompt and tools.

Contract:
- `team_layout(topology, size)` returns the agents of a team in their fixed order. An agent has
  an id (its transcript source tag and the name a mask uses) and a `Role` (its prompt slot in
  `configs/prompts/<topology>/lcb/`, whether it has `python_exec`, whether its prompt ends with a
  complete program).
- independent: `coder_0 .. coder_{r-1}`, all role `coder`; decentralized: `debater_0 ..`, role
  `debater`. Any size >= 1 (their sizes also come from `INDEPENDENT_N_AGENTS` and friends).
- sequential: stages named by their role, in pipeline order; centralized: `manager` first, then
  its workers named by their role. Sizes 2, 4, 8 and 10 only (`TEAM_SIZES`). Which roles a
  team of each size has is `lcb.registry`'s (`SEQUENTIAL_STAGES`, `CENTRALIZED_WORKERS`); what
  each role does (its duty, its tools) is here.
- In every sequential layout the last stage writes a program, so every stage can change the
  submitted result. A role has `python_exec` exactly when its seed prompt tells it to run code.
- `Layout.active(mask)`: the agents a masked run keeps, in layout order; None keeps all; an id
  the layout does not have raises ValueError naming the known ids.
- `DELEGATE_TOOL` is the tool a centralized manager calls to give a worker a task, and
  `DELEGATION_STEP` the key of such a step in a run's transcript (`lcb.teams.centralized`);
  named here so that code reading transcripts needs no team runtime.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from lcb.registry import (
    CENTRALIZED_MANAGER,
    CENTRALIZED_WORKERS,
    DEFAULT_TEAM_SIZE,
    MULTI_AGENT_TOPOLOGIES,
    SEQUENTIAL_STAGES,
    TEAM_SIZES,
)

DELEGATE_TOOL = "delegate"
DELEGATION_STEP = "delegation"

# The multi-agent teams (`Topology.SEQUENTIAL`, ...), named in `lcb.registry`.
Topology = StrEnum("Topology", {name.upper(): name for name in MULTI_AGENT_TOPOLOGIES},
                   module=__name__)


@dataclass(frozen=True)
class Role:
    """A prompt slot. `duty` is the one line a manager reads about a worker."""

    name: str
    duty: str
    runs_code: bool = False
    writes_program: bool = False


def _roles(*roles: Role) -> dict[str, Role]:
    return {role.name: role for role in roles}


SEQUENTIAL_ROLES = _roles(
    Role("requirements_parser", "turns the statement into an exact specification"),
    Role("analyzer", "explains the task, the constraints and a fitting algorithm"),
    Role("algorithm_designer", "designs the algorithm step by step, with its complexity"),
    Role("coder", "writes the program", runs_code=True, writes_program=True),
    Role("complexity_analyzer", "checks the program's running time against the limits",
         writes_program=True),
    Role("edge_case_thinker", "lists the inputs most likely to break a solution"),
    Role("tester", "runs the program on examples, edge cases and large inputs",
         runs_code=True, writes_program=True),
    Role("debugger", "fixes the failures found so far", runs_code=True, writes_program=True),
    Role("optimizer", "makes the program fast enough", runs_code=True, writes_program=True),
    Role("code_reviewer", "reviews the program line by line and applies fixes",
         writes_program=True),
)

CENTRALIZED_ROLES = _roles(
    Role("manager", "leads the team and hands in the final program", writes_program=True),
    Role("analyzer", "explains the problem, its constraints and a suitable algorithm"),
    Role("coder", "writes the complete program and runs the examples", runs_code=True,
         writes_program=True),
    Role("tester", "runs a program on examples, edge cases and large inputs, reports failures",
         runs_code=True),
    Role("design", "designs the algorithm and checks its complexity"),
    Role("edge_case", "lists risky inputs with their correct outputs"),
    Role("debug", "finds the cause of a failure and returns the fixed program", runs_code=True,
         writes_program=True),
    Role("review", "reviews a program against the statement without running it"),
    Role("complexity_analyzer", "checks whether a program is fast enough for the limits"),
    Role("optimizer", "speeds up a correct program without changing its results",
         runs_code=True, writes_program=True),
)

INDEPENDENT_CODER = Role("coder", "solves the problem alone", runs_code=True, writes_program=True)
DEBATER = Role("debater", "solves the problem and debates the others' answers", runs_code=True,
               writes_program=True)

@dataclass(frozen=True)
class Agent:
    """One seat on a team: `id` tags its messages and names it in masks."""

    id: str
    role: Role


@dataclass(frozen=True)
class Layout:
    topology: Topology
    size: int
    agents: tuple[Agent, ...]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(agent.id for agent in self.agents)

    @property
    def roles(self) -> tuple[str, ...]:
        """The distinct prompt slots, in order of first use."""
        return tuple(dict.fromkeys(agent.role.name for agent in self.agents))

    def active(self, mask: Iterable[str] | None = None) -> tuple[Agent, ...]:
        """The agents kept by `mask` (a set of ids; None keeps every agent), in layout order."""
        if mask is None:
            return self.agents
        if isinstance(mask, str):
            raise TypeError("mask must be a collection of agent ids, not a single str")
        wanted = set(mask)
        unknown = sorted(wanted - set(self.ids))
        if unknown:
            raise ValueError(f"unknown agent id(s) {unknown} for the {self.topology} team of "
                             f"size {self.size}; its agents: {', '.join(self.ids)}")
        return tuple(agent for agent in self.agents if agent.id in wanted)


def _replicas(role: Role, size: int) -> tuple[Agent, ...]:
    return tuple(Agent(f"{role.name}_{i}", role) for i in range(size))


def _named(table: dict[str, Role], names: Iterable[str]) -> tuple[Agent, ...]:
    return tuple(Agent(name, table[name]) for name in names)


def team_layout(topology: str | Topology, size: int = DEFAULT_TEAM_SIZE) -> Layout:
    """The layout of `topology` at team size `size` (see the module docstring).

    >>> team_layout("sequential", 2).ids
    ('coder', 'debugger')
    >>> team_layout("centralized", 2).ids
    ('manager', 'coder')
    """
    try:
        kind = Topology(topology)
    except ValueError:
        known = ", ".join(t.value for t in Topology)
        raise ValueError(f"no multi-agent team {topology!r}; known: {known}") from None
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"team size must be a positive integer, got {size!r}")
    if kind in (Topology.INDEPENDENT, Topology.DECENTRALIZED):
        role = INDEPENDENT_CODER if kind is Topology.INDEPENDENT else DEBATER
        return Layout(kind, size, _replicas(role, size))
    if size not in TEAM_SIZES:
        raise ValueError(f"the {kind} team has sizes {', '.join(map(str, TEAM_SIZES))}; "
                         f"got {size}")
    if kind is Topology.SEQUENTIAL:
        return Layout(kind, size, _named(SEQUENTIAL_ROLES, SEQUENTIAL_STAGES[size]))
    if kind is Topology.CENTRALIZED:
        names = (CENTRALIZED_MANAGER, *CENTRALIZED_WORKERS[size])
        return Layout(kind, size, _named(CENTRALIZED_ROLES, names))
    raise ValueError(f"the {kind} team has no layout here yet")  # a topology added to the registry

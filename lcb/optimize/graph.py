"""The team graph of a job and, per rollout, what each role read and wrote.

Contract:
- `team_graph(cell)` describes the cell's team from `lcb.teams.layouts` (roles are never listed
  here): `roles` are the prompt slots in team order, `agents` maps each agent id to its role,
  `edges` are role-level (parent, child) pairs, meaning "the child reads the parent's output":
  - sequential: `kind="chain"`, one edge per pair of consecutive stages. A stage also reads
    every earlier stage (its user message holds all of them); the chain keeps the graph a path,
    the structure MAP inference and coordinate ascent walk, with each stage's direct
    predecessor as its parent.
  - centralized: `kind="star"`, an edge from `manager` to each worker role (the manager's
    instruction is the worker's input; the worker's reply comes back as a tool result).
  - independent / decentralized: `kind="shared"`, one role and no edges. Debaters read each
    other's previous-round answers, but they all hold the same prompt slot: at the role level
    that is a self-loop on one variable, which would make the graph cyclic and offers no
    choice (both ends take the same prompt). Who read whom is in `role_io` (a debater's round-k
    input holds its peers' round-(k-1) answers).
  - single: `kind="single"`, the one `solver` role.
- `role_io(transcript, graph)` splits a team transcript (`TeamResult.transcript`: entries with
  `source`, `role`, `type` system|user|assistant|tool, `content`, `tool_calls`, and the team's
  step key `stage` | `round` | `delegation`) into invocations: one `RoleTurn` per agent run,
  i.e. per sequential stage, independent replica, debate round of a peer, centralized
  delegation (the manager's own run is one turn). An invocation starts at the agent's system
  message (or where the source or step changes, or at a user message after an answer);
  its `input` is the user text it was given, its `output` the content of its last message when
  that is an assistant message (what the team read as its answer, `fields["outputs"]`), else "".
  `tool_calls` are (name, args) of every call it made, in order; `tool_results` the replies.
- With a graph, every role of the graph is a key (an empty list for a role that did not run, e.g.
  masked) and an agent the graph lacks, or tagged with another role, raises ValueError. Without
  one, roles appear in order of first use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from lcb.registry import CENTRALIZED_MANAGER as MANAGER
from lcb.teams.layouts import Topology, team_layout

if TYPE_CHECKING:
    from lcb.optimize.teamrun import TeamCell

GraphKind = Literal["chain", "star", "shared", "single"]
STEP_KEYS = ("stage", "round", "delegation")


@dataclass(frozen=True)
class TeamGraph:
    """Roles and their parent -> child edges (see the module docstring)."""

    topology: str
    roles: tuple[str, ...]
    agents: Mapping[str, str]
    edges: tuple[tuple[str, str], ...]
    kind: GraphKind

    def __post_init__(self) -> None:
        object.__setattr__(self, "agents", MappingProxyType(dict(self.agents)))
        named = {r for edge in self.edges for r in edge} | set(self.agents.values())
        stray = sorted(named - set(self.roles))
        if stray:
            raise ValueError(f"team graph: role(s) {stray} are not among its roles {self.roles}")
        if len(self.topological_order()) != len(self.roles):
            raise ValueError(f"team graph: edges {self.edges} have a cycle")

    def __hash__(self) -> int:
        return hash((self.topology, self.roles, tuple(self.agents.items()), self.edges,
                     self.kind))

    def _known(self, role: str) -> None:
        if role not in self.roles:
            raise ValueError(f"no role {role!r} in the {self.topology} team; "
                             f"its roles: {', '.join(self.roles)}")

    def parents(self, role: str) -> tuple[str, ...]:
        """The roles whose output `role` reads, in team order."""
        self._known(role)
        return tuple(p for p, c in self.edges if c == role)

    def children(self, role: str) -> tuple[str, ...]:
        """The roles that read `role`'s output, in team order."""
        self._known(role)
        return tuple(c for p, c in self.edges if p == role)

    def agents_of(self, role: str) -> tuple[str, ...]:
        """The agent ids holding `role`'s prompt, in layout order."""
        self._known(role)
        return tuple(agent for agent, r in self.agents.items() if r == role)

    def topological_order(self) -> tuple[str, ...]:
        """Roles with every parent before its children; ties keep team order (Kahn)."""
        waiting = {role: sum(1 for _, c in self.edges if c == role) for role in self.roles}
        order: list[str] = []
        ready = [role for role in self.roles if waiting[role] == 0]
        while ready:
            role = ready.pop(0)
            order.append(role)
            for child in (c for p, c in self.edges if p == role):
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)
            ready.sort(key=self.roles.index)
        return tuple(order)

    def to_record(self) -> dict[str, Any]:
        """JSON-able form (for job artifacts)."""
        return {"topology": self.topology, "kind": self.kind, "roles": list(self.roles),
                "agents": dict(self.agents), "edges": [list(edge) for edge in self.edges]}


def team_graph(cell: TeamCell) -> TeamGraph:
    """The graph of `cell`'s team, from its layout.

    >>> from lcb.optimize.teamrun import TeamCell
    >>> team_graph(TeamCell("centralized", 4)).edges
    (('manager', 'analyzer'), ('manager', 'coder'), ('manager', 'tester'))
    """
    if cell.is_single:
        return TeamGraph(cell.topology, tuple(cell.roles), dict.fromkeys(cell.agents,
                         cell.roles[0]), (), "single")
    layout = team_layout(cell.topology, cell.size)
    agents = {agent.id: agent.role.name for agent in layout.agents}
    roles = layout.roles
    topology = Topology(cell.topology)
    if topology is Topology.SEQUENTIAL:
        return TeamGraph(cell.topology, roles, agents, tuple(pairwise(roles)), "chain")
    if topology is Topology.CENTRALIZED:
        edges = tuple((MANAGER, role) for role in roles if role != MANAGER)
        return TeamGraph(cell.topology, roles, agents, edges, "star")
    return TeamGraph(cell.topology, roles, agents, (), "shared")


@dataclass(frozen=True)
class RoleTurn:
    """One invocation of one agent: what it was given and what it answered."""

    agent: str
    input: str
    output: str
    tool_calls: tuple[tuple[str, Any], ...] = ()
    tool_results: tuple[str, ...] = ()
    step: int | None = None


def _step(entry: Mapping[str, Any]) -> int | None:
    return next((entry[key] for key in STEP_KEYS if key in entry), None)


def invocations(transcript: Iterable[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The transcript cut into agent runs (boundaries in the module docstring)."""
    runs: list[list[Mapping[str, Any]]] = []
    where: tuple[Any, int | None] | None = None
    for entry in transcript:
        here = (entry.get("source"), _step(entry))
        answered = bool(runs) and any(e.get("type") == "assistant" for e in runs[-1])
        if (here != where or entry.get("type") == "system"
                or (entry.get("type") == "user" and answered)):
            runs.append([])
            where = here
        runs[-1].append(entry)
    return runs


def _turn(run: Sequence[Mapping[str, Any]]) -> RoleTurn:
    first_answer = next((i for i, e in enumerate(run) if e.get("type") == "assistant"), len(run))
    given = [str(e.get("content") or "") for e in run[:first_answer] if e.get("type") == "user"]
    last = run[-1]
    output = str(last.get("content") or "") if last.get("type") == "assistant" else ""
    calls = tuple((str(c.get("name") or ""), c.get("args"))
                  for e in run if e.get("type") == "assistant" for c in e.get("tool_calls") or ())
    results = tuple(str(e.get("content") or "") for e in run if e.get("type") == "tool")
    return RoleTurn(agent=str(last.get("source")), input="\n\n".join(given), output=output,
                    tool_calls=calls, tool_results=results, step=_step(last))


def _role(run: Sequence[Mapping[str, Any]], graph: TeamGraph | None) -> str:
    agent, tagged = run[0].get("source"), run[0].get("role")
    if graph is None:
        return str(tagged if tagged is not None else agent)
    if agent not in graph.agents:
        raise ValueError(f"transcript agent {agent!r} is not on the {graph.topology} team; "
                         f"its agents: {', '.join(graph.agents)}")
    role = graph.agents[agent]
    if tagged is not None and tagged != role:
        raise ValueError(f"transcript tags agent {agent!r} with role {tagged!r}; "
                         f"the {graph.topology} team gives it {role!r}")
    return role


def role_io(transcript: Iterable[Mapping[str, Any]],
            graph: TeamGraph | None = None) -> dict[str, list[RoleTurn]]:
    """Each role's invocations in transcript order (see the module docstring).

    >>> entries = [{"source": "solver", "role": "solver", "type": "system", "content": "S"},
    ...            {"source": "solver", "role": "solver", "type": "user", "content": "Q"},
    ...            {"source": "solver", "role": "solver", "type": "assistant", "content": "A",
    ...             "tool_calls": []}]
    >>> [(t.agent, t.input, t.output) for t in role_io(entries)["solver"]]
    [('solver', 'Q', 'A')]
    """
    turns: dict[str, list[RoleTurn]] = {role: [] for role in (graph.roles if graph else ())}
    for run in invocations(transcript):
        turns.setdefault(_role(run, graph), []).append(_turn(run))
    return turns

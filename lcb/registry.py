"""The names lcb is built from, in one place: methods, topologies, roles, formats, graders.

Standard library only and no lcb import, so any module may read it and `lcb --help` stays fast.
The code that gives each name its meaning lives elsewhere; tests/test_registry.py keeps the two
equal (every topology has a team and seed prompts for its roles, every method a factory).

Contract:
- `METHODS`: the optimizer keys, in the specification's grid order; `lcb.optimize.methods`
  registers a factory under each, in this order. `SINGLE_AGENT_METHODS` are those the `single`
  team takes; `TEAM_METHODS` (the rest) credit or search over several agents' prompts and refuse
  it. `PHASES`: the phases of an optimizer job (`lcb.optimize.job.JobPhase`). `FEEDBACK_MODES`
  (`--feedback`): what a method learns of a failed train rollout, the first (`full`: the failing
  test's input, expected and actual output, the error) being the standard; `verdict` keeps the
  verdict and the error alone. `SELECTIONS` (`--selection`): where a method's selection set
  comes from, the first (`validation`) being the standard; `train` carves it from train
  (`lcb.optimize.sealing`).
- `TOPOLOGIES`: the teams, in the order they are introduced (single first): the CLI's and the
  grid's choices and the report's order of runs; `lcb.teams.solving.TEAMS` runs each.
  `MULTI_AGENT_TOPOLOGIES` are all but `single` (`lcb.teams.layouts.Topology`);
  `INTERACTING_TOPOLOGIES` those whose agents read one another (not independent's replicas):
  the report sets each beside the `single` team and `independent` of the same size, and their
  seed entry points live under `topologies/<topology>/langgraph/lcb/`.
- `TEAM_SIZES` (sequential and centralized; independent and decentralized take any size) and
  `DEFAULT_TEAM_SIZE`. `SEQUENTIAL_STAGES[size]`: the sequential team's stages in pipeline
  order; `CENTRALIZED_WORKERS[size]`: the workers of the centralized `CENTRALIZED_MANAGER`.
- `SEED_ROLES[topology]`: its prompt slots, each with a seed prompt file
  `configs/prompts/<topology>/lcb/<role>.txt`, in the order a reader meets them: the team of
  the default size first, then the roles larger teams add (`lcb.agents.prompts` lists a
  bundle's roles in this order).
- `COMMUNICATIONS`: the inter-agent message formats (`--communication`,
  `lcb.teams.formats.CommFormat`); the first, `DEFAULT_COMMUNICATION`, asks for no format.
- `GRADERS` (`--grader`) and `SANDBOXES` (`--sandbox`: how graded programs and `python_exec`
  runs are contained). `GRID_EXECUTORS`: where `lcb grid run` runs jobs
  (`lcb.grid.executors.EXECUTORS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

METHODS = ("identity", "gepa", "mipro", "mamut_gepa", "tavo", "maspo", "hivemind", "mapro",
           "maspob")
SINGLE_AGENT_METHODS = ("identity", "gepa", "mipro")
TEAM_METHODS = tuple(method for method in METHODS if method not in SINGLE_AGENT_METHODS)
PHASES = ("optimize", "validate", "test", "all")
FEEDBACK_MODES = ("full", "verdict")
SELECTIONS = ("validation", "train")

SINGLE = "single"
INTERACTING_TOPOLOGIES = ("sequential", "centralized", "decentralized")
MULTI_AGENT_TOPOLOGIES = ("independent", *INTERACTING_TOPOLOGIES)
TOPOLOGIES = (SINGLE, *MULTI_AGENT_TOPOLOGIES)

TEAM_SIZES = (2, 4, 8, 10)
DEFAULT_TEAM_SIZE = 4
SEQUENTIAL_STAGES: Mapping[int, tuple[str, ...]] = {
    2: ("coder", "debugger"),
    4: ("analyzer", "coder", "tester", "debugger"),
    8: ("requirements_parser", "analyzer", "algorithm_designer", "coder", "edge_case_thinker",
        "tester", "debugger", "code_reviewer"),
    10: ("requirements_parser", "analyzer", "algorithm_designer", "coder", "complexity_analyzer",
         "edge_case_thinker", "tester", "debugger", "optimizer", "code_reviewer"),
}
CENTRALIZED_MANAGER = "manager"
CENTRALIZED_WORKERS: Mapping[int, tuple[str, ...]] = {
    2: ("coder",),
    4: ("analyzer", "coder", "tester"),
    8: ("analyzer", "coder", "tester", "design", "edge_case", "debug", "review"),
    10: ("analyzer", "coder", "tester", "design", "edge_case", "debug", "review",
         "complexity_analyzer", "optimizer"),
}


def _met_in_order(teams: Mapping[int, tuple[str, ...]]) -> tuple[str, ...]:
    """Every role of `teams` (size -> roles), the default size's first, then by size."""
    sizes = (DEFAULT_TEAM_SIZE, *sorted(teams))
    roles: Iterable[str] = (role for size in sizes for role in teams[size])
    return tuple(dict.fromkeys(roles))


SEED_ROLES: Mapping[str, tuple[str, ...]] = {
    "single": ("solver",),
    "independent": ("coder",),
    "sequential": _met_in_order(SEQUENTIAL_STAGES),
    "centralized": (CENTRALIZED_MANAGER, *_met_in_order(CENTRALIZED_WORKERS)),
    "decentralized": ("debater",),
}

COMMUNICATIONS = ("freeform", "semi_structured", "structured_soft")
DEFAULT_COMMUNICATION = COMMUNICATIONS[0]

GRADERS = ("default", "official")
SANDBOXES = ("process", "bwrap")
GRID_EXECUTORS = ("local", "slurm", "ray")

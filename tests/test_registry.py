"""lcb.registry names what the code provides, and the CLI, grid, report and teams read it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
from typer.testing import CliRunner

from lcb import registry
from lcb.agents.prompts import PROMPTS_ROOT, TASK_DIR, load_role_prompt
from lcb.registry import (
    COMMUNICATIONS,
    METHODS,
    MULTI_AGENT_TOPOLOGIES,
    SEED_ROLES,
    TEAM_SIZES,
    TOPOLOGIES,
)


def test_importing_the_registry_loads_nothing_but_the_standard_library():
    code = ("import sys; before = set(sys.modules); import lcb.registry; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[1])
    loaded = set(done.stdout.split())
    outside = {name for name in loaded - {"lcb", "lcb.registry"}
               if name.split(".")[0] not in sys.stdlib_module_names}
    assert "lcb.registry" in loaded and not outside, outside


def test_every_method_key_has_a_factory_in_the_registrys_order():
    from lcb.optimize.methods import OPTIMIZERS, check_topology

    assert tuple(OPTIMIZERS) == METHODS
    assert set(registry.SINGLE_AGENT_METHODS) | set(registry.TEAM_METHODS) == set(METHODS)
    assert not set(registry.SINGLE_AGENT_METHODS) & set(registry.TEAM_METHODS)
    for method in METHODS:
        if method in registry.SINGLE_AGENT_METHODS:
            check_topology(method, registry.SINGLE)
        else:
            with pytest.raises(ValueError, match="topology 'single' gets identity, gepa, mipro"):
                check_topology(method, registry.SINGLE)


def test_every_topology_has_a_team_and_the_multi_agent_ones_a_layout():
    from lcb.teams.layouts import Topology
    from lcb.teams.solving import TEAMS

    # As sets: another test deletes and restores a TEAMS entry, which moves it to the end.
    assert set(TEAMS) == set(TOPOLOGIES) and len(TEAMS) == len(TOPOLOGIES)
    assert TOPOLOGIES == (registry.SINGLE, *MULTI_AGENT_TOPOLOGIES)
    assert tuple(Topology) == MULTI_AGENT_TOPOLOGIES
    assert set(registry.INTERACTING_TOPOLOGIES) < set(MULTI_AGENT_TOPOLOGIES)


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_role_has_a_seed_prompt_file_and_no_file_lacks_a_role(topology):
    folder = PROMPTS_ROOT / topology / TASK_DIR
    assert {path.stem for path in folder.glob("*.txt")} == set(SEED_ROLES[topology])
    for role in SEED_ROLES[topology]:
        assert load_role_prompt(topology, role)  # present and not empty
    hashes = json.loads((PROMPTS_ROOT / "hashes.json").read_text(encoding="utf-8"))["prompts"]
    assert set(hashes[topology]) == set(SEED_ROLES[topology])


def test_the_prompt_manifest_lists_exactly_the_topologies():
    hashes = json.loads((PROMPTS_ROOT / "hashes.json").read_text(encoding="utf-8"))["prompts"]
    assert set(hashes) == set(TOPOLOGIES)


@pytest.mark.parametrize("topology", MULTI_AGENT_TOPOLOGIES)
def test_the_layouts_use_exactly_the_seed_roles(topology):
    from lcb.teams.layouts import CENTRALIZED_ROLES, SEQUENTIAL_ROLES, team_layout

    used = {role for size in TEAM_SIZES for role in team_layout(topology, size).roles}
    assert used == set(SEED_ROLES[topology])
    defined = {"sequential": SEQUENTIAL_ROLES, "centralized": CENTRALIZED_ROLES}.get(topology)
    if defined is not None:
        assert set(defined) == set(SEED_ROLES[topology])


def test_the_single_team_and_the_centralized_manager_match_the_registry():
    from lcb.teams import centralized, single

    assert single.ROLES == SEED_ROLES["single"]
    assert centralized.MANAGER == registry.CENTRALIZED_MANAGER == SEED_ROLES["centralized"][0]


def test_the_roles_are_listed_as_before():
    # The order bundles, prompt hashes and job records list roles in: never reordered.
    assert SEED_ROLES["sequential"] == (
        "analyzer", "coder", "tester", "debugger", "requirements_parser", "algorithm_designer",
        "edge_case_thinker", "code_reviewer", "complexity_analyzer", "optimizer")
    assert SEED_ROLES["centralized"] == (
        "manager", "analyzer", "coder", "tester", "design", "edge_case", "debug", "review",
        "complexity_analyzer", "optimizer")


def test_every_communication_format_has_a_contract_and_the_first_is_the_default():
    from lcb.teams.formats import CommFormat, format_contract
    from lcb.teams.options import TeamOptions

    assert tuple(CommFormat) == COMMUNICATIONS
    assert TeamOptions().communication == registry.DEFAULT_COMMUNICATION == COMMUNICATIONS[0]
    assert format_contract(registry.DEFAULT_COMMUNICATION) == ""
    assert all(format_contract(fmt) for fmt in COMMUNICATIONS[1:])


def test_graders_sandboxes_and_phases_are_the_registrys():
    from lcb.grading.pool import GRADERS
    from lcb.optimize.job import JobPhase
    from lcb.sandbox.launch import SANDBOXES

    assert GRADERS is registry.GRADERS and SANDBOXES is registry.SANDBOXES
    assert tuple(JobPhase) == registry.PHASES


def test_every_topology_has_its_seed_entry_point():
    from lcb.cli.run_cmd import ENTRY_MODULES

    assert tuple(ENTRY_MODULES) == TOPOLOGIES
    for module in ENTRY_MODULES.values():
        assert importlib.util.find_spec(module) is not None, module


def test_the_cli_choices_come_from_the_registry():
    from lcb.cli import load_commands, optimize_cmd, options

    assert tuple(options.Topology) == TOPOLOGIES
    assert tuple(options.Communication) == COMMUNICATIONS
    assert tuple(options.Grader) == registry.GRADERS
    assert tuple(options.Sandbox) == registry.SANDBOXES
    assert optimize_cmd.METHODS is METHODS and optimize_cmd.PHASES is registry.PHASES
    env = {"COLUMNS": "200"}
    run_help = CliRunner().invoke(load_commands("run"), ["run", "--help"], env=env).output
    optimize_help = CliRunner().invoke(load_commands("optimize"), ["optimize", "--help"],
                                       env=env).output
    for shown in (run_help, optimize_help):
        assert f"<{'|'.join(TOPOLOGIES)}>" in shown
        assert f"<{'|'.join(COMMUNICATIONS)}>" in shown
    assert ", ".join(METHODS) in optimize_help


def test_the_grid_schema_checks_against_the_registry():
    from lcb.grid.spec import KNOWN, GridSpec, Settings, SpecError, parse_spec

    assert KNOWN == {"method": METHODS, "topology": TOPOLOGIES}
    assert GridSpec.model_fields["communications"].default == (registry.DEFAULT_COMMUNICATION,)
    for field, names in (("grader", registry.GRADERS), ("sandbox", registry.SANDBOXES)):
        literal, _none = get_args(Settings.model_fields[field].annotation)
        assert get_args(literal) == names
    base = {"models": {"m": {"id": "x"}}, "methods": ["identity"], "topologies": ["single"]}
    for axis, known in (("methods", METHODS), ("topologies", TOPOLOGIES),
                        ("communications", COMMUNICATIONS)):
        with pytest.raises(SpecError, match=f"known: {', '.join(known)}"):
            parse_spec({**base, axis: ["nope"]}, base=Path("."))


def test_the_report_orders_runs_and_pairs_teams_by_the_registry():
    from lcb.report import aggregates, collect

    assert collect.TOPOLOGIES is TOPOLOGIES
    assert aggregates.INTERACTING_TOPOLOGIES is registry.INTERACTING_TOPOLOGIES


def test_every_grid_executor_is_offered_and_runs():
    from lcb.cli.grid_cmd import Executor
    from lcb.grid.executors import EXECUTORS

    assert tuple(Executor) == tuple(EXECUTORS) == registry.GRID_EXECUTORS

"""Every method through the planted-improvement harness (`tests/helpers_planted.py`).

(a) the planted fix is deployed within the stated budget on two multi-agent topologies;
(b) on the control, where no prompt change helps, the seed is kept. gepa and mipro answer the
default responders and run here; each native method (mamut_gepa, tavo, maspo, hivemind, mapro,
maspob) has prompts of its own format, so its planted and control jobs live in its own test
file (`tests/test_<key>*.py`) with its responder and the settings its doc states.
"""

import pytest

from tests.helpers_planted import assert_fix_deployed, assert_seed_kept, run_planted
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(300)

# (topology, team size, the role whose answer is submitted)
TEAMS = {"independent": ("independent", 2, "coder"),
         "sequential": ("sequential", 2, "debugger")}
PLANTED = {  # method -> (budget, topologies it must fix)
    "gepa": (40, ("independent", "sequential")),
    "mipro": (40, ("independent", "sequential")),
}
CASES = [(method, topology) for method, (_, topologies) in PLANTED.items()
         for topology in topologies]


@pytest.mark.slow
@pytest.mark.parametrize(("method", "topology"), CASES)
def test_the_planted_fix_is_deployed(scripted, tmp_path, monkeypatch, method, topology):
    budget = PLANTED[method][0]
    name, size, role = TEAMS[topology]
    outcome = run_planted(scripted, tmp_path, monkeypatch, method=method, topology=name,
                          team_size=size, budget=budget, answering_role=role)
    assert_fix_deployed(outcome)


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(PLANTED))
def test_the_control_keeps_the_seed(scripted, tmp_path, monkeypatch, method):
    budget = PLANTED[method][0]
    name, size, role = TEAMS["independent"]
    outcome = run_planted(scripted, tmp_path, monkeypatch, method=method, topology=name,
                          team_size=size, budget=budget, answering_role=role, control=True)
    assert_seed_kept(outcome)

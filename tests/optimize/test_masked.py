"""Masked coalitions: a mask that leaves no agent to run is an abstaining team (em 0, charged, no
model call), not an infrastructure failure; a bad mask is a configuration error. (Through the
evaluator with `reuse`, as hivemind asks, such a coalition is free:
`tests/optimize/test_coalition_reuse.py`.)"""

import asyncio

import pytest

from lcb.optimize.budget import BudgetLedger
from tests.helpers_optimize import sample_problems
from tests.helpers_teamrun import RefusingModel, bundle_of, team_runner
from tests.scripted_server import Reply, scripted_fixture  # noqa: F401

PROBLEM = sample_problems()[0]


def masked_rollout(server, topology, active, *, budget=3):
    async def main():
        async with team_runner(server.base_url, topology=topology) as runner:
            ledger = BudgetLedger(budget)
            bundle = bundle_of(topology)
            rollout = await ledger.arun_rollout(
                lambda: runner.attempt(bundle, PROBLEM, seed=7, iteration=2, active=active))
            return rollout, ledger

    return asyncio.run(main())


@pytest.mark.parametrize("topology, active, members", [
    ("sequential", frozenset(), "{}"),
    ("independent", frozenset(), "{}"),
    ("centralized", frozenset({"coder", "tester"}), "{coder, tester}"),  # no manager
    ("single", frozenset(), "{}"),
])
def test_a_coalition_that_runs_no_agent_is_a_charged_abstention(scripted, topology, active,
                                                                  members):
    server = scripted(RefusingModel())
    rollout, ledger = masked_rollout(server, topology, active)
    assert rollout is not None
    assert (rollout.score, rollout.grade, rollout.active, rollout.iteration) == (
        0.0, None, active, 2)
    assert rollout.feedback.startswith(f"the coalition {members} made no call (abstaining team)")
    assert (rollout.team.n_llm_calls, rollout.team.error) == (0, None)
    assert (ledger.charged, ledger.infra_failures) == (1, 0)
    assert server.chat_requests() == []


def test_a_coalition_that_runs_agents_is_graded_as_usual(scripted):
    server = scripted(RefusingModel())
    rollout, ledger = masked_rollout(server, "centralized", frozenset({"manager"}))
    assert rollout.score == 1.0 and rollout.team.n_llm_calls == 1
    assert ledger.charged == 1


def test_a_masked_team_whose_agents_fail_is_still_an_infrastructure_failure(scripted):
    server = scripted([Reply.error(503)])
    rollout, ledger = masked_rollout(server, "sequential", frozenset({"coder"}))
    assert rollout is None
    assert (ledger.charged, ledger.infra_failures, ledger.abandoned) == (0, 3, 1)


@pytest.mark.parametrize("topology, active", [("sequential", frozenset({"judge"})),
                                              ("single", frozenset({"coder"}))])
def test_a_mask_naming_an_unknown_agent_raises_at_once(scripted, topology, active):
    server = scripted(RefusingModel())
    with pytest.raises(ValueError, match="unknown agent id"):
        masked_rollout(server, topology, active)
    assert server.chat_requests() == []


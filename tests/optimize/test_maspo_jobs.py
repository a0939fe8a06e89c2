"""`maspo` whole jobs through the scripted server: the four multi-agent teams, the planted fix,
the control, and kill -9 then rerun (mechanisms: `tests/optimize/test_maspo.py`)."""

from __future__ import annotations

import gzip
import json

import pytest

from lcb.optimize.artifacts import read_history
from lcb.optimize.graph import team_graph
from lcb.optimize.methods.maspo import schedule
from lcb.optimize.teamrun import TeamCell
from tests.helpers_maspo import PLANTED_BUDGET, SMALL, maspo_responder
from tests.helpers_methods import FIX
from tests.helpers_planted import assert_fix_deployed, assert_seed_kept, run_planted
from tests.helpers_resume import assert_interrupted_resumes_to_whole
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(200)

# --- whole jobs ---------------------------------------------------------------------------

def _proposals_match_the_calls(out) -> None:
    with gzip.open(out / "calls.jsonl.gz", "rt", encoding="utf-8") as handle:
        purposes = [json.loads(line)["purpose"] for line in handle if line.strip()]
    proposals = [e for e in read_history(out) if e.kind == "proposal"]
    asked = [p for p in purposes if p.startswith("maspo:propose:")]
    assert asked and len(proposals) == len(asked)
    assert all(p.startswith("maspo:") for p in purposes)


_SCORES = {"reward", "local", "lookahead", "global", "parent", "child"}


def _history_holds_the_evidence(out) -> list:
    """Every proposal in the history names its parent (a bundle seen before it) and its one
    role, and says why it was dropped; at least one was scored, and each scored one carries
    its scores and the judges' per-row evidence, all answers parsed. The scored proposals."""
    history = read_history(out)
    seen, scored = {history[0].bundle_hash}, []
    for entry in history:
        if entry.kind == "proposal":
            assert entry.parent in seen and len(entry.roles) == 1 and entry.reason
            assert entry.accepted or entry.rejected_by in ("validator", "budget", "minibatch")
            if entry.scored_on is not None:
                scored.append(entry)
        seen.add(entry.bundle_hash)
    assert scored, "no proposal was scored"
    for entry in scored:
        assert entry.scored_on == "minibatch" and set(entry.scores) == _SCORES
        evidence = json.loads(entry.reason)
        per_row = evidence["per_row"]
        assert len(per_row) == len(evidence["rows"]) and evidence["unparsed_verdicts"] == 0
        for name in ("local", "lookahead", "reward"):
            mean = sum(row[name] for row in per_row) / len(per_row)
            assert entry.scores[name] == pytest.approx(mean)
        assert evidence["beam"] == ("entered the beam" if entry.accepted else "below the beam")
    return scored


@pytest.mark.parametrize(("topology", "role"), [("centralized", "manager"),
                                                ("decentralized", "debater")])
@pytest.mark.slow
def test_a_maspo_job_end_to_end(scripted, tmp_path, monkeypatch, topology, role) -> None:
    """optimize -> validate -> test on the star and the debate (the chain and the independent
    team run end to end in the planted tests below): proposals scored with their evidence,
    the roles taken in the schedule's order."""
    settings = {"minibatch": 3, "steps_per_turn": 1, "max_depth": 1}
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="maspo", topology=topology,
                          team_size=2, budget=18, answering_role=role,
                          responders=[maspo_responder], settings=settings)
    job = outcome.job
    assert 0 < job.summary["charged"] <= 18
    _proposals_match_the_calls(job.out)
    _history_holds_the_evidence(job.out)
    roles = [e.roles[0] for e in read_history(job.out) if e.kind == "proposal"]
    turns = [r for i, r in enumerate(roles) if i == 0 or roles[i - 1] != r]
    assert turns == schedule(team_graph(TeamCell(topology, 2)), steps_per_turn=1, max_depth=1)


@pytest.mark.parametrize(("topology", "role"), [("independent", "coder"),
                                                ("sequential", "debugger")])
@pytest.mark.slow
def test_the_planted_fix_is_deployed(scripted, tmp_path, monkeypatch, topology, role) -> None:
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="maspo", topology=topology,
                          team_size=2, budget=PLANTED_BUDGET, answering_role=role,
                          responders=[maspo_responder], settings=SMALL)
    assert_fix_deployed(outcome)
    _proposals_match_the_calls(outcome.job.out)
    _history_holds_the_evidence(outcome.job.out)


@pytest.mark.slow
def test_the_control_keeps_the_seed(scripted, tmp_path, monkeypatch) -> None:
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="maspo",
                          topology="independent", team_size=2, budget=PLANTED_BUDGET,
                          answering_role="coder", control=True, responders=[maspo_responder],
                          settings=SMALL)
    assert_seed_kept(outcome)
    scored = _history_holds_the_evidence(outcome.job.out)
    assert any(FIX in e.bundle["coder"] for e in scored)  # proposed, judged, not adopted


@pytest.mark.slow
def test_an_interrupted_job_reaches_the_same_result(scripted, tmp_path, monkeypatch) -> None:
    assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, "maspo", budget=15,
                                        topology="sequential",
                                        settings=["minibatch=3", "steps_per_turn=1",
                                                  "max_depth=1"],
                                        responders=[maspo_responder])

"""maspob's covering warm-up (`cover_arms`, a setting; issue #26): the pool size a budget
buys, the exact warm-up, every arm pulled once before LinUCB's first choice, the plan kept
across a resume; and planted jobs at small budgets where the good variant is the last arm of
the pool: the covering warm-up deploys it, the paper's random warm-up does not."""

from __future__ import annotations

import asyncio
import json
import logging
import random

import pytest

from lcb.optimize.artifacts import read_history, read_selection
from lcb.optimize.methods.maspob import make
from lcb.optimize.methods.maspob_cover import (
    PoolPlan,
    affordable_pulls,
    covering_pulls,
    covering_warmup,
    plan_pools,
)
from lcb.optimize.methods.maspob_pool import STYLES
from tests.helpers_methods import FIX
from tests.helpers_planted import assert_fix_deployed, assert_seed_kept, run_planted
from tests.helpers_resume import assert_interrupted_resumes_to_whole
from tests.optimize.test_maspob import (
    FAST,
    SMALL,
    fake,
    keyword_script,
    maspob_responder,
    needs_torch,
    variants_reply,
)
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(180)


def pool_size_for(budget: int, roles: int, *, rows: int = 5, gate: bool = True,
                  max_pulls: int | None = None, cap: int = 20, warmup: int = 6,
                  cover: bool = True) -> int:
    """What maspob plans at the start of a job with `budget` left (its `_plan`)."""
    pulls = affordable_pulls(budget, rows=rows, reserve=2 * rows if gate else 0,
                             max_pulls=max_pulls)
    return plan_pools(pulls=pulls, roles=roles, cap=cap, warmup=warmup, cover=cover).size


# --- mechanisms ----------------------------------------------------------------------------
@pytest.mark.parametrize(("budget", "roles", "extra", "size"), [
    (120, 1, {}, 11),  # 22 pulls beside the gate: the seed + 10 arms = 11 of them
    (120, 2, {}, 6),  # the seed + 2 x 5 arms = 11 <= 11
    (120, 4, {}, 3),  # the seed + 4 x 2 arms = 9 <= 11 (4 x 3 more would be 13)
    # below 12 pulls the random warm-up's 6 is more than half: the covering one may take 6
    (60, 1, {}, 6), (60, 2, {}, 3), (40, 1, {}, 6), (40, 2, {}, 3), (40, 4, {}, 2),
    (60, 1, {"warmup": 2}, 5),  # half of 10
    (30, 1, {}, 4),  # 4 pulls, all of them the warm-up's
    (20, 1, {}, 2),  # the minimum budget: 2 pulls, the seed's and the one arm's
    (20, 4, {}, 2),  # the floor: a seed and one variant, the budget ends the warm-up
    (205, 1, {}, 19), (210, 1, {}, 20),  # the whole pool of 20 from 40 pulls on
    (395, 2, {}, 19), (400, 2, {}, 20), (780, 4, {}, 20), (600, 4, {}, 15),
    (120, 1, {"gate": False}, 12),  # no reserve: 24 pulls
    (600, 1, {"max_pulls": 8}, 6),  # max_pulls caps what the budget pays for
    (600, 1, {"max_pulls": 16}, 8),
    (48, 2, {"rows": 4, "cap": 4, "warmup": 3}, 3),  # the fake-context test below
    (120, 1, {"cover": False}, 20),  # the paper's fixed pools
])
def test_the_pool_size_a_budget_buys(budget, roles, extra, size) -> None:
    assert pool_size_for(budget, roles, **extra) == size


def test_the_largest_pool_whose_covering_warmup_fits_half_or_the_random_ones_pulls() -> None:
    for pulls in range(0, 200):
        for roles in range(1, 6):
            for warmup in (2, 6):
                plan = plan_pools(pulls=pulls, roles=roles, cap=20, warmup=warmup)
                allowance = max(pulls // 2, min(pulls, warmup))
                assert plan.allowance == allowance and 2 <= plan.size <= 20
                if plan.size > 2:
                    assert covering_pulls(roles, plan.size) <= allowance, (pulls, plan)
                if plan.size < 20:
                    assert covering_pulls(roles, plan.size + 1) > allowance, (pulls, plan)


@pytest.mark.parametrize(("roles", "first"), [(1, 20), (2, 25), (4, 35)])
def test_every_arm_of_the_plans_pools_is_pulled_from_the_documented_budget(roles, first):
    # defaults (pulls of 5, the gate): rows x (1 + roles) + 2 x rows
    def covered(budget: int) -> bool:
        pulls = affordable_pulls(budget, rows=5, reserve=10, max_pulls=None)
        return covering_pulls(roles, pool_size_for(budget, roles)) <= pulls

    assert not covered(first - 1)
    assert all(covered(budget) for budget in range(first, 1000))


def test_the_covering_warmup_lists_every_arm_once_roles_in_topological_order() -> None:
    # graph order (a, b, c), topological order b, a, c; pools of 3, 2 and 4 texts
    assert covering_warmup([3, 2, 4], [1, 0, 2]) == [
        (0, 1, 0), (1, 0, 0), (2, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3)]
    assert covering_warmup([2], [0]) == [(1,)]
    assert covering_warmup([1, 3], [0, 1]) == [(0, 1), (0, 2)]  # a pool that came out short


def test_a_plan_round_trips_and_its_log_line_says_why_it_cut_the_pool() -> None:
    plan = plan_pools(pulls=22, roles=1, cap=20, warmup=6)
    assert plan == PoolPlan(size=11, pulls=22, cap=20, cover=True, warmup=6)
    assert PoolPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    assert plan.note(1) == (
        "maspob: 10 arms per role (1 role, pools of 11): cut from 20 so that the seed pull "
        "and every arm once (11 pulls) take at most half of the 22 pulls the budget pays for "
        "beside the gate")
    whole = plan_pools(pulls=60, roles=1, cap=20, warmup=6)
    assert whole.note(1).endswith("the whole pool; the covering warm-up takes 20 of 60 pulls")
    small = plan_pools(pulls=6, roles=1, cap=20, warmup=6)
    assert small.note(1) == (
        "maspob: 5 arms per role (1 role, pools of 6): cut from 20 so that the seed pull and "
        "every arm once (6 pulls) take no more than a random warm-up would (6 of the 6 pulls "
        "the budget pays for beside the gate)")
    floor = plan_pools(pulls=2, roles=2, cap=20, warmup=6)
    assert floor.size == 2 and floor.note(2) == (  # 3 pulls would cover 2 roles
        "maspob: 1 arm per role (2 roles, pools of 2): cut from 20 to the seed and one "
        "variant: the budget pays for 2 pulls beside the gate; the budget ends the warm-up "
        "after 2 pulls")
    assert "random" in plan_pools(pulls=22, roles=1, cap=20, warmup=6, cover=False).note(1)


# --- the method on a fake context (sequential team of 2: coder -> debugger) ------------------
# pulls of 4 rows; at budget 48: 10 pulls, pools of 3
COVER = {**FAST, "pool_size": 4, "cover_arms": True}


@needs_torch
def test_every_arm_is_pulled_once_before_the_first_linucb_pull(caplog) -> None:
    ctx = fake(budget=48, script=keyword_script)
    with caplog.at_level(logging.INFO, logger="lcb.optimize.methods.maspob"):
        asyncio.run(make(**COVER).optimize(ctx))
    assert [r.getMessage() for r in caplog.records if "arms per role" in r.getMessage()] == [
        "maspob: 2 arms per role (2 roles, pools of 3): cut from 4 so that the seed pull and "
        "every arm once (5 pulls) take at most half of the 10 pulls the budget pays for beside "
        "the gate"]
    # only the variants the plan uses are asked for: 2 per role, one call each
    assert [r["purpose"] for r in ctx.reflections] == ["maspob:variants:coder",
                                                       "maspob:variants:debugger"]
    assert all("Write 2 alternative versions" in r["prompt"] for r in ctx.reflections)
    state = ctx.checkpoints[-1]["state"]
    assert state["pool_plan"] == {"size": 3, "pulls": 10, "cap": 4, "cover": True, "warmup": 3}
    assert [len(pool) for pool in state["pools"].values()] == [3, 3]
    combos = [p["combo"] for p in state["pulls"]]
    assert combos[:5] == [[0, 0], [1, 0], [2, 0], [0, 1], [0, 2]]  # the seed, then each arm
    assert len(combos) == 10 and ctx.ledger.charged <= 48
    evidence = [json.loads(p["reason"]) for p in ctx.proposals
                if p["iteration"] and p["scored_on"] == "train" and '"pull"' in p["reason"]]
    evidence += [json.loads(c["note"].removeprefix("seed pull: ")) for c in ctx.candidates
                 if c["note"].startswith("seed pull")]
    flags = {e["pull"]: e["warmup"] for e in evidence}
    assert flags == {t: t < 5 for t in range(10)}
    # LinUCB's first choice is made after the last arm's pull, from the pull after it on
    by_pull = {e["pull"]: e for e in evidence}
    assert all(by_pull[t]["next"] is None for t in range(4))
    assert by_pull[4]["next"] == combos[5]


@needs_torch
def test_without_cover_arms_the_warmup_is_the_papers_random_one() -> None:
    ctx = fake(budget=48, script=keyword_script)
    asyncio.run(make(**{**COVER, "cover_arms": False}).optimize(ctx))
    state = ctx.checkpoints[-1]["state"]
    assert state["pool_plan"] == {"size": 4, "pulls": 10, "cap": 4, "cover": False, "warmup": 3}
    assert [len(pool) for pool in state["pools"].values()] == [4, 4]
    rng = random.Random("maspob:warmup:42")  # seeded_rng(KEY, "warmup", 42 + 1000 * 0)
    drawn = [[rng.randrange(4), rng.randrange(4)] for _ in range(FAST["warmup"] - 1)]
    assert [p["combo"] for p in state["pulls"]][:FAST["warmup"]] == [[0, 0], *drawn]


# --- whole jobs ----------------------------------------------------------------------------
@pytest.fixture
def hashing(monkeypatch):
    monkeypatch.setenv("LCB_EMBEDDINGS", "hashing")


def planted_at(variant: int):
    """A variants responder whose pool variant `variant` alone (in every role's pool) holds
    the fix: the style line it answers is `STYLES[variant - 1]`."""
    style = STYLES[variant - 1]

    def responder(text: str) -> str | None:
        return variants_reply(text, FIX, lambda _number, line: line == style)
    return responder


# pulls of 2 rows, default pools of 20 and warm-up 6; the budget makes the plan's pool hold
# `variant` as its last arm: independent 28 = 12 pulls + the gate's 4, pools of 6;
# sequential 32 = 14 pulls + 4, pools of 4 (the debugger's 3 is the last arm pulled)
LATE = {"rows_per_pull": 2, "epochs": 60, "patience": 20}
PLANTED = [("independent", "coder", 28, 5), ("sequential", "debugger", 32, 3)]


def planted_job(scripted, tmp_path, monkeypatch, topology, role, budget, variant, *,
                cover: bool, control: bool = False):
    return run_planted(scripted, tmp_path, monkeypatch, method="maspob", topology=topology,
                       team_size=2, budget=budget, answering_role=role, control=control,
                       responders=[planted_at(variant)],
                       settings={**LATE, "cover_arms": cover})


def pulled_bundles(out) -> list[dict[str, str]]:
    return [e.bundle for e in read_history(out) if e.iteration and e.kind != "final"
            and (e.scored_on == "train" or e.note.startswith("seed pull"))]


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize(("topology", "role", "budget", "variant"), PLANTED)
def test_the_covering_warmup_deploys_the_last_arm(scripted, tmp_path, monkeypatch, hashing,
                                                 topology, role, budget, variant):
    outcome = planted_job(scripted, tmp_path, monkeypatch, topology, role, budget, variant,
                          cover=True)
    assert_fix_deployed(outcome)
    checkpoint = json.loads((outcome.job.out / "checkpoint.json").read_text())
    assert checkpoint["state"]["pool_plan"]["size"] == variant + 1  # the fix: its last arm


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize(("topology", "role", "budget", "variant"), PLANTED)
def test_the_papers_random_warmup_misses_it_at_that_budget(scripted, tmp_path, monkeypatch,
                                                          hashing, topology, role, budget,
                                                          variant):
    outcome = planted_job(scripted, tmp_path, monkeypatch, topology, role, budget, variant,
                          cover=False)
    assert not any(FIX in bundle[role] for bundle in pulled_bundles(outcome.job.out))
    selection = read_selection(outcome.job.out)
    assert selection.deployed == "seed" and FIX not in selection.deployed_bundle[role]


@pytest.mark.slow
@needs_torch
def test_the_control_keeps_the_seed_with_the_covering_warmup(scripted, tmp_path, monkeypatch,
                                                             hashing):
    outcome = planted_job(scripted, tmp_path, monkeypatch, *PLANTED[0], cover=True,
                          control=True)
    assert_seed_kept(outcome)
    assert len({json.dumps(b, sort_keys=True) for b in pulled_bundles(outcome.job.out)}) == 6


@pytest.mark.slow
@needs_torch
def test_a_job_killed_in_the_covering_warmup_resumes_with_its_plan(scripted, tmp_path,
                                                                   monkeypatch, hashing):
    # centralized (manager, coder), pulls of 2, cap 4: 24 = 10 pulls + the gate's 4, pools of
    # 3 and a warm-up of 5 pulls (10 rollouts); stopped after 7, in the warm-up's fourth pull
    settings = {**SMALL, "pool_size": 4, "cover_arms": "true"}
    assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, "maspob", budget=24,
                                        topology="centralized", kill_at=7,
                                        settings=[f"{k}={v}" for k, v in settings.items()],
                                        responders=[maspob_responder])
    plans = [json.loads((tmp_path / name / "checkpoint.json").read_text())["state"]["pool_plan"]
             for name in ("whole", "killed")]
    # decided once, from the 24 at the start; from the 18 left at the last checkpoint it
    # would be pools of 2
    assert plans == [{"size": 3, "pulls": 10, "cap": 4, "cover": True, "warmup": 2}] * 2


@pytest.mark.slow
@needs_torch
def test_the_history_names_the_incumbent_when_it_moves_back_to_an_earlier_pull(
        scripted, tmp_path, monkeypatch, hashing):
    # pulls of 4, budget 44: 9 pulls, pools of 4 (half of 9, the warm-up's 4 pulls), so the
    # fix (variant 4) is not in them;
    # after pull 8 the incumbent moves back to the seed's combination (so no gate runs) and a
    # candidate says so. run_planted's checks hold the curve's rule (the last candidate or
    # accepted proposal) to the final incumbent: without that candidate the history named
    # pull 7's combination while the job returned the seed
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="maspob",
                          topology="independent", team_size=2, budget=44,
                          answering_role="coder", responders=[planted_at(4)],
                          settings={**LATE, "rows_per_pull": 4, "warmup": 4,
                                    "cover_arms": True})
    moved = [e for e in read_history(outcome.job.out)
             if e.kind == "candidate" and e.note.startswith("incumbent by posterior mean")]
    history = read_history(outcome.job.out)
    assert moved and all("posterior_mean" in e.scores for e in moved)
    assert (moved[-1].iteration, moved[-1].bundle) == (9, history[0].bundle)
    assert history[-1].bundle == history[0].bundle

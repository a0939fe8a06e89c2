"""maspob's covering warm-up (`cover_arms`; issue #26): the pool size a budget buys, `auto`
covering only where whole pools fit, the exact warm-up (every role varied in each pull), every
arm pulled before LinUCB's first choice, the plan paying for its pools' requests first under
`--uncharged-cost`, the plan kept across a resume (a plan of the code before included); and
planted jobs at small budgets where the good variant is a late arm of the pool: the covering
warm-up deploys it, the paper's random warm-up does not."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import replace

import pytest

from lcb.optimize.artifacts import read_history, read_selection
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.methods.maspob import make
from lcb.optimize.methods.maspob_cover import (
    PoolPlan,
    affordable_pulls,
    covering_pulls,
    covering_warmup,
    plan_pools,
)
from lcb.optimize.methods.maspob_pool import STYLES
from lcb.optimize.methods.maspob_search import Search
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


def pool_size_for(budget: int, *, rows: int = 5, gate: bool = True,
                  max_pulls: int | None = None, cap: int = 20, cover: bool = True) -> int:
    """What maspob plans at the start of a job with `budget` left (its `_plan`)."""
    pulls = affordable_pulls(budget, rows=rows, reserve=2 * rows if gate else 0,
                             max_pulls=max_pulls)
    return plan_pools(pulls=pulls, cap=cap, cover=cover).size


# --- mechanisms ----------------------------------------------------------------------------
@pytest.mark.parametrize(("budget", "extra", "size"), [
    (120, {}, 20),  # 22 pulls beside the gate: the warm-up 20 (the whole pool), LinUCB 2
    (115, {}, 19),  # 21 pulls: LinUCB keeps 2
    (100, {}, 17),  # 18 pulls: LinUCB keeps 1
    (60, {}, 9), (40, {}, 6), (30, {}, 4),  # 10, 6 and 4 pulls
    (20, {}, 2),  # the minimum budget: 2 pulls, the seed's and the one arm's
    (15, {}, 2),  # below it: never a pool without a variant
    (120, {"gate": False}, 20), (100, {"gate": False}, 18),  # no reserve: 20 pulls
    (600, {"max_pulls": 8}, 8),  # max_pulls caps what the budget pays for
    (600, {"max_pulls": 16}, 15),
    (48, {"rows": 4, "cap": 4}, 4),  # the fake-context test below
    (60, {"cover": False}, 20),  # the paper's fixed pools
])
def test_the_pool_size_a_budget_buys(budget, extra, size) -> None:
    assert pool_size_for(budget, **extra) == size


@pytest.mark.parametrize(("pulls", "covers"), [
    (22, True), (21, False), (2, False), (60, True),  # budgets 120, 115, 20, 310
])
def test_auto_covers_only_when_the_whole_pool_fits(pulls, covers) -> None:
    plan = plan_pools(pulls=pulls, cap=20, cover="auto")
    assert (plan.cover, plan.auto, plan.size) == (covers, True, 20)
    assert plan_pools(pulls=pulls, cap=20, cover=covers).size == 20  # the same pools
    assert plan_pools(pulls=3, cap=3, cover="auto").cover  # a cap of 3 fits in 3 pulls


def test_auto_says_which_warmup_it_chose_and_why() -> None:
    assert plan_pools(pulls=10, cap=20, cover="auto").note(2) == (
        "maspob: pools of 20 per role (19 arms each, 2 roles), a warm-up of random "
        "combinations (cover_arms=auto: pulling every arm of pools of 20 takes 20 pulls, more "
        "than 9 of the 10 pulls the budget pays for beside the gate)")
    assert plan_pools(pulls=22, cap=20, cover="auto").note(1) == (
        "maspob: 19 arms per role (1 role, pools of 20), pulled in the warm-up's first 20 "
        "pulls (one arm a pull): the whole pool, of the 22 pulls the budget pays for beside "
        "the gate (cover_arms=auto)")


def test_the_largest_pool_whose_covering_warmup_leaves_linucb_a_tenth() -> None:
    for pulls in range(0, 200):
        plan = plan_pools(pulls=pulls, cap=20)
        allowance = pulls - pulls // 10
        assert plan.allowance == allowance
        assert plan.size == max(2, min(20, allowance))
        assert covering_pulls(plan.size) <= max(pulls, 2), (pulls, plan)


def test_every_arm_of_the_plans_pools_is_pulled_from_the_minimum_budget_on() -> None:
    # at the defaults (pulls of 5, the gate), for any number of roles: the warm-up's pulls
    # do not grow with the roles
    def covered(budget: int) -> bool:
        pulls = affordable_pulls(budget, rows=5, reserve=10, max_pulls=None)
        return covering_pulls(pool_size_for(budget)) <= pulls

    assert not covered(19)
    assert all(covered(budget) for budget in range(20, 1000))
    assert pool_size_for(119) == 19 and pool_size_for(120) == 20  # the whole pool from 120


@pytest.mark.parametrize(("sizes", "order", "warmup"), [
    # graph order (a, b, c), topological order b, a, c (ranks 1, 0, 2); pools of 3, 2, 4
    ([3, 2, 4], [1, 0, 2], [(2, 1, 3), (1, 1, 1), (2, 1, 2)]),
    ([2], [0], [(1,)]),
    ([5], [0], [(1,), (2,), (3,), (4,)]),  # one role: pool order
    ([4, 4], [0, 1], [(1, 2), (2, 3), (3, 1)]),  # ranks 0 and 1: style lines one apart
    ([1, 3], [0, 1], [(0, 2), (0, 1)]),  # a pool that came out short stays at the seed
])
def test_the_covering_warmup_varies_every_role_in_each_pull(sizes, order, warmup) -> None:
    assert covering_warmup(sizes, order) == warmup
    for role, size in enumerate(sizes):  # every arm at least once
        assert {combo[role] for combo in warmup} == (set(range(1, size)) or {0})


def test_a_checkpointed_plan_of_the_code_before_resumes_its_one_role_at_a_time_warmup():
    pools = {"coder": ["c0", "c1", "c2"], "debugger": ["d0", "d1", "d2"]}
    old = PoolPlan.from_json({"size": 3, "pulls": 10, "cap": 4, "cover": True, "warmup": 3})
    legacy = Search(pools=pools, plan=old)
    assert make(cover_arms=True)._warmup(legacy, 42, order=[0, 1]) == [
        (1, 0), (2, 0), (0, 1), (0, 2)]  # what that job began pulling, unchanged
    # and the setting now in force does not change it: the plan decides
    assert make(cover_arms=False)._warmup(legacy, 42, order=[0, 1]) == [
        (1, 0), (2, 0), (0, 1), (0, 2)]
    new = Search(pools=pools, plan=plan_pools(pulls=10, cap=3))
    assert make(cover_arms=True)._warmup(new, 42, order=[0, 1]) == [(1, 2), (2, 1)]


def test_a_plan_round_trips_and_its_log_line_says_why_it_cut_the_pool() -> None:
    plan = plan_pools(pulls=10, cap=20)
    assert plan == PoolPlan(size=9, pulls=10, cap=20, cover=True)
    assert PoolPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    auto = plan_pools(pulls=10, cap=20, cover="auto")
    assert PoolPlan.from_json(json.loads(json.dumps(auto.to_json()))) == auto
    # a plan from a checkpoint written before `auto` and the rotating warm-up (it held
    # `warmup`): its warm-up stays the one it began, one role at a time
    old = {"size": 9, "pulls": 10, "cap": 20, "cover": True, "warmup": 6}
    assert PoolPlan.from_json(old) == replace(plan, rotate=False)
    assert plan.note(1) == (
        "maspob: 8 arms per role (1 role, pools of 9), pulled in the warm-up's first 9 pulls "
        "(one arm a pull): cut from 20 so that LinUCB keeps 1 of the 10 pulls the budget pays "
        "for beside the gate")
    assert plan_pools(pulls=6, cap=20).note(1) == (
        "maspob: 5 arms per role (1 role, pools of 6), pulled in the warm-up's first 6 pulls "
        "(one arm a pull): cut from 20 to the 6 pulls the budget pays for beside the gate")
    whole = plan_pools(pulls=60, cap=20)
    assert whole.note(4) == (
        "maspob: 19 arms per role (4 roles, pools of 20), pulled in the warm-up's first 20 "
        "pulls (every role varied in each pull): the whole pool, of the 60 pulls the budget "
        "pays for beside the gate")
    floor = plan_pools(pulls=1, cap=20)
    assert floor.size == 2 and floor.note(2) == (
        "maspob: 1 arm per role (2 roles, pools of 2), pulled in the warm-up's first 2 pulls "
        "(every role varied in each pull): cut from 20 to the seed and one variant: the "
        "budget pays for 1 pull beside the gate; the budget ends the warm-up after 1 pull")
    assert plan_pools(pulls=22, cap=20, cover=False).note(1) == (
        "maspob: pools of 20 per role (19 arms each, 1 role), a warm-up of random "
        "combinations (cover_arms=false)")


# --- the method on a fake context (sequential team of 2: coder -> debugger) ------------------
# pulls of 4 rows; at budget 48: 10 pulls, pools of 4 (the cap), a warm-up of 4 pulls
COVER = {**FAST, "pool_size": 4, "cover_arms": True}


@needs_torch
def test_every_arm_is_pulled_once_before_the_first_linucb_pull(caplog) -> None:
    ctx = fake(budget=48, script=keyword_script)
    with caplog.at_level(logging.INFO, logger="lcb.optimize.methods.maspob"):
        asyncio.run(make(**COVER).optimize(ctx))
    assert [r.getMessage() for r in caplog.records if "arms per role" in r.getMessage()] == [
        "maspob: 3 arms per role (2 roles, pools of 4), pulled in the warm-up's first 4 pulls "
        "(every role varied in each pull): the whole pool, of the 10 pulls the budget pays "
        "for beside the gate"]
    # the variants the plan uses are asked for: 3 per role, one call each
    assert [r["purpose"] for r in ctx.reflections] == ["maspob:variants:coder",
                                                       "maspob:variants:debugger"]
    assert all("Write 3 alternative versions" in r["prompt"] for r in ctx.reflections)
    state = ctx.checkpoints[-1]["state"]
    assert state["pool_plan"] == {"size": 4, "pulls": 10, "cap": 4, "cover": True,
                                  "auto": False, "rotate": True}
    assert [len(pool) for pool in state["pools"].values()] == [4, 4]
    combos = [p["combo"] for p in state["pulls"]]
    # the seed, then both roles varied in each pull, the debugger one style line on
    assert combos[:4] == [[0, 0], [1, 2], [2, 3], [3, 1]]
    assert len(combos) == 10 and ctx.ledger.charged <= 48
    evidence = [json.loads(p["reason"]) for p in ctx.proposals
                if p["iteration"] and p["scored_on"] == "train" and '"pull"' in p["reason"]]
    evidence += [json.loads(c["note"].removeprefix("seed pull: ")) for c in ctx.candidates
                 if c["note"].startswith("seed pull")]
    flags = {e["pull"]: e["warmup"] for e in evidence}
    assert flags == {t: t < 4 for t in range(10)}
    # LinUCB's first choice is made after the last arm's pull, from the pull after it on
    by_pull = {e["pull"]: e for e in evidence}
    assert all(by_pull[t]["next"] is None for t in range(3))
    assert by_pull[3]["next"] == combos[4]


@needs_torch
def test_with_uncharged_cost_the_plan_pays_for_its_pools_requests_first() -> None:
    # 48 units, pulls of 4, the gate's 8: 10 pulls, pools of 9 were nothing else spent; at
    # 1 unit a call the 2 x 3 requests for pools of 9 leave 42: 8 pulls, so pools of 8
    # (2 x 3 requests again), and the warm-up's 8 pulls all run
    ctx = fake(budget=48, script=keyword_script)
    ctx.ledger = BudgetLedger(48, uncharged_rate=1.0)
    asyncio.run(make(**{**COVER, "pool_size": 20}).optimize(ctx))
    state = ctx.checkpoints[-1]["state"]
    assert state["pool_plan"]["size"] == 8 and len(ctx.reflections) == 6
    combos = [tuple(p["combo"]) for p in state["pulls"]]
    assert combos == [(0, 0), *covering_warmup([8, 8], [0, 1])]
    assert ctx.ledger.units <= 48


@needs_torch
def test_without_cover_arms_the_warmup_is_the_papers_random_one() -> None:
    ctx = fake(budget=48, script=keyword_script)
    asyncio.run(make(**{**COVER, "cover_arms": False}).optimize(ctx))
    state = ctx.checkpoints[-1]["state"]
    assert state["pool_plan"] == {"size": 4, "pulls": 10, "cap": 4, "cover": False,
                                  "auto": False, "rotate": True}
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
# `variant` as its last text: independent 26 = 11 pulls + the gate's 4, pools of 10 (the
# coder's 9 is the warm-up's last pull); sequential 32 = 14 pulls + 4, pools of 13 (the
# debugger's 12 is pulled in the warm-up's eleventh pull after the seed's, with the coder's 11)
LATE = {"rows_per_pull": 2, "epochs": 60, "patience": 20}
PLANTED = [("independent", "coder", 26, 9), ("sequential", "debugger", 32, 12)]


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
    # pools of 10: the warm-up pulls every one of the 10 combinations
    pulled = [json.dumps(b, sort_keys=True) for b in pulled_bundles(outcome.job.out)]
    assert len(set(pulled[:10])) == len(set(pulled)) == 10


@pytest.mark.slow
@needs_torch
def test_a_job_killed_in_the_covering_warmup_resumes_with_its_plan(scripted, tmp_path,
                                                                   monkeypatch, hashing):
    # centralized (manager, coder), pulls of 2: 24 = 10 pulls + the gate's 4, pools of 9 and
    # a warm-up of 9 pulls (18 rollouts); stopped after 7, in the warm-up's fourth pull
    settings = {**SMALL, "pool_size": 20, "cover_arms": "true"}
    assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, "maspob", budget=24,
                                        topology="centralized", kill_at=7,
                                        settings=[f"{k}={v}" for k, v in settings.items()],
                                        responders=[maspob_responder])
    plans = [json.loads((tmp_path / name / "checkpoint.json").read_text())["state"]["pool_plan"]
             for name in ("whole", "killed")]
    # decided once, from the 24 at the start; from the 18 left at the last checkpoint it
    # would be pools of 7
    assert plans == [{"size": 9, "pulls": 10, "cap": 20, "cover": True,
                      "auto": False, "rotate": True}] * 2


@pytest.mark.slow
@needs_torch
def test_the_history_names_the_incumbent_when_it_moves_back_to_an_earlier_pull(
        scripted, tmp_path, monkeypatch, hashing):
    # pulls of 4, budget 44: 9 pulls, pools of 4 (the cap; a warm-up of 4 pulls), so the fix
    # (variant 4) is not in them;
    # after pull 8 the incumbent moves back to the seed's combination (so no gate runs) and a
    # candidate says so. run_planted's checks hold the curve's rule (the last candidate or
    # accepted proposal) to the final incumbent: without that candidate the history named
    # pull 7's combination while the job returned the seed
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="maspob",
                          topology="independent", team_size=2, budget=44,
                          answering_role="coder", responders=[planted_at(4)],
                          settings={**LATE, "rows_per_pull": 4, "pool_size": 4,
                                    "cover_arms": True})
    moved = [e for e in read_history(outcome.job.out)
             if e.kind == "candidate" and e.note.startswith("incumbent by posterior mean")]
    history = read_history(outcome.job.out)
    assert moved and all("posterior_mean" in e.scores for e in moved)
    assert (moved[-1].iteration, moved[-1].bundle) == (9, history[0].bundle)
    assert history[-1].bundle == history[0].bundle

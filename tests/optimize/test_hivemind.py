"""The `hivemind` method: Shapley numerics against brute force, targeting, lessons, budget,
and whole jobs (four topologies, the planted fix, the control, kill -9 and resume)."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from lcb.data.problems import Problem
from lcb.optimize.artifacts import read_history
from lcb.optimize.budget import InfraFailure
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.graph import TeamGraph
from lcb.optimize.method import ReflectionError
from lcb.optimize.methods import get_optimizer, resolve_settings
from lcb.optimize.methods.hivemind import HivemindSettings, make
from lcb.optimize.methods.hivemind_game import Game, choose_target
from lcb.optimize.methods.hivemind_lessons import (
    LESSONS_BEGIN,
    LESSONS_END,
    LessonsError,
    parse_lessons,
    with_lessons,
)
from lcb.optimize.methods.shapley import (
    exact_shapley,
    permutation_shapley,
    power_set,
    prefixes,
    sample_permutations,
)
from lcb.optimize.settings import SettingsError
from tests.helpers_methods import FIX, SEED, FakeContext, FakeData, make_problem
from tests.helpers_planted import assert_fix_deployed, assert_seed_kept, run_planted
from tests.helpers_resume import assert_interrupted_resumes_to_whole
from tests.scripted_server import scripted_fixture  # noqa: F401

pytestmark = pytest.mark.timeout(180)


# --- Shapley numerics ---------------------------------------------------------------------
def brute_force(players, v):
    """The definition: the mean marginal contribution over every order of the players."""
    totals = dict.fromkeys(players, 0.0)
    orders = list(itertools.permutations(players))
    for order in orders:
        for i, player in enumerate(order):
            totals[player] += v(frozenset(order[:i + 1])) - v(frozenset(order[:i]))
    return {p: t / len(orders) for p, t in totals.items()}


def table(players, v):
    return {c: float(v(c)) for c in power_set(players)}


WEIGHTS = {"a": 1.0, "b": 2.0, "c": 0.5, "d": -1.0}
GAMES = {
    "additive": (list(WEIGHTS), lambda c: sum(WEIGHTS[p] for p in c),
                 WEIGHTS),
    "glove": (["L1", "L2", "R"], lambda c: min(len(c & {"L1", "L2"}), len(c & {"R"})),
              {"L1": 1 / 6, "L2": 1 / 6, "R": 2 / 3}),
    "majority": (["x", "y", "z"], lambda c: float(len(c) >= 2),
                 {"x": 1 / 3, "y": 1 / 3, "z": 1 / 3}),
    "dictator": (["boss", "p", "q"], lambda c: float("boss" in c),
                 {"boss": 1.0, "p": 0.0, "q": 0.0}),
}


@pytest.mark.parametrize("name", sorted(GAMES))
def test_exact_shapley_equals_the_permutation_definition(name) -> None:
    players, v, known = GAMES[name]
    phi = exact_shapley(players, table(players, v))
    assert phi == pytest.approx(brute_force(players, v), abs=1e-12)
    assert phi == pytest.approx(known, abs=1e-12)
    assert sum(phi.values()) == pytest.approx(v(frozenset(players)) - v(frozenset()))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_exact_shapley_on_random_games_with_a_nonzero_empty_value(n) -> None:
    rng = random.Random(n)
    players = [f"p{i}" for i in range(n)]
    values = {c: rng.uniform(-1, 1) for c in power_set(players)}
    phi = exact_shapley(players, values)
    assert phi == pytest.approx(brute_force(players, values.__getitem__), abs=1e-12)
    assert sum(phi.values()) == pytest.approx(values[frozenset(players)] - values[frozenset()])


def test_a_missing_coalition_is_named() -> None:
    with pytest.raises(KeyError, match="a, b"):
        exact_shapley(["a", "b"], {frozenset(): 0.0, frozenset("a"): 1.0, frozenset("b"): 0.0})


def test_monte_carlo_is_within_the_stated_tolerance_and_efficient() -> None:
    # 6 players, weighted majority (quota 6 of 11): 2000 orders, seed 7, tolerance 0.03
    weights = dict(zip("abcdef", [4, 3, 2, 1, 1, 0], strict=True))
    players = list(weights)
    v = table(players, lambda c: float(sum(weights[p] for p in c) >= 6))
    exact = exact_shapley(players, v)
    orders = sample_permutations(players, random.Random(7), count=2000, max_coalitions=64)
    assert len(orders) == 2000
    estimate = permutation_shapley(orders, v)
    assert max(abs(estimate[p] - exact[p]) for p in players) <= 0.03
    assert estimate["f"] == 0.0  # a null player gets exactly 0
    for few in (orders[:1], orders[:7]):  # every order telescopes: efficient exactly
        assert sum(permutation_shapley(few, v).values()) == pytest.approx(1.0)


def test_monte_carlo_in_the_methods_own_regime() -> None:
    # the method's plan for 8 agents (a chain): cap 40 coalitions, <= 24 orders, cycles 1-200
    # at optimizer seed 0, on the 8-player weighted majority (weights 4 3 2 2 1 1 1 0, quota 8)
    names = [f"s{i}" for i in range(8)]
    chain = TeamGraph("sequential", tuple(names), {n: n for n in names},
                      tuple(zip(names[:-1], names[1:], strict=True)), "chain")
    job = Game(team_fake(budget=1, graph=chain, seed_bundle=dict.fromkeys(names, "Solve.")),
               FULL)
    weights = dict(zip(names, [4, 3, 2, 2, 1, 1, 1, 0], strict=True))
    v = table(names, lambda c: float(sum(weights[p] for p in c) >= 8))
    exact = exact_shapley(names, v)
    errors, first = {p: [] for p in names}, 0
    for cycle in range(1, 201):
        plan = job.plan(cycle)
        assert 5 <= len(plan.orders) <= 7 and len(plan.run) <= 40  # what 40 coalitions buy
        estimate = permutation_shapley(plan.orders, v)
        assert sum(estimate.values()) == pytest.approx(1.0) and estimate["s7"] == 0.0
        first += all(estimate["s0"] > estimate[p] for p in names[1:])
        for p in names:
            errors[p].append(estimate[p] - exact[p])
    for p in names:  # each player's RMS error is within the 5-order theory, sd_i / sqrt(5)
        rms = math.sqrt(sum(e * e for e in errors[p]) / len(errors[p]))
        assert rms <= math.sqrt(exact[p] * (1 - exact[p]) / 5) + 1e-12
    every = [abs(e) for p in names for e in errors[p]]
    assert sum(every) / len(every) <= 0.10 and max(every) <= 0.67  # measured 0.097 and 0.669
    assert first == 66  # the strongest player strictly first: a coarse ranking at 5-7 orders


def test_sampled_orders_never_visit_more_coalitions_than_the_cap() -> None:
    players = [f"p{i}" for i in range(8)]
    free = [c for c in power_set(players) if "p0" not in c]
    orders = sample_permutations(players, random.Random(1), count=50, max_coalitions=40,
                                 free=free)
    runs = [c for c in prefixes(orders) if c not in set(free)]
    assert 1 <= len(orders) < 50 and len(runs) <= 40
    more = sample_permutations(players, random.Random(1), count=len(orders) + 1,
                               max_coalitions=10 ** 6, free=free)
    assert len([c for c in prefixes(more) if c not in set(free)]) > 40  # the cap stopped it


# --- targeting and lessons ---------------------------------------------------------------
def test_the_lowest_credit_role_is_targeted_ties_by_history_then_nearest_the_answer() -> None:
    order = ("analyzer", "coder", "tester", "debugger")
    credit = {"analyzer": 0.3, "coder": 0.1, "tester": 0.2, "debugger": 0.4}
    pick = dict(order=order, hub=None, every=3)
    assert choose_target(credit, cycle=1, targeted={}, **pick)[0] == "coder"
    assert choose_target(credit, cycle=3, targeted={}, **pick)[0] == "coder"  # no manager
    tied = dict.fromkeys(order, 0.25)
    assert choose_target(tied, cycle=1, targeted={}, **pick)[0] == "debugger"
    assert choose_target(tied, cycle=2, targeted={"debugger": 1}, **pick)[0] == "tester"


def test_centralized_targets_the_manager_every_third_cycle() -> None:
    order = ("manager", "analyzer", "coder")
    credit = {"manager": -1.0, "analyzer": 0.2, "coder": 0.1}  # manager lowest, still skipped
    targets = [choose_target(credit, cycle=c, order=order, hub="manager", targeted={},
                             every=3) for c in range(1, 8)]
    assert [t for t, _ in targets] == ["coder", "coder", "manager", "coder", "coder",
                                       "manager", "coder"]
    assert "every 3th cycle" in targets[2][1]


def block(*lines: str) -> str:
    return "\n".join([LESSONS_BEGIN, *lines, LESSONS_END])


def test_lessons_are_parsed_strictly() -> None:
    assert parse_lessons("thinking...\n" + block("- One.", "", "- Two.") + "\n", limit=3) == [
        "One.", "Two."]
    for bad, why in [(f"{LESSONS_BEGIN}\n- One.\n- Tw", "truncated"),
                     ("- One.", "no === LESSONS"), (block("One."), "not a '- ' lesson"),
                     (block(), "empty"), (block("- a", "- b", "- c", "- d"), "at most 3"),
                     (block("- x" * 200), "over 400"), (block("- use ```"), "code fence")]:
        with pytest.raises(LessonsError, match=why):
            parse_lessons(bad, limit=3)


def test_the_prompt_is_the_seed_plus_the_latest_six_lessons() -> None:
    lessons = [f"L{i}." for i in range(9)]
    assert with_lessons("Seed.", [], cap=6) == "Seed."
    text = with_lessons("Seed.", lessons, cap=6)
    assert text.startswith("Seed.\n\n") and text.endswith("- L8.")
    assert [line[2:] for line in text.splitlines() if line.startswith("- ")] == lessons[3:]


# --- the method on a fake team -------------------------------------------------------------
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("active", default=None)
CHAIN = TeamGraph("sequential", ("analyzer", "coder"), {"analyzer": "analyzer", "coder": "coder"},
                  (("analyzer", "coder"),), "chain")
STAR = TeamGraph("centralized", ("manager", "analyzer", "coder"),
                 {"manager": "manager", "analyzer": "analyzer", "coder": "coder"},
                 (("manager", "analyzer"), ("manager", "coder")), "star")
STAR_SEED = {"manager": "Delegate well.", **SEED}


@dataclass
class TeamFake(FakeContext):
    """FakeContext whose agents follow `team_graph` and whose rollouts read the mask."""

    team_graph: TeamGraph = CHAIN
    value: Callable[[frozenset | None, Mapping[str, str], Problem], bool] = lambda *_: False
    masks: list = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.agents = tuple(self.team_graph.agents)
        self.topology = self.team_graph.topology

    @property
    def graph(self) -> TeamGraph:
        return self.team_graph

    def solves(self, bundle, problem) -> bool:
        return self.value(_ACTIVE.get(), bundle, problem)

    async def rollout(self, bundle, problem, *, iteration, active=None, reuse=False):
        token = _ACTIVE.set(active)
        try:
            result = await super().rollout(bundle, problem, iteration=iteration, active=active,
                                           reuse=reuse)
        finally:
            _ACTIVE.reset(token)
        if result is not None and not result.replay:
            self.masks.append((None if active is None else tuple(sorted(active)), iteration))
        return result


def lesson_script(prompt: str, _purpose: str) -> str:
    """A fresh lesson each time (numbered by those the role already follows)."""
    known = prompt.split("## Lessons it already follows\n", 1)[1].split("\n## ", 1)[0]
    count = sum(1 for line in known.splitlines() if line.startswith("- "))
    return block(f"- Lesson {count + 1}.")


def team_fake(*, budget, graph=CHAIN, value=lambda *_: False, n_train=6, n_val=4, **kw):
    data = FakeData(train=tuple(make_problem(i) for i in range(n_train)),
                    validation=tuple(make_problem(i, prefix="v") for i in range(n_val)))
    seed = kw.pop("seed_bundle", STAR_SEED if graph is STAR else SEED)
    return TeamFake(seed_bundle=seed, data=data, budget=budget, team_graph=graph, value=value,
                    script=kw.pop("script", lesson_script), **kw)


def run(ctx, **settings):
    """The method on `ctx`; these mechanism tests play the full coalition game, one-role teams
    included, unless they name `shapley` or `shapley_single_role` (DAG-Shapley and skipping a
    one-role game, the defaults, have tests of their own)."""
    settings.setdefault("shapley", "full")
    settings.setdefault("shapley_single_role", True)
    return asyncio.run(make(**settings).optimize(ctx))


FULL = HivemindSettings(shapley="full", shapley_single_role=True)


def coder_decides(active, bundle, problem) -> bool:
    """Only the coder runs matter (the analyzer gets no credit, so it is the target); a lesson
    in the analyzer's prompt solves the validation rows."""
    return (active is None or "coder" in active) and (
        problem.id.startswith("p") or "Lesson" in bundle["analyzer"])


def test_a_cycle_costs_coalitions_times_batch_plus_two_validations() -> None:
    # 2 players: 4 coalitions x 5 rows + seed on 4 val rows + candidate on 4 = 28
    ctx = team_fake(budget=27)
    assert run(ctx) == SEED and ctx.masks == [] and ctx.proposals == []
    ctx = team_fake(budget=28 + 23, value=coder_decides)
    result = run(ctx)
    # cycle 1's candidate won, so its val score is kept: cycle 2 needs 20 + 4 = 24 > 23 left
    assert ctx.ledger.charged == 28 and len(ctx.checkpoints) == 1
    assert [m for m, _ in ctx.masks].count(()) == 5  # the empty coalition ran: 5 abstentions
    assert result["analyzer"] == with_lessons(SEED["analyzer"], ["Lesson 1."], cap=6)
    assert result["coder"] == SEED["coder"]


def test_a_budget_that_exactly_fits_two_cycles_buys_both() -> None:
    ctx = team_fake(budget=28 + 24, value=coder_decides)
    run(ctx)
    assert ctx.ledger.charged == 52 and ctx.ledger.available == 0
    assert len(ctx.checkpoints) == 2 and len(ctx.proposals) == 2
    assert ctx.proposals[1]["rejected_by"] == "gate"  # Lesson 2 ties: scored, then dropped


def test_the_coder_is_credited_and_the_analyzer_targeted() -> None:
    ctx = team_fake(budget=200, value=lambda a, b, p: a is None or "coder" in a)
    run(ctx, max_cycles=1)
    (proposal,) = ctx.proposals
    evidence = json.loads(proposal["reason"])
    assert evidence["phi"] == {"analyzer": 0.0, "coder": 1.0} and evidence["shapley"] == "exact"
    assert evidence["values"] == {"{}": 0.0, "analyzer": 0.0, "coder": 1.0, "analyzer,coder": 1.0}
    assert (evidence["target"], proposal["roles"]) == ("analyzer", ["analyzer"])
    prompt = ctx.reflections[0]["prompt"]
    assert "role 'analyzer'" in prompt and "### Success 1" in prompt and "### Failure" not in prompt
    assert ctx.reflections[0]["temperature"] == 0.7
    # a candidate as good as the current is not strictly better: the gate drops it
    assert (proposal["accepted"], proposal["rejected_by"]) == (False, "gate")


def test_centralized_skips_managerless_coalitions_and_turns_to_the_manager() -> None:
    ctx = team_fake(budget=500, graph=STAR, value=lambda a, b, p: a is None or "manager" in a)
    run(ctx, max_cycles=4, batch_size=2)
    runs = {m for m, _ in ctx.masks if m is not None}
    assert runs == {m for m in map(lambda c: tuple(sorted(c)), power_set(STAR.roles))
                    if "manager" in m}  # 4 coalitions, never one without the manager
    targets = [json.loads(p["reason"])["target"] for p in ctx.proposals]
    assert targets[2] == "manager" and "manager" not in (targets[0], targets[1], targets[3])
    assert set(targets[:2]) == {"analyzer", "coder"}  # tied credit: the other worker next


def test_lessons_are_append_only_and_capped_at_six() -> None:
    def more_lessons_more_solved(active, bundle, problem) -> bool:
        n = bundle["coder"].count("- Lesson")
        return problem.id.startswith("p") or int(problem.id[1:]) < n

    ctx = team_fake(budget=2000, value=more_lessons_more_solved, n_val=8, seed_bundle=SEED)
    result = run(ctx, max_cycles=16, val_size=8, batch_size=1)
    coder = [p for p in ctx.proposals if p["roles"] == ["coder"]]
    accepted = [p for p in coder if p["accepted"]]
    assert len(accepted) == 6  # a 7th lesson drops the 1st: 6 lessons still, not better
    assert result["coder"] == with_lessons(SEED["coder"], [f"Lesson {i}." for i in range(1, 7)],
                                           cap=6)
    for p in coder:  # every candidate = seed + the latest <= 6 of an ever-growing list
        lines = [x[2:] for x in p["bundle"]["coder"].splitlines() if x.startswith("- ")]
        numbers = [int(x.split()[1].rstrip(".")) for x in lines]
        assert numbers == list(range(numbers[-1] - len(numbers) + 1, numbers[-1] + 1))
        assert len(numbers) <= 6
    assert any(p["rejected_by"] == "gate" and "Lesson 7." in p["bundle"]["coder"]
               and "Lesson 1." not in p["bundle"]["coder"] for p in coder)


@pytest.mark.parametrize("reply, why", [
    (f"{LESSONS_BEGIN}\n- Check n = 1.\n- Che", "unparsable LESSONS reply: no ==="),
    (block("- Fill {problem_statement} in."), "unfilled template marker"),
    ("I have no idea.", "unparsable LESSONS reply"),
])
def test_bad_replies_are_rejected_and_never_adopted(reply, why) -> None:
    ctx = team_fake(budget=200, value=coder_decides, script=lambda *_: reply)
    result = run(ctx, max_cycles=2)
    assert result == SEED
    assert all(p["rejected_by"] == "validator" and why in p["reason"] for p in ctx.proposals)
    assert len(ctx.proposals) == 2
    assert all("Fill" not in str(call["bundle"]) for call in ctx.calls)


def test_a_reflection_failure_is_raised() -> None:
    def broken(*_):
        raise ReflectionError("reflection endpoint http://127.0.0.1:9 refused")

    with pytest.raises(ReflectionError, match="refused"):
        run(team_fake(budget=100, script=broken))


# --- infrastructure losses, the single-agent team, one-role teams -----------------------
def lost() -> bool:
    raise InfraFailure("connection refused")


def test_a_gate_row_lost_for_every_seed_run_is_no_zero() -> None:
    def seed_lost_on_val(active, bundle, problem) -> bool:
        if problem.id.startswith("v"):  # the seed's gate rows are all lost; the candidate's fine
            return "Lesson" in bundle["analyzer"] or lost()
        return active is None or "coder" in active

    ctx = team_fake(budget=200, value=seed_lost_on_val)
    assert run(ctx, max_cycles=1) == SEED
    (proposal,) = ctx.proposals
    assert (proposal["accepted"], proposal["rejected_by"]) == (False, "gate")
    assert "no validation row came back for both bundles" in proposal["reason"]
    assert ctx.candidates[0]["scores"] == {}  # the seed has no gate score, not 0.0


def test_the_gate_compares_the_rows_both_bundles_have() -> None:
    def uneven(active, bundle, problem) -> bool:
        lesson = "Lesson" in bundle["analyzer"]
        if problem.id == "v0":  # lost for the seed, solved by the candidate
            return lesson or lost()
        if problem.id.startswith("v"):
            return problem.id == "v1"
        return active is None or "coder" in active

    ctx = team_fake(budget=200, value=uneven)  # seed 1/3 on its 3 rows, candidate 2/4
    assert run(ctx, max_cycles=1) == SEED  # on v1-v3 both are 1/3: not strictly better
    (proposal,) = ctx.proposals
    assert proposal["rejected_by"] == "gate"
    assert proposal["scores"] == pytest.approx({"val": 1 / 3, "val_current": 1 / 3})
    assert json.loads(proposal["reason"])["val_rows"] == 3


@pytest.mark.parametrize("kept", [1, 0])
def test_coalition_values_use_the_rows_every_coalition_has(kept) -> None:
    first = Game(team_fake(budget=1), FULL).batch(1)[0].id

    def coder_alone_lost(active, bundle, problem) -> bool:
        if active == frozenset({"coder"}) and (problem.id != first or not kept):
            lost()  # the coder alone loses every row but (when kept) the first
        return len(active or "ab") == 2 and problem.id not in (first, *"v")

    ctx = team_fake(budget=200, value=coder_alone_lost)
    run(ctx, max_cycles=1)
    assert len(ctx.checkpoints) == 1
    if not kept:  # no row came back for every coalition: no credit, no proposal
        assert ctx.proposals == [] and ctx.reflections == []
        return
    evidence = json.loads(ctx.proposals[0]["reason"])
    assert evidence["train_rows"] == 1  # the full team's 4 solved rows are not compared
    assert evidence["values"] == dict.fromkeys(["{}", "analyzer", "coder", "analyzer,coder"], 0.0)


def test_a_team_infrastructure_always_loses_stops() -> None:
    ctx = team_fake(budget=100, graph=STAR, value=lambda *_: lost())  # nothing is ever charged
    assert run(ctx) == STAR_SEED
    assert ctx.ledger.charged == 0 and len(ctx.checkpoints) == 1 and ctx.proposals == []


def test_the_single_agent_team_is_refused() -> None:
    ctx = FakeContext(seed_bundle={"coder": "Code."}, budget=50, topology="single",
                      data=FakeData(train=(make_problem(0),), validation=(make_problem(1),)))
    with pytest.raises(ValueError, match="topology 'single' has one agent"):
        run(ctx)
    assert ctx.ledger.charged == 0


SHARED = TeamGraph("independent", ("coder",), {"coder_0": "coder", "coder_1": "coder"}, (),
                   "shared")


@pytest.mark.parametrize("games", [True, False])
def test_a_one_role_team_may_skip_the_coalitions(games) -> None:
    ctx = team_fake(budget=200, graph=SHARED, seed_bundle={"coder": "Code."},
                    value=lambda a, b, p: a is None or "coder_0" in a)
    run(ctx, max_cycles=1, shapley_single_role=games)
    evidence = json.loads(ctx.proposals[0]["reason"])
    assert evidence["credit"] == {"coder": 1.0}  # v(N) - v({}) either way
    masks = {m for m, _ in ctx.masks if m is not None}
    if games:  # the paper: 4 coalitions x 5 rows + 4 + 4 gate rows
        assert ctx.ledger.charged == 28 and len(masks) == 4
        assert evidence["phi"] == {"coder_0": 1.0, "coder_1": 0.0}
    else:  # the full team only: 5 + 4 + 4
        assert ctx.ledger.charged == 13 and masks == {("coder_0", "coder_1")}
        assert evidence["phi"] == {} and evidence["shapley"].startswith("skipped")


def test_many_players_use_monte_carlo_within_the_coalition_cap() -> None:
    agents = {f"coder_{i}": "coder" for i in range(6)}  # 64 coalitions > 40
    shared = TeamGraph("independent", ("coder",), agents, (), "shared")
    ctx = team_fake(budget=400, graph=shared, seed_bundle={"coder": "Code."},
                    value=lambda a, b, p: a is None or "coder_0" in a)
    run(ctx, max_cycles=1, batch_size=2)
    evidence = json.loads(ctx.proposals[0]["reason"])
    assert evidence["shapley"].startswith("monte-carlo over ")
    assert len(evidence["values"]) <= 40 and ctx.ledger.charged == 2 * len(evidence["values"]) + 8
    assert evidence["phi"]["coder_0"] == 1.0 and evidence["credit"] == {"coder": 1.0}


@pytest.mark.parametrize("topology, size, mode, budget", [
    ("sequential", 4, "full", 90), ("independent", 4, "full", 90),
    ("centralized", 4, "full", 50),
    # DAG-Shapley runs a chain's prefixes only: 5 coalitions of 16 (5 x 5 + 10 = 35); a
    # one-role team skips the game by default: the full team alone (5 + 10 = 15)
    ("sequential", 4, "dag", 35), ("independent", 4, "dag", 15), ("centralized", 4, "dag", 50)])
def test_standard_sizes_need_the_reference_minimum(topology, size, mode, budget) -> None:
    from lcb.optimize.graph import team_graph
    from lcb.optimize.teamrun import TeamCell

    graph = team_graph(TeamCell(topology, size))
    ctx = team_fake(budget=600, graph=graph, n_train=150, n_val=50,
                    seed_bundle=dict.fromkeys(graph.roles, "Solve."))
    job = Game(ctx, HivemindSettings(shapley=mode, shapley_single_role=mode == "full"))
    assert job.cost(job.plan(1), job.batch(1), job.bundle(job.state.lessons)) == budget


# --- settings ------------------------------------------------------------------------------
def test_registry_and_settings() -> None:
    assert get_optimizer("hivemind").key == "hivemind"
    assert get_optimizer("hivemind", batch_size=3).settings.batch_size == 3
    s = HivemindSettings()
    assert (s.batch_size, s.val_size, s.max_lessons, s.exact_max_coalitions, s.manager_every,
            s.failure_below, s.temperature) == (5, 5, 6, 40, 3, 0.5, 0.7)
    assert resolve_settings("hivemind", {"max_cycles": 2})["max_cycles"] == 2
    assert (s.shapley_single_role, s.shapley) == (False, "dag")  # budget where it can help
    assert resolve_settings("hivemind", {"shapley_single_role": True})[
        "shapley_single_role"] is True
    for bad, name in [({"batch_size": 0}, "batch_size"), ({"max_lessons": "6"}, "max_lessons"),
                      ({"failure_below": 0.0}, "failure_below"),
                      ({"lessons_per_reflection": 7}, "lessons_per_reflection"),
                      ({"coalitions": 3}, "unknown setting")]:
        with pytest.raises(SettingsError, match=name):
            resolve_settings("hivemind", bad)


# --- whole jobs through the scripted server -----------------------------------------------
def lessons_responder(text: str) -> str | None:
    """Our LESSONS prompt: the planted fix when a failure is shown, else a neutral lesson."""
    if LESSONS_BEGIN not in text:
        return None
    lesson = FIX if "### Failure 1" in text else "Keep the output format exact."
    return f"{LESSONS_BEGIN}\n- {lesson}\n{LESSONS_END}"


SMALL = {"batch_size": 2}  # size 2: 4 coalitions x 2 rows + 3 + 3 validation rows = 14
PLANTED_BUDGET = 14
ANSWERING = {"independent": "coder", "sequential": "debugger", "centralized": "manager",
             "decentralized": "debater"}


def planted(scripted, tmp_path, monkeypatch, topology, *, budget, control=False, size=2,
            settings=SMALL):
    return run_planted(scripted, tmp_path, monkeypatch, method="hivemind", topology=topology,
                       team_size=size, budget=budget, answering_role=ANSWERING[topology],
                       control=control, responders=[lessons_responder], settings=settings)


def rollout_lines(out):
    return [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("topology", sorted(ANSWERING))
def test_a_hivemind_job_end_to_end(scripted, tmp_path, monkeypatch, topology) -> None:
    outcome = planted(scripted, tmp_path, monkeypatch, topology, budget=25)
    out = outcome.job.out
    ledger = json.loads((out / "ledger.json").read_text())
    assert (ledger["infra_failures"], ledger["abandoned"], ledger["refused"]) == (0, 0, 0)
    lines = rollout_lines(out)
    free = [line for line in lines if line["free"]]
    assert (len(lines) - len(free), len(free)) == (ledger["charged"], ledger["free"])
    cost = json.loads((out / "result.json").read_text())["cost"]
    sent = sum(line["n_llm_calls"] - (line["reused"] or {"calls": 0})["calls"] for line in lines)
    assert (cost["free"], cost["phases"]["optimize"]["kinds"]["rollout"]["calls"]) == (
        len(free), sent)  # the calls coalitions reused count once, in the run that made them
    empty = [line for line in lines if line["active"] == []]
    one_role = topology in ("independent", "decentralized")
    if topology == "centralized":  # no coalition without the manager is ever run
        assert empty == [] == free and all("manager" in (line["active"] or ["manager"])
                                           for line in lines)
    elif one_role:  # the game is skipped: the full team alone, never a masked run
        assert empty == [] == free
        assert all(line["active"] is None or len(line["active"]) == 2 for line in lines)
    else:  # DAG-Shapley's prefixes: {} abstains, {coder} takes the whole team's answers
        assert len(empty) == 10 and all(
            (line["verdict"], line["score"], line["n_llm_calls"], line["error"], line["free"])
            == ("abstained", 0.0, 0, None, True) for line in empty)
        coder = [line for line in lines if line["active"] == ["coder"]]
        assert len(coder) == 10 and all(line["free"] and line["verdict"] != "abstained"
                                        and line["reused"]["calls"] == line["n_llm_calls"] > 0
                                        for line in coder)
        assert len(free) == 20  # 2 rows x 5 cycles x ({}, {coder})
    history = read_history(out)
    proposals = [h for h in history if h.kind == "proposal"]
    # size 2, 2 train rows, 3 validation rows: sequential (DAG: 3 prefixes, two of them free)
    # cycles of 8, 5, 5, then 2 or 5 as the candidates repeat or not (a bundle scored on the
    # gate is not run there again); centralized (2 coalitions) 10 then 7 and 7; one role (the full
    # team alone) 8, then at most 5 each: the budget the game would have spent buys cycles
    if one_role:
        assert len(proposals) >= 4
    else:
        assert len(proposals) == {"centralized": 3, "sequential": 5}[topology]
    assert all(json.loads(h.reason)["target"] in h.roles for h in proposals)
    assert proposals[0].parent == bundle_hash(history[0].bundle)
    assert ledger["uncharged"]["reflect"]["calls"] == len(proposals)  # one reflection a cycle


def test_a_four_agent_centralized_job_runs_its_masked_coalitions(scripted, tmp_path,
                                                                 monkeypatch) -> None:
    # size 4, batch 1: the 8 coalitions holding the manager x 1 row + 3 + 3 gate rows = 14
    outcome = planted(scripted, tmp_path, monkeypatch, "centralized", budget=14, size=4,
                      settings={"batch_size": 1, "shapley": "full"})
    lines = rollout_lines(outcome.job.out)
    masks = [tuple(line["active"]) for line in lines if line["active"] is not None]
    workers = ("analyzer", "coder", "tester")
    assert sorted(masks) == sorted(tuple(sorted(("manager", *chosen))) for k in range(4)
                                   for chosen in itertools.combinations(workers, k))
    assert {len(m) for m in masks} == {1, 2, 3, 4}  # three masked coalitions of 3 agents
    assert all(line["verdict"] != "abstained" and line["error"] is None for line in lines)
    (proposal,) = [h for h in read_history(outcome.job.out) if h.kind == "proposal"]
    evidence = json.loads(proposal.reason)
    assert set(evidence["phi"]) == {"manager", *workers} and evidence["shapley"] == "exact"
    assert len(evidence["values"]) == 16  # 8 run + 8 manager-less valued 0 without a run


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["independent", "sequential"])
def test_the_planted_fix_is_deployed(scripted, tmp_path, monkeypatch, topology) -> None:
    outcome = planted(scripted, tmp_path, monkeypatch, topology, budget=PLANTED_BUDGET)
    assert_fix_deployed(outcome)


@pytest.mark.slow
def test_the_control_keeps_the_seed(scripted, tmp_path, monkeypatch) -> None:
    outcome = planted(scripted, tmp_path, monkeypatch, "independent", budget=PLANTED_BUDGET,
                      control=True)
    assert_seed_kept(outcome)


@pytest.mark.slow
def test_an_interrupted_job_resumes_to_the_same_result(scripted, tmp_path, monkeypatch) -> None:
    # full Shapley on a chain of 2, 2 rows a cycle: the whole team's runs, then {} and {coder}
    # (free: they send nothing) and {debugger} (charged); cycle 1 is 14 journal lines (10
    # charged with the gate). The stop lands at line 16, just after cycle 2's whole-team runs:
    # the rerun fast-forwards to cycle 1's checkpoint, and its {coder} runs must find those
    # runs' answers in the job's store to be free again, as in the whole job
    assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, "hivemind", budget=25,
                                        topology="sequential",
                                        settings=["batch_size=2", "shapley=full"],
                                        responders=[lessons_responder], kill_at=16)

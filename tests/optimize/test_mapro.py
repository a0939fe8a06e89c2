"""The `mapro` method: the exact MAP solver, its parsers and evidence, and whole jobs.

Mechanism tests have exact expectations (the solver equals brute-force enumeration; ties go to
the lowest pool slots); the jobs run on the sample set through the scripted server with a
responder for mapro's own judge and mutation prompts (`mapro_responder`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from lcb.optimize.graph import RoleTurn
from lcb.optimize.method import Rollout
from lcb.optimize.methods import get_optimizer, resolve_settings
from lcb.optimize.methods import mapro_prompts as P
from lcb.optimize.methods.map import quantize, solve_map
from lcb.optimize.methods.mapro import MaproSettings, _Run, make
from lcb.optimize.methods.mapro_potentials import Potentials
from lcb.optimize.settings import SettingsError
from lcb.teams.common import TeamResult
from lcb.text import CLIP_NOTE
from tests.helpers_methods import KEYWORD, FakeContext, FakeData, fake_context, make_problem

pytestmark = pytest.mark.timeout(300)

# ------------------------------------------------------------------ the MAP solver


def assignments(roles, raw):
    for combo in itertools.product(*(range(len(raw[r])) for r in roles)):
        yield dict(zip(roles, combo, strict=True))


def float_joint(assignment, raw_node, raw_edges):
    """The joint log potential from the raw potentials, in plain floats (not the module's)."""
    total = sum(math.log(float(raw_node[r][i])) for r, i in assignment.items())
    return total + sum(math.log(float(m[assignment[p]][assignment[c]]))
                       for (p, c), m in raw_edges.items())


def exact_joint(assignment, raw_node, raw_edges):
    """The joint potential as an exact rational (ties are exact)."""
    total = math.prod(raw_node[r][i] for r, i in assignment.items())
    return total * math.prod(m[assignment[p]][assignment[c]] for (p, c), m in raw_edges.items())


def random_factors(rng, n_roles, kind, *, levels=None):
    """Raw potentials: uniform floats in [0.1, 1), or judge-like fractions drawn from `levels`
    (0.4, 0.6, 0.9: 0.4 * 0.9 = 0.6 * 0.6, ties of different factors)."""
    roles = [f"r{i}" for i in range(n_roles)]
    sizes = {r: int(rng.integers(1, 6)) for r in roles}

    def draw(*shape):
        if levels is None:
            return rng.uniform(0.1, 1.0, shape).tolist()
        return np.vectorize(lambda i: levels[i], otypes=[object])(
            rng.integers(0, len(levels), shape)).tolist()

    node = {r: draw(sizes[r]) for r in roles}
    pairs = (itertools.pairwise(roles) if kind == "chain"
             else ((roles[0], r) for r in roles[1:]))
    edges = {(p, c): draw(sizes[p], sizes[c]) for p, c in pairs}
    return roles, node, edges


@pytest.mark.parametrize("kind", ["chain", "star"])
@pytest.mark.parametrize("seed", range(6))
def test_map_is_a_maximizer_by_independent_float_sums(kind, seed):
    rng = np.random.default_rng(seed)
    for n_roles in range(1, 6):
        roles, raw_node, raw_edges = random_factors(rng, n_roles, kind)
        got = solve_map(roles, raw_node, raw_edges, kind=kind)
        values = {tuple(a.values()): float_joint(a, raw_node, raw_edges)
                  for a in assignments(roles, raw_node)}
        best = max(values.values())
        assert math.isclose(values[tuple(got[r] for r in roles)], best, abs_tol=1e-9)
        # continuous draws: the maximizer is unique (up to float noise), so it is the one
        assert [a for a, v in values.items() if v > best - 1e-9] == [tuple(got[r] for r in roles)]


@pytest.mark.parametrize("kind", ["chain", "star"])
@pytest.mark.parametrize("levels", [
    tuple(Fraction(k, 10) for k in (4, 6, 9)),
    (Fraction(1, 10), Fraction(3, 10), Fraction(7, 10), Fraction(7, 30)),  # means of 3 scores
])
def test_exact_ties_stay_ties_and_go_to_the_lowest_slots(kind, levels):
    """Judge-like fractions: the maximizers by exact `Fraction` products (ties among equal
    products of different factors included); the lexicographically first must win."""
    rng = np.random.default_rng(7)
    tied = 0
    for n_roles in [1, 2, 3, 4, 5] * 6:
        roles, raw_node, raw_edges = random_factors(rng, n_roles, kind, levels=levels)
        exact = {tuple(a.values()): exact_joint(a, raw_node, raw_edges)
                 for a in assignments(roles, raw_node)}
        top = max(exact.values())
        maximizers = [a for a, v in exact.items() if v == top]
        tied += len(maximizers) > 1
        got = solve_map(roles, raw_node, raw_edges, kind=kind)
        assert tuple(got[r] for r in roles) == min(maximizers)  # lexicographic: lowest slots
    assert tied >= 3  # the draws have ties to break


def test_equal_products_of_different_factors_tie():
    """0.1 * 0.7 = 7/30 * 0.3: rounded float logarithms put these one quantum apart (the
    solver then took (1, 0)); exact fractions tie, and the lower slots win."""
    node = {"a": [Fraction(1, 10), Fraction(7, 30)], "b": [Fraction(3, 10), Fraction(7, 10)]}
    edge = {("a", "b"): [[Fraction(1, 10), Fraction(1)], [Fraction(1), Fraction(1, 10)]]}
    assert solve_map(["a", "b"], node, edge, kind="chain") == {"a": 0, "b": 1}
    assert int(quantize([Fraction(7, 100)])[0]) == \
        int(quantize([Fraction(1, 10)])[0]) + int(quantize([Fraction(7, 10)])[0]) == \
        int(quantize([Fraction(7, 30)])[0]) + int(quantize([Fraction(3, 10)])[0])


@pytest.mark.parametrize("seed", range(4))
def test_the_tied_variable_uses_its_diagonal(seed):
    rng = np.random.default_rng(seed)
    node = {"debater": rng.uniform(0.1, 1, 5)}
    self_edge = rng.uniform(0.1, 1, (5, 5))
    expected = int(np.argmax(quantize(node["debater"]) + np.diagonal(quantize(self_edge))))
    got = solve_map(["debater"], node, {("debater", "debater"): self_edge}, kind="shared")
    assert got == {"debater": expected}
    assert solve_map(["coder"], {"coder": [0.5, 0.9, 0.9]}, {}, kind="shared") == \
        {"coder": 1}  # no self-edge (independent replicas): the node alone, first maximum


def test_ties_go_to_the_lowest_slots_deterministically():
    flat = {r: np.ones(4) for r in ("a", "b", "c")}
    edges = {("a", "b"): np.ones((4, 4)), ("b", "c"): np.ones((4, 4))}
    assert solve_map(["a", "b", "c"], flat, edges, kind="chain") == {"a": 0, "b": 0, "c": 0}
    # two maximizers, (a=1, b=2) and (a=2, b=1): the lexicographically first wins, every time
    node = {"a": [0.1, 0.5, 0.5], "b": [0.1, 0.5, 0.5]}
    pair = np.full((3, 3), 0.2)
    pair[1, 2] = pair[2, 1] = 0.9
    for _ in range(3):
        assert solve_map(["a", "b"], node, {("a", "b"): pair}, kind="star") == {"a": 1, "b": 2}


def test_the_solver_refuses_what_is_not_its_graph():
    node = {r: np.ones(2) for r in ("a", "b", "c")}
    with pytest.raises(ValueError, match="two parents"):
        solve_map(["a", "b", "c"], node, {("a", "c"): np.ones((2, 2)),
                                          ("b", "c"): np.ones((2, 2))}, kind="chain")
    with pytest.raises(ValueError, match="shape"):
        solve_map(["a", "b", "c"], node, {("a", "b"): np.ones((2, 3))}, kind="chain")
    for bad in (0.0, float("inf"), float("nan"), -0.5, Fraction(0)):
        with pytest.raises(ValueError, match="positive and finite"):
            quantize([1.0, bad])
    with pytest.raises(ValueError, match="one tied role"):
        solve_map(["a", "b", "c"], node, {}, kind="shared")


# ------------------------------------------------------------------ parsers and evidence


@pytest.mark.parametrize(("reply", "parsed"), [
    ('{"score": 7, "reason": "fine"}', (7, "fine")),
    ('```json\n{"score": 10}\n```', (10, "")),
    ('Sure! {"score": 7}', None),  # prose around the object
    ('{"score": 7.5}', None), ('{"score": true}', None), ('{"score": 0}', None),
    ('{"score": 11}', None), ('{"mark": 7}', None), ("[7]", None), ("", None),
])
def test_judge_replies_are_parsed_strictly(reply, parsed):
    assert P.parse_json_score(reply, key="score", text_key="reason",
                              bounds=P.SCORE_RANGE) == parsed


@pytest.mark.parametrize("reply", [
    "[" * 50_000, "{" * 50_000, '{"score": 7, "x": ' + "[" * 100 + "]" * 100 + "}",
    '{"score": 7, "reason": "' + "a" * (P.MAX_JUDGE_CHARS + 1) + '"}',
    '{"score": 7}\n{"score": 8}', '{"score": 7} and more',
])
def test_hostile_judge_replies_are_unparsable_not_fatal(reply):
    assert P.parse_json_score(reply, key="score", text_key="reason",
                              bounds=P.SCORE_RANGE) is None


def test_the_object_scan_reads_strings_and_escapes():
    reply = '{"score": 7, "reason": "a \\" } [[[[[ b"}'
    assert P.parse_json_score(reply, key="score", text_key="reason",
                              bounds=P.SCORE_RANGE) == (7, 'a " } [[[[[ b')


def test_a_truncated_mutation_is_never_a_prompt():
    assert P.parse_prompt(f"{P.BEGIN_MARK}\nKeep going\n{P.END_MARK}") == "Keep going"
    assert P.parse_prompt(f"{P.BEGIN_MARK}\nKeep going and") is None
    assert P.parse_prompt(f"{P.BEGIN_MARK}\n\n{P.END_MARK}") is None


def test_a_candidate_is_framed_as_the_team_framed_the_seed():
    seed = "Lead.\nWorkers:\n{workers}\nThen answer."
    sent = "Lead.\nWorkers:\n- coder: writes code\nThen answer.\n\nOutput contract: a block."
    frame = P.frame_of(seed, sent)
    assert frame == ({"workers": "- coder: writes code"}, "\n\nOutput contract: a block.")
    assert P.render_system("Lead well.\n{workers}", frame) == \
        "Lead well.\n- coder: writes code\n\nOutput contract: a block."
    assert P.frame_of("Other text.", sent) == ({}, "")


def test_children_read_parents_through_quotes():
    code = "```python\nprint(int(input()) * 2)\n```"
    chain = {"coder": [RoleTurn("coder", "Q", code)],
             "debugger": [RoleTurn("debugger", f"Q\n### Stage 1: coder\n\n{code}", "fixed")]}
    assert P.link(chain, "coder", "debugger")[2] == code
    delegation = {"worker": "coder", "instruction": "Write the doubling program carefully."}
    star = {"manager": [RoleTurn("manager", "Q", "done", (("delegate", delegation),))],
            "coder": [RoleTurn("coder", "Q\n## Task from the manager\n\n"
                                        "Write the doubling program carefully.\n", "ok")]}
    assert P.link(star, "manager", "coder")[2] == delegation["instruction"]
    debate = {"debater": [RoleTurn("debater_0", "Q", code), RoleTurn("debater_1", "Q", "mine"),
                          RoleTurn("debater_1", f"Q\n### The others\n{code}", "revised")]}
    parent, child, handed = P.link(debate, "debater", "debater")
    assert (parent.agent, child.output, handed) == ("debater_0", "revised", code)
    replicas = {"coder": [RoleTurn("coder_0", "Q", code), RoleTurn("coder_1", "Q", code)]}
    assert P.link(replicas, "coder", "coder") is None


# ------------------------------------------------------------------ potentials


def turn(agent, role, user, answer, calls=()):
    return [{"source": agent, "role": role, "type": "system", "content": f"SEED-{role}\n\nRULES"},
            {"source": agent, "role": role, "type": "user", "content": user},
            {"source": agent, "role": role, "type": "assistant", "content": answer,
             "tool_calls": [{"name": n, "args": a} for n, a in calls]}]


def seed_rollout(transcript):
    team = TeamResult(code=None, final_text="", transcript=transcript, prompt_tokens=0,
                      completion_tokens=0, n_llm_calls=2, n_tool_calls=0, usage_by_role={},
                      fields={})
    return Rollout(problem_id="p0", score=0.0, feedback="wrong answer", team=team, seed=0)


HANDED = "Write the doubling program and test it."


def potentials_script(prompt: str, purpose: str) -> str:
    """Probes answer `ANSWER(<first line of the system prompt>)`; an edge judge gives 2 + 3
    per parent candidate B seen in the hand-off + 5 per child candidate B, a node judge 6."""
    if purpose == "mapro:probe":
        return f"ANSWER({prompt.splitlines()[0]}) for the doubling task"
    if purpose == "mapro:edge":
        handed = re.search(r"## Output of \w+\n(.*?)\n## ", prompt, re.DOTALL).group(1)
        return json.dumps({"score": 2 + 3 * ("B-parent" in handed)
                           + 5 * ("B-child" in _candidate(prompt))})
    return '{"score": 6}'


@pytest.mark.parametrize("kind", ["chain", "star"])
def test_edge_potentials_put_each_parent_candidate_in_front_of_each_child(kind):
    if kind == "chain":
        parent, child, topology = "coder", "debugger", "sequential"
        parent_out = "```python\nprint(2 * int(input()))\n```"
        transcript = turn("coder", "coder", "Q", parent_out) + turn(
            "debugger", "debugger", f"Q\n### Stage 1: coder\n\n{parent_out}", "fixed")
    else:
        parent, child, topology = "manager", "coder", "centralized"
        parent_out = ""
        delegation = {"worker": "coder", "instruction": HANDED}
        transcript = turn("manager", "manager", "Q", "final", [("delegate", delegation)]) + \
            turn("coder", "coder", f"Q\n## Task from the manager\n\n{HANDED}\n", "done")
    seed = {parent: f"SEED-{parent}", child: f"SEED-{child}"}
    ctx = fake_context(budget=1, topology=topology, seed_bundle=seed,
                       script=potentials_script)
    potentials = Potentials(ctx, MaproSettings(), seed, [seed_rollout(transcript)])
    assert potentials.edges == [(parent, child)]
    [context] = potentials.edge_contexts[(parent, child)]
    assert context.via == ("output" if kind == "chain" else "handoff")
    pools = {parent: [f"SEED-{parent}", "B-parent"], child: [f"SEED-{child}", "B-child"]}
    asyncio.run(potentials.update(pools))
    node, edges = potentials.tables(pools)
    assert node == {parent: [Fraction(6, 10)] * 2, child: [Fraction(6, 10)] * 2}
    assert edges[(parent, child)] == [[Fraction(2, 10), Fraction(7, 10)],
                                      [Fraction(5, 10), Fraction(1)]]
    probes = [r["prompt"] for r in ctx.reflections if r["kind"] == "probe"]
    # the framing of the seed (the appended rules) is kept for every candidate
    assert all("\n\nRULES\n\n" in p for p in probes)
    # the child candidate's node probe reads the recorded input; its edge probes read each
    # parent candidate's answer in place of what the child quoted
    child_inputs = [p for p in probes if p.startswith("B-child")]
    assert len(child_inputs) == 3
    edge_inputs = [p for p in child_inputs if "ANSWER(" in p]
    assert [re.search(r"ANSWER\((.*?)\)", p).group(1) for p in edge_inputs] == \
        [f"SEED-{parent}", "B-parent"]
    quoted_text = parent_out if kind == "chain" else HANDED
    assert all(quoted_text not in p for p in edge_inputs)
    if kind == "star":  # the manager was asked for its instruction to the coder
        assert sum(P.handoff_request("coder").strip() in p for p in probes) == 2


# ------------------------------------------------------------------ the method on a fake context

SEED2 = {"coder": "Write a correct Python program for the problem.",
         "debugger": "Fix the program the coder wrote."}
SMALL = {"pool_size": 3, "scoring_batch": 1, "feedback_rows": 2, "mutations": 1}


def keyword_script(prompt: str, purpose: str) -> str:
    """Fake answers: mutations add the keyword on a failure; judges prefer the keyword."""
    if purpose == "mapro:mutate":
        current = re.search(r"## The current prompt\n(.*?)\n\n## What", prompt, re.DOTALL)
        body = current.group(1).strip()
        return f"{P.BEGIN_MARK}\n{body}\n{KEYWORD}\n{P.END_MARK}"
    if purpose in ("mapro:node", "mapro:edge"):
        return json.dumps({"score": 9 if KEYWORD in _candidate(prompt) else 4})
    if purpose == "mapro:blame":
        return '{"parent_blame": 5, "critique": "hand over less noise"}'
    return "an answer"  # a probe


def _candidate(text: str) -> str:
    found = re.search(r"## Candidate prompt[^\n]*\n(.*?)\n## ", text, re.DOTALL)
    return found.group(1) if found else ""


def run(ctx, **settings):
    return asyncio.run(make(**{**SMALL, **settings}).optimize(ctx))


def test_finds_the_keyword_within_two_passes():
    ctx = fake_context(budget=40, n_train=4, seed_bundle=SEED2, target_role="debugger",
                       script=keyword_script)
    result = run(ctx)
    assert KEYWORD in result["debugger"] and list(result) == list(SEED2)
    assert dict(ctx.seed_bundle) == SEED2 and result is not ctx.seed_bundle
    assert ctx.ledger.charged == 8  # the seed pass, one MAP pass: perfect, so it stops
    assert [c["note"] for c in ctx.candidates] == ["seed", "MAP assignment of round 1"]
    pool = [p for p in ctx.proposals if '"stage": "pool"' in p["reason"]]
    maps = [p for p in ctx.proposals if '"stage": "map"' in p["reason"]]
    assert [(p["roles"], p["accepted"]) for p in pool] == [
        (["coder"], True), (["coder"], False), (["debugger"], True), (["debugger"], False)]
    assert [p["rejected_by"] for p in pool] == [None, "validator", None, "validator"]
    assert all("duplicate of pool slot 1" in p["reason"] for p in pool[1::2])
    assert [(m["accepted"], m["scores"], m["scored_on"]) for m in maps] == \
        [(True, {"train": 1.0}, "train")]
    purposes = {r["purpose"] for r in ctx.reflections}
    assert {"mapro:mutate", "mapro:node", "mapro:probe"} <= purposes
    assert all(r["temperature"] == 0.0 for r in ctx.reflections if r["kind"] == "probe")
    assert len(ctx.checkpoints) == 2  # after seeding the pools, after round 1
    assert {c["iteration"] for c in ctx.calls} == {0}  # the same request seeds for every pass
    evidence = json.loads(maps[0]["reason"])
    assert evidence["compared"] == {"rows": 4, "score": 1.0, "best": 0.0}
    assert {"edges", "node", "slots", "blame", "judge_defaults"} <= set(evidence)


@pytest.mark.parametrize(("budget", "charged"), [(299, 0), (300, 300)])
def test_the_standard_minimum_budget_buys_one_scored_assignment(budget, charged):
    ctx = fake_context(budget=budget, n_train=150, seed_bundle=SEED2, target_role="debugger",
                       script=keyword_script)
    run(ctx)
    assert ctx.ledger.charged == charged
    maps = [p for p in ctx.proposals if '"stage": "map"' in p["reason"]]
    assert [m["scores"] for m in maps] == ([{"train": 1.0}] if charged else [])


@pytest.mark.parametrize("budget", [0, 7, 8, 15])
def test_a_budget_below_two_passes_keeps_the_seed_and_spends_nothing(budget):
    ctx = fake_context(budget=budget, n_train=8, seed_bundle=SEED2, target_role="debugger",
                       script=keyword_script)
    assert run(ctx) == SEED2 and ctx.ledger.charged == 0 and ctx.reflections == []


def longer_is_better(prompt: str, purpose: str) -> str:
    """Mutations append their focus hint (so each differs); judges prefer longer prompts."""
    if purpose == "mapro:mutate":
        body = re.search(r"## The current prompt\n(.*?)\n\n## What", prompt, re.DOTALL)
        hint = re.search(r"paying attention to (.*?)\. Stay", prompt).group(1)
        return f"{P.BEGIN_MARK}\n{body.group(1).strip()} Mind {hint}.\n{P.END_MARK}"
    if purpose in ("mapro:node", "mapro:edge"):
        return json.dumps({"score": min(10, 1 + len(_candidate(prompt)) // 25)})
    return keyword_script(prompt, purpose)


@pytest.mark.parametrize("budget", [12, 13])
def test_the_budget_ends_the_rounds_before_any_wasted_uncharged_call(budget):
    available_at_calls = []

    def script(prompt: str, purpose: str) -> str:
        available_at_calls.append(ctx.ledger.available)
        return longer_is_better(prompt, purpose)

    ctx = fake_context(budget=budget, n_train=4, seed_bundle=SEED2, target_role="debugger",
                       script=script)  # no prompt ever helps: rounds go on
    result = run(ctx, max_rounds=8, patience=8, trust_region=0.1)
    assert result == SEED2
    assert ctx.ledger.charged == 12  # the seed and two MAP passes; a third does not fit
    maps = [p for p in ctx.proposals if '"stage": "map"' in p["reason"]]
    assert [m["rejected_by"] for m in maps] == ["gate", "gate"]
    # once the next pass cannot be paid, no probe, judge or mutation is asked
    assert available_at_calls and min(available_at_calls) >= 4
    assert {c["iteration"] for c in ctx.calls} == {0}
    assert len(ctx.checkpoints) == 3 and ctx.checkpoints[-1]["state"]["round"] == 2


def test_unparsable_and_truncated_replies_are_recorded_not_adopted():
    def broken(prompt: str, purpose: str) -> str:
        if purpose == "mapro:mutate":
            return f"{P.BEGIN_MARK}\nWrite code. {KEYWORD}\nand then"
        return "I think it is quite good" if purpose != "mapro:probe" else "an answer"

    ctx = fake_context(budget=40, n_train=4, seed_bundle=SEED2, target_role="debugger",
                       script=broken)
    assert run(ctx) == SEED2 and ctx.ledger.charged == 4  # nothing new to score
    pool = [p for p in ctx.proposals if '"stage": "pool"' in p["reason"]]
    assert pool and all(p["rejected_by"] == "validator" and "truncated" in p["reason"]
                        for p in pool)
    # each round's MAP assignment (the seed again) is in the history, marked already scored
    maps = [json.loads(p["reason"]) | {"by": p["rejected_by"], "scores": p["scores"]}
            for p in ctx.proposals if '"stage": "map"' in p["reason"]]
    assert [(m["round"], m["by"], m["already_scored"], m["scores"]) for m in maps] == \
        [(1, "gate", 0.0, {}), (2, "gate", 0.0, {}), (3, "gate", 0.0, {})]  # patience 3
    # the judge defaults each round brought: round 1 the seeds' node judges
    assert [m["judge_defaults"] for m in maps] == [{"mapro:node": 2}, {}, {}]
    assert len(ctx.proposals) == len(pool) + 3


@dataclass
class LosingContext(FakeContext):
    """Infrastructure loses the `lost` rows of every bundle holding the keyword (None, with
    budget left, uncharged)."""

    lost: frozenset[str] = frozenset()

    async def rollout(self, bundle, problem, *, iteration, active=None):
        if KEYWORD in bundle[self.target_role] and problem.id in self.lost:
            return None
        return await super().rollout(bundle, problem, iteration=iteration, active=active)


def test_lost_rows_are_left_out_of_the_comparison_and_recorded():
    easy = frozenset({"p0", "p1"})  # the seed solves these: 0.5
    data = FakeData(train=tuple(make_problem(i) for i in range(4)), validation=())
    ctx = LosingContext(seed_bundle=SEED2, data=data, budget=40, target_role="debugger",
                        easy=easy, lost=easy, script=keyword_script)
    result = run(ctx)
    # on the rows both completed (p2, p3) the keyword is 1.0 against 0.0: a 0 for the lost
    # rows would have made it 0.5, not better than the seed
    assert KEYWORD in result["debugger"]
    [scored] = [p for p in ctx.proposals if '"stage": "map"' in p["reason"]]
    evidence = json.loads(scored["reason"])
    assert scored["accepted"] and scored["scores"] == {"train": 1.0}
    assert evidence["compared"] == {"rows": 2, "score": 1.0, "best": 0.0}
    assert evidence["missing"] == {"assignment": ["p0", "p1"], "best": []}


def chain_failure(index: int) -> Rollout:
    code = f"```python\nprint({index} * int(input()))\n```"
    rollout = seed_rollout(turn("coder", "coder", f"Q{index}", code)
                           + turn("debugger", "debugger",
                                  f"Q{index}\n### Stage 1: coder\n\n{code}", "fixed"))
    return Rollout(problem_id=f"p{index}", score=0.0, feedback=f"wrong answer {index}",
                   team=rollout.team, seed=0)


def test_critiques_reaching_a_mutation_are_clipped_and_capped():
    def verbose(prompt: str, purpose: str) -> str:
        row = re.search(r"wrong answer (\d+)", prompt).group(1)
        return json.dumps({"parent_blame": 8, "critique": f"row {row}: " + "c" * 5000})

    ctx = fake_context(budget=40, n_train=4, seed_bundle=SEED2, script=verbose)
    settings = MaproSettings(**SMALL, clip_chars=300, max_critiques=2)
    mapro_run = _Run(ctx, settings)
    failures = [chain_failure(i) for i in range(5)]
    mapro_run.potentials = Potentials(ctx, settings, SEED2, failures)
    blame, critiques = asyncio.run(mapro_run._blame(failures))
    assert blame == {"coder": 0.8, "debugger": pytest.approx(0.2)}
    assert [c[:len("debugger: row 0")] for c in critiques["coder"]] == \
        ["debugger: row 0", "debugger: row 1"]  # the worst rows' first
    assert all(len(c) <= len("debugger: ") + 300 + len(CLIP_NOTE) for c in critiques["coder"])
    prompt = mapro_run._mutation_prompt("coder", SEED2["coder"], failures[:2],
                                        critiques["coder"], 0)
    assert prompt.count("c" * 150) == 2 and "c" * 301 not in prompt


def test_single_is_refused_and_settings_are_checked():
    ctx = fake_context(budget=20, topology="single", seed_bundle={"solver": "Solve."})
    with pytest.raises(ValueError, match="single"):
        asyncio.run(make().optimize(ctx))
    assert get_optimizer("mapro").key == "mapro"
    defaults = MaproSettings()
    assert (defaults.pool_size, defaults.max_rounds, defaults.patience,
            defaults.scoring_batch, defaults.feedback_rows) == (5, 8, 3, 3, 3)
    assert resolve_settings("mapro", {"pool_size": 3})["pool_size"] == 3
    for bad, name in [({"pool_size": 1}, "pool_size"), ({"patience": 0}, "patience"),
                      ({"trust_region": 1.5}, "trust_region"),
                      ({"judge_default": 11}, "judge_default"), ({"rounds": 2}, "rounds"),
                      ({"train_rows": "all"}, "train_rows"),
                      ({"max_critiques": 0}, "max_critiques")]:
        with pytest.raises(SettingsError, match=name):
            resolve_settings("mapro", bad)


def _run_of(problem_id: str, *, passed: bool, coder: str, debugger: str) -> Rollout:
    code = f"```python\n{coder}\n```"
    team = seed_rollout(turn("coder", "coder", f"Q {problem_id}", code)
                        + turn("debugger", "debugger", f"Q {problem_id}\n### Stage 1: coder\n\n"
                               f"{code}", debugger)).team
    return Rollout(problem_id=problem_id, score=float(passed), feedback="", team=team, seed=0)


def test_judges_are_primed_with_better_and_worse_answers_from_train_runs_only():
    ctx = fake_context(budget=1, seed_bundle=SEED2, script=potentials_script)
    runs = [_run_of("p0", passed=True, coder="print(GOOD)", debugger="GOOD-FIX"),
            _run_of("p1", passed=False, coder="print(BAD)", debugger="BAD-FIX"),
            _run_of("v0", passed=False, coder="print(VALIDATION)", debugger="VAL-FIX")]
    potentials = Potentials(ctx, MaproSettings(), SEED2, runs)
    asyncio.run(potentials.update({role: [text] for role, text in SEED2.items()}))
    judged = [r["prompt"] for r in ctx.reflections if r["kind"] == "judge"]
    node = next(p for p in judged if "role 'coder'" in p)
    better, worse = node.index("### Better"), node.index("### Worse")
    assert better < node.index("print(GOOD)") < worse < node.index("print(BAD)")
    edge = next(p for p in judged if "hand-off" in p)
    assert "Answer of debugger:\nGOOD-FIX" in edge and "Answer of debugger:\nBAD-FIX" in edge
    demos = [p.split("## How this role's answers fared")[1].split("\nThe agent")[0]
             for p in judged]
    assert not any("VALIDATION" in d or "VAL-FIX" in d for d in demos)  # train rows only
    none = Potentials(ctx, MaproSettings(preference_demos=0), SEED2, runs)
    assert set(none.node_demos.values()) == {""} and set(none.edge_demos.values()) == {""}
    one_sided = Potentials(ctx, MaproSettings(), SEED2, runs[1:])  # no passing run
    assert set(one_sided.node_demos.values()) == {""}

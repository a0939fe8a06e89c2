"""The `maspo` method: reward arithmetic, role order, misalignment mining, beam refresh, budget,
records and resume on the fake context (whole jobs: `tests/optimize/test_maspo_jobs.py`)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from dataclasses import replace

import pytest

from lcb.optimize.graph import team_graph
from lcb.optimize.methods import get_optimizer, resolve_settings
from lcb.optimize.methods import maspo_prompts as mp
from lcb.optimize.methods.maspo import (
    MaspoResumeDivergence,
    MaspoSettings,
    Member,
    MisalignmentBuffer,
    inject,
    make,
    refreshed,
    revisit_budget,
    schedule,
    select,
)
from lcb.optimize.methods.maspo_judge import lookahead_mode
from lcb.optimize.settings import SettingsError
from lcb.optimize.teamrun import TeamCell
from tests import helpers_methods
from tests.helpers_maspo import _CURRENT, SMALL, _prefer, _propose
from tests.helpers_methods import KEYWORD, fake_context

pytestmark = pytest.mark.timeout(200)

SEQ2 = {"coder": "Write the program.", "debugger": "Fix the program."}
SEQ4 = {"analyzer": "List the constraints.", "coder": "Write the program.",
        "tester": "Test the program.", "debugger": "Fix the program."}
STAR2 = {"manager": "Plan and delegate.", "coder": "Write the program."}



def keyword_script(prompt: str, _purpose: str) -> str:
    """FakeContext's script: the same behaviour with `KEYWORD` (the judge prefers the side
    whose outputs hold it: see `_outputs_follow_instructions`)."""
    return _prefer(prompt, KEYWORD) if mp.JUDGE_TITLE in prompt else _propose(prompt, KEYWORD)


@pytest.fixture(autouse=True)
def _outputs_follow_instructions(monkeypatch):
    """FakeContext's agents answer alike whatever their instructions, and maspo's judge sees
    only inputs and outputs: here an agent whose text holds `KEYWORD` says so in its answer."""
    original = helpers_methods.team_result

    def team_result(bundle, problem, *, solved):
        result = original(bundle, problem, solved=solved)
        transcript = [
            {**e, "content": f"{e['content']}\n({KEYWORD})"}
            if e["type"] == "assistant" and KEYWORD in bundle[e["role"]] else e
            for e in result.transcript]
        return replace(result, transcript=transcript)

    monkeypatch.setattr(helpers_methods, "team_result", team_result)


def run(ctx, **settings):
    return asyncio.run(make(**settings).optimize(ctx))


# --- the reward arithmetic ---------------------------------------------------------------

@pytest.mark.parametrize(("terms", "reward"), [
    ((1.0, 1.0, 1.0), 0.5), ((0.0, 0.0, 0.0), -0.5), ((0.5, 0.5, 0.5), 0.0),
    ((1.0, 1.0, 0.5), 0.4), ((1.0, 0.5, 0.5), 0.2), ((0.5, 0.5, 1.0), 0.1),
    ((1.0, 0.0, 0.0), -0.1), ((0.0, 1.0, 1.0), 0.1)])
def test_item_reward_weights(terms, reward) -> None:
    assert mp.item_reward(*terms) == pytest.approx(reward)


def test_judge_answers_map_to_numbers() -> None:
    assert [mp.pairwise_value(v, child_side="B") for v in ("B", "A", "tie", None)] == [
        1.0, 0.0, 0.5, 0.5]
    assert [mp.pairwise_value(v, child_side="A") for v in ("B", "A")] == [0.0, 1.0]
    assert [mp.metric_value(*pair) for pair in ((1.0, 0.0), (0.0, 0.0), (0.0, 1.0))] == [
        1.0, 0.5, 0.0]
    parsed = [mp.parse_verdict(reply) for reply in (
        '{"verdict": "B", "reason": "x"}', '```json\n{"verdict": "tie"}\n```',
        '{"verdict": "Tie"}', "B", '{"verdict": "C"}', '{"verdict": "A"', '["A"]',
        '{"verdict": 1}')]
    assert parsed == ["B", "tie", "tie", None, None, None, None, None]


@pytest.mark.parametrize(("reply", "verdict"), [
    ('Sure: {"verdict": "A"}', "A"),
    ('{"verdict": "b", "reason": "x"}', "B"),
    ('{"verdict": "a"}', "A"),
    ('{"verdict": " TIE "}', "tie"),
    ('Having compared both:\n```json\n{"verdict": "b", "reason": "x"}\n```\nThat is all.', "B"),
    ('{"verdict": "A", "reason": "it handles {n = 0}"} and more prose }', "A"),
    ('I like {this} more: {"verdict": "B", "nested": {"k": 1}}', "B"),
])
def test_a_verdict_is_read_from_the_first_json_object(reply, verdict) -> None:
    assert mp.parse_verdict(reply) == verdict


@pytest.mark.parametrize("reply", [
    '{"verdict": "A is better"}', '{"verdict": "c"}', '{"verdict": ["A"]}', "A",
    'Verdict: {"verdict": "B", "reason": "trunc', '{"reason": "x"} then {"verdict": "A"}',
    "{}", "",
])
def test_anything_else_is_unparsed(reply) -> None:
    assert mp.parse_verdict(reply) is None


def _judged(purpose_answers):
    """A script: proposals add the keyword; judge answers come from the purpose."""
    def script(prompt: str, purpose: str) -> str:
        if mp.JUDGE_TITLE not in prompt:
            return _propose(prompt, KEYWORD)
        answer = purpose_answers(purpose)
        return _prefer(prompt, KEYWORD) if answer == "prefer" else answer
    return script


def test_reward_of_a_non_terminal_stage_on_fixed_answers() -> None:
    # coder -> debugger: local prefers the keyword side (1), lookahead says tie (0.5), and the
    # coder's prompt does not change the debugger's answer (global 0.5): 0.4+0.2+0.1-0.5 = 0.2
    ctx = fake_context(budget=8, seed_bundle=SEQ2, target_role="debugger",
                       script=_judged(lambda p: "prefer" if ":local:" in p
                                      else '{"verdict": "tie"}'))
    run(ctx, **SMALL)
    scored = [p for p in ctx.proposals if p["scores"]]
    assert [p["roles"] for p in scored] == [["coder"]]
    assert scored[0]["scores"]["reward"] == pytest.approx(0.2)
    assert {k: scored[0]["scores"][k] for k in ("local", "lookahead", "global")} == {
        "local": 1.0, "lookahead": 0.5, "global": 0.5}
    purposes = [r["purpose"] for r in ctx.reflections if r["kind"] == "judge"]
    assert purposes == ["maspo:local:coder", "maspo:lookahead:coder"] * 4


def test_reward_of_the_terminal_stage_takes_the_global_value_as_lookahead() -> None:
    # the debugger answers for the team: no lookahead judge; lookahead = global. Rows the
    # child newly solves: 0.4 + 0.4 + 0.2 - 0.5 = 0.5; easy rows (both solve): local 1,
    # global 0.5: 0.4 + 0.2 + 0.1 - 0.5 = 0.2
    easy = frozenset({"p0", "p1", "p2", "p3"})
    ctx = fake_context(budget=16, n_train=8, seed_bundle=SEQ2, target_role="debugger",
                       easy=easy, script=_judged(lambda p: "prefer"))
    run(ctx, **SMALL)
    scored = [p for p in ctx.proposals if p["scores"] and p["roles"] == ["debugger"]]
    assert len(scored) == 1
    rows = json.loads(scored[0]["reason"])["rows"]
    expected = sum(0.2 if row in easy else 0.5 for row in rows) / len(rows)
    assert scored[0]["scores"]["reward"] == pytest.approx(expected)
    assert json.loads(scored[0]["reason"])["lookahead_mode"] == "global"
    judged = {r["purpose"] for r in ctx.reflections if r["kind"] == "judge"}
    assert "maspo:lookahead:debugger" not in judged and "maspo:local:debugger" in judged


def test_reward_of_a_shared_role_judges_the_final_answer() -> None:
    # independent: local prefers the keyword (1), the final-answer lookahead says tie (0.5),
    # the keyword solves every row (global 1): 0.4 + 0.2 + 0.2 - 0.5 = 0.3
    ctx = fake_context(budget=12, seed_bundle={"coder": "Write the program."},
                       topology="independent", team_size=2,
                       script=_judged(lambda p: "prefer" if ":local:" in p
                                      else '{"verdict": "tie", "reason": "same"}'))
    result = run(ctx, **SMALL)
    scored = [p for p in ctx.proposals if p["scores"]]
    assert scored[0]["scores"]["reward"] == pytest.approx(0.3)
    assert json.loads(scored[0]["reason"])["lookahead_mode"] == "final"
    assert KEYWORD in result["coder"]


def test_unparsable_verdicts_count_as_ties_and_are_counted() -> None:
    ctx = fake_context(budget=8, seed_bundle=SEQ2, target_role="debugger",
                       script=_judged(lambda p: "I think B is better"))
    run(ctx, **SMALL)
    (scored,) = [p for p in ctx.proposals if p["scores"]]
    assert scored["scores"]["reward"] == pytest.approx(0.4 * 0.5 + 0.4 * 0.5 + 0.2 * 0.5 - 0.5)
    assert json.loads(scored["reason"])["unparsed_verdicts"] == 8


def test_prose_wrapped_lowercase_verdicts_are_read() -> None:
    # as test_reward_of_a_non_terminal_stage_on_fixed_answers, the answers in prose, lowercase
    def script(prompt: str, purpose: str) -> str:
        if mp.JUDGE_TITLE not in prompt:
            return _propose(prompt, KEYWORD)
        if ":lookahead:" in purpose:
            return 'Both look alike.\n{"verdict": "TIE", "reason": "same"}'
        verdict = json.loads(_prefer(prompt, KEYWORD))["verdict"].lower()
        return f'After comparing the outputs: {{"verdict": "{verdict}"}}. Done.'

    ctx = fake_context(budget=8, seed_bundle=SEQ2, target_role="debugger", script=script)
    run(ctx, **SMALL)
    (scored,) = [p for p in ctx.proposals if p["scores"]]
    assert scored["scores"]["reward"] == pytest.approx(0.2)
    assert json.loads(scored["reason"])["unparsed_verdicts"] == 0


def test_the_judge_sees_outputs_never_instruction_texts() -> None:
    """A candidate that praises itself gains nothing: the judge, who would prefer the side
    holding the praise, never sees it; outputs are alike, so every verdict is a tie."""
    praise = "This version is better than the other one."

    def script(prompt: str, _purpose: str) -> str:
        if mp.JUDGE_TITLE in prompt:
            return _prefer(prompt, praise)
        body = _CURRENT.search(prompt).group(1).strip()
        return f"{mp.BEGIN}\n{body}\n{praise}\n{mp.END}"

    ctx = fake_context(budget=8, seed_bundle=SEQ2, target_role="debugger", script=script)
    run(ctx, **SMALL)
    (scored,) = [p for p in ctx.proposals if p["scores"]]
    assert praise in scored["bundle"]["coder"]
    assert {k: scored["scores"][k] for k in ("reward", "local", "lookahead")} == {
        "reward": 0.0, "local": 0.5, "lookahead": 0.5}
    judged = [(r["purpose"], r["prompt"]) for r in ctx.reflections if r["kind"] == "judge"]
    assert len(judged) == 8
    assert not any(praise in prompt or "Write the program." in prompt or "Instructions\n"
                   in prompt for _, prompt in judged)
    shown = {"maspo:local:coder": "[coder] answer for p", "maspo:lookahead:coder":
             "[debugger] answer for p"}  # the role's own output; its successor's
    assert all(prompt.count(shown[purpose]) == 2 for purpose, prompt in judged)


def test_lookahead_modes() -> None:
    graphs = {t: team_graph(TeamCell(t, 4)) for t in ("independent", "sequential",
                                                       "centralized", "decentralized")}
    assert [lookahead_mode(graphs["sequential"], r) for r in graphs["sequential"].roles] == [
        "children", "children", "children", "global"]
    assert [lookahead_mode(graphs["centralized"], r) for r in graphs["centralized"].roles] == [
        "children", "final", "final", "final"]
    assert lookahead_mode(graphs["independent"], "coder") == "final"
    assert lookahead_mode(graphs["decentralized"], "debater") == "final"


# --- role order --------------------------------------------------------------------------

@pytest.mark.parametrize(("topology", "size", "order"), [
    ("independent", 2, ["coder"]),
    ("sequential", 2, ["coder", "debugger"]),
    ("sequential", 4, ["analyzer", "coder", "tester", "debugger"]),
    ("centralized", 2, ["manager", "coder"]),
    ("centralized", 4, ["manager", "analyzer", "coder", "tester"]),
    ("decentralized", 2, ["debater"]),
])
def test_role_order_per_topology(topology, size, order) -> None:
    graph = team_graph(TeamCell(topology, size))
    assert schedule(graph, steps_per_turn=3, max_depth=9) == order * 3
    assert schedule(graph, steps_per_turn=3, max_depth=4) == order
    assert schedule(graph, steps_per_turn=1, max_depth=2) == order * 2


def test_single_is_refused() -> None:
    with pytest.raises(ValueError, match="multi-agent"):
        schedule(team_graph(TeamCell("single")), steps_per_turn=3, max_depth=9)


def test_the_run_visits_roles_in_the_schedule() -> None:
    ctx = fake_context(budget=200, seed_bundle=SEQ2, target_role="debugger",
                       script=keyword_script)
    run(ctx, minibatch=2, steps_per_turn=1, max_depth=3)
    roles = [r["purpose"].rsplit(":", 1)[1] for r in ctx.reflections if r["kind"] == "reflect"]
    turns = [role for i, role in enumerate(roles) if i == 0 or roles[i - 1] != role]
    assert turns == ["coder", "debugger"] * 3
    temps = {r["temperature"] for r in ctx.reflections if r["kind"] == "reflect"}
    assert temps == {0.7}
    assert {r["temperature"] for r in ctx.reflections if r["kind"] == "judge"} == {0.0}


# --- misalignment mining, beam ------------------------------------------------------------

def test_misalignment_buffer_keeps_the_newest_three() -> None:
    buffer = MisalignmentBuffer(3)
    for problem_id in "abcd":
        buffer.add(problem_id)
    assert buffer.ids == ["b", "c", "d"]
    buffer.add("b")
    assert buffer.ids == ["c", "d", "b"]


def test_injection_takes_at_most_five_oldest_first_and_consumes_them() -> None:
    first, second = MisalignmentBuffer(3, ["a", "b", "c"]), MisalignmentBuffer(3, ["d", "e", "f"])
    assert inject([first, second], limit=5) == ["a", "b", "c", "d", "e"]
    assert (first.ids, second.ids) == ([], ["f"])
    assert inject([MisalignmentBuffer(3, ["x", "y"])], limit=1) == ["x"]


def test_mined_cases_reach_the_predecessors_minibatch() -> None:
    """Star manager -> coder: the team solves a row only when the manager holds the keyword,
    which the reflection never writes for it; the coder's keyword is judged locally better,
    but the team still fails, so its rows are mined and the manager's next turn starts from
    them (3 newest, of at most 5)."""
    def script(prompt: str, _purpose: str) -> str:
        if mp.JUDGE_TITLE in prompt:
            return _prefer(prompt, KEYWORD)
        return _propose(prompt, KEYWORD, roles=("coder",))

    ctx = fake_context(budget=40, n_train=8, seed_bundle=STAR2, target_role="manager",
                       topology="centralized", team_size=2, script=script)
    run(ctx, minibatch=4, steps_per_turn=1, max_depth=2)
    (coder,) = [json.loads(p["reason"]) for p in ctx.proposals
                if p["scores"] and p["roles"] == ["coder"]]
    assert coder["misaligned"] == coder["rows"]  # locally better, globally wrong: all 4
    mined = coder["misaligned"][-3:]
    turns = [c["state"] for c in ctx.checkpoints]
    assert [t["buffers"]["coder"] for t in turns if t["turn"] == 1][-1] == mined
    assert [t["buffers"]["coder"] for t in turns if t["turn"] == 2][0] == []  # consumed
    # the manager's second turn (turn 2) drew its first minibatch with the mined rows first
    rows = {call["problem"] for call in ctx.calls if call["iteration"] == 3}  # turn 2's node
    assert set(mined) <= rows and len(rows) == 4
    asked = [r["prompt"] for r in ctx.reflections if r["purpose"] == "maspo:propose:manager"]
    shown = re.findall(r"Problem:\nPrint (\d+)\.", asked[2])  # turn 2's first slice
    assert [f"p{n}" for n in shown] == mined[:2]


def test_beam_refresh_reanchors() -> None:
    old = [Member("a", 0.5, 2), Member("s", 0.0, 0), Member("t", 0.25, 1)]
    fresh = refreshed(old, "a", beam=2, reanchor=0.7)
    assert [(m.text, m.gain) for m in fresh] == [("a", 0), ("s", -2)]
    assert [m.value for m in fresh] == pytest.approx([0.0, 0.3 * (0.0 - 0.5)])
    outside = refreshed([Member("x", 0.4, 1)], "s", beam=2, reanchor=0.7)
    assert [(m.text, m.gain) for m in outside] == [("s", 0), ("x", 1)]
    assert outside[1].value == pytest.approx(0.12)
    assert refreshed([], "s", beam=2, reanchor=0.7) == [Member("s")]


def test_selection_keeps_the_best_distinct_texts() -> None:
    pool = [Member("a"), Member("b", 0.2), Member("c", 0.2), Member("b", 0.3), Member("d", -1)]
    assert [(m.text, m.value) for m in select(pool, 2)] == [("b", 0.3), ("c", 0.2)]
    assert [m.text for m in select([Member("a"), Member("b")], 2)] == ["a", "b"]


# --- budget, records, resume ----------------------------------------------------------------

@pytest.mark.parametrize("budget", [0, 5, 7, 8, 13, 31])
def test_the_budget_is_never_exceeded(budget: int) -> None:
    ctx = fake_context(budget=budget, seed_bundle=SEQ2, target_role="debugger",
                       script=keyword_script)
    result = run(ctx, minibatch=4)
    assert ctx.ledger.charged <= budget and len(ctx.calls) == ctx.ledger.charged
    assert list(result) == list(SEQ2)
    if budget < 8:  # a node needs the parent's and one child's minibatch
        assert ctx.calls == [] and result == SEQ2
    if budget == 13:  # one node (parent 4, one child 4; its twin is not run), then 5 < 8
        assert ctx.ledger.charged == 8


@pytest.mark.parametrize(("roles", "rows", "settings", "need"), [
    (4, 10, {}, 4 * 150 + 20), (2, 10, {}, 320), (1, 10, {}, 170), (10, 10, {}, 1520),
    (4, 2, {"steps_per_turn": 2, "max_depth": 4}, 4 * 18 + 4),
    (2, 4, {"beam": 4, "offspring": 1, "steps_per_turn": 3}, 2 * (1 + 2 + 4) * 8 + 8)])
def test_the_budget_that_buys_a_revisit(roles, rows, settings, need) -> None:
    assert revisit_budget(roles, rows, MaspoSettings(**settings)) == need


def _distinct(prompt: str, _purpose: str) -> str:
    """Every reply a new valid text (the proposal prompt's hash): every node costs its most."""
    if mp.JUDGE_TITLE in prompt:
        return '{"verdict": "tie"}'
    body = _CURRENT.search(prompt).group(1).strip()
    return f"{mp.BEGIN}\n{body}\nNote {hashlib.sha256(prompt.encode()).hexdigest()[:8]}\n{mp.END}"


@pytest.mark.parametrize(("budget", "revisited"), [(75, False), (76, True)])
def test_a_budget_short_of_a_revisit_is_warned_about(caplog, budget, revisited) -> None:
    # size-4 chain, nodes of 2 rows: each first turn costs its most, 18 (1 + 2 nodes of 6), so
    # the first sweep spends 72 and the revisit's first node needs 4 more
    settings = {"minibatch": 2, "steps_per_turn": 2, "max_depth": 4}
    ctx = fake_context(budget=budget, n_train=80, seed_bundle=SEQ4, target_role="debugger",
                       team_size=4, script=_distinct)
    with caplog.at_level(logging.WARNING, logger="lcb.optimize.methods.maspo"):
        run(ctx, **settings)
    warned = [r.getMessage() for r in caplog.records if "revisit" in r.getMessage()]
    assert warned == ([] if revisited else [
        "maspo: a budget of 75 may end before any revisit: the first turns of 4 role(s) can "
        "spend 72, so a revisit needs a budget of 76"])
    sweep = [c["ledger"]["charged"] for c in ctx.checkpoints if c["state"]["turn"] == 3]
    assert sweep[-1] == 72 and ctx.replays == 0  # the worst case: no replay, no twin
    revisit = [call for call in ctx.calls if call["iteration"] == 5]  # the fifth turn's
    assert len(revisit) == (4 if revisited else 0)


def test_no_warning_without_revisits_in_the_schedule(caplog) -> None:
    ctx = fake_context(budget=8, seed_bundle=SEQ2, target_role="debugger", script=keyword_script)
    with caplog.at_level(logging.WARNING, logger="lcb.optimize.methods.maspo"):
        run(ctx, **SMALL)
    assert not [r for r in caplog.records if "revisit" in r.getMessage()]


def test_a_truncated_or_invalid_proposal_is_never_adopted() -> None:
    replies = iter([f"{mp.BEGIN}\nWrite code. {KEYWORD}\nand then",
                    f"{mp.BEGIN}\n{KEYWORD}\n```python\nprint(1)\n{mp.END}"] * 50)

    def script(prompt: str, _purpose: str) -> str:
        return _prefer(prompt, KEYWORD) if mp.JUDGE_TITLE in prompt else next(replies)

    ctx = fake_context(budget=40, seed_bundle=SEQ2, target_role="debugger", script=script)
    result = run(ctx, **SMALL)
    assert result == SEQ2 and all(call["bundle"] == SEQ2 for call in ctx.calls)
    assert [(p["rejected_by"], p["accepted"]) for p in ctx.proposals] == [
        ("validator", False)] * 4
    assert ctx.proposals[0]["reason"].startswith("the reply has no complete marked candidate")
    assert "code fence" in ctx.proposals[1]["reason"]


def test_every_proposal_is_recorded_with_its_parent() -> None:
    ctx = fake_context(budget=60, seed_bundle=SEQ2, target_role="debugger",
                       script=keyword_script)
    result = run(ctx, minibatch=4, steps_per_turn=1, max_depth=2)
    asked = [r for r in ctx.reflections if r["kind"] == "reflect"]
    assert len(ctx.proposals) == len(asked)
    assert KEYWORD in result["debugger"] and KEYWORD not in result["coder"]
    adopted = ctx.candidates[0]
    assert adopted["bundle"] == result and adopted["note"].startswith("maspo: debugger")
    assert all(p["parent"] and p["roles"] in (["coder"], ["debugger"]) for p in ctx.proposals)
    assert [c["state"]["save"] for c in ctx.checkpoints] == list(
        range(1, len(ctx.checkpoints) + 1))


def test_a_diverging_resume_is_refused() -> None:
    ctx = fake_context(budget=40, seed_bundle=SEQ2, target_role="debugger",
                       script=keyword_script, restored={"save": 1, "turn": 0, "iteration": 7})
    with pytest.raises(MaspoResumeDivergence, match="checkpoint 1"):
        run(ctx, **SMALL)


def test_a_retrace_reproduces_the_checkpoint() -> None:
    first = fake_context(budget=40, seed_bundle=SEQ2, target_role="debugger",
                         script=keyword_script)
    whole = run(first, **SMALL)
    saved = first.checkpoints[1]["state"]
    again = fake_context(budget=40, seed_bundle=SEQ2, target_role="debugger",
                         script=keyword_script, restored=saved)
    assert run(again, **SMALL) == whole


# --- settings -----------------------------------------------------------------------------

def test_registry_and_settings() -> None:
    assert get_optimizer("maspo").key == "maspo"
    s = MaspoSettings()
    assert (s.beam, s.offspring, s.minibatch, s.steps_per_turn, s.max_depth, s.buffer,
            s.inject, s.reanchor, s.temperature) == (2, 2, 10, 3, 9, 3, 5, 0.7, 0.7)
    assert resolve_settings("maspo", {"minibatch": 4})["minibatch"] == 4
    for bad, name in (({"minibatch": 0}, "minibatch"), ({"reanchor": 1.5}, "reanchor"),
                      ({"max_depth": 2}, "max_depth"), ({"beam": "two"}, "beam"),
                      ({"inject": -1}, "inject"), ({"nope": 1}, "nope")):
        with pytest.raises(SettingsError, match=name):
            resolve_settings("maspo", bad)
    with pytest.raises(TypeError):
        make(unknown_knob=1)

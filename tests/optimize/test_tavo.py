"""The `tavo` method: decomposition, merge fallback, overlay, gate (exact), then whole jobs."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from lcb.optimize.artifacts import read_history
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.methods import get_optimizer, resolve_settings
from lcb.optimize.methods import tavo_prompts as tp
from lcb.optimize.methods.tavo import (
    OVERLAY_BEGIN,
    OVERLAY_END,
    TavoSettings,
    gate,
    keep_going,
    make,
    merge_fallback,
    overlay_rules,
    paired_gate,
    val_batch_size,
    with_overlay,
)
from lcb.optimize.methods.tavo_credit import split_transcript
from lcb.optimize.methods.tavo_parts import rule_problem
from lcb.optimize.settings import SettingsError
from lcb.teams.centralized import TOOL
from tests import helpers_methods, helpers_planted
from tests.helpers_methods import FIX, KEYWORD, SEED, fake_context
from tests.helpers_optimize import TeamModel
from tests.helpers_planted import assert_fix_deployed, assert_seed_kept, run_planted
from tests.helpers_resume import assert_resumes_to_whole
from tests.scripted_server import (  # noqa: F401
    Reply,
    ToolCall,
    message_text,
    scripted_fixture,
)

pytestmark = pytest.mark.timeout(300)
PLANTED_BUDGET = 12  # the seed's scoring (3) + one round (6 train + 3 validation)
CAPS = {"add": 6, "remove": 4, "restructure": 4}


# --- a responder for tavo's prompts (a pure function of the request text) ---------------
def _section(text: str, start: str, stop: str) -> str:
    found = re.search(re.escape(start) + r"(.*?)" + re.escape(stop), text, re.DOTALL)
    return found.group(1) if found else ""


def tavo_responder(fix: str = FIX, *, always_edit: bool = False, rules=None):
    """Judges answer in tavo's JSON; a failed outcome (or `always_edit`) makes the agent
    credit `add` the fix; merge, overlay and rewrite carry the fix when their edits hold it.
    `rules(text)` may replace the overlay's rules."""

    def respond(text: str) -> str | None:
        failed = "Outcome: FAILED" in text
        if text.startswith(tp.TITLES["subtraj"]):
            score = 3 if failed else 8
            return json.dumps({"progress": score, "coordination": score,
                               "stage_appropriateness": score, "contributions": ["wrote code"],
                               "weaknesses": ["missed a case"] if failed else [],
                               "suggestions": ["check the examples"]})
        if text.startswith(tp.TITLES["agent"]):
            add = [fix] if failed or always_edit else []
            return "Here it is:\n" + json.dumps({
                "score": 2 if failed else 8, "causal_analysis": "the program was wrong",
                "editing_instructions": {"add": add, "remove": [], "restructure": []}})
        if text.startswith(tp.TITLES["merge"]):
            return json.dumps({"add": [fix] if fix in text else ["Keep it short."],
                               "remove": [], "restructure": []})
        edits = _section(text, "## Edits", "## Your task")
        if text.startswith(tp.TITLES["overlay"]):
            chosen = rules(text) if rules else [
                "Read the statement twice.", "State the algorithm first.",
                "Test the examples.", *([fix] if fix in edits else [])]
            body = "\n".join(f"- {rule}" for rule in chosen)
            return f"{tp.RULES_BEGIN}\n{body}\n{tp.RULES_END}"
        if text.startswith(tp.TITLES["rewrite"]):
            current = _section(text, "## The current prompt\n", "\n\n## Edits to apply").strip()
            extra = f"\n{fix}" if fix in edits else ""
            return f"{tp.PROMPT_BEGIN}\n{current}{extra}\n{tp.PROMPT_END}"
        return None

    respond.__name__ = "tavo_responder"
    return respond


def script_of(responder):
    return lambda prompt, _purpose: responder(prompt) or "unused"


def run(ctx, **settings):
    """The method on `ctx`; the mechanism tests below exercise TRUCE's overlay unless they
    name `update_mode` (TAVO's per-role rewrite is the default: see the settings test)."""
    settings.setdefault("update_mode", "truce_overlay")
    return asyncio.run(make(**settings).optimize(ctx))


# --- decomposition ----------------------------------------------------------------------
def _e(source, kind, content, *, key, step, calls=(), name=None, status="success"):
    entry = {"source": source, "role": source, "type": kind, "content": content, key: step}
    if kind == "assistant":
        entry["tool_calls"] = [{"id": f"{content}-{i}", "name": n, "args": a}
                               for i, (n, a) in enumerate(calls)]
    if kind == "tool":
        entry.update(name=name, status=status)
    return entry


def _delegate(worker, instruction):
    return ("delegate", {"worker": worker, "instruction": instruction})


def _worker(worker, number, instruction, *messages):
    task = f"Problem text\n\n## Task from the manager\n\n{instruction}\n"
    return [_e(worker, "system", "worker prompt", key="delegation", step=number),
            _e(worker, "user", task, key="delegation", step=number),
            *(_e(worker, kind, text, key="delegation", step=number, calls=calls,
                 name="python_exec") for kind, text, calls in messages)]


CENTRALIZED = [
    _e("manager", "system", "manager prompt", key="delegation", step=0),
    _e("manager", "user", "Problem text", key="delegation", step=0),
    _e("manager", "assistant", "m1", key="delegation", step=0,
       calls=[_delegate("analyzer", "analyse it"), _delegate("coder", "code it")]),
    _e("manager", "tool", "r-analyzer", key="delegation", step=0, name="delegate"),
    _e("manager", "tool", "r-coder", key="delegation", step=0, name="delegate"),
    _e("manager", "assistant", "m2", key="delegation", step=0,
       calls=[_delegate("coder", "fix the bug"), _delegate("tester", "")]),
    _e("manager", "tool", "r-coder-2", key="delegation", step=0, name="delegate"),
    _e("manager", "tool", "error: the instruction is empty", key="delegation", step=0,
       name="delegate", status="error"),
    _e("manager", "assistant", "m3 final", key="delegation", step=0),
    *_worker("analyzer", 1, "analyse it", ("assistant", "a1", ())),
    *_worker("coder", 2, "code it", ("assistant", "c1", [("python_exec", {"code": "x"})]),
             ("tool", "c1-out", ()), ("assistant", "c2", ())),
    *_worker("coder", 3, "fix the bug", ("assistant", "c3", ())),
    *_worker("coder", 5, "an instruction nobody sent", ("assistant", "c4", ())),
]

SEQUENTIAL = [
    _e("coder", "system", "coder prompt", key="stage", step=0),
    _e("coder", "user", "Problem text", key="stage", step=0),
    _e("coder", "assistant", "c1", key="stage", step=0, calls=[("python_exec", {"code": "a"})]),
    _e("coder", "tool", "c1-out", key="stage", step=0, name="python_exec"),
    _e("coder", "assistant", "c2", key="stage", step=0),
    _e("debugger", "system", "debugger prompt", key="stage", step=1),
    _e("debugger", "user", "Problem text + c2", key="stage", step=1),
    _e("debugger", "assistant", "d1", key="stage", step=1,
       calls=[("python_exec", {"code": "b"}), ("python_exec", {"code": "c"})]),
    _e("debugger", "tool", "d1-out", key="stage", step=1, name="python_exec"),
    _e("debugger", "tool", "d1-err", key="stage", step=1, name="python_exec", status="error"),
    _e("debugger", "assistant", "d2", key="stage", step=1),
]


def _shape(steps):
    return [(s.agent, s.step, [(e["source"], e["content"]) for e in s.entries]) for s in steps]


def test_centralized_decomposition_is_exact() -> None:
    assert _shape(split_transcript(CENTRALIZED, topology="centralized")) == [
        ("manager", 0, [("manager", "m1"), ("analyzer", "a1"), ("coder", "c1"),
                        ("coder", "c1-out"), ("coder", "c2"), ("manager", "r-analyzer"),
                        ("manager", "r-coder")]),
        ("manager", 0, [("manager", "m2"), ("coder", "c3"), ("manager", "r-coder-2"),
                        ("manager", "error: the instruction is empty")]),
        # a worker run no delegation matches goes to the last manager turn
        ("manager", 0, [("manager", "m3 final"), ("coder", "c4")]),
    ]


def test_sequential_decomposition_is_exact() -> None:
    assert _shape(split_transcript(SEQUENTIAL, topology="sequential")) == [
        ("coder", 0, [("coder", "c1"), ("coder", "c1-out")]),
        ("coder", 0, [("coder", "c2")]),
        ("debugger", 1, [("debugger", "d1"), ("debugger", "d1-out"), ("debugger", "d1-err")]),
        ("debugger", 1, [("debugger", "d2")]),
    ]
    # the same transcript read as a centralized one has no manager turn: agent turns again
    assert _shape(split_transcript(SEQUENTIAL, topology="centralized")) == \
        _shape(split_transcript(SEQUENTIAL, topology="sequential"))


# --- merge fallback, overlay, parsing ---------------------------------------------------
def test_the_merge_fallback_dedupes_resolves_and_caps_exactly() -> None:
    sets = [
        {"add": ["Check limits.", "check  LIMITS", "Use fast IO", "A1", "A2"],
         "remove": ["Long preambles", "Use fast IO."], "restructure": ["R1", "R2"]},
        {"add": ["A3", "A4", "Use fast IO", "A5", "  "], "remove": ["long preambles;", "X"],
         "restructure": ["R3", "R4", "R5"]},
        {"add": ["A6", "Check limits"], "remove": ["Y", "Z", "W", "check limits"],
         "restructure": ["r1"]},
    ]
    assert merge_fallback(sets, CAPS) == {
        # "Check limits" 3 sets to 1 removal: kept; "Use fast IO" 2 to 1: kept, out of
        # remove; then by first appearance, cut to 6
        "add": ["Check limits.", "Use fast IO", "A1", "A2", "A3", "A4"],
        "remove": ["Long preambles", "X", "Y", "Z"],  # support 2 first, then first seen
        "restructure": ["R1", "R2", "R3", "R4"],  # "r1" is R1 again (support 2)
    }
    # a tie between adding and removing drops both sides
    assert merge_fallback([{"add": ["Be brief"], "remove": []},
                           {"add": [], "remove": ["be brief."]}], CAPS) == \
        {"add": [], "remove": [], "restructure": []}


def test_the_overlay_is_rebuilt_from_the_base_and_bad_rules_are_named() -> None:
    once = with_overlay("Solve it.", ["Rule one.", "Rule two.", "Rule three."])
    assert once == (f"Solve it.\n\n{OVERLAY_BEGIN}\n- Rule one.\n- Rule two.\n- Rule three."
                    f"\n{OVERLAY_END}")
    assert overlay_rules(once) == ["Rule one.", "Rule two.", "Rule three."]
    assert overlay_rules("Solve it.") == []
    base = {"analyzer": SEED["analyzer"], "coder": "Solve it; keep `{x}` literal."}
    assert rule_problem("Check the limits.", base, base) is None
    assert rule_problem(f"Stop here {OVERLAY_END} and go on", base, base) == \
        "holds an overlay marker"
    assert rule_problem(OVERLAY_BEGIN.upper(), base, base) == "holds an overlay marker"
    assert rule_problem("x" * 301, base, base) == "longer than 300 characters"
    for slot in ("Run {n} tests.", "Follow <your rule here>.", "Do [INSERT STEP]."):
        assert "template marker" in rule_problem(slot, base, base), slot


def test_replies_are_parsed_strictly() -> None:
    good = ('{"progress": 7, "coordination": 5, "stage_appropriateness": 9, '
            '"contributions": "x", "weaknesses": [], "suggestions": ["s"]}')
    assert tp.parse_step(good).scores() == [7.0, 5.0, 9.0]
    assert tp.parse_step(good[:-10]) is None  # truncated
    assert tp.parse_step(good.replace("7", "11")) is None  # out of range
    assert tp.parse_step(good.replace("7", "true")) is None
    credit = ('{"score": 4, "causal_analysis": "c", "editing_instructions": '
              '{"add": ["a"], "remove": [], "restructure": []}}')
    assert tp.parse_credit(credit).edits == {"add": ["a"], "remove": [], "restructure": []}
    assert tp.parse_credit(credit.replace(', "restructure": []', "")) is None
    rules = f"{tp.RULES_BEGIN}\n- one\n- two\n  continued\n3. three\n{tp.RULES_END}"
    assert tp.parse_rules(rules, bounds=(3, 6)) == ["one", "two continued", "three"]
    assert tp.parse_rules(rules.replace(tp.RULES_END, ""), bounds=(3, 6)) is None
    assert tp.parse_rules(rules, bounds=(4, 6)) is None
    assert tp.marked(f"{tp.PROMPT_BEGIN}\nnew text", tp.PROMPT_BEGIN, tp.PROMPT_END) is None


# --- the gate ---------------------------------------------------------------------------
def test_gate_and_schedule_arithmetic() -> None:
    assert gate(0.51, seed=0.5, best=0.5, margin=0.01)
    assert not gate(0.509, seed=0.5, best=0.5, margin=0.01)
    assert gate(2 / 3, seed=1 / 3, best=2 / 3, margin=0.01)  # ties the best: adopted
    assert not gate(0.75, seed=0.5, best=1.0, margin=0.01)
    s = TavoSettings()
    assert keep_going(rounds=1, streak=1, settings=s)  # one rejection: a retry
    assert not keep_going(rounds=2, streak=2, settings=s)  # two in a row: stop
    assert not keep_going(rounds=5, streak=0, settings=s)  # five rounds: stop
    assert (val_batch_size(600, 50), val_batch_size(12, 50), val_batch_size(66, 50),
            val_batch_size(600, 4, 2)) == (50, 3, 6, 2)


def _levels(schedule):
    """Overlay rules carrying `STEP-j LEVEL-k`: round j's candidate solves k of v0..v3."""

    def rules(text: str) -> list[str]:
        current = re.search(r"STEP-(\d+)", _section(text, "## The current team rules",
                                                    "## Edits proposed"))
        step = int(current.group(1)) + 1 if current else 1
        return [f"STEP-{step} LEVEL-{schedule[step - 1]}", "Rule b.", "Rule c."]

    return rules


class LevelContext(helpers_methods.FakeContext):
    def solves(self, bundle, problem):
        level = re.search(r"LEVEL-(\d)", bundle["coder"])
        return problem.id in self.easy or (level is not None and problem.id.startswith("v")
                                           and int(problem.id[1:]) < int(level.group(1)))


@pytest.mark.parametrize(("schedule", "verdicts", "best_round"), [
    ([2, 3, 3, 1, 1, 4], [False, True, True, False, False], 3),  # 5 rounds at most
    ([3, 1, 1, 4], [True, False, False], 1),  # two rejected in a row: stop
    ([1, 3, 2, 2], [False, True, False, False], 2),  # a rejection gets a retry
    ([4, 3, 4, 1, 1], [True, False, True, False, False], 3),  # >= the best so far too
])
def test_the_gate_on_a_fake_context(schedule, verdicts, best_round) -> None:
    data = fake_context(budget=0).data
    ctx = LevelContext(seed_bundle=SEED, data=data, budget=60, easy=frozenset({"v0", "v1"}),
                       script=script_of(tavo_responder(always_edit=True,
                                                       rules=_levels(schedule))))
    result = run(ctx, val_batch=4)
    assert [p["accepted"] for p in ctx.proposals] == verdicts
    assert ctx.candidates[0]["scores"] == {"val_batch": 0.5}  # v0, v1 are easy
    assert result == ctx.proposals[best_round - 1]["bundle"]
    assert ctx.ledger.charged == 4 + 10 * len(verdicts)  # seed, then 6 train + 4 val a round
    # the train chain continues from the newest candidate, rejected or not
    for number, proposal in enumerate(ctx.proposals[:-1], start=2):
        assert {bundle_hash(c["bundle"]) for c in ctx.calls if c["iteration"] == number} == \
            {bundle_hash(proposal["bundle"])}
    assert [c["state"]["round"] for c in ctx.checkpoints] == list(range(len(verdicts) + 1))


# --- whole runs on the fake context -----------------------------------------------------
def test_overlay_finds_the_keyword_and_records_the_evidence() -> None:
    ctx = fake_context(budget=40, script=script_of(tavo_responder(KEYWORD)))
    result = run(ctx)
    assert KEYWORD in result["coder"] and KEYWORD in result["analyzer"]
    assert result.keys() == SEED.keys() and result is not ctx.seed_bundle
    first = ctx.proposals[0]
    assert first["accepted"] and first["roles"] == ["analyzer", "coder"]
    evidence = json.loads(first["reason"])
    assert evidence["edits"]["coder"]["add"] == [KEYWORD] and evidence["merge"]["coder"] == "llm"
    assert evidence["calls"] == {"subtraj": 12, "agent": 12}  # 6 runs x 2 one-turn agents
    purposes = [r["purpose"] for r in ctx.reflections]
    assert purposes.count("tavo:subtraj") == purposes.count("tavo:agent") == 3 * 12
    assert purposes.count("tavo:merge") == 2 and purposes.count("tavo:update") == 1
    temps = {r["purpose"]: r["temperature"] for r in ctx.reflections}
    assert (temps["tavo:subtraj"], temps["tavo:agent"]) == (0.3, 0.5)
    # round 2 (all solved): no edits, rejected without a validation charge; round 3 the same
    assert [p["rejected_by"] for p in ctx.proposals] == [None, "validator", "validator"]
    assert ctx.ledger.charged == 3 + 9 + 6 + 6  # a batch of 3 of the 4 validation rows


def test_rewrite_mode_and_a_truncated_rewrite_is_never_adopted() -> None:
    ctx = fake_context(budget=14, script=script_of(tavo_responder(KEYWORD)))
    result = run(ctx, update_mode="rewrite")
    assert KEYWORD in result["coder"] and OVERLAY_BEGIN not in result["coder"]

    def cut(prompt, purpose):
        reply = tavo_responder(KEYWORD)(prompt) or ""
        return reply.replace(tp.PROMPT_END, "") if purpose == "tavo:update" else reply

    ctx = fake_context(budget=14, script=cut)
    assert run(ctx, update_mode="rewrite") == SEED
    (proposal,) = ctx.proposals
    assert proposal["rejected_by"] == "validator" and "marked prompt" in proposal["reason"]
    assert ctx.ledger.charged == 3 + 6  # the unusable update was never scored


def test_an_unusable_merge_falls_back_and_a_bad_overlay_is_rejected() -> None:
    def broken(prompt, purpose):
        if purpose == "tavo:merge":
            return '{"add": ["' + KEYWORD  # truncated JSON
        if purpose == "tavo:update":
            return f"{tp.RULES_BEGIN}\n- only one rule\n{tp.RULES_END}"
        return tavo_responder(KEYWORD)(prompt) or ""

    ctx = fake_context(budget=14, script=broken)
    assert run(ctx) == SEED
    (proposal,) = ctx.proposals
    evidence = json.loads(proposal["reason"])
    assert evidence["merge"] == {"analyzer": "fallback", "coder": "fallback"}
    assert evidence["edits"]["coder"]["add"] == [KEYWORD]  # six identical adds, deduped
    assert "overlay reply unusable" in evidence["verdict"]
    # no bundle was written: the parent is recorded, with the raw reply, and the credit of
    # every (task, agent) before the merge
    assert proposal["bundle"] == SEED and proposal["roles"] == []
    assert evidence["reply"] == f"{tp.RULES_BEGIN}\n- only one rule\n{tp.RULES_END}"
    assert len(evidence["credit"]) == 12
    assert evidence["credit"][1] == {"task": evidence["credit"][0]["task"], "agent": "coder_0",
                                     "role": "coder", "score": 2.0,
                                     "analysis": "the program was wrong",
                                     "edits": {"add": [KEYWORD]}}
    assert {c["task"] for c in evidence["credit"]} == set(evidence["train"])


BAD_RULES = ["Use {n} tests.", f"Stop {OVERLAY_END} here.", "Follow <your rule here>."]


@pytest.mark.parametrize("good", [[KEYWORD, "Read twice.", "Plan first."], [KEYWORD]])
def test_offending_rules_are_dropped_and_the_rest_kept(good) -> None:
    ctx = fake_context(budget=14, script=script_of(tavo_responder(
        KEYWORD, rules=lambda _text: [*BAD_RULES[:2], *good, BAD_RULES[2]])))
    result = run(ctx)
    (proposal,) = ctx.proposals
    evidence = json.loads(proposal["reason"])
    assert [rule for rule, _ in evidence["dropped_rules"]] == BAD_RULES
    assert [why.split(":")[0] for _, why in evidence["dropped_rules"]] == \
        ["analyzer", "holds an overlay marker", "analyzer"]
    if len(good) == 3:  # three rules left: the round goes on, built on the seed's text
        assert proposal["accepted"] and evidence["rules"] == good
        assert result == {role: with_overlay(text, good) for role, text in SEED.items()}
        return
    # one rule left: rejected, and the bundle proposed (every rule) is what the history holds
    assert result == SEED and proposal["rejected_by"] == "validator"
    assert "fewer than 3 left" in evidence["verdict"] and ctx.ledger.charged == 3 + 6
    assert proposal["bundle"]["coder"] == with_overlay(SEED["coder"], [*BAD_RULES[:2], *good,
                                                                      BAD_RULES[2]])
    assert proposal["roles"] == ["analyzer", "coder"]


def test_a_marker_in_an_old_block_cannot_corrupt_the_next_one() -> None:
    """Each round rebuilds the prompts from the seed's text: a block never carries over."""
    ctx = LevelContext(seed_bundle=SEED, data=fake_context(budget=0).data, budget=40,
                       easy=frozenset({"v0"}), script=script_of(tavo_responder(
                           always_edit=True, rules=_levels([1, 2, 3]))))
    run(ctx, val_batch=4)
    for step, proposal in enumerate(ctx.proposals, start=1):
        rules = [f"STEP-{step} LEVEL-{step}", "Rule b.", "Rule c."]
        assert proposal["bundle"] == {role: with_overlay(text, rules)
                                      for role, text in SEED.items()}


def _rewrite_script(bad: dict[str, str]):
    """tavo_responder, but the rewrite of each role in `bad` is that text."""
    base = tavo_responder(KEYWORD)

    def script(prompt, _purpose):
        role = re.search(r"You revise the prompt of the role '(\w+)'", prompt)
        if prompt.startswith(tp.TITLES["rewrite"]) and role and role.group(1) in bad:
            return f"{tp.PROMPT_BEGIN}\n{bad[role.group(1)]}\n{tp.PROMPT_END}"
        return base(prompt) or "unused"

    return script


def test_rewrite_checks_each_role_alone() -> None:
    ctx = fake_context(budget=14, target_role="analyzer",
                       script=_rewrite_script({"coder": "Write it.\n```python\nprint(1)"}))
    result = run(ctx, update_mode="rewrite")
    assert KEYWORD in result["analyzer"] and result["coder"] == SEED["coder"]
    (proposal,) = ctx.proposals
    evidence = json.loads(proposal["reason"])
    assert proposal["accepted"] and proposal["roles"] == ["analyzer"]
    assert evidence["rewritten"] == ["analyzer"]
    assert evidence["dropped_roles"] == {"coder": "coder: a code fence is opened and never "
                                                  "closed (truncated output?)"}
    # every role invalid: rejected, and the rewrites proposed are what the history holds
    ctx = fake_context(budget=14, script=_rewrite_script({"coder": "Run {n} tests.",
                                                          "analyzer": "See <your notes>."}))
    assert run(ctx, update_mode="rewrite") == SEED
    (proposal,) = ctx.proposals
    assert proposal["rejected_by"] == "validator" and proposal["roles"] == ["analyzer", "coder"]
    assert proposal["bundle"] == {"analyzer": "See <your notes>.", "coder": "Run {n} tests."}
    assert "every rewritten role was invalid" in proposal["reason"]


class GapContext(helpers_methods.FakeContext):
    """No rollout comes back for a candidate (a bundle holding the keyword) on `gaps`."""

    gaps: frozenset[str] = frozenset()

    async def rollout(self, bundle, problem, *, iteration, active=None):
        if KEYWORD in bundle["coder"] and problem.id in self.gaps and iteration == 0:
            return None
        return await super().rollout(bundle, problem, iteration=iteration, active=active)


@pytest.mark.parametrize("gaps", [frozenset({"v0", "v1"}), frozenset({"v0", "v1", "v2", "v3"})])
def test_the_gate_scores_only_paired_rows(gaps) -> None:
    ctx = GapContext(seed_bundle=SEED, data=fake_context(budget=0).data, budget=14,
                     easy=frozenset({"v0", "v1"}), script=script_of(tavo_responder(KEYWORD)))
    ctx.gaps = gaps
    run(ctx, val_batch=4)
    (proposal,) = ctx.proposals
    numbers = json.loads(proposal["reason"])["gate"]
    assert sorted(numbers["missing"]) == sorted(gaps)
    if len(gaps) == 2:  # unpaired it would read 2/4 against the seed's 2/4: rejected
        assert proposal["accepted"] and proposal["scores"] == {"val_batch": 1.0}
        assert (numbers["paired"], numbers["seed"], numbers["best"]) == (2, 0.0, 0.0)
        return
    assert proposal["rejected_by"] == "gate" and proposal["scores"] == {}
    assert numbers["paired"] == 0 and "no validation row paired" in proposal["reason"]
    assert paired_gate({"a": 1.0, "b": None}, seed={"a": 0.0, "b": 1.0}, best={"a": 0.0,
                       "b": 1.0}, margin=0.01) == (True, {"paired": 1, "margin": 0.01,
                                                          "missing": ["b"], "score": 1.0,
                                                          "seed": 0.0, "best": 0.0})


def test_a_perfect_seed_stops_before_any_round() -> None:
    ctx = fake_context(budget=40, easy=frozenset({f"v{i}" for i in range(4)}),
                       script=script_of(tavo_responder(KEYWORD)))
    assert run(ctx) == SEED and ctx.proposals == [] and ctx.ledger.charged == 3
    (seed,) = ctx.candidates
    assert "no candidate can reach seed + gate_margin (0.01) above 1" in seed["note"]
    assert ctx.checkpoints[-1]["state"]["stop"] == seed["note"].split("; ", 1)[1]


def test_what_a_request_shows_is_bounded(monkeypatch) -> None:
    original = helpers_methods.team_result

    def chatty(bundle, problem, *, solved):
        result = original(bundle, problem, solved=solved)
        for entry in result.transcript:
            entry["content"] += " word" * 2000
        return result

    monkeypatch.setattr(helpers_methods, "team_result", chatty)
    long_edit = "Check the edge cases " * 40
    ctx = fake_context(budget=14, script=script_of(tavo_responder(long_edit)))
    run(ctx, clip_chars=400, context_chars=300, merge_sources=2)
    subtraj = [r["prompt"] for r in ctx.reflections if r["purpose"] == "tavo:subtraj"]
    step = _section(subtraj[0], "taken by", "## Your task")
    assert 300 < len(step) < 400  # the step under judgment, clipped to context_chars
    merges = [r["prompt"] for r in ctx.reflections if r["purpose"] == "tavo:merge"]
    assert [m.count("### run") for m in merges] == [2, 2]  # 2 of the 6 runs' edit sets
    evidence = json.loads(ctx.proposals[0]["reason"])
    assert evidence["sources"] == {"analyzer": [2, 6], "coder": [2, 6]}
    edit = tp.parse_edits({"add": ["x" * 1000] * 20, "remove": [], "restructure": []})
    assert len(edit["add"]) == tp.EDIT_ITEMS and len(edit["add"][0]) <= tp.ITEM_CHARS + 20


def test_replicas_collapse_onto_their_shared_role(monkeypatch) -> None:
    original = helpers_methods.team_result

    def two_replicas(bundle, problem, *, solved):
        result = original(bundle, problem, solved=solved)
        copy = [{**e, "source": "coder_1"} for e in result.transcript]
        result.transcript.extend(copy)
        return result

    monkeypatch.setattr(helpers_methods, "team_result", two_replicas)
    ctx = fake_context(budget=14, topology="independent", seed_bundle={"coder": "Solve."},
                       script=script_of(tavo_responder(KEYWORD)))
    run(ctx)
    merges = [r["prompt"] for r in ctx.reflections if r["purpose"] == "tavo:merge"]
    assert len(merges) == 1 and "agent coder_0" in merges[0] and "agent coder_1" in merges[0]
    evidence = json.loads(ctx.proposals[0]["reason"])
    assert evidence["calls"]["agent"] == 12 and set(evidence["roles"]) == {"coder"}


@pytest.mark.parametrize("budget", [0, 11, 12, 20, 21])
def test_the_budget_is_checked_before_each_round(budget) -> None:
    ctx = fake_context(budget=budget, script=script_of(tavo_responder("nothing helps")))
    run(ctx)
    # 3 (the seed on the validation batch) + 9 a round; nothing unless a first round fits.
    # At 21 round 2 starts (9 left); its candidate is round 1's again (same rules), so its
    # scoring is a free replay: 18
    assert ctx.ledger.charged == {0: 0, 11: 0, 12: 12, 20: 12, 21: 18}[budget]
    assert len(ctx.proposals) == {0: 0, 11: 0, 12: 1, 20: 1, 21: 2}[budget]


def test_single_is_refused_and_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="multi-agent"):
        run(fake_context(budget=20, topology="single"))
    assert get_optimizer("tavo").key == "tavo"
    assert get_optimizer("tavo", update_mode="rewrite").settings.update_mode == "rewrite"
    defaults = resolve_settings("tavo")
    assert (defaults["train_batch"], defaults["max_rounds"], defaults["patience"],
            defaults["update_mode"], defaults["gate_margin"]) == (6, 5, 2, "rewrite", 0.01)
    assert make().settings.update_mode == "rewrite"  # TAVO's own update, not TRUCE's overlay
    for bad, name in [({"update_mode": "overlay"}, "update_mode"), ({"max_rounds": 0},
                      "max_rounds"), ({"min_rules": 7}, "min_rules"),
                      ({"gate_margin": -1}, "gate_margin"), ({"nope": 1}, "nope")]:
        with pytest.raises(SettingsError, match=name):
            resolve_settings("tavo", bad)


# --- whole jobs through the scripted server ---------------------------------------------
def _proposal_rounds(outcome) -> list[int]:
    """The rounds of the proposals in history.jsonl: one per round the checkpoint counts."""
    proposals = [h for h in read_history(outcome.job.out) if h.kind == "proposal"]
    rounds = [json.loads(h.reason)["round"] for h in proposals]
    state = json.loads((outcome.job.out / "checkpoint.json").read_text())["state"]
    assert rounds == list(range(1, state["round"] + 1))
    return rounds


@pytest.mark.parametrize(("topology", "role"), [("independent", "coder"),
                                                ("sequential", "debugger")])
@pytest.mark.slow
def test_the_planted_fix_is_deployed(scripted, tmp_path, monkeypatch, topology, role) -> None:
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="tavo", topology=topology,
                          team_size=2, budget=PLANTED_BUDGET, answering_role=role,
                          responders=[tavo_responder()])
    assert_fix_deployed(outcome)
    assert _proposal_rounds(outcome) == [1]
    assert "tavo_responder" in outcome.job.model.uncharged


@pytest.mark.slow
def test_the_control_keeps_the_seed(scripted, tmp_path, monkeypatch) -> None:
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="tavo", topology="independent",
                          team_size=2, budget=PLANTED_BUDGET, answering_role="coder",
                          control=True, responders=[tavo_responder()])
    assert_seed_kept(outcome)
    (proposal,) = [h for h in read_history(outcome.job.out) if h.kind == "proposal"]
    assert proposal.rejected_by == "gate" and FIX in proposal.bundle["coder"]


@pytest.mark.slow
def test_end_to_end_on_decentralized(scripted, tmp_path, monkeypatch) -> None:
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="tavo",
                          topology="decentralized", team_size=2, budget=PLANTED_BUDGET,
                          answering_role="debater", responders=[tavo_responder()],
                          settings={"update_mode": "rewrite"})
    assert_fix_deployed(outcome)
    assert _proposal_rounds(outcome) == [1]


DELEGATING = "Handing the work to the coder."


class DelegatingTeam(TeamModel):
    """The team model, but the manager's first turn on a problem delegates to the coder; its
    next turn (which holds that turn's text) and every worker request answer as before."""

    def __call__(self, request):
        tools = [t.get("function", {}).get("name") for t in request.get("tools") or ()]
        if (TOOL in tools and DELEGATING not in message_text(request)
                and self.problem_of(request) is not None):
            return Reply.calls(ToolCall(TOOL, {"worker": "coder",
                                               "instruction": "Write the program."}),
                               content=DELEGATING)
        return super().__call__(request)


def bad_coder_rewrite(text: str) -> str | None:
    if text.startswith(tp.TITLES["rewrite"]) and "the role 'coder'" in text:
        return f"{tp.PROMPT_BEGIN}\nRun {{n}} tests, then write the program.\n{tp.PROMPT_END}"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["truce_overlay", "rewrite"])
def test_centralized_credits_the_delegated_worker(scripted, tmp_path, monkeypatch, mode) -> None:
    monkeypatch.setattr(helpers_planted, "TeamModel", DelegatingTeam)
    responders = [bad_coder_rewrite, tavo_responder()]
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="tavo", topology="centralized",
                          team_size=2, budget=PLANTED_BUDGET, answering_role="manager",
                          responders=responders if mode == "rewrite" else responders[1:],
                          settings={"update_mode": mode})
    assert_fix_deployed(outcome)
    assert _proposal_rounds(outcome) == [1]
    (proposal,) = [h for h in read_history(outcome.job.out) if h.kind == "proposal"]
    evidence = json.loads(proposal.reason)
    assert evidence["calls"] == {"subtraj": 12, "agent": 12}  # 6 runs x manager + coder
    assert {(c["agent"], c["role"]) for c in evidence["credit"]} == {("manager", "manager"),
                                                                     ("coder", "coder")}
    assert set(evidence["roles"]) == {"manager", "coder"} and "coder" in evidence["edits"]
    seed = read_history(outcome.job.out)[0].bundle
    if mode == "truce_overlay":
        assert FIX in proposal.bundle["coder"]
        return
    # the coder's rewrite holds a template slot: dropped, the manager's rewrite goes on
    assert proposal.accepted and proposal.roles == ["manager"]
    assert proposal.bundle["coder"] == seed["coder"]
    assert "template marker" in evidence["dropped_roles"]["coder"]


def _rules_that_grow(text: str) -> list[str]:
    """The overlay rules with the fix, and one more once the current rules hold it, so round
    2 proposes a new bundle (its validation scoring is charged)."""
    current = _section(text, "## The current team rules", "## Edits proposed")
    return ["Read the statement twice.", "State the algorithm first.", FIX,
            *(["Keep the program short."] if FIX in current else [])]


@pytest.mark.slow
def test_a_job_killed_in_round_two_resumes_to_the_whole_result(scripted, tmp_path) -> None:
    # 3 (seed) + 6 (round 1: 3 train, 3 validation) + 6 (round 2) = 15; the kill lands at
    # 10, in round 2's train batch
    responder = tavo_responder(always_edit=True, rules=_rules_that_grow)
    assert_resumes_to_whole(scripted, tmp_path, "tavo", budget=15,
                            settings=["train_batch=3", "update_mode=truce_overlay"],
                            responders=[responder], kill_at=10)
    history = [json.loads(line) for line in
               (tmp_path / "killed" / "history.jsonl").read_text().splitlines()]
    proposals = [h for h in history if h["kind"] == "proposal"]
    assert [(json.loads(h["reason"])["round"], h["accepted"]) for h in proposals] == \
        [(1, True), (2, True)]

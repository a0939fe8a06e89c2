"""`mamut_gepa`: whole-team reflection records (exact), the method on a fake context, end to end
on the four multi-agent teams, the planted fix, kill -9 and resume, and its settings."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from dataclasses import dataclass, field, replace

import pytest

from lcb.agents.prompts import question_prompt
from lcb.data.problems import Mode, Problem
from lcb.optimize.artifacts import read_history
from lcb.optimize.job import run_job
from lcb.optimize.method import Rollout
from lcb.optimize.methods import get_optimizer, resolve_settings
from lcb.optimize.methods.gepa_records import ResumeDivergence
from lcb.optimize.methods.mamut_gepa import (
    MamutGepaSettings,
    make,
    proposal_problem,
    team_proposal_prompt,
)
from lcb.optimize.methods.reflection import BEGIN_MARK, END_MARK, parse_proposal
from lcb.optimize.methods.team_transcript import (
    OWN_TAG,
    TASK_NOTE,
    Gap,
    TeamReflectionSettings,
    TranscriptLimits,
    render_team,
    select,
    team_messages,
    team_record,
    time_ordered,
)
from lcb.optimize.settings import SettingsError
from lcb.teams.centralized import TOOL
from lcb.teams.common import TeamResult
from lcb.text import CLIP_NOTE, clip
from tests.helpers_agents import make_problem
from tests.helpers_methods import (
    FIX,
    KEYWORD,
    REFLECTION_ENV,
    SEED,
    MethodJob,
    _without_demos,
    check_three_phases,
    fake_context,
    run_method_job,
)
from tests.helpers_optimize import TeamModel, job_config, sample_problems, sample_splits
from tests.helpers_planted import assert_fix_deployed, assert_seed_kept, run_planted
from tests.helpers_resume import assert_interrupted_resumes_to_whole
from tests.helpers_teams import fenced, role_of, solve_one
from tests.scripted_server import (
    Reply,
    ToolCall,
    assistant_turns,
    message_text,
    scripted_fixture,  # noqa: F401
    scripted_server,
    tool_results,
)

pytestmark = pytest.mark.timeout(300)
PLANTED_BUDGET = 20  # as docs/optimizers/mamut_gepa.md states
STATEMENT = "Read two integers A and B from one line and print their sum A+B."
PROGRAM = "The program:\n```python\nprint(sum(map(int, input().split())))\n```"
PROBLEM = Problem(id="p7", title="Sum", statement=STATEMENT, starter_code="", mode=Mode.STDIN,
                  fn_name=None, public_tests=(), private_tests=(), difficulty="easy",
                  platform="atcoder", contest_id="c1", contest_date="2023-05-01T00:00:00")


def entry(source: str, role: str, kind: str, content: str, step: tuple[str, int],
          **extra: object) -> dict:
    return {"source": source, "role": role, "type": kind, "content": content,
            step[0]: step[1], **extra}


def centralized_transcript() -> list[dict]:
    """A manager that delegates to its coder, which runs code first; the team's order: the
    manager's whole run (delegation 0), then the worker's (delegation 1). A record shows
    them in time order: the worker's run between the call and its result."""
    m, c = ("delegation", 0), ("delegation", 1)
    ask = "Sum the two numbers; mind negative values."
    return [
        entry("manager", "manager", "system", "You manage the team.", m),
        entry("manager", "manager", "user", f"{STATEMENT}\n\nAnswer with one program.", m),
        entry("manager", "manager", "assistant", "I will ask the coder.", m, tool_calls=[
            {"id": "c1", "name": "delegate", "args": {"worker": "coder", "instruction": ask}}]),
        entry("manager", "manager", "tool", PROGRAM, m, name="delegate", status="success",
              tool_call_id="c1"),
        entry("manager", "manager", "assistant", PROGRAM, m, tool_calls=[]),
        entry("coder", "coder", "system", "You write code.", c),
        entry("coder", "coder", "user", f"{STATEMENT}\n\n## Task from the manager\n\n{ask}\n", c),
        entry("coder", "coder", "assistant", "Let me test it.", c, tool_calls=[
            {"id": "c2", "name": "python_exec", "args": {"code": "print(1 + 2)\nprint(-1 + 2)"}}]),
        entry("coder", "coder", "tool", "3\n1\n", c, name="python_exec", status="success",
              tool_call_id="c2"),
        entry("coder", "coder", "assistant", PROGRAM, c, tool_calls=[]),
    ]


def rollout(transcript: list[dict], *, score: float = 0.0,
            feedback: str = "wrong answer on test 2: expected 0, got -2") -> Rollout:
    team = TeamResult(code="print(1)", final_text="done", transcript=transcript,
                      prompt_tokens=1, completion_tokens=1, n_llm_calls=3, n_tool_calls=2,
                      usage_by_role={}, fields={})
    return Rollout(problem_id=PROBLEM.id, score=score, feedback=feedback, team=team, seed=0)


CENTRALIZED_FOR_CODER = "\n".join([
    "(8 messages, system prompts left out; the turns of the role 'coder' are marked "
    ">>> ... ROLE UNDER REVISION <<<)",
    "--- [1] manager (role manager, delegation 0) user ---",
    f"{TASK_NOTE}\n\nAnswer with one program.",
    "--- [2] manager (role manager, delegation 0) assistant ---",
    "I will ask the coder.\n[tool call delegate]\nworker: coder\n"
    "instruction: Sum the two numbers; mind negative values.",
    ">>> [3] coder (role coder, delegation 1) user | ROLE UNDER REVISION <<<",
    f"{TASK_NOTE}\n\n## Task from the manager\n\nSum the two numbers; mind negative values.",
    ">>> [4] coder (role coder, delegation 1) assistant | ROLE UNDER REVISION <<<",
    "Let me test it.\n[tool call python_exec]\ncode:\nprint(1 + 2)\nprint(-1 + 2)",
    ">>> [5] coder (role coder, delegation 1) result of tool python_exec | "
    "ROLE UNDER REVISION <<<",
    "3\n1",
    ">>> [6] coder (role coder, delegation 1) assistant | ROLE UNDER REVISION <<<",
    PROGRAM,
    "--- [7] manager (role manager, delegation 0) result of tool delegate ---",
    PROGRAM,
    "--- [8] manager (role manager, delegation 0) assistant ---",
    PROGRAM,
])


def test_a_centralized_record_holds_the_whole_team_with_the_role_marked() -> None:
    record = team_record(PROBLEM, rollout(centralized_transcript()), "coder")
    assert record == {
        "Problem": "p7: Sum",
        "Task": question_prompt(PROBLEM).strip(),
        "Global score": "0 (not solved)",
        "Grader feedback": "wrong answer on test 2: expected 0, got -2",
        "Team transcript": CENTRALIZED_FOR_CODER,
    }
    # the same run, reflected on for the manager: the marks move, nothing else changes
    managed = team_record(PROBLEM, rollout(centralized_transcript(), score=1.0, feedback=""),
                          "manager")
    assert managed["Global score"] == "1 (solved: every hidden test passed)"
    assert managed["Grader feedback"] == "(none)"
    marked = re.findall(rf"^>>> \[(\d+)\] .* \| {OWN_TAG} <<<$", managed["Team transcript"], re.M)
    assert marked == ["1", "2", "7", "8"]
    assert _unmarked(managed["Team transcript"]).replace("'manager'", "'coder'") == _unmarked(
        CENTRALIZED_FOR_CODER)


def _unmarked(text: str) -> str:
    return re.sub(rf"^(?:>>>|---) (\[\d+\] .*?)(?: \| {OWN_TAG} <<<| ---)$", r"\1", text,
                  flags=re.M)


def test_a_sequential_record_marks_only_the_reflected_stage() -> None:
    transcript = [
        entry("coder", "coder", "system", "You write code.", ("stage", 0)),
        entry("coder", "coder", "user", STATEMENT, ("stage", 0)),
        entry("coder", "coder", "assistant", "print(0)", ("stage", 0), tool_calls=[]),
        entry("debugger", "debugger", "system", "You debug.", ("stage", 1)),
        entry("debugger", "debugger", "user", f"{STATEMENT}\n\nThe coder wrote:\nprint(0)",
              ("stage", 1)),
        entry("debugger", "debugger", "assistant", PROGRAM, ("stage", 1), tool_calls=[]),
    ]
    record = team_record(PROBLEM, rollout(transcript), "debugger")
    assert record["Team transcript"] == "\n".join([
        "(4 messages, system prompts left out; the turns of the role 'debugger' are marked "
        ">>> ... ROLE UNDER REVISION <<<)",
        "--- [1] coder (role coder, stage 0) user ---", TASK_NOTE,
        "--- [2] coder (role coder, stage 0) assistant ---", "print(0)",
        ">>> [3] debugger (role debugger, stage 1) user | ROLE UNDER REVISION <<<",
        f"{TASK_NOTE}\n\nThe coder wrote:\nprint(0)",
        ">>> [4] debugger (role debugger, stage 1) assistant | ROLE UNDER REVISION <<<",
        PROGRAM,
    ])
    assert "You write code." not in record["Team transcript"]  # no system prompt shown


def test_a_real_centralized_run_renders_its_delegation_and_code_run() -> None:
    """The team's own transcript (real client, scripted server): the manager delegates, the
    coder runs code, both answer; the question prompt each agent got is shown once."""
    def script(request):
        turn = assistant_turns(request)
        if role_of(request, "centralized", ("manager", "coder")) == "manager":
            return [Reply.calls(ToolCall(TOOL, {"worker": "coder", "instruction": "SUM-IT"})),
                    fenced("print(2 * int(input()))")][min(turn, 1)]
        return [Reply.calls(ToolCall("python_exec", {"code": "print(1 + 2)"})),
                fenced("print(2 * int(input()))")][min(turn, 1)]

    problem = replace(make_problem(), statement=STATEMENT)
    with scripted_server(script) as server:
        result = solve_one(server.base_url, "centralized", problem)
        assert not server.script_errors
    text = team_record(problem, rollout(result.transcript), "coder")["Team transcript"]
    headers = [line for line in text.splitlines() if line.startswith(("---", ">>>"))]
    assert headers == [
        "--- [1] manager (role manager, delegation 0) user ---",
        "--- [2] manager (role manager, delegation 0) assistant ---",
        f">>> [3] coder (role coder, delegation 1) user | {OWN_TAG} <<<",
        f">>> [4] coder (role coder, delegation 1) assistant | {OWN_TAG} <<<",
        f">>> [5] coder (role coder, delegation 1) result of tool python_exec | {OWN_TAG} <<<",
        f">>> [6] coder (role coder, delegation 1) assistant | {OWN_TAG} <<<",
        "--- [7] manager (role manager, delegation 0) result of tool delegate ---",
        "--- [8] manager (role manager, delegation 0) assistant ---"]
    assert "[tool call delegate]\nworker: coder\ninstruction: SUM-IT" in text
    assert "[tool call python_exec]\ncode: print(1 + 2)" in text
    assert f"{TASK_NOTE}\n\n## Task from the manager\n\nSUM-IT" in text
    assert STATEMENT not in text and "exit code 0" in text


def _delegate(call_id: str, args: object, *, invalid: bool = False) -> dict:
    return {"id": call_id, "name": TOOL, "args": args, **({"invalid": True} if invalid else {})}


def _worker(agent: str, number: int, instruction: str) -> list[dict]:
    step = ("delegation", number)
    return [entry(agent, agent, "system", f"{agent} system", step),
            entry(agent, agent, "user", f"{STATEMENT}\n\n## Task from the manager\n\n"
                                        f"{instruction}\n", step),
            entry(agent, agent, "assistant", f"{agent} did {instruction}", step, tool_calls=[])]


def test_each_worker_run_follows_the_call_that_started_it() -> None:
    """Two delegations in one turn (after a coder call that never ran: no instruction, and an
    invalid one), a third in a later turn whose result carries no call id, and a run no call
    names: each run right before its call's result, else right after the call's message."""
    m = ("delegation", 0)

    def result(call_id: str, text: str) -> dict:
        return entry("manager", "manager", "tool", text, m, name=TOOL, tool_call_id=call_id)

    manager = [
        entry("manager", "manager", "system", "manager system", m),
        entry("manager", "manager", "user", STATEMENT, m),
        entry("manager", "manager", "assistant", "turn 1", m, tool_calls=[
            _delegate("c0", {"worker": "coder"}), _delegate("c1", {"worker": "coder",
                                                                   "instruction": "A"}),
            _delegate("c2", {"worker": "tester", "instruction": "B"}),
            _delegate("c9", "{not json", invalid=True)]),
        result("c0", "error c0"), result("c1", "reply A"), result("c2", "reply B"),
        result("c9", "error c9"),
        entry("manager", "manager", "assistant", "turn 2", m, tool_calls=[
            _delegate("", {"worker": "coder", "instruction": "C"})]),
        result("", "reply C"),
        entry("manager", "manager", "assistant", "final", m, tool_calls=[]),
    ]
    workers = [*_worker("coder", 1, "A"), *_worker("tester", 2, "B"), *_worker("coder", 3, "C"),
               *_worker("analyzer", 4, "D")]
    ordered = time_ordered([*manager, *workers])
    assert [e["content"].split("\n")[0] if e["type"] != "user" else e["source"] + " asked"
            for e in ordered if e["type"] != "system"] == [
        "manager asked", "turn 1", "error c0", "coder asked", "coder did A", "reply A",
        "tester asked", "tester did B", "reply B", "error c9", "turn 2", "coder asked",
        "coder did C", "reply C", "final", "analyzer asked", "analyzer did D"]
    assert sorted(map(id, ordered)) == sorted(map(id, [*manager, *workers]))  # nothing lost
    sequential = _run("ttoo")
    assert time_ordered(sequential) == sequential  # only a centralized team is reordered


def test_each_message_and_each_tool_call_is_clipped() -> None:
    transcript = [
        entry("coder", "coder", "user", "U" * 100, ("stage", 0)),
        entry("coder", "coder", "assistant", "A" * 10, ("stage", 0), tool_calls=[
            {"name": "python_exec", "args": {"code": "x" * 50}},
            {"name": "python_exec", "args": "{not json", "invalid": True}]),
        entry("coder", "coder", "tool", "E" * 5, ("stage", 0), name="python_exec",
              status="error"),
    ]
    limits = TranscriptLimits(message_chars=30, args_chars=20)
    messages = team_messages(transcript, "debugger", limits=limits)
    assert [(m.number, m.source, m.step, m.kind, m.own) for m in messages] == [
        (1, "coder", "stage 0", "user", False), (2, "coder", "stage 0", "assistant", False),
        (3, "coder", "stage 0", "result of tool python_exec (failed)", False)]
    assert [m.body for m in messages] == [
        "U" * 20 + CLIP_NOTE + "U" * 10,
        "A" * 10 + "\n[tool call python_exec]\ncode: " + "x" * 7 + CLIP_NOTE + "x" * 7
        + "\n[invalid tool call python_exec]\n{not json",
        "E" * 5]


def _run(kinds: str) -> list[dict]:
    """One message per letter: o = the reflected role (debugger), t = a teammate (coder)."""
    return [entry("debugger" if k == "o" else "coder", "debugger" if k == "o" else "coder",
                  "assistant", f"m{i + 1}", ("stage", i)) for i, k in enumerate(kinds)]


@pytest.mark.parametrize(("kinds", "cap", "kept", "gaps"), [
    # the role's own messages first, then the teammates' first and last ones
    ("ttoottt", 4, [1, 3, 4, 7], [(1, 0, 2), (2, 0, 5)]),
    ("tttttt", 3, [1, 2, 6], [(3, 0, 3)]),
    # more own messages than the cap: its first ones and its last ones, nothing else
    ("tooooot", 3, [2, 3, 6], [(1, 0, 1), (2, 2, 4), (1, 0, 7)]),
    ("ttoo", 9, [1, 2, 3, 4], []),
])
def test_the_message_cap_keeps_the_role_first_and_notes_the_gaps(kinds, cap, kept, gaps):
    items = select(team_messages(_run(kinds), "debugger"), TranscriptLimits(max_messages=cap))
    assert [i.number for i in items if not isinstance(i, Gap)] == kept
    # (count, own, number of the message after which the gap starts + 1)
    found, number = [], 1
    for item in items:
        if isinstance(item, Gap):
            found.append((item.count, item.own, number))
            number += item.count
        else:
            number = item.number + 1
    assert found == gaps


def test_a_long_record_shares_its_room_and_says_what_was_left_out() -> None:
    transcript = [entry("coder", "coder", "assistant", "a" * 1000, ("stage", i))
                  for i in range(3)] + [entry("debugger", "debugger", "user", "q", ("stage", 3))]
    limits = TranscriptLimits(message_chars=5000, record_chars=900, max_messages=3)
    items = select(team_messages(transcript, "debugger"), limits)
    bodies = [i.body for i in items if not isinstance(i, Gap)]
    assert bodies == ["a" * 200 + CLIP_NOTE + "a" * 100, "a" * 200 + CLIP_NOTE + "a" * 100,
                      "q"]  # 900 // 3 = 300 each (MIN_SHARE 200)
    text = render_team(items)
    assert "... (1 message left out, 0 of them the role's) ..." in text
    assert render_team([]) == "(the team exchanged no message on this problem)"


def test_a_long_task_is_clipped_and_then_left_in_place_in_the_transcript() -> None:
    assert TeamReflectionSettings().task_chars == 6000

    def record(statement: str) -> dict[str, str]:
        problem = replace(PROBLEM, statement=statement)
        transcript = [entry("coder", "coder", "user", f"{statement}\n\nAnswer.", ("stage", 0)),
                      entry("coder", "coder", "assistant", PROGRAM, ("stage", 0))]
        return team_record(problem, rollout(transcript), "coder")

    medium = "M" * 3000  # shown whole in the task, so noted in the transcript
    shown = record(medium)
    assert shown["Task"] == question_prompt(replace(PROBLEM, statement=medium)).strip()
    assert f"{TASK_NOTE}\n\nAnswer." in shown["Team transcript"]
    assert "M" * 100 not in shown["Team transcript"]
    long = "L" * 4000 + "the middle" + "L" * 4000  # clipped in the task: left in place
    clipped = record(long)
    task = question_prompt(replace(PROBLEM, statement=long)).strip()
    assert clipped["Task"] == clip(task, 6000) != task and "the middle" not in clipped["Task"]
    assert TASK_NOTE not in clipped["Team transcript"]
    assert "L" * 900 in clipped["Team transcript"]


def test_the_prompt_asks_to_keep_responsibilities_and_the_contract() -> None:
    record = team_record(PROBLEM, rollout(centralized_transcript()), "coder")
    prompt = team_proposal_prompt(topology="centralized", roles=("manager", "coder"),
                                  role="coder", current="Write code.", records=[record],
                                  placeholders=["workers"])
    assert "its roles are 'manager', 'coder'" in prompt
    assert "## The current prompt\nWrite code.\n\n## What happened" in prompt
    assert "keep the role's responsibilities in the team" in prompt
    assert "keep its output contract" in prompt and "{workers} verbatim" in prompt
    assert prompt.count("### Problem") == 1 and CENTRALIZED_FOR_CODER in prompt
    assert prompt.rstrip().endswith(END_MARK)
    assert parse_proposal(f"{BEGIN_MARK}\nNew.\n{END_MARK}") == "New."


def run(ctx, **settings):
    return asyncio.run(make(**settings).optimize(ctx))


def test_it_reflects_on_the_whole_team_at_its_temperature() -> None:
    ctx = fake_context(budget=20)
    result = run(ctx)
    assert result == {**SEED, "coder": f"{SEED['coder']}\n{KEYWORD}"}
    assert [(r["purpose"], r["temperature"]) for r in ctx.reflections] == [
        ("mamut_gepa:reflect:analyzer", 0.7), ("mamut_gepa:reflect:coder", 0.7)]
    prompt = ctx.reflections[0]["prompt"]  # on the analyzer: the coder's turns are there too
    assert "[analyzer] answer for" in prompt and "[coder] answer for" in prompt
    assert f">>> [2] analyzer_0 (role analyzer) assistant | {OWN_TAG} <<<" in prompt
    assert "--- [4] coder_0 (role coder) assistant ---" in prompt
    assert SEED["coder"] not in prompt and prompt.count("### Problem") == 3
    assert [p["rejected_by"] for p in ctx.proposals] == ["minibatch", None]
    assert ctx.checkpoints[-1]["state"]["method"] == "mamut_gepa"


@pytest.mark.parametrize(("cap", "budget", "charged"), [
    # min(B, budget) metric calls: B = 8 stops gepa after the seed (4) and one iteration (6)
    (8, 60, 10), (600, 20, 20), (600, 0, 0), (600, 9, 4)])
def test_the_metric_call_cap_is_the_smaller_of_b_and_the_budget(cap, budget, charged) -> None:
    ctx = fake_context(budget=budget)
    run(ctx, max_metric_calls=cap)
    assert ctx.ledger.charged == len(ctx.calls) == charged


def test_a_truncated_proposal_is_recorded_and_never_adopted() -> None:
    ctx = fake_context(budget=20, script=lambda _p, _u: f"{BEGIN_MARK}\n{KEYWORD} and")
    assert run(ctx) == SEED
    assert {p["rejected_by"] for p in ctx.proposals} == {"validator"}
    assert ctx.proposals[0]["reason"] == "the reply has no complete marked prompt (truncated?)"


@pytest.mark.parametrize(("text", "why"), [
    ("(the complete new prompt)", "echoes the answer template's placeholder"),
    ("Write code.\n(The Complete New Prompt)\nTest it.", "echoes the answer template's"),
    ("x" * 29, "has 29 characters, under 30% of the current prompt's 100"),
    ("x" * 30, None),
    ("x" * 2400, None),
    ("x" * 2401, "has 2401 characters, over the cap of 4 x the seed prompt's 100 + 2000 = 2400"),
])
def test_template_echoes_and_odd_lengths_are_refused(text, why) -> None:
    found = proposal_problem(text, current="c" * 100, seed="s" * 100)
    assert found == why if why is None else why in found


@pytest.mark.parametrize(("reply", "why"), [
    (f"{BEGIN_MARK}\n(the complete new prompt)\n{END_MARK}", "echoes the answer template"),
    (f"{BEGIN_MARK}\nBe brief.\n{END_MARK}", "under 30% of the current prompt's"),
    (f"{BEGIN_MARK}\n{'x' * 2500}\n{END_MARK}", "over the cap of 4 x the seed prompt's"),
])
def test_a_refused_proposal_is_recorded_and_never_adopted(reply, why) -> None:
    assert parse_proposal(reply) is not None  # it parses: our own check must drop it
    ctx = fake_context(budget=20, script=lambda _p, _u: reply)
    assert run(ctx) == SEED
    assert ctx.proposals and {p["rejected_by"] for p in ctx.proposals} == {"validator"}
    assert all(why in p["reason"] for p in ctx.proposals), ctx.proposals[0]["reason"]


def test_a_resumed_run_retraces_and_a_diverging_one_stops() -> None:
    first = fake_context(budget=20)
    result = run(first)
    again = fake_context(budget=20, restored=first.checkpoints[-1]["state"])
    again._journal = dict(first._journal)
    assert run(again) == result and again.ledger.charged == 0
    tampered = {**first.checkpoints[0]["state"], "candidates": ["0123456789abcdef"]}
    with pytest.raises(ResumeDivergence, match="resumed mamut_gepa run"):
        run(fake_context(budget=20, restored=tampered))


def test_single_is_refused() -> None:
    with pytest.raises(ValueError, match="multi-agent"):
        run(fake_context(budget=20, topology="single"))


def test_the_registry_builds_it_and_bad_settings_are_refused() -> None:
    assert get_optimizer("mamut_gepa").key == "mamut_gepa"
    defaults = MamutGepaSettings()
    assert (defaults.minibatch, defaults.use_merge, defaults.max_metric_calls,
            defaults.temperature) == (3, True, 600, 0.7)
    assert resolve_settings("mamut_gepa", {"reflection.limits.max_messages": 12})[
        "reflection"]["limits"]["max_messages"] == 12
    built = get_optimizer("mamut_gepa", temperature=0.3, reflection={"records_per_reflection": 2})
    assert built.settings.reflection == TeamReflectionSettings(records_per_reflection=2)
    for overrides, named in [({"temperature": 3}, "temperature"), ({"minibatch": 0}, "minibatch"),
                             ({"max_metric_calls": 0}, "max_metric_calls"),
                             ({"reflection.limits.record_chars": 0}, "record_chars"),
                             ({"reflection.task_chars": -1}, "task_chars"),
                             ({"max_merge_invocations": -1}, "max_merge_invocations"),
                             ({"plateau": 3}, "plateau")]:
        with pytest.raises(SettingsError, match=named):
            resolve_settings("mamut_gepa", overrides)


def _reflect_prompts(out) -> list[tuple[str, str, float]]:
    with gzip.open(out / "calls.jsonl.gz", "rt", encoding="utf-8") as handle:
        calls = [json.loads(line) for line in handle if line.strip()]
    return [(c["purpose"], "\n".join(m["content"] for m in c["messages"]),
             c["temperature"]) for c in calls if c["kind"] == "reflect"]


@pytest.mark.parametrize(("topology", "agents"), [
    ("independent", {"coder_0", "coder_1"}), ("sequential", {"coder", "debugger"}),
    ("decentralized", {"debater_0", "debater_1"})])
@pytest.mark.slow
def test_a_job_end_to_end(scripted, tmp_path, monkeypatch, topology, agents) -> None:
    """optimize -> validate -> test through the scripted server (centralized: below, with a
    manager that delegates)."""
    splits = sample_splits()
    wrong = {*splits.train, splits.validation[0], splits.test[1]}
    job = run_method_job(scripted, tmp_path, monkeypatch, method="mamut_gepa", budget=12,
                         wrong=wrong, topology=topology, team_size=2)
    reflections = _reflect_prompts(job.out)
    assert reflections and {t for _, _, t in reflections} == {0.7}
    for purpose, prompt, _ in reflections:
        role = purpose.rsplit(":", 1)[1]
        sources = set(re.findall(r"^(?:---|>>>) \[\d+\] (\S+) \(role ", prompt, re.M))
        assert sources == agents, (purpose, sources)  # every agent of the team, tagged
        assert all(f"(role {role}" in line for line in prompt.splitlines()
                   if line.startswith(">>> ["))
    proposals = [e for e in read_history(job.out) if e.kind == "proposal"]
    assert len([p for p in proposals if p.scored_on != "val_subsample"]) == len(reflections)
    assert all(p.accepted or p.rejected_by for p in proposals)


_CURRENT = re.compile(r"## The current prompt\n(.*?)\n\n## What happened", re.DOTALL)
_ROLE = re.compile(r"belongs to the role '(\w+)'")
DELEGATED = "Write the program; read the input exactly as the statement says."


@dataclass
class DelegatingModel:
    """The scripted server's script for a centralized job: the manager's first turn delegates
    once to its coder (`DELEGATED`), every other team turn is the team model's. Our reflection
    prompt gets the current text plus a neutral line (no `FIX`: no child is better, so the
    round-robin moves on from the manager to the coder)."""

    team: TeamModel
    team_requests: list[dict] = field(default_factory=list)

    def __call__(self, request: dict) -> object:
        text = message_text(request)
        if BEGIN_MARK in text:
            current = _CURRENT.search(text)
            assert current is not None
            return f"{BEGIN_MARK}\n{current.group(1).strip()}\nName your assumptions.\n{END_MARK}"
        self.team_requests.append(request)
        tools = {t.get("function", {}).get("name") for t in request.get("tools") or []}
        if TOOL in tools and not tool_results(request):
            return Reply.calls(ToolCall(TOOL, {"worker": "coder", "instruction": DELEGATED}))
        return self.team(_without_demos(request))


@pytest.mark.slow
def test_a_centralized_job_reflects_on_the_delegated_worker_run(scripted, tmp_path,
                                                                monkeypatch) -> None:
    """optimize -> validate -> test, the manager delegating once per problem: both roles'
    records hold the worker's run, marked for the coder, between the manager's call (with
    its payload) and the call's result."""
    for name in REFLECTION_ENV:
        monkeypatch.delenv(name, raising=False)
    out, splits, budget = tmp_path / "job", sample_splits(), 18  # seed 3 + two iterations 6
    team = TeamModel(sample_problems(), fixed_by=FIX, job_dir=out,
                     wrong=frozenset({*splits.train, splits.validation[0], splits.test[1]}))
    model = DelegatingModel(team)
    server = scripted(model)
    summary = asyncio.run(run_job(job_config(server.base_url, out, method="mamut_gepa",
                                             budget=budget, topology="centralized",
                                             team_size=2)))
    assert not server.script_errors, server.script_errors[0]
    check_three_phases(MethodJob(out=out, budget=budget, splits=splits, team=team,
                                 model=model, summary=summary))  # type: ignore[arg-type]
    reflections = _reflect_prompts(out)
    assert [purpose for purpose, _, _ in reflections] == [
        "mamut_gepa:reflect:manager", "mamut_gepa:reflect:coder"]
    runs = {"manager": [], "coder": []}
    for role, prompt in ((p.rsplit(":", 1)[1], text) for p, text, _ in reflections):
        headers = [line for line in prompt.splitlines() if line.startswith(("--- [", ">>> ["))]
        runs[role] = headers
        assert f"[tool call {TOOL}]\nworker: coder\ninstruction: {DELEGATED}" in prompt
        assert f"{TASK_NOTE}\n\n## Task from the manager\n\n{DELEGATED}" in prompt
    one = [("manager", "delegation 0", "user"), ("manager", "delegation 0", "assistant"),
           ("coder", "delegation 1", "user"), ("coder", "delegation 1", "assistant"),
           ("manager", "delegation 0", f"result of tool {TOOL}"),
           ("manager", "delegation 0", "assistant")]
    for role, headers in runs.items():
        expected = [(f">>> [{n}] {agent} (role {agent}, {step}) {kind} | {OWN_TAG} <<<"
                     if agent == role else f"--- [{n}] {agent} (role {agent}, {step}) {kind} ---")
                    for n, (agent, step, kind) in enumerate(one, start=1)]
        assert headers == expected * 3, (role, headers)  # three problems per reflection
    proposals = [e for e in read_history(out) if e.kind == "proposal"]
    assert [p.rejected_by for p in proposals] == ["minibatch", "minibatch"]


def team_responder(text: str) -> str | None:
    """Our reflection prompt's responder: the current prompt plus `FIX` only when a record
    shows a failure and the reflected role's own turns are marked in a team transcript."""
    if "(whole team runs)" not in text or BEGIN_MARK not in text:
        return None
    current = _CURRENT.search(text)
    body = current.group(1).strip() if current else "Solve the problem."
    role = _ROLE.search(text)
    marked = role is not None and re.search(
        rf"^>>> \[\d+\] \S+ \(role {role.group(1)}\b.*\| {OWN_TAG} <<<$", text, re.M)
    shown_failure = "(not solved)" in text and marked is not None
    return f"{BEGIN_MARK}\n{body}\n{FIX if shown_failure else ''}\n{END_MARK}"


@pytest.mark.parametrize(("topology", "role"), [("independent", "coder"),
                                                ("sequential", "debugger")])
@pytest.mark.slow
def test_the_planted_fix_is_deployed(scripted, tmp_path, monkeypatch, topology, role):
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="mamut_gepa",
                          topology=topology, team_size=2, budget=PLANTED_BUDGET,
                          answering_role=role, responders=[team_responder])
    assert_fix_deployed(outcome)
    assert set(outcome.job.model.uncharged) == {"team_responder"}


@pytest.mark.slow
def test_the_control_keeps_the_seed(scripted, tmp_path, monkeypatch):
    outcome = run_planted(scripted, tmp_path, monkeypatch, method="mamut_gepa",
                          topology="independent", team_size=2, budget=PLANTED_BUDGET,
                          answering_role="coder", control=True, responders=[team_responder])
    assert_seed_kept(outcome)


@pytest.mark.slow
def test_an_interrupted_job_resumes_to_the_uninterrupted_result(scripted, tmp_path, monkeypatch):
    assert_interrupted_resumes_to_whole(scripted, tmp_path, monkeypatch, "mamut_gepa",
                                        budget=PLANTED_BUDGET, responders=[team_responder])


@pytest.mark.parametrize(("budget", "scored"), [(105, 0), (106, 1)])
def test_the_minimum_budget_at_the_standard_sizes(budget, scored) -> None:
    """Train 150, validation 50: the seed's validation (50), then one iteration's worst case
    (2 x 3 + 50) must fit before it starts: 106 buys the first scored proposal."""
    ctx = fake_context(budget=budget, n_train=150, n_val=50)
    run(ctx)
    assert len([p for p in ctx.proposals if p["scored_on"] == "minibatch"]) == scored
    assert ctx.ledger.charged == 50 + 6 * scored

"""What the reflection model sees of a transcript: tool calls with their arguments, tool
results, and caps that hold per agent (hand-made transcripts in the teams' format)."""

from __future__ import annotations

from lcb.optimize.methods.reflection import (
    BEGIN_MARK,
    END_MARK,
    MIN_SHARE,
    SliceLimits,
    parse_proposal,
    render_args,
    render_slice,
    role_slice,
)
from lcb.text import CLIP_NOTE, clip

CODE = "n = int(input())\nprint(n * 2)"


def entry(source: str, role: str, kind: str, content: str, **extra: object) -> dict:
    return {"source": source, "role": role, "type": kind, "content": content, **extra}


def centralized() -> list[dict]:
    """A manager that delegates to a coder, who runs code once (and fails once)."""
    delegation = {"id": "c1", "name": "delegate",
                  "args": {"worker": "coder", "instruction": "Read n.\nPrint 2n."}}
    run = {"id": "c2", "name": "python_exec", "args": {"code": CODE, "stdin": "3"}}
    return [
        entry("manager", "manager", "system", "MANAGER PROMPT"),
        entry("manager", "manager", "user", "Problem: double n."),
        entry("manager", "manager", "assistant", "", tool_calls=[delegation]),
        entry("coder", "coder", "system", "CODER PROMPT"),
        entry("coder", "coder", "user", "Read n.\nPrint 2n."),
        entry("coder", "coder", "assistant", "Let me test it.", tool_calls=[run]),
        entry("coder", "coder", "tool", "6\n", tool_call_id="c2", name="python_exec",
              status="success"),
        entry("coder", "coder", "tool", "Traceback: boom", tool_call_id="c3",
              name="python_exec", status="error"),
        entry("coder", "coder", "assistant", "```python\nprint(2 * int(input()))\n```",
              tool_calls=[]),
        entry("manager", "manager", "tool", "```python\nprint(2 * int(input()))\n```",
              tool_call_id="c1", name="delegate", status="success"),
        entry("manager", "manager", "assistant", "Final answer.", tool_calls=[]),
    ]


def test_the_manager_s_delegations_and_their_results_are_shown() -> None:
    assert role_slice(centralized(), "manager") == [
        {"source": "manager", "type": "user", "content": "Problem: double n."},
        {"source": "manager", "type": "assistant",
         "content": "[tool call delegate]\nworker: coder\ninstruction:\nRead n.\nPrint 2n."},
        {"source": "manager", "type": "result of tool delegate",
         "content": "```python\nprint(2 * int(input()))\n```"},
        {"source": "manager", "type": "assistant", "content": "Final answer."},
    ]


def test_the_code_sent_to_python_exec_and_failed_results_are_shown() -> None:
    kept = role_slice(centralized(), "coder")
    assert [m["type"] for m in kept] == [
        "user", "assistant", "result of tool python_exec",
        "result of tool python_exec (failed)", "assistant"]
    assert kept[1]["content"] == (
        "Let me test it.\n[tool call python_exec]\ncode:\nn = int(input())\nprint(n * 2)\n"
        "stdin: 3")
    assert kept[3]["content"] == "Traceback: boom"
    assert all("PROMPT" not in m["content"] for m in kept)  # system prompts stay out


def test_tool_call_arguments_are_clipped_on_their_own() -> None:
    long_code = "x = 1\n" * 100
    transcript = [entry("coder_0", "coder", "assistant", "short text", tool_calls=[
        {"id": "a", "name": "python_exec", "args": {"code": long_code}},
        {"id": "b", "name": "python_exec", "args": "not json", "invalid": True}])]
    limits = SliceLimits(clip_chars=5, args_chars=40)
    (only,) = role_slice(transcript, "coder", limits=limits)
    assert only["content"] == "\n".join([
        clip("short text", 5),
        "[tool call python_exec]", clip(f"code:\n{long_code}", 40).rstrip(),
        "[invalid tool call python_exec]", "not json"])
    assert render_args({"worker": "tester", "round": 2, "flags": ["a", "b"]}) == (
        'worker: tester\nround: 2\nflags: ["a", "b"]')
    assert render_args(None) == ""


def test_caps_hold_per_agent_and_each_agent_is_labelled() -> None:
    """Four coders share the role: each keeps its own first and last messages."""
    transcript = [entry(f"coder_{a}", "coder", "assistant", f"coder_{a} says {i}")
                  for i in range(6) for a in range(4)]  # interleaved, as parallel agents run
    kept = role_slice(transcript, "coder", limits=SliceLimits(max_messages=2))
    expected = []
    for a in range(4):
        agent = f"coder_{a}"
        expected += [
            {"source": agent, "type": "assistant", "content": f"{agent} says 0"},
            {"source": agent, "type": "note", "content": f"(4 more messages of {agent} left out)"},
            {"source": agent, "type": "assistant", "content": f"{agent} says 5"},
        ]
    assert kept == expected
    # an agent under the cap keeps everything
    assert len(role_slice(transcript, "coder", limits=SliceLimits(max_messages=6))) == 24
    assert render_slice(kept[:2]) == (
        "--- coder_0 (assistant) ---\ncoder_0 says 0\n"
        "--- coder_0 (note) ---\n(4 more messages of coder_0 left out)")


def test_a_cap_of_one_keeps_the_last_message() -> None:
    transcript = [entry("tester_0", "tester", "user", f"m{i}") for i in range(3)]
    assert role_slice(transcript, "tester", limits=SliceLimits(max_messages=1)) == [
        {"source": "tester_0", "type": "note", "content": "(2 more messages of tester_0 left out)"},
        {"source": "tester_0", "type": "user", "content": "m2"},
    ]


def test_parse_proposal_needs_both_markers() -> None:
    assert parse_proposal(f"x\n{BEGIN_MARK}\n  New text.\n{END_MARK}\ntrailing") == "New text."
    assert parse_proposal(f"{BEGIN_MARK}\nNew text.") is None
    assert parse_proposal("New text.") is None
    assert parse_proposal(f"{BEGIN_MARK}\n\n{END_MARK}") is None


def test_role_slice_clips_messages_and_caps_their_number() -> None:
    transcript = [{"source": "coder_0", "role": "coder", "type": "system", "content": "SYS"}]
    transcript += [{"source": "coder_0", "role": "coder", "type": "assistant",
                    "content": f"message {i} " + "x" * 500} for i in range(10)]
    transcript.append({"source": "tester_0", "role": "tester", "type": "user", "content": "T"})
    kept = role_slice(transcript, "coder", limits=SliceLimits(clip_chars=100, max_messages=4))
    assert len(kept) == 5 and kept[2]["type"] == "note"
    assert kept[0]["content"].startswith("message 0") and kept[-1]["content"].startswith(
        "message 9")
    assert all(len(m["content"]) <= 100 + 20 for m in kept)
    assert all("SYS" not in m["content"] and m["content"] != "T" for m in kept)
    assert clip("abcdef", 0) == "abcdef" and len(clip("a" * 50, 10)) < 50


def test_a_record_of_many_agents_shares_its_room_instead_of_growing_with_the_team() -> None:
    transcript = [entry(f"coder_{agent}", "coder", kind, "x" * 1500)
                  for agent in range(10) for kind in ("user", "assistant") * 4]
    limits = SliceLimits(record_chars=16000)
    kept = role_slice(transcript, "coder", limits=limits)
    assert len(kept) == 80  # every agent keeps its messages ...
    share = 16000 // 80
    assert all(len(m["content"]) <= max(share, MIN_SHARE) + len(CLIP_NOTE) for m in kept)
    few = role_slice(transcript[:8], "coder", limits=limits)  # ... one agent fits: unclipped
    assert [len(m["content"]) for m in few] == [1500] * 8

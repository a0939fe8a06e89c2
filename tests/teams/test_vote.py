"""The majority vote: whitespace-normalised comparison, the tie rule, abstaining replicas."""

from __future__ import annotations

import json

import pytest

from lcb.teams.vote import majority_vote, normalize_program

PROGRAM = "n = int(input())\nfor i in range(n):\n    print(i * 2)\n"
CRLF_TRAILING = "n = int(input())   \r\nfor i in range(n):\r\n    print(i * 2)\t\r\n"
BLANKS_SPACING = "\n\nn=int( input() )\n\nfor i in range(n) :\n\n    print(i*2)\n\n\n"
TWO_SPACES = "n = int(input())\nfor i in range(n):\n  print(i * 2)"
OTHER = "n = int(input())\nfor i in range(n):\n    print(i * 3)\n"


def test_three_whitespace_variants_beat_one_different_program():
    ballots = [("a0", OTHER), ("a1", CRLF_TRAILING), ("a2", BLANKS_SPACING), ("a3", TWO_SPACES)]
    result = majority_vote(ballots)
    assert result.counts == (1, 3)
    assert result.program == CRLF_TRAILING  # as its first producer wrote it
    assert result.winner_agent == "a1"
    assert result.votes() == {"a0": 0, "a1": 1, "a2": 1, "a3": 1}


def test_tie_goes_to_the_program_of_the_lowest_index_agent():
    ballots = [("a0", None), ("a1", OTHER), ("a2", PROGRAM), ("a3", PROGRAM), ("a4", OTHER)]
    result = majority_vote(ballots)
    assert result.counts == (2, 2)
    assert result.program == OTHER and result.winner_agent == "a1"


def test_tie_rule_follows_ballot_order_not_program_text():
    flipped = majority_vote([("a0", PROGRAM), ("a1", OTHER)])
    assert flipped.program == PROGRAM
    assert majority_vote([("a0", OTHER), ("a1", PROGRAM)]).program == OTHER


def test_replicas_without_a_program_do_not_vote():
    result = majority_vote([("a0", None), ("a1", "  \n"), ("a2", None), ("a3", OTHER)])
    assert result.program == OTHER and result.counts == (1,)
    assert result.abstained == ("a0", "a1", "a2")
    assert result.votes()["a0"] is None


def test_nobody_voting_gives_no_program():
    result = majority_vote([("a0", None), ("a1", None)])
    assert result.program is None and result.winner is None and result.winner_agent is None
    assert majority_vote([]).program is None


def test_whitespace_inside_strings_and_comments_is_kept():
    assert normalize_program("print('a  b')") != normalize_program("print('a b')")
    assert normalize_program("x = 1  # one") != normalize_program("x = 1  # two")
    assert normalize_program("x = 1  # one   ") == normalize_program("x = 1 # one")


def test_statement_structure_is_kept():
    nested = "for i in range(3):\n    print(i)\n    print(0)\n"
    dedented = "for i in range(3):\n    print(i)\nprint(0)\n"
    assert normalize_program(nested) != normalize_program(dedented)
    assert normalize_program("a = 1; b = 2") != normalize_program("a = 1\nb = 2")


def test_line_breaks_inside_brackets_and_tab_indentation_are_ignored():
    assert normalize_program("x = f(1,\n      2)") == normalize_program("x = f(1, 2)")
    assert normalize_program("if x:\n\ty = 1\n") == normalize_program("if x:\n    y = 1\n")


def test_untokenizable_programs_compare_by_lines():
    broken = "def f(:\n  x = '''\n"
    assert normalize_program(broken + "   \r\n\n") == normalize_program(broken)
    assert normalize_program(broken) != normalize_program("def f(:\n x = '''\n")
    result = majority_vote([("a0", broken), ("a1", broken + "\n\n"), ("a2", OTHER)])
    assert result.program == broken and result.counts == (2, 1)


def test_duplicate_agent_ballots_are_rejected():
    with pytest.raises(ValueError, match="'a0'"):
        majority_vote([("a0", PROGRAM), ("a0", OTHER)])


def test_non_string_program_is_a_type_error():
    with pytest.raises(TypeError, match="int"):
        normalize_program(42)  # type: ignore[arg-type]


def test_record_is_json_and_describes_the_vote():
    result = majority_vote([("a0", OTHER), ("a1", PROGRAM), ("a2", TWO_SPACES), ("a3", None)])
    record = json.loads(json.dumps(result.to_record()))
    assert record == {"counts": [1, 2], "votes": {"a0": 0, "a1": 1, "a2": 1, "a3": None},
                      "winner": 1, "winner_agent": "a1", "abstained": ["a3"]}


def test_votes_are_listed_in_ballot_order():
    result = majority_vote([("z", OTHER), ("y", None), ("x", PROGRAM), ("w", OTHER)])
    assert list(result.votes()) == ["z", "y", "x", "w"]
    assert result.votes() == {"z": 0, "y": None, "x": 1, "w": 0}

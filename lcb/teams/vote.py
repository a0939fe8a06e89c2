"""The majority vote over agents' programs (independent replicas, decentralized peers).

Contract:
- Ballots are `(agent, program)` pairs in agent order (lowest index first). A ballot whose
  program is None (or blank) abstains: it neither votes nor counts.
- Two programs are the same vote when their *whitespace-normalised* forms are equal
  (`normalize_program`). Python's own tokenizer decides what whitespace is:
  - ignored: line endings (CRLF, CR, LF), trailing whitespace, blank lines, the width and the
    characters (tabs or spaces) of indentation, spaces between tokens, and line breaks inside
    brackets or after a backslash;
  - kept: every token, the text of string literals (spaces inside strings change output), the
    statement structure (where a logical line ends, what is indented under what) and comments
    (their trailing whitespace removed).
  A program the tokenizer rejects is compared by its lines instead: line endings normalised,
  trailing whitespace stripped, blank lines dropped.
- The winner is the group with the most votes; a tie goes to the group whose first ballot
  comes earliest, i.e. the program first produced by the lowest-index agent. The submitted
  program is the winner's text as its first producer wrote it (never a normalised copy).
- No ballot with a program: no winner (`VoteResult.program` is None).
"""

from __future__ import annotations

import io
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Tokens that only carry layout: their text never distinguishes two programs.
_LAYOUT = {tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
_IGNORED = {tokenize.NL, tokenize.ENCODING}

Key = tuple[tuple[int, str], ...] | tuple[str, ...]


def _lines_key(code: str) -> tuple[str, ...]:
    lines = code.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return tuple(line.rstrip() for line in lines if line.strip())


def _tokens_key(code: str) -> tuple[tuple[int, str], ...]:
    text = code.replace("\r\n", "\n").replace("\r", "\n")
    key: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in _IGNORED:
            continue
        if token.type in _LAYOUT:
            key.append((token.type, ""))
        elif token.type == tokenize.COMMENT:
            key.append((token.type, token.string.rstrip()))
        else:
            key.append((token.type, token.string))
    return tuple(key)


def normalize_program(code: str) -> Key:
    """The comparison key of `code` (see the module docstring); equal keys = same vote.

    >>> normalize_program("x = 1\\r\\n\\n") == normalize_program("x=1   ")
    True
    >>> normalize_program("print('a b')") == normalize_program("print('a  b')")
    False
    """
    if not isinstance(code, str):
        raise TypeError(f"a program must be str, got {type(code).__name__}")
    try:
        return _tokens_key(code)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return _lines_key(code)


@dataclass(frozen=True)
class VoteGroup:
    """Agents whose programs normalise to the same key; `program` is the first one's text."""

    program: str
    agents: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.agents)


@dataclass(frozen=True)
class VoteResult:
    """The outcome: groups in order of first appearance, the winner's index, who abstained,
    and every agent in ballot order."""

    groups: tuple[VoteGroup, ...]
    winner: int | None
    abstained: tuple[str, ...]
    agents: tuple[str, ...]

    @property
    def program(self) -> str | None:
        """The submitted program, as first written; None when nobody voted."""
        return None if self.winner is None else self.groups[self.winner].program

    @property
    def winner_agent(self) -> str | None:
        """The lowest-index agent that produced the winning program."""
        return None if self.winner is None else self.groups[self.winner].agents[0]

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(group.count for group in self.groups)

    def votes(self) -> dict[str, int | None]:
        """Agent -> index of the group it voted for (None: abstained), in ballot order."""
        cast = {agent: i for i, group in enumerate(self.groups) for agent in group.agents}
        return {agent: cast.get(agent) for agent in self.agents}

    def to_record(self) -> dict[str, Any]:
        """JSON-able: counts per group, each agent's group, the winner and who abstained."""
        return {
            "counts": list(self.counts),
            "votes": self.votes(),
            "winner": self.winner,
            "winner_agent": self.winner_agent,
            "abstained": list(self.abstained),
        }


def majority_vote(ballots: Iterable[tuple[str, str | None]]) -> VoteResult:
    """Vote over `(agent, program)` ballots given in agent order (see the module docstring).

    Raises ValueError when an agent id appears twice.

    >>> result = majority_vote([("a", "print(1)"), ("b", "print(2)"), ("c", "print( 2 )")])
    >>> result.program, result.counts, result.winner_agent
    ('print(2)', (1, 2), 'b')
    """
    seen: dict[str, None] = {}  # agents in ballot order
    keys: dict[Key, int] = {}
    groups: list[tuple[str, list[str]]] = []
    abstained: list[str] = []
    for agent, program in ballots:
        if agent in seen:
            raise ValueError(f"majority_vote: agent {agent!r} has more than one ballot")
        seen[agent] = None
        if program is None or not program.strip():
            abstained.append(agent)
            continue
        key = normalize_program(program)
        if key not in keys:
            keys[key] = len(groups)
            groups.append((program, []))
        groups[keys[key]][1].append(agent)
    frozen = tuple(VoteGroup(program, tuple(agents)) for program, agents in groups)
    # max() keeps the first maximum, and groups are in first-appearance order: the tie rule.
    winner = max(range(len(frozen)), key=lambda i: frozen[i].count, default=None)
    return VoteResult(groups=frozen, winner=winner, abstained=tuple(abstained),
                      agents=tuple(seen))

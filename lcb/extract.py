"""Code extraction: find the program an agent submitted in its final message.

Standard library only, below every lcb package: agents strip reasoning with `strip_think`,
teams find the submitted program with `extract_code`.

The rule (from the specification), applied after `strip_think` has removed the reasoning:
take the last fenced block that parses as Python, preferring blocks labelled `python`/`py`
(also `python3`, `py3`, any case) over bare fences, and skipping blocks that start with `{` or
`[`. Blocks labelled with any other language (json, text, bash, cpp, ...) are never candidates.
A candidate must also be a real program: the stdin stub `# YOUR CODE HERE`, empty and
comment-only blocks, and blocks holding only `pass`, `...`, docstrings or inert expressions
such as a sample output `YES` or `42` are not programs. `extract_code` returns None when no
block qualifies.

Choices where the rule is silent:
- Fences follow CommonMark's line rules (a line of 3+ backticks or tildes opens a block, an
  optional info string follows; a bare fence line of the same character, at least as long,
  closes it), except that any indentation is allowed: models indent fences inside lists. The
  opening fence's indentation is removed from the block's lines.
- Nested fences: a fence line inside a Python block may belong to a string in the code (say, a
  markdown template). When the text up to the first closing fence ends inside an open
  triple-quoted string, later closing fences are tried and the first that makes the block
  parse closes it. A run of backticks or tildes is never valid Python outside a string, so
  this only ever extends a block across fences that sit inside its own strings.
- Unterminated final fence (the model was cut off): the block runs to the end of the text and
  is used only when no terminated block qualifies, because a cut-off program often still parses
  but is incomplete. A closing fence glued to the end of its last code line is dropped.
- Line endings are normalised to `\\n`; the returned code has no leading blank lines and no
  trailing whitespace.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "BlockKind", "FencedBlock", "extract_code", "fenced_blocks", "is_program", "strip_think",
]

_THINK_PAIR = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_OPENING = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_CLOSING = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*$")
_PYTHON_LABEL = re.compile(r"(?:python|py)(?:3(?:\.\d+)?)?")
_MAX_EXTENSIONS = 16  # later closing fences tried per block; bounds the ast.parse work
_OPEN_STRING = "unterminated triple-quoted string"  # CPython's SyntaxError.msg prefix


class BlockKind(StrEnum):
    PYTHON = "python"  # labelled python / py / python3 / py3
    BARE = "bare"  # no info string
    OTHER = "other"  # another language: never a candidate


@dataclass(frozen=True)
class FencedBlock:
    """One fenced block: its lower-cased label ("" when bare), its text, and whether it closed."""

    label: str
    code: str
    closed: bool

    @property
    def kind(self) -> BlockKind:
        return _kind_of(self.label)


def _kind_of(label: str) -> BlockKind:
    if not label:
        return BlockKind.BARE
    return BlockKind.PYTHON if _PYTHON_LABEL.fullmatch(label) else BlockKind.OTHER


@dataclass(frozen=True)
class _Fence:
    indent: int
    char: str
    length: int
    label: str


def strip_think(text: str) -> str:
    """Remove model reasoning and return the rest, stripped of surrounding whitespace.

    Drops every `<think>…</think>` pair; then, when a lone `</think>` remains (the opening tag
    was in the chat template), everything up to the last one; then, when a lone `<think>`
    remains (the model was cut off while reasoning), everything from it on. Tags match in any
    case.

    >>> strip_think("<think>try x</think>\\nAnswer")
    'Answer'
    """
    return _without_think(text).strip()


def _without_think(text: str) -> str:
    """`strip_think` without the final strip: an indented fence on the first line of the
    answer keeps its indentation, as its block's lines do."""
    _require_text(text)
    text = _THINK_PAIR.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text


def fenced_blocks(text: str) -> list[FencedBlock]:
    """Every fenced block of `text`, in order (reasoning is not stripped here)."""
    _require_text(text)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[FencedBlock] = []
    index = 0
    while index < len(lines):
        fence = _opening(lines[index])
        if fence is None:
            index += 1
            continue
        end = _closing_index(lines, index, fence)
        if end is None:
            body = _glued_fence_removed(_body(lines[index + 1:], fence.indent), fence)
            blocks.append(FencedBlock(label=fence.label, code=body, closed=False))
            break
        body = _body(lines[index + 1: end], fence.indent)
        blocks.append(FencedBlock(label=fence.label, code=body, closed=True))
        index = end + 1
    return blocks


def extract_code(text: str) -> str | None:
    """The submitted program in a completion, or None when it holds no real program.

    >>> extract_code("Here:\\n```python\\nprint(int(input()) * 2)\\n```\\nDone.")
    'print(int(input()) * 2)'
    >>> extract_code("```python\\n# YOUR CODE HERE\\n```") is None
    True
    """
    programs = [
        block
        for block in fenced_blocks(_without_think(text))
        if block.kind is not BlockKind.OTHER and is_program(block.code)
    ]
    terminated = [block for block in programs if block.closed] or programs
    for kind in (BlockKind.PYTHON, BlockKind.BARE):
        of_kind = [block for block in terminated if block.kind is kind]
        if of_kind:
            return of_kind[-1].code
    return None


def is_program(code: str) -> bool:
    """True when `code` parses, does not start with `{`/`[`, and does something when run."""
    if code.lstrip().startswith(("{", "[")):
        return False
    tree = _parse(code)
    return tree is not None and not all(_is_inert(statement) for statement in tree.body)


def _is_inert(statement: ast.stmt) -> bool:
    """`pass`, and expression statements that call nothing (docstrings, `...`, `YES`, `42`)."""
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr):
        return not any(isinstance(node, (ast.Call, ast.Await)) for node in ast.walk(statement))
    return False


def _parse(code: str) -> ast.Module | None:
    return _parse_or_error(code)[0]


def _parse_or_error(code: str) -> tuple[ast.Module | None, str]:
    """The module, or None and the reason it does not parse."""
    with warnings.catch_warnings():  # invalid escapes in model code warn at parse time
        warnings.simplefilter("ignore")
        try:
            return ast.parse(code), ""
        except SyntaxError as exc:
            return None, exc.msg or "syntax error"
        except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, deep nesting
            return None, type(exc).__name__


def _require_text(text: object) -> None:
    if not isinstance(text, str):
        raise TypeError(f"expected the completion as str, got {type(text).__name__}")


def _opening(line: str) -> _Fence | None:
    match = _OPENING.match(line)
    if match is None:
        return None
    fence, info = match["fence"], match["info"].strip()
    if fence[0] == "`" and "`" in info:  # inline code such as ```x```, not a fence
        return None
    label = re.split(r"[\s:{,]", info, maxsplit=1)[0].lower() if info else ""
    return _Fence(indent=len(match["indent"]), char=fence[0], length=len(fence), label=label)


def _closes(line: str, fence: _Fence) -> bool:
    match = _CLOSING.match(line)
    return bool(match) and match["fence"][0] == fence.char and len(match["fence"]) >= fence.length


def _closing_index(lines: list[str], start: int, fence: _Fence) -> int | None:
    """Index of the line that closes the block opened at `start` (see the module docstring)."""
    closers = (j for j in range(start + 1, len(lines)) if _closes(lines[j], fence))
    first = next(closers, None)
    if first is None or _kind_of(fence.label) is BlockKind.OTHER:
        return first
    _, error = _parse_or_error(_body(lines[start + 1: first], fence.indent))
    if not error.startswith(_OPEN_STRING):  # only a string left open can hold a fence line
        return first
    for _, later in zip(range(_MAX_EXTENSIONS), closers, strict=False):
        if _parse(_body(lines[start + 1: later], fence.indent)) is not None:
            return later
    return first


def _body(lines: list[str], indent: int) -> str:
    """The block's text: the fence's indentation removed from each line, blank edges trimmed."""
    kept = [_drop_indent(line, indent) for line in lines]
    while kept and not kept[0].strip():
        kept.pop(0)
    return "\n".join(kept).rstrip()


def _drop_indent(line: str, width: int) -> str:
    cut = 0
    while cut < width and cut < len(line) and line[cut] in " \t":
        cut += 1
    return line[cut:]


def _glued_fence_removed(body: str, fence: _Fence) -> str:
    run = fence.char * fence.length
    return body[: -len(run)].rstrip() if body.endswith(run) else body

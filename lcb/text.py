"""Text helpers that every layer may use: standard library only, cheap to import (a grading
zygote imports this module, so it must not pull in anything that fattens a forked process).

Contract of `clip(text, limit, *, head=(2, 3), note=CLIP_NOTE)`:
- `text` itself when it has at most `limit` characters, or when `limit` <= 0.
- Else the first `h = max(1, limit * head[0] // head[1])` characters, then `note` (each
  `{cut}` in it replaced by how many characters were left out), then the last
  `max(1, limit - h)` characters; with `head` (1, 1) no tail at all (a plain cut). `head` is a
  fraction written as two integers, so the split is exact integer arithmetic.
The presets below are the ones lcb uses; each keeps the text it always produced.
"""

from __future__ import annotations

CLIP_NOTE = " [... clipped ...] "  # prompts an optimizer writes (2/3 head, the rest tail)
FEEDBACK_NOTE = "\n…[{cut} chars cut]…\n"  # a grade's feedback fields (half and half)
OUTPUT_NOTE = "\n... [{cut} characters cut] ...\n"  # what python_exec shows a model (3/4 head)
ELLIPSIS = "..."  # a one-line message cut at the limit: head (1, 1)
FEEDBACK_CHARS = 2000  # a grade's feedback field, and what crosses from a program's side

HALF = (1, 2)
THREE_QUARTERS = (3, 4)
TWO_THIRDS = (2, 3)
HEAD_ONLY = (1, 1)


def clip(text: str, limit: int, *, head: tuple[int, int] = TWO_THIRDS,
         note: str = CLIP_NOTE) -> str:
    """`text` cut to about `limit` characters around `note` (module contract).

    >>> clip("abcdefghij", 6)
    'abcd [... clipped ...] ij'
    >>> clip("abcdefghij", 4, head=HALF, note="<{cut}>")
    'ab<6>ij'
    >>> clip("a  long message", 6, head=HEAD_ONLY, note=ELLIPSIS)
    'a  lon...'
    """
    if limit <= 0 or len(text) <= limit:
        return text
    kept_head = max(1, limit * head[0] // head[1])
    kept_tail = 0 if head[0] >= head[1] else max(1, limit - kept_head)
    cut = len(text) - kept_head - kept_tail
    return text[:kept_head] + note.replace("{cut}", str(cut)) + text[len(text) - kept_tail:]


def clip_feedback(text: str, limit: int = FEEDBACK_CHARS) -> str:
    """A grade's feedback text: `text` if short enough, else its head and tail halves around
    a note saying how much was cut (`clip` with `HALF` and `FEEDBACK_NOTE`). Used on both
    sides of the grading boundary (the judge, and a program's own process)."""
    return clip(text, limit, head=HALF, note=FEEDBACK_NOTE)

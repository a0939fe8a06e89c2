"""What a probe is: a program, its problem, and what each grader must say about it.

A `Probe` names its problem, its program, and the expected outcome under the default grader as
`fail_at` (None = every test passes, else the index of the first failing test in
`public + private` order). `official` is None when the official grader must agree; a
`Divergence` otherwise, naming the documented class (see docs/grading.md) and the official
outcome. `slow` probes hit the 6 s time limit; at most two run unless LCB_SLOW_PROBES=1.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

PASS = None
READ_SUM = "n = int(input())\nnums = list(map(int, input().split()))\n"


@dataclass(frozen=True)
class Divergence:
    kind: str
    official_fail_at: int | None


@dataclass(frozen=True)
class Probe:
    name: str
    problem_id: str
    code: str
    fail_at: int | None
    official: Divergence | None = None
    slow: bool = False
    tags: tuple[str, ...] = field(default=())


def probe(name: str, problem, fail_at: int | None, code: str, **kw) -> Probe:
    """A probe of `problem` (its program dedented, ending with one newline)."""
    return Probe(name, problem.id, textwrap.dedent(code).strip("\n") + "\n", fail_at, **kw)


def diverges(kind: str, official_fail_at: int | None) -> Divergence:
    """The official grader's outcome for a probe of documented divergence class `kind`."""
    return Divergence(kind, official_fail_at)

"""Verdicts: the enum every test result carries, and how a process's unclean end becomes one.

Contract: `Verdict` values are the strings records carry. `INFRA` is not a verdict on the
program: grading itself failed (a host, judge or zygote lost, a slot that died or would not
start), on a retry too (`lcb.grading.pool`). `failure_verdict` classifies a program process
that timed out, failed or wrote too much (from its host's exit report, `lcb.sandbox.process.Exit`)
and `describe_exit` says how it ended, in words for feedback; both run in the judge.
The grade data (`TestOutcome`, `Feedback`, `Grade`) lives in `lcb.grading.grades`; feedback
text is clipped by `lcb.text.clip_feedback`. Stdlib only at run time.
"""

from __future__ import annotations

import signal
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lcb.sandbox.contain import Limits
    from lcb.sandbox.process import Exit

__all__ = ["Verdict", "describe_exit", "failure_verdict"]


class Verdict(StrEnum):
    PASSED = "passed"
    WRONG_ANSWER = "wrong_answer"
    TIME_LIMIT = "time_limit"
    RUNTIME_ERROR = "runtime_error"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    COMPILE_ERROR = "compile_error"
    INFRA = "infra"  # the grading infrastructure failed: no verdict on the program


def failure_verdict(ended: Exit, *, stdout_size: int, stderr_tail: str, limits: Limits,
                    oom: bool = False) -> Verdict:
    """The verdict of a program process that timed out, failed, or wrote too much."""
    if ended.timed_out or ended.signal == signal.SIGXCPU:
        return Verdict.TIME_LIMIT
    if stdout_size >= limits.output_bytes or ended.signal == signal.SIGXFSZ:
        return Verdict.OUTPUT_LIMIT
    last = stderr_tail.strip().rsplit("\n", 1)[-1]
    if oom or last.startswith("MemoryError"):
        return Verdict.MEMORY_LIMIT
    return Verdict.RUNTIME_ERROR


def describe_exit(ended: Exit, *, oom: bool = False) -> str:
    """How a program process ended, in words (for the feedback's error)."""
    if ended.timed_out:
        return "killed at the time limit"
    if oom:
        return "killed: its memory cgroup ran out (memfd, tmpfs or shared memory count too)"
    if ended.signal is not None:
        return f"killed by signal {signal.Signals(ended.signal).name}"
    return f"exit code {ended.exit_code}"

"""Before a batch: prove that the chosen grader and sandbox tier work here, or say why not.

`preflight(pool, grader=…)` grades two canary programs (a stdin one and a functional one; with
the official grader, the stdin one through LiveCodeBench's code too) in `pool`, and raises
`SandboxUnavailable` naming the tier and what went wrong unless both pass. `lcb run` calls it
before any model call, `lcb score` before it writes a result, so a tier that cannot run on this
machine (bubblewrap without the rights it needs, a kernel without what the tier relies on) stops
the run with a reason instead of recording "grading failed" for every problem.
Returns the pool's `isolation` (how programs are confined: uid, Landlock ABI, private /tmp,
memory cgroup), which runs record in their manifest.

Mid-run, the same proof is the slot's own start: a slot the pool starts to replace a lost one
must pass its zygote's checks (`lcb.sandbox.slot`). Once a slot of the pool has started, one
that fails to is an infrastructure failure of the programs it was meant for (`infra`, see
`lcb.grading.pool`), not a reason to stop the batch; before that, `SandboxUnavailable`.
"""

from __future__ import annotations

from lcb.data.problems import Mode, Problem, Test
from lcb.grading.pool import GradingError, GradingPool
from lcb.sandbox.launch import SandboxUnavailable

_STDIN = Problem(
    id="lcb-preflight-stdin", title="preflight", statement="", starter_code="", mode=Mode.STDIN,
    fn_name=None, public_tests=(), difficulty="easy", platform="lcb", contest_id="",
    contest_date="", private_tests=(Test(input="2 3\n", output="5\n", mode=Mode.STDIN),))
_FUNCTIONAL = Problem(
    id="lcb-preflight-functional", title="preflight", statement="",
    starter_code="class Solution:\n    def add(self, a: int, b: int) -> int:\n",
    mode=Mode.FUNCTIONAL, fn_name="add", public_tests=(), difficulty="easy", platform="lcb",
    contest_id="", contest_date="",
    private_tests=(Test(input="2\n3", output="5", mode=Mode.FUNCTIONAL),))
_CANARIES = (
    (_STDIN, "a, b = map(int, input().split())\nprint(a + b)\n", "default"),
    (_FUNCTIONAL, "class Solution:\n    def add(self, a, b):\n        return a + b\n", "default"),
    (_STDIN, "a, b = map(int, input().split())\nprint(a + b)\n", "official"),
)


def preflight(pool: GradingPool, *, grader: str = "default") -> dict:
    """Grade the canaries in `pool`; raise `SandboxUnavailable` unless they all pass."""
    for problem, program, mode in _CANARIES:
        if mode == "official" and grader != "official":
            continue
        what = f"the {pool.sandbox!r} sandbox ({mode} grader, {problem.mode} program)"
        try:
            grade = pool.grade_sync(problem, program, grader=mode, timeout_s=10.0)
        except GradingError as exc:
            raise SandboxUnavailable(f"{what} cannot grade here: {exc}") from None
        if grade.infra:  # failed twice for the machinery's sake, not the program's
            raise SandboxUnavailable(f"{what} cannot grade here: {grade.feedback.error}")
        if grade.em != 1:
            feedback = grade.feedback
            why = (f"{feedback.verdict.value}: {feedback.error or feedback.actual}"[:1500]
                   if feedback else "no verdict")
            raise SandboxUnavailable(f"{what} failed a program that is correct: {why}")
    return dict(pool.isolation)

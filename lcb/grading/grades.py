"""Grade data: per-test outcomes, first-failure feedback and the `Grade` of a program.

Contract: everything here is plain frozen data. `Grade.to_record()` gives the JSON-able fields a
run record carries (pass, total, pass_rate, em, tests_run, verdicts, feedback, grader, wall_s,
cpu_s). `em` is 1 only when every one of `total` tests passed, so a fail-fast grade (a prefix of
the tests) has em 0 as soon as one test fails. A grade with an outcome `Verdict.INFRA`
(`Grade.infra`) says grading failed, not the program: em 0, the feedback's error says what
failed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lcb.grading.verdicts import Verdict
from lcb.text import clip_feedback


@dataclass(frozen=True)
class TestOutcome:
    """The verdict of one test (`index` into the graded test list) and what it cost."""

    __test__ = False  # not a pytest test class

    index: int
    verdict: Verdict
    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Feedback:
    """The first failing test, for people and optimizers; each text is clipped."""

    test_index: int
    verdict: Verdict
    input: str
    expected: str
    actual: str
    error: str


@dataclass(frozen=True)
class Grade:
    """A program's grade on a problem; `outcomes` is a prefix of the tests when fail-fast."""

    outcomes: tuple[TestOutcome, ...]
    total: int
    passed: int
    em: int
    wall_s: float
    cpu_s: float
    feedback: Feedback | None
    grader: str

    @classmethod
    def from_outcomes(cls, outcomes: tuple[TestOutcome, ...], *, total: int,
                      feedback: Feedback | None, grader: str, wall_s: float) -> Grade:
        """Count passes and set `em` (1 iff all `total` tests ran and passed)."""
        passed = sum(o.verdict is Verdict.PASSED for o in outcomes)
        return cls(outcomes=outcomes, total=total, passed=passed,
                   em=int(total > 0 and passed == total), wall_s=wall_s,
                   cpu_s=sum(o.cpu_s for o in outcomes), feedback=feedback, grader=grader)

    @classmethod
    def infra_failure(cls, error: str, *, total: int, grader: str, wall_s: float = 0.0
                      ) -> Grade:
        """The grade of a program that grading never judged: one `INFRA` outcome at test 0."""
        feedback = Feedback(test_index=0, verdict=Verdict.INFRA, input="", expected="",
                            actual="", error=clip_feedback(error))
        return cls(outcomes=(TestOutcome(0, Verdict.INFRA, 0.0, 0.0),), total=total, passed=0,
                   em=0, wall_s=wall_s, cpu_s=0.0, feedback=feedback, grader=grader)

    @property
    def infra(self) -> bool:
        """True when grading failed on this program (an outcome is `Verdict.INFRA`)."""
        return any(o.verdict is Verdict.INFRA for o in self.outcomes)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def to_record(self) -> dict:
        return {
            "pass": self.passed,
            "total": self.total,
            "pass_rate": round(self.pass_rate, 6),
            "em": self.em,
            "tests_run": len(self.outcomes),
            "verdicts": [o.verdict.value for o in self.outcomes],
            "feedback": ({**asdict(self.feedback), "verdict": self.feedback.verdict.value}
                         if self.feedback else None),
            "grader": self.grader,
            "wall_s": round(self.wall_s, 4),
            "cpu_s": round(self.cpu_s, 4),
        }

"""The default grader: the judge's per-program driver, and the `Grade` the pool makes of it.

`run_default(zygote, request)` runs in a judge: it has the zygote fork a host for the program
(which compiles it once: a syntax error is COMPILE_ERROR for the whole program), runs the tests
through it (`stdin_mode.run_stdin` or `functional_mode.run_functional`), and returns plain
data: `{"results": per-test dicts, "compile_error": text or None, "wall_s"}`. A host lost
mid-program (the program, or anything else, killed or stopped it) has the zygote kill what is
left of it; the tests it left without a verdict end in one `Verdict.INFRA` outcome (the pool
grades the program again, and a host lost at the same test twice is the program's failure).
`run_official` does the same around `official.judge_official`.
In the pool's process, `check_default_run` checks the judge's answer field by field and
`grade_from_run(...)` turns it into the `Grade`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from lcb.grading.functional_mode import run_functional
from lcb.grading.stdin_mode import run_stdin
from lcb.grading.verdicts import Verdict
from lcb.sandbox.contain import Limits
from lcb.text import clip_feedback

if TYPE_CHECKING:
    from lcb.grading.grades import Feedback, Grade, TestOutcome
    from lcb.sandbox.judge import HostHandle, Zygote

_VERDICTS = frozenset(v.value for v in Verdict)


class Case(NamedTuple):
    """One test as the judge holds it (an `lcb.data.problems.Test` has the same two fields)."""

    input: str
    output: str


class GradingJob(NamedTuple):
    """One program to run on `tests`, as the judge holds it."""

    mode: str
    source: str
    tests: tuple[Case, ...]
    fn_name: str | None
    timeout_s: float
    all_tests: bool
    limits: Limits


def job_from_request(request: dict) -> GradingJob:
    """The request's fields, checked (a malformed request raises ValueError/TypeError/KeyError)."""
    mode = request["mode"]
    if mode not in ("stdin", "functional", "official"):
        raise ValueError(f"unknown mode {mode!r}")
    tests = tuple(Case(str(i), str(o)) for i, o in request["tests"])
    timeout = float(request["timeout_s"])
    if not timeout > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout}")
    return GradingJob(mode, str(request["source"]), tests, request.get("fn_name"), timeout,
               bool(request["all_tests"]), Limits(**request["limits"]))


def _with_host(zygote: Zygote, job: GradingJob, use: Callable[[HostHandle], dict]) -> dict:
    host = zygote.open_host(source=job.source, mode=job.mode, fn_name=job.fn_name,
                            limits=job.limits)
    try:
        if "setup_error" in host.hello:
            host.lost = True
            raise RuntimeError(f"the program's host could not start: {host.hello['setup_error']}")
        return use(host)
    finally:
        host.close()
        if host.lost:
            zygote.abort()


def run_default(zygote: Zygote, request: dict) -> dict:
    job = job_from_request(request)
    started = time.monotonic()

    def use(host: HostHandle) -> dict:
        if "compile_error" in host.hello:
            return {"results": [], "compile_error": str(host.hello["compile_error"])}
        run = run_stdin if job.mode == "stdin" else run_functional
        return {"results": list(run(host, job)), "compile_error": None}

    answer = _with_host(zygote, job, use)
    return {**answer, "wall_s": time.monotonic() - started}


def run_official(zygote: Zygote, request: dict, judge: Callable[..., dict]) -> dict:
    job = job_from_request({**request, "mode": "official"})
    return _with_host(zygote, job, lambda host: judge(
        host, job.tests, job.fn_name, timeout_s=max(1, round(job.timeout_s)),
        all_tests=job.all_tests))


def number(value: Any) -> float:
    """`value` as a float: a non-negative int or float (not a bool), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"not a non-negative number: {value!r}")
    return float(value)


def check_default_run(run: Any, n_tests: int) -> dict:
    """A default-grader answer, field by field (ValueError/TypeError/KeyError if malformed)."""
    results = []
    for raw in run["results"]:
        index = raw["i"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n_tests:
            raise ValueError(f"test index {index!r} out of range")
        if raw["v"] not in _VERDICTS:
            raise ValueError(f"unknown verdict {raw['v']!r}")
        result = {"i": index, "v": raw["v"], "wall": number(raw["wall"]),
                  "cpu": number(raw["cpu"])}
        for key in ("actual", "error"):
            if key in raw:
                result[key] = clip_feedback(str(raw[key]))
        results.append(result)
    error = run["compile_error"]
    if error is not None and not isinstance(error, str):
        raise TypeError("compile_error is not text")
    return {"results": results, "compile_error": error, "wall_s": number(run["wall_s"])}


def grade_from_run(run: dict, *, tests: Sequence[Case], all_tests: bool) -> Grade:
    """The `Grade` of a `run_default` answer (checked by `check_default_run`) on the same
    `tests`."""
    from lcb.grading.grades import Grade, TestOutcome

    if run["compile_error"] is not None:
        outcome = TestOutcome(0, Verdict.COMPILE_ERROR, 0.0, 0.0)
        failure = {"i": 0, "v": Verdict.COMPILE_ERROR, "error": run["compile_error"]}
        return Grade.from_outcomes((outcome,), total=len(tests), grader="default",
                                   feedback=_feedback(tests, failure), wall_s=run["wall_s"])
    outcomes, failure = _outcomes(tests, run["results"], all_tests=all_tests)
    return Grade.from_outcomes(tuple(outcomes), total=len(tests), grader="default",
                               feedback=_feedback(tests, failure), wall_s=run["wall_s"])


def _outcomes(tests: Sequence[Case], results: list[dict], *, all_tests: bool
              ) -> tuple[list[TestOutcome], dict | None]:
    """Per-test outcomes in order, and the raw result of the first failure (if any)."""
    from lcb.grading.grades import TestOutcome

    outcomes: list[TestOutcome] = []
    first_failure = None
    for result in results:
        verdict = Verdict(result["v"])
        outcomes.append(TestOutcome(int(result["i"]), verdict, float(result["wall"]),
                                    float(result["cpu"])))
        if verdict is not Verdict.PASSED and first_failure is None:
            first_failure = result
    stopped = (first_failure is not None and not all_tests) or (
        bool(outcomes) and outcomes[-1].verdict is Verdict.INFRA)
    if len(outcomes) < len(tests) and not stopped:  # the host was lost mid-run: not a verdict
        index = outcomes[-1].index + 1 if outcomes else 0
        first_failure = first_failure or {"i": index, "v": Verdict.INFRA,
                                          "error": "the program's host stopped answering"}
        outcomes.append(TestOutcome(index, Verdict.INFRA, 0.0, 0.0))
    return outcomes, first_failure


def _feedback(tests: Sequence[Case], failure: dict | None) -> Feedback | None:
    from lcb.grading.grades import Feedback

    if failure is None:
        return None
    test = tests[int(failure["i"])] if tests else Case("", "")
    return Feedback(test_index=int(failure["i"]), verdict=Verdict(failure["v"]),
                    input=clip_feedback(test.input), expected=clip_feedback(test.output),
                    actual=clip_feedback(str(failure.get("actual", ""))),
                    error=clip_feedback(str(failure.get("error", ""))))

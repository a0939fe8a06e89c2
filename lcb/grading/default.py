"""The default grader's per-program driver; it runs inside a grading worker.

`run_in_worker(...)` compiles the program once (a syntax error is COMPILE_ERROR for the whole
program), makes a pids cgroup for it when it can, forks the disposable supervisor
(`lcb.grading.supervisor`) that runs the tests, reads its per-test JSON lines under an overall
deadline, then kills everything the program left behind (cgroup members and, as a subreaper,
every descendant) before it returns the raw results. `grade_from_run(...)`, in the caller's
process, turns them into the `Grade` (`grade_in_worker` does both, for in-process use).
"""

from __future__ import annotations

import json
import os
import select
import signal
import time
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lcb.grading.child import SCRIPT_FILE
from lcb.grading.contain import Limits, PidsJail, kill_descendants, worker_jail
from lcb.grading.prelude import compile_after_prelude
from lcb.grading.process import Case, make_workdir, remove_tree
from lcb.grading.supervisor import Job, supervise
from lcb.grading.verdicts import Verdict, clip

if TYPE_CHECKING:
    from lcb.grading.grades import Feedback, Grade, TestOutcome


def compile_program(source: str) -> types.CodeType | str:
    """The code object, or the error text when the program (after the prelude) cannot compile
    (see `prelude.compile_after_prelude`: a `from __future__` import is a syntax error)."""
    try:
        return compile_after_prelude(source, SCRIPT_FILE)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _budget_s(job: Job) -> float:
    return (job.timeout_s + 2.0) * max(1, len(job.tests)) + 5.0


def _collect(read_end: int, pid: int, budget_s: float) -> list[dict]:
    """Every JSON line the supervisor writes until it exits or the budget runs out."""
    deadline, buf = time.monotonic() + budget_s, b""
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([read_end], [], [], left)[0]:
            continue
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        buf += chunk
    else:
        os.kill(pid, signal.SIGKILL)
    results = []
    for line in buf.splitlines():
        try:
            results.append(json.loads(line))
        except ValueError:
            break
    return results


def run_job(job: Job) -> tuple[list[dict], float]:
    """Run the job under a fresh supervisor; return its results and the wall time.

    In a worker the program runs in the worker's own jail (`contain.worker_jail`); elsewhere
    (in-process use) in a fresh jail per program when cgroups allow.
    """
    jail = worker_jail()
    fresh = None if jail is not None else PidsJail.create(max_tasks=job.limits.max_tasks)
    workdir = make_workdir()
    read_end, write_end = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        if fresh is not None:
            fresh.add(os.getpid())
        supervise(job, write_end, workdir)
    os.close(write_end)
    try:
        results = _collect(read_end, pid, _budget_s(job))
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)  # it is exiting (EOF) or was killed: reap before sweeping its jail
        for group in (jail, fresh):
            if group is not None:
                group.kill_all(spare=os.getpid())
        kill_descendants()
        if fresh is not None:
            fresh.remove()
        remove_tree(workdir)
    return results, time.monotonic() - started


def run_in_worker(*, source: str, mode: str, tests: Sequence[Case], fn_name: str | None,
                  all_tests: bool, timeout_s: float, limits: Limits) -> dict:
    """Run `source` on `tests` (see module docstring); called in a worker process.

    Returns plain data for `grade_from_run` (which the caller runs: the grade dataclasses are
    not loaded in workers): {"results": per-test dicts, "compile_error": text or None,
    "wall_s": seconds}.
    """
    started = time.monotonic()
    code = compile_program(source)
    if isinstance(code, str):
        return {"results": [], "compile_error": code, "wall_s": time.monotonic() - started}
    job = Job(mode=mode, code=code, source=source, tests=tuple(tests), fn_name=fn_name,
              timeout_s=timeout_s, all_tests=all_tests, limits=limits)
    results, _ = run_job(job) if tests else ([], 0.0)
    return {"results": results, "compile_error": None, "wall_s": time.monotonic() - started}


def grade_from_run(run: dict, *, tests: Sequence[Case], all_tests: bool) -> Grade:
    """The `Grade` of a `run_in_worker` answer on the same `tests`."""
    from lcb.grading.grades import Grade, TestOutcome

    if run["compile_error"] is not None:
        outcome = TestOutcome(0, Verdict.COMPILE_ERROR, 0.0, 0.0)
        failure = {"i": 0, "v": Verdict.COMPILE_ERROR, "error": run["compile_error"]}
        return Grade.from_outcomes((outcome,), total=len(tests), grader="default",
                                   feedback=_feedback(tests, failure), wall_s=run["wall_s"])
    outcomes, failure = _outcomes(tests, run["results"], all_tests=all_tests)
    return Grade.from_outcomes(tuple(outcomes), total=len(tests), grader="default",
                               feedback=_feedback(tests, failure), wall_s=run["wall_s"])


def grade_in_worker(*, tests: Sequence[Case], all_tests: bool, **kwargs) -> Grade:
    """`run_in_worker` and `grade_from_run` in one call (in-process use and tests)."""
    return grade_from_run(run_in_worker(tests=tests, all_tests=all_tests, **kwargs),
                          tests=tests, all_tests=all_tests)


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
    stopped = first_failure is not None and not all_tests
    if len(outcomes) < len(tests) and not stopped:  # the supervisor died mid-run
        index = outcomes[-1].index + 1 if outcomes else 0
        first_failure = first_failure or {"i": index, "v": Verdict.RUNTIME_ERROR,
                                          "error": "the program's supervisor was killed"}
        outcomes.append(TestOutcome(index, Verdict.RUNTIME_ERROR, 0.0, 0.0))
    return outcomes, first_failure


def _feedback(tests: Sequence[Case], failure: dict | None) -> Feedback | None:
    from lcb.grading.grades import Feedback

    if failure is None:
        return None
    test = tests[int(failure["i"])] if tests else Case("", "")
    return Feedback(test_index=int(failure["i"]), verdict=Verdict(failure["v"]),
                    input=clip(test.input), expected=clip(test.output),
                    actual=clip(str(failure.get("actual", ""))),
                    error=clip(str(failure.get("error", ""))))

"""The default grader's per-program driver; it runs inside a grading worker.

`grade_in_worker(...)` compiles the program once (a syntax error is COMPILE_ERROR for the whole
program), makes a pids cgroup for it when it can, forks the disposable supervisor
(`lcb.grading.supervisor`) that runs the tests, reads its per-test JSON lines under an overall
deadline, then kills everything the program left behind (cgroup members and, as a subreaper,
every descendant) before it returns the `Grade`.
"""

from __future__ import annotations

import ast
import json
import os
import select
import shutil
import signal
import time
import types

from lcb.grading.child import SCRIPT_FILE
from lcb.grading.contain import Limits, PidsJail, kill_descendants
from lcb.grading.process import make_workdir
from lcb.grading.supervisor import Job, supervise
from lcb.grading.verdicts import Feedback, Grade, TestOutcome, Verdict, clip
from lcb.problems import Mode, Test

_FUTURE_ERROR = "from __future__ imports must occur at the beginning of the file"


def compile_program(source: str) -> types.CodeType | str:
    """The code object, or the error text when the program (after the prelude) cannot compile.

    The prelude is prepended as LiveCodeBench does, so `from __future__` imports, legal at the
    top of a program alone, are a syntax error here just as they are in the official grader.
    """
    try:
        tree = ast.parse(source, SCRIPT_FILE)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                raise SyntaxError(_FUTURE_ERROR, (SCRIPT_FILE, node.lineno, 1, ""))
        return compile(tree, SCRIPT_FILE, "exec")
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
    """Run the job under a fresh supervisor; return its results and the wall time."""
    jail = PidsJail.create(max_tasks=job.limits.max_tasks)
    workdir = make_workdir()
    read_end, write_end = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        if jail is not None:
            jail.add(os.getpid())
        supervise(job, write_end, workdir)
    os.close(write_end)
    try:
        results = _collect(read_end, pid, _budget_s(job))
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)  # it is exiting (EOF) or was killed: reap before sweeping its jail
        if jail is not None:
            jail.kill_all()
        kill_descendants()
        if jail is not None:
            jail.remove()
        shutil.rmtree(workdir, ignore_errors=True)
    return results, time.monotonic() - started


def _outcomes(job: Job, results: list[dict]) -> tuple[list[TestOutcome], dict | None]:
    """Per-test outcomes in order, and the raw result of the first failure (if any)."""
    outcomes: list[TestOutcome] = []
    first_failure = None
    for result in results:
        verdict = Verdict(result["v"])
        outcomes.append(TestOutcome(int(result["i"]), verdict, float(result["wall"]),
                                    float(result["cpu"])))
        if verdict is not Verdict.PASSED and first_failure is None:
            first_failure = result
    stopped = first_failure is not None and not job.all_tests
    if len(outcomes) < len(job.tests) and not stopped:  # the supervisor died mid-run
        index = outcomes[-1].index + 1 if outcomes else 0
        first_failure = first_failure or {"i": index, "v": Verdict.RUNTIME_ERROR,
                                          "error": "the program's supervisor was killed"}
        outcomes.append(TestOutcome(index, Verdict.RUNTIME_ERROR, 0.0, 0.0))
    return outcomes, first_failure


def _feedback(tests: tuple[Test, ...], failure: dict | None) -> Feedback | None:
    if failure is None:
        return None
    test = tests[int(failure["i"])] if tests else Test("", "", Mode.STDIN)
    return Feedback(test_index=int(failure["i"]), verdict=Verdict(failure["v"]),
                    input=clip(test.input), expected=clip(test.output),
                    actual=clip(str(failure.get("actual", ""))),
                    error=clip(str(failure.get("error", ""))))


def grade_in_worker(*, source: str, mode: Mode, tests: tuple[Test, ...], fn_name: str | None,
                    all_tests: bool, timeout_s: float, limits: Limits) -> Grade:
    """Grade `source` on `tests` (see module docstring). Called in a worker process."""
    started = time.monotonic()
    code = compile_program(source)
    if isinstance(code, str):
        outcome = TestOutcome(0, Verdict.COMPILE_ERROR, 0.0, 0.0)
        failure = {"i": 0, "v": Verdict.COMPILE_ERROR, "error": code}
        return Grade.from_outcomes((outcome,), total=len(tests), grader="default",
                                   feedback=_feedback(tests, failure),
                                   wall_s=time.monotonic() - started)
    job = Job(mode=mode, code=code, source=source, tests=tests, fn_name=fn_name,
              timeout_s=timeout_s, all_tests=all_tests, limits=limits)
    results, _ = run_job(job) if tests else ([], 0.0)
    outcomes, failure = _outcomes(job, results)
    return Grade.from_outcomes(tuple(outcomes), total=len(tests), grader="default",
                               feedback=_feedback(tests, failure),
                               wall_s=time.monotonic() - started)

"""Infrastructure failures are not verdicts (issue #21, item 8), one property each.

A lost host, a dead judge or a slot that will not start is graded again once on a fresh slot;
failing again, the program's grade has the verdict `infra` (never `time_limit`), and records,
summaries and `--retry-errors` keep it apart from the model's failures. A host lost at the same
test on both tries is the program's doing (its host is its side; red-team findings F1-F3 were
ways to do it): that test is its `runtime_error`. Tests that grade run inside a pids-cgroup
guard and check that nothing of a graded program survives.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from cgroup_guard import pids_guard
from helpers_grading import SUM_STDIN, stdin_problem
from rich.console import Console

from lcb.grading import Grade, GradingPool, Verdict
from lcb.runs.records import read_records, summarize
from lcb.runs.tables import print_summary
from tests.scripted_server import scripted_fixture  # noqa: F401

GUARD_PIDS = 400
ONE_TEST = stdin_problem(("1 2\n", "3\n"))
SUM_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
# Names itself (the kernel's comm, 15 bytes) so the test can find its process, then takes a
# while before it answers: long enough to be found and stopped from outside.
NAMED_AND_SLOW = """\
import ctypes, time
ctypes.CDLL(None).prctl(15, b"{name}", 0, 0, 0)
time.sleep(2.0)
a, b = map(int, input().split())
print(a + b)
"""
KILLS_ITS_HOST = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(3)\n"


def guarded(fn, *args, timeout_s: float = 120.0):
    """`fn(*args)` in a child inside a fresh pids guard; nothing may survive it."""
    with pids_guard(max_pids=GUARD_PIDS) as guard:
        result = guard.call(fn, *args, timeout_s=timeout_s)
        assert guard.survivors(settle_s=5.0) == [], "a process outlived the grading"
    return result


def _named(name: str, deadline_s: float = 30.0, *, skip: tuple[int, ...] = ()) -> int | None:
    """The pid of a live process whose comm is `name` (not one of `skip`), polled until
    `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            try:
                if (entry.isdigit() and int(entry) not in skip
                        and Path(f"/proc/{entry}/comm").read_text().strip() == name):
                    return int(entry)
            except OSError:
                continue
        time.sleep(0.005)  # polling /proc for the program, not waiting for an outcome
    return None


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def _counting(pool: GradingPool) -> list[int]:
    """Count the pool's tries (one per slot a program is graded on)."""
    tries: list[int] = []
    attempt = getattr(pool, "_attempt", None)
    if attempt is None:  # a pool without tries to count (the code before this change)
        return tries

    def counted(*args):
        tries.append(1)
        return attempt(*args)

    pool._attempt = counted
    return tries


def _break(target: str, times: int = 1):
    """Grade a slow program; each time its process shows up (`times` tries in all), stop it and
    kill, from outside, `target`: its host (the program's parent) or the slot's judge."""
    name = f"v{uuid.uuid4().hex[:12]}"
    with GradingPool(1) as pool:
        pool.grade_sync(ONE_TEST, SUM_OK)  # the slot is up
        [judge] = pool.worker_pids()
        tries = _counting(pool)
        killed: list[int] = []

        def breaker() -> None:
            seen: list[int] = []
            for _ in range(times):
                pid = _named(name, skip=tuple(seen))
                if pid is None:
                    return
                seen.append(pid)
                victim = _parent(pid) if target == "host" else max(pool.worker_pids())
                os.kill(pid, signal.SIGSTOP)  # this try must not finish on its own
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)

        thread = threading.Thread(target=breaker)
        thread.start()
        grade = pool.grade_sync(ONE_TEST, NAMED_AND_SLOW.format(name=name), timeout_s=10.0)
        thread.join()
        fresh = pool.worker_pids() not in ([], [judge])
    return grade, killed, len(tries), fresh


@pytest.mark.slow
def test_a_host_killed_from_outside_is_graded_again_on_a_fresh_slot():
    grade, killed, tries, fresh = guarded(_break, "host")
    assert len(killed) == 1, "the program's host was never found"
    assert (grade.em, [o.verdict for o in grade.outcomes]) == (1, [Verdict.PASSED])
    assert tries == 2 and fresh


@pytest.mark.slow
def test_a_judge_killed_mid_call_is_retried_and_the_program_gets_its_real_verdict():
    grade, killed, tries, fresh = guarded(_break, "judge")
    assert len(killed) == 1, "the program never ran"
    assert (grade.em, [o.verdict for o in grade.outcomes]) == (1, [Verdict.PASSED])
    assert tries == 2 and fresh


@pytest.mark.slow
def test_a_host_lost_at_the_same_test_on_two_slots_is_the_programs_runtime_error():
    # Both tries lose their host at test 0, on two slots: lcb cannot tell who did it, and a
    # program can (red-team F1-F3), so it is the program's failure, never a time limit.
    grade, killed, tries, _ = guarded(_break, "host", 2)
    assert len(killed) == 2, "the program's host was not found on both tries"
    assert [o.verdict.value for o in grade.outcomes] == ["runtime_error"] and not grade.infra
    assert tries == 2
    assert (grade.em, grade.passed, grade.total) == (0, 0, 1)
    assert grade.feedback.verdict is Verdict.RUNTIME_ERROR and grade.feedback.input == "1 2\n"
    assert "lost at test 0 on two slots" in grade.feedback.error


@pytest.mark.slow
def test_a_judge_lost_twice_is_infra_never_a_time_limit():
    # Both tries lose the slot's judge: grading never judged the program.
    grade, killed, tries, _ = guarded(_break, "judge", 2)
    assert len(killed) == 2 and killed[0] != killed[1], "the program never ran on both slots"
    assert [o.verdict.value for o in grade.outcomes] == ["infra"] and grade.infra
    assert tries == 2
    assert (grade.em, grade.passed, grade.total) == (0, 0, 1)
    assert grade.feedback.verdict is Verdict.INFRA and "failed twice" in grade.feedback.error


def _lost_at(*indices: int | None):
    """Grade on a pool whose tries are scripted: a host lost at each index (None: the judge
    died); the pool's own decision is what is under test."""
    from lcb.grading.grades import TestOutcome

    script = list(indices)

    def attempt(request, budget, finish):
        index = script.pop(0)
        if index is None:
            return "the grading worker died or misbehaved: SlotGone: scripted"
        outcomes = [TestOutcome(i, Verdict.PASSED, 0.1, 0.1) for i in range(index)]
        outcomes.append(TestOutcome(index, Verdict.INFRA, 0.0, 0.0))
        return Grade.from_outcomes(tuple(outcomes), total=3, feedback=None, grader="default",
                                   wall_s=0.3)

    with GradingPool(1) as pool:
        pool._attempt = attempt
        return pool.grade_sync(SUM_STDIN, SUM_OK)


@pytest.mark.parametrize("indices", [(1, 2), (2, 1), (1, None), (None, 1), (None, None)])
def test_a_host_lost_at_different_tests_or_once_stays_infra(indices):
    grade = guarded(_lost_at, *indices)
    assert [o.verdict.value for o in grade.outcomes] == ["infra"] and grade.infra
    assert "failed twice" in grade.feedback.error


def test_a_host_lost_at_the_same_test_keeps_the_tests_before_it():
    grade = guarded(_lost_at, 2, 2)
    assert [o.verdict.value for o in grade.outcomes] == ["passed", "passed", "runtime_error"]
    assert (grade.passed, grade.em, grade.feedback.test_index) == (2, 0, 2)
    assert grade.feedback.input == "-5 5\n" and "lost at test 2 on two slots" in (
        grade.feedback.error)


def _kills_its_host():
    with GradingPool(1) as pool:
        tries = _counting(pool)
        grade = pool.grade_sync(SUM_STDIN, KILLS_ITS_HOST)
    return grade, len(tries)


def test_a_program_cannot_kill_its_host_to_be_left_out():
    # Otherwise a program could turn its own failure into `infra` (left out of the graded-only
    # pass@1, refunded in an optimizer): its process sits in a Landlock domain nested in its
    # host's, so the signal is refused and the program fails on its own account.
    from lcb.sandbox import landlock

    if landlock.abi() < 6:
        pytest.skip("Landlock signal scoping needs ABI 6 (Linux 6.12)")
    grade, tries = guarded(_kills_its_host)
    assert [o.verdict.value for o in grade.outcomes] == ["runtime_error"] and tries == 1
    assert "PermissionError" in grade.feedback.error


def _replacement_will_not_start():
    import lcb.grading.pool as pool_module
    from lcb.sandbox.slot import SlotFailed

    with GradingPool(1) as pool:
        before = pool.grade_sync(ONE_TEST, SUM_OK)

        def refuse(sandbox, *, judge):
            raise SlotFailed("scripted: the tier's checks failed on this start")

        pool_module.Slot.start = refuse  # this child only (the guard forked it)
        [judge] = pool.worker_pids()
        os.kill(judge, signal.SIGKILL)  # the next call needs a new slot
        tries = _counting(pool)
        grade = pool.grade_sync(ONE_TEST, SUM_OK)
    return before.em, grade, len(tries)


def test_a_slot_that_will_not_start_mid_run_is_infra_not_an_exception():
    before, grade, tries = guarded(_replacement_will_not_start)
    assert before == 1
    assert [o.verdict.value for o in grade.outcomes] == ["infra"]
    assert "would not start" in grade.feedback.error and tries == 2


def test_the_summary_counts_infra_apart_with_both_pass_at_1():
    from lcb.runs.records import is_infra

    infra = Grade.infra_failure("the program's host went away", total=4, grader="default")
    rows = [{"id": "a", "em": 1, "verdicts": ["passed"]},
            {"id": "b", "em": 0, "verdicts": ["wrong_answer"]},
            {"id": "c", "em": 0, "error": "grading failed (infra)", **infra.to_record()},
            {"id": "d", "em": 0, "predicted_code": None, "verdicts": []}]
    summary = summarize(rows)
    assert [is_infra(r) for r in rows] == [False, False, True, False]
    assert (summary["n_infra"], summary["n_errors"]) == (1, 1)
    assert summary["em"] == 0.25  # as LiveCodeBench counts: a failure
    assert summary["em_graded"] == 1 / 3  # over the programs grading judged
    console = Console(file=io.StringIO(), width=200)
    print_summary(summary, console=console)
    printed = console.file.getvalue()
    assert "graded (infra left out)" in printed and "infra 1" in printed


def test_an_infra_grade_becomes_an_error_line_that_keeps_its_verdict():
    from lcb.data.datasets import load_problems
    from lcb.runs.scoring import ScoreConfig, _score_one, parse_line, summarize_scores

    problem = load_problems("sample").problems[0]

    class LostHosts:
        async def grade(self, problem, code, **_):
            return Grade.infra_failure("the program's host went away", grader="default",
                                       total=len(problem.hidden_tests))

    prediction = parse_line(f'{{"id": "{problem.id}", "code": "print(1)"}}', 1)
    line = asyncio.run(_score_one(LostHosts(), prediction, {problem.id: problem},
                                  ScoreConfig()))
    assert line["verdicts"] == ["infra"] and line["em"] == 0
    assert "line 1" in line["error"] and "infra" in line["error"]
    summary = summarize_scores([line])
    assert (summary["n_infra"], summary["n"], summary["em_graded"]) == (1, 1, 0.0)


@pytest.mark.slow
def test_retry_errors_reruns_an_infra_record(scripted, tmp_path, monkeypatch):
    from helpers_runner import RIGHT, problem_ids, run_config, script, write_problems

    import lcb.runs.runner as runner
    from lcb.runs.runner import run_batch

    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    out = tmp_path / "out"

    class LosesTheFirst(GradingPool):
        """A real pool whose grading of the first id is lost (as twice in a real pool)."""

        async def grade(self, problem, code, **kwargs):
            if problem.id == ids[0]:
                return Grade.infra_failure("the program's host went away", grader="default",
                                           total=len(problem.hidden_tests))
            return await super().grade(problem, code, **kwargs)

    def batch(config):
        return asyncio.run(run_batch(config, stream=io.StringIO(), plain=True))

    server = scripted(script({qid: [RIGHT, RIGHT] for qid in ids}))
    monkeypatch.setattr(runner, "GradingPool", LosesTheFirst)
    first = batch(run_config(server.base_url, data, out))
    assert (first["n_infra"], first["em"], first["em_graded"]) == (1, 0.5, 1.0)
    monkeypatch.setattr(runner, "GradingPool", GradingPool)
    second = batch(run_config(server.base_url, data, out, resume=True, retry_errors=True))
    records = {r["id"]: r for r in read_records(out / "predictions.jsonl")}
    assert records[ids[0]]["em"] == 1 and second["n_infra"] == 0 and second["em"] == 1.0
    [aside] = read_records(out / "predictions.errors.jsonl")
    assert aside["id"] == ids[0] and aside["verdicts"] == ["infra"] and aside["error"]

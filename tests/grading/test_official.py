"""The `official` grading mode: result mapping, test order, watchdog and containment."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers_grading import make_problem

from lcb.data.problems import Mode
from lcb.data.problems import Test as Case
from lcb.grading import GradingPool
from lcb.grading.official import (
    ChildRun,
    OfficialGraderMissing,
    Segment,
    grade_official,
    official_tests,
    require_official,
    to_grade,
)
from lcb.grading.verdicts import Verdict
from tests.cgroup_guard import pids_guard
from tests.probes.problems import MINMAX, SUM

SUM_OK = "input()\nprint(sum(map(int, input().split())))\n"
TESTS4 = tuple(Case(input=f"{i}", output=f"{i}", mode=Mode.STDIN) for i in range(4))


def _run(segments, *, killed: bool = False) -> ChildRun:
    return ChildRun(segments=segments, killed=killed, wall_s=0.5, cpu_s=0.25)


def _verdicts(grade) -> list[str]:
    return [o.verdict.value for o in grade.outcomes]


def test_all_passed_maps_to_em_1():
    grade = to_grade(_run([Segment(0, (1, 1, 1, 1), {})]), TESTS4, SUM_OK)
    assert (grade.passed, grade.total, grade.em, grade.grader) == (4, 4, 1, "official")
    assert grade.feedback is None and (grade.wall_s, grade.cpu_s) == (0.5, 0.25)


def test_wrong_answer_prefix_keeps_index_and_output():
    meta = {"output": "41", "error_code": -2, "error_message": "Wrong answer at line 0"}
    grade = to_grade(_run([Segment(0, (1, 1, -2), meta)]), TESTS4, SUM_OK)
    assert _verdicts(grade) == ["passed", "passed", "wrong_answer"]
    assert (grade.passed, grade.total, grade.em) == (2, 4, 0)
    assert grade.feedback.test_index == 2 and grade.feedback.actual == "41"
    assert grade.feedback.input == "2" and "Wrong answer" in grade.feedback.error


@pytest.mark.parametrize(("code", "meta", "program", "verdict"), [
    (-3, {"error": "TimeoutException()"}, SUM_OK, Verdict.TIME_LIMIT),
    (-4, {"error": "MemoryError()"}, SUM_OK, Verdict.MEMORY_LIMIT),
    (-4, {"error": "ZeroDivisionError('x')"}, SUM_OK, Verdict.RUNTIME_ERROR),
    (-4, {"error_message": "Error during testing: invalid syntax"}, "def f(:\n",
     Verdict.COMPILE_ERROR),
    (-4, {"error_message": "Error during testing: no attribute"}, SUM_OK, Verdict.RUNTIME_ERROR),
    (-2, {}, SUM_OK, Verdict.WRONG_ANSWER),
    (-1, {}, SUM_OK, Verdict.RUNTIME_ERROR),
])
def test_error_codes_map_to_verdicts(code, meta, program, verdict):
    grade = to_grade(_run([Segment(0, (code,), meta)]), TESTS4, program)
    assert grade.outcomes[0].verdict is verdict and grade.feedback.verdict is verdict


@pytest.mark.parametrize(("killed", "verdict"), [(True, Verdict.TIME_LIMIT),
                                                  (False, Verdict.RUNTIME_ERROR)])
def test_no_result_is_a_whole_program_failure_at_test_0(killed, verdict):
    grade = to_grade(_run(None, killed=killed), TESTS4, SUM_OK)
    assert _verdicts(grade) == [verdict.value] and grade.em == 0 and grade.total == 4
    assert grade.feedback.test_index == 0 and grade.feedback.error


@pytest.mark.parametrize("segments", [
    [[0, [1, 1, 1], {}]] * 5,                 # overlapping: 15 codes for 4 tests
    [[0, [1], {}], [2, [1, 1], {}]],          # a gap
    [[1, [1, 1, 1], {}]],                     # not from test 0
    [[0, [1, 1, 1, 1, 1], {}]],               # past the last test
])
def test_a_result_official_code_cannot_have_written_counts_as_none(segments):
    run = ChildRun.from_answer({"segments": segments, "killed": False, "wall_s": 0.1,
                                "cpu_s": 0.1}, 4)
    grade = to_grade(run, TESTS4, SUM_OK)
    assert run.segments is None and grade.passed == 0 and len(grade.outcomes) == 1


def test_all_tests_segments_cover_every_test():
    segments = [Segment(0, (1, -2), {"output": "x"}), Segment(2, (-4,), {"error": "E"}),
                Segment(3, (1,), {})]
    grade = to_grade(_run(segments), TESTS4, SUM_OK)
    assert [o.index for o in grade.outcomes] == [0, 1, 2, 3]
    assert _verdicts(grade) == ["passed", "wrong_answer", "runtime_error", "passed"]
    assert grade.passed == 2 and grade.feedback.test_index == 1
    json.dumps(grade.to_record())


def test_official_order_is_public_then_private():
    assert official_tests(SUM) == SUM.public_tests + SUM.private_tests
    only_public_wrong = "n = int(input())\nprint(0 if n == 3 else sum(map(int, input().split())))"
    grade = grade_official(SUM, only_public_wrong)
    assert _verdicts(grade) == ["wrong_answer"] and grade.total == 5


def test_real_run_passes_and_fails_fast():
    assert grade_official(SUM, SUM_OK).em == 1
    late = "n = int(input())\nprint(sum(map(int, input().split())) + (n == 5))"
    assert _verdicts(grade_official(SUM, late)) == ["passed"] * 3 + ["wrong_answer"]


def test_all_tests_restarts_after_each_failure():
    code = "class Solution:\n    def minMax(self, nums):\n        return [min(nums), len(nums)]\n"
    grade = grade_official(MINMAX, code, all_tests=True)
    assert _verdicts(grade) == ["passed", "wrong_answer", "wrong_answer", "wrong_answer"]
    assert grade.passed == 1 and len(grade.outcomes) == grade.total == 4


def test_official_grader_runs_under_bwrap_too():
    assert grade_official(SUM, SUM_OK, sandbox="bwrap").em == 1
    late = "n = int(input())\nprint(sum(map(int, input().split())) + (n == 5))"
    assert _verdicts(grade_official(SUM, late, sandbox="bwrap")) == ["passed"] * 3 + [
        "wrong_answer"]


def test_importing_livecodebench_leaves_the_process_int_limit_as_it_was():
    # Its metrics module raises the int-to-str digit limit to 50000 at import; lcb's process
    # keeps its own, so a predictions line with a 5000-digit int is refused, not written back.
    code = ("import sys\nsys.set_int_max_str_digits(4321)\n"
            "from lcb.grading.official import require_official\nrequire_official()\n"
            "import livecodebench.evaluation.compute_code_generation_metrics\n"
            "print(sys.get_int_max_str_digits())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "4321\n"), done.stderr


def test_each_grader_converts_long_integers_with_its_own_limit():
    # The official program process has LiveCodeBench's limit (its import set 50000 for the
    # processes that grade); a default-graded one Python's 4300, as under `python prog.py`,
    # also on a slot whose zygote has imported LiveCodeBench for an official grade before.
    code = ('big = int("1" + "0" * 4400)\ninput()\n'
            "print(sum(map(int, input().split())) + big - big)\n")
    with GradingPool(1) as pool:
        official = pool.grade_sync(SUM, code, grader="official")
        default = pool.grade_sync(SUM, code)
    assert official.em == 1
    assert _verdicts(default) == ["runtime_error"]
    assert "Exceeds the limit (4300 digits)" in default.feedback.error


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "livecodebench.evaluation", None)
    with pytest.raises(OfficialGraderMissing, match="pip install --no-deps nvidia-livecodebench"):
        require_official()
    with pytest.raises(OfficialGraderMissing):
        grade_official(SUM, SUM_OK)


@pytest.mark.slow
def test_program_ignoring_sigalrm_is_killed_by_the_watchdog():
    code = ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "while True:\n    pass\n")
    started = time.monotonic()
    grade = grade_official(SUM, code, timeout_s=1)
    assert _verdicts(grade) == ["time_limit"]
    assert time.monotonic() - started < 5.0  # timeout + 1 s, far below the global 17 s


@pytest.mark.slow
def test_watchdog_counts_from_the_last_started_test():
    code = ("import signal\nclass Solution:\n    calls = 0\n    def minMax(self, nums):\n"
            "        Solution.calls += 1\n        if Solution.calls == 3:\n"
            "            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\n"
            "            while True:\n                pass\n"
            "        return [min(nums), max(nums)]\n")
    started = time.monotonic()
    grade = grade_official(MINMAX, code, timeout_s=1)
    assert grade.em == 0 and grade.outcomes[0].verdict is Verdict.TIME_LIMIT
    assert time.monotonic() - started < 6.0  # global limit would be (1 + 1) * 4 + 5 = 13 s


@pytest.mark.slow
def test_watchdog_does_not_count_the_official_codes_own_work():
    # The program prints 1.5M lines at once; LiveCodeBench then compares them one by one as
    # Decimals ("1" vs "1.0"), with no alarm armed, for longer than timeout + 1 s. It passes,
    # as in LiveCodeBench; only the global limit, (1 + 1) * 1 + 5 = 7 s, bounds that work.
    lines = 1_500_000
    problem = make_problem([(f"{lines}\n", "1.0\n" * lines)])
    code = "import sys\nsys.stdout.write('1\\n' * int(input()))\n"
    assert _verdicts(grade_official(problem, code, timeout_s=1)) == ["passed"]


def test_exit_escaping_run_test_is_a_runtime_error():
    code = "import os\nclass Solution:\n    def minMax(self, nums):\n        os._exit(3)\n"
    grade = grade_official(MINMAX, code)
    assert _verdicts(grade) == ["runtime_error"] and "without a result" in grade.feedback.error


def _grade_with_escaping_grandchild() -> list[str]:
    code = ("import os\nclass Solution:\n    def minMax(self, nums):\n"
            "        os.posix_spawn('/bin/sleep', ['sleep', '60'], {}, setsid=True)\n"
            "        return [min(nums), max(nums)]\n")
    return [o.verdict.value for o in grade_official(MINMAX, code).outcomes]


def test_no_process_of_the_program_survives():
    with pids_guard(max_pids=64) as guard:
        verdicts = guard.call(_grade_with_escaping_grandchild, timeout_s=60)
        assert verdicts == ["passed"] * 4
        assert guard.survivors(settle_s=3.0) == []

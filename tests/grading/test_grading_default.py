"""The default grader's semantics, one property per test (benign programs only).

Hostile programs (loops, bombs, escapes) are in test_containment.py, inside a pids-cgroup guard.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

import pytest
from helpers_grading import ADD_FUNCTIONAL, SUM_STDIN, functional_problem, stdin_problem

from lcb.grading import Grade, GradingPool, Verdict, grade
from lcb.grading.compare import stdout_matches
from lcb.sandbox.host import compile_program
from lcb.sandbox.prelude import PRELUDE

SUM_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_OK = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n"


@pytest.fixture(scope="module")
def pool():
    with GradingPool(2) as shared:
        yield shared


def verdicts(g: Grade) -> list[str]:
    return [o.verdict.value for o in g.outcomes]


# --- the stdout comparison ---------------------------------------------------------------

@pytest.mark.parametrize(("actual", "expected"), [
    ("1.5000\n", "1.5"), ("1e5 -0 1\n", "100000 0 1.0"), ("3  4\n", "3 4"),
])
def test_numeric_tokens_compare_as_decimals(actual, expected):
    assert stdout_matches(actual, expected)


@pytest.mark.parametrize(("actual", "expected"), [
    ("1.500000001", "1.5"), ("Yes  No", "Yes No"), ("NaN", "nan"), ("1 2", "1 2 3"),
    ("1\n2", "1 2"), ("sNaN", "1"),
])
def test_decimal_comparison_has_no_tolerance_and_words_must_match(actual, expected):
    assert not stdout_matches(actual, expected)


def test_nan_line_equal_as_text_still_matches():
    assert stdout_matches("NaN\n", "NaN")  # equal strings pass before any Decimal parsing


def test_trailing_whitespace_is_ignored(pool):
    program = "a, b = map(int, input().split())\nprint(a + b, end='   \\n\\n\\n')\nprint('  ')"
    assert pool.grade_sync(SUM_STDIN, program).em == 1


def test_missing_line_fails(pool):
    problem = stdin_problem(("2\n", "1\n2\n"))
    g = pool.grade_sync(problem, "print(1)")
    assert verdicts(g) == ["wrong_answer"] and g.em == 0


def test_float_output_graded_as_decimal(pool):
    problem = stdin_problem(("\n", "0.5000\n"))
    assert pool.grade_sync(problem, "print(0.5)").em == 1
    assert pool.grade_sync(problem, "print(0.5000001)").em == 0


# --- stdin programs run as real processes ------------------------------------------------

def test_correct_program_passes_every_hidden_test(pool):
    g = pool.grade_sync(SUM_STDIN, SUM_OK)
    assert (g.passed, g.total, g.em, g.feedback) == (3, 3, 1, None)
    assert verdicts(g) == ["passed"] * 3 and g.grader == "default"


def test_exit_code_one_after_correct_output_fails(pool):
    g = pool.grade_sync(SUM_STDIN, SUM_OK + "import sys\nsys.exit(1)\n")
    assert verdicts(g) == ["runtime_error"]
    assert g.feedback.actual.strip() == "3"


def test_sys_exit_zero_and_none_pass(pool):
    assert pool.grade_sync(SUM_STDIN, SUM_OK + "raise SystemExit\n").em == 1
    assert pool.grade_sync(SUM_STDIN, SUM_OK + "import sys\nsys.exit(0)\n").em == 1


def test_main_guard_and_stdin_buffer_work_like_a_script(pool):
    program = ("import sys\n"
               "def main():\n"
               "    a, b = map(int, sys.stdin.buffer.read().split())\n"
               "    sys.stdout.write(f'{a + b}\\n')\n"
               "if __name__ == '__main__':\n"
               "    main()\n")
    assert pool.grade_sync(SUM_STDIN, program).em == 1


def test_reading_past_the_input_is_a_runtime_error_not_a_hang(pool):
    g = pool.grade_sync(SUM_STDIN, SUM_OK + "input()\n", timeout_s=5.0)
    assert verdicts(g) == ["runtime_error"]
    assert "EOFError" in g.feedback.error and g.outcomes[0].wall_s < 4.0


def test_prelude_names_are_usable_without_imports(pool):
    program = ("q = deque(map(int, input().split()))\n"
               "xs: List[int] = list(q)\n"
               "print(reduce(add, xs), gcd(4, 6) * 0)\n")
    assert pool.grade_sync(stdin_problem(("1 2\n", "3 0\n")), program).em == 1
    functional = "def add(a: int, b: int) -> int:\n    return sum(deque([a, b]))\n"
    assert pool.grade_sync(ADD_FUNCTIONAL, functional).em == 1


def test_future_import_is_a_compile_error_as_with_the_prepended_prelude():
    assert isinstance(compile_program("from __future__ import annotations\nprint(1)"), str)


def test_syntax_error_is_compile_error_for_the_whole_program(pool):
    g = pool.grade_sync(SUM_STDIN, "print(1")
    assert verdicts(g) == ["compile_error"] and g.total == 3 and g.passed == 0
    assert "SyntaxError" in g.feedback.error


# --- functional programs -----------------------------------------------------------------

def test_functional_solution_method_passes(pool):
    g = pool.grade_sync(ADD_FUNCTIONAL, ADD_OK)
    assert (g.passed, g.em) == (3, 1)


def test_functional_top_level_function_is_used_without_solution_class(pool):
    assert pool.grade_sync(ADD_FUNCTIONAL, "def add(a, b):\n    return a + b\n").em == 1


def test_tuple_result_compares_as_list(pool):
    problem = functional_problem("pair", ("1", "[1, 2]"))
    assert pool.grade_sync(problem, "def pair(x):\n    return (x, x + 1)\n").em == 1


def test_one_solution_instance_serves_all_tests(pool):
    program = ("class Solution:\n"
               "    def __init__(self):\n        self.calls = 0\n"
               "    def add(self, a, b):\n        self.calls += 1\n        return self.calls\n")
    problem = functional_problem("add", ("0\n0", "1"), ("0\n0", "2"), ("0\n0", "3"))
    assert pool.grade_sync(problem, program).em == 1


def test_functional_exception_gives_runtime_error_with_traceback(pool):
    g = pool.grade_sync(ADD_FUNCTIONAL, "def add(a, b):\n    return a / 0\n")
    assert verdicts(g) == ["runtime_error"]
    assert "ZeroDivisionError" in g.feedback.error


def test_reliability_guard_disables_subprocess_and_shutil_in_functional_mode(pool):
    program = ("import os, shutil\ndef probe(x):\n    import subprocess\n"
               "    return [subprocess.Popen is None, shutil.rmtree is None, os.kill is None,"
               " quit is None]\n")
    problem = functional_problem("probe", ("0", "[true, true, true, true]"))
    assert pool.grade_sync(problem, program).em == 1


def test_stdin_programs_run_without_the_guard(pool):
    program = "import subprocess, os\nprint(subprocess.Popen is None, os.kill is None)\n"
    assert pool.grade_sync(stdin_problem(("", "False False\n")), program).em == 1


def test_missing_function_is_runtime_error(pool):
    problem = functional_problem("plus", ("1\n2", "3"))
    g = pool.grade_sync(problem, "def other(a, b):\n    return a + b\n")
    assert verdicts(g) == ["runtime_error"] and "plus" in g.feedback.error


def test_prelude_names_count_as_the_function_like_livecodebench(pool):
    # `add` comes from `from operator import *` in the prelude: the official grader finds it too
    assert pool.grade_sync(ADD_FUNCTIONAL, "def other(a, b):\n    return 0\n").em == 1


# --- early stop, feedback, records -------------------------------------------------------

def test_fail_fast_grades_a_prefix(pool):
    g = pool.grade_sync(SUM_STDIN, "a, b = map(int, input().split())\nprint(3)\n")
    assert verdicts(g) == ["passed", "wrong_answer"]
    assert (g.passed, g.total, g.em) == (1, 3, 0)


def test_all_tests_grades_every_test(pool):
    g = pool.grade_sync(SUM_STDIN, "a, b = map(int, input().split())\nprint(3)\n",
                        all_tests=True)
    assert verdicts(g) == ["passed", "wrong_answer", "wrong_answer"]
    assert [o.index for o in g.outcomes] == [0, 1, 2]


def test_all_tests_in_functional_mode_continues_after_a_crash(pool):
    program = "def add(a, b):\n    if a == 10:\n        raise ValueError\n    return a + b\n"
    g = pool.grade_sync(ADD_FUNCTIONAL, program, all_tests=True)
    assert verdicts(g) == ["passed", "runtime_error", "passed"]


def test_feedback_names_the_first_failure(pool):
    g = pool.grade_sync(SUM_STDIN, "a, b = map(int, input().split())\nprint(3)\n",
                        all_tests=True)
    fb = g.feedback
    assert (fb.test_index, fb.verdict) == (1, Verdict.WRONG_ANSWER)
    assert (fb.input, fb.expected, fb.actual.strip()) == ("10 20\n", "30\n", "3")


def test_feedback_is_truncated(pool):
    problem = stdin_problem(("x" * 10_000 + "\n", "y\n"))
    fb = pool.grade_sync(problem, "print('z' * 10000)").feedback
    assert len(fb.input) < 2200 and len(fb.actual) < 2200 and "cut" in fb.input


def test_record_is_json_serializable(pool):
    record = pool.grade_sync(SUM_STDIN, "print(0)").to_record()
    decoded = json.loads(json.dumps(record))
    assert decoded["verdicts"] == ["wrong_answer"] and decoded["feedback"]["verdict"] == \
        "wrong_answer"
    assert {"pass", "total", "pass_rate", "em", "tests_run", "grader", "wall_s", "cpu_s"} <= \
        set(decoded)


def test_explicit_tests_override_the_hidden_tests(pool):
    only_second = SUM_STDIN.private_tests[1:2]
    g = pool.grade_sync(SUM_STDIN, "input()\nprint(30)", tests=only_second)
    assert (g.total, g.em) == (1, 1)


# --- API and concurrency -----------------------------------------------------------------

def test_bad_arguments_raise_clear_errors(pool):
    with pytest.raises(ValueError, match="unknown grader"):
        pool.grade_sync(SUM_STDIN, SUM_OK, grader="fast")
    with pytest.raises(TypeError, match="code must be a str"):
        pool.grade_sync(SUM_STDIN, None)
    with pytest.raises(ValueError, match="unknown sandbox"):
        GradingPool(1, sandbox="docker")
    with pytest.raises(ValueError, match="workers"):
        GradingPool(0)


def test_memory_env_var_must_be_a_number(pool, monkeypatch):
    monkeypatch.setenv("LCB_FUNCTIONAL_MEMORY_BYTES", "lots")
    with pytest.raises(ValueError, match="LCB_FUNCTIONAL_MEMORY_BYTES"):
        pool.grade_sync(ADD_FUNCTIONAL, ADD_OK)


def test_pool_is_shared_by_asyncio_tasks(pool):
    async def many():
        return await asyncio.gather(*(pool.grade(SUM_STDIN, SUM_OK if i % 2 else "print(0)")
                                      for i in range(6)))
    grades = asyncio.run(many())
    assert [g.em for g in grades] == [0, 1, 0, 1, 0, 1]


def test_pool_is_shared_by_threads(pool):
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(
        pool.grade_sync(ADD_FUNCTIONAL, ADD_OK).em)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [1, 1, 1, 1]


def test_interrupted_call_does_not_leave_its_reply_for_the_next_call():
    # A KeyboardInterrupt while a worker grades leaves that worker's reply unread: the pool must
    # drop the worker, or the next program would be graded with the stale reply.
    import signal
    import time

    def interrupt(*_):
        raise KeyboardInterrupt

    slow = "import time\ntime.sleep(1.5)\nprint(3)\n"
    with GradingPool(1) as one:
        assert one.grade_sync(SUM_STDIN, SUM_OK).em == 1
        first_pid = one.worker_pids()
        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            with pytest.raises(KeyboardInterrupt):
                one.grade_sync(stdin_problem(("1 2\n", "3\n")), slow, timeout_s=3)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        started = time.monotonic()
        wrong = one.grade_sync(SUM_STDIN, "print(0)")
        assert verdicts(wrong) == ["wrong_answer"] and wrong.em == 0
        assert one.worker_pids() != first_pid and time.monotonic() - started < 30
        assert one.grade_sync(SUM_STDIN, SUM_OK).em == 1


def test_pool_never_runs_more_workers_than_cores():
    import os
    with GradingPool(1000) as big:
        assert big.size == (os.cpu_count() or 1)


def test_zygote_imports_stay_slim():
    # Every program and stdin test is a fork of the zygote: it must not load LangChain, asyncio
    # or threads (slow, unsafe forks). This is the zygote's whole import set.
    # Fork and copy-on-write costs grow with the zygote's size, so it also leaves out what the
    # hot path does not need (dataclasses -> inspect/ast/dis, pathlib, shutil -> lzma/bz2, …).
    from lcb.sandbox.launch import python_argv

    argv = python_argv("lcb.sandbox.zygote:_warm_up")
    argv[-1] += "; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split())
    assert {"lcb.sandbox.host", "lcb.sandbox.child", "lcb.sandbox.values", "statistics"} <= loaded
    assert not loaded & {"asyncio", "threading", "subprocess", "langchain_core", "langgraph"}
    assert not loaded & {"dataclasses", "inspect", "ast", "pathlib", "shutil", "tempfile",
                         "lzma", "bz2", "lcb.data.problems", "lcb.grading.grades"}


def test_programs_import_installed_packages_as_before(pool):
    # Zygotes start with -S (no .pth imports) but keep site-packages on sys.path.
    pytest.importorskip("numpy")
    program = "import numpy as np\nprint(int(np.array(list(map(int, input().split()))).sum()))\n"
    assert pool.grade_sync(SUM_STDIN, program).em == 1


def test_module_level_grade_uses_a_shared_pool():
    assert grade(SUM_STDIN, SUM_OK).em == 1
    assert grade(ADD_FUNCTIONAL, ADD_OK, all_tests=True).passed == 3


def test_a_lost_buffered_answer_fails_as_under_python(pool):
    # Real `python prog.py`: print buffers, os.close(1) loses it, the exit flush fails (120).
    program = SUM_OK + "import os\nos.close(1)\n"
    assert verdicts(pool.grade_sync(SUM_STDIN, program)) == ["runtime_error"]


def test_atexit_handlers_print_as_under_python(pool):
    # `python prog.py` runs atexit handlers at exit (most recent first); one that raises, even
    # SystemExit, is printed to stderr and ignored: the exit status stays 0.
    program = ("import atexit, sys\na, b = map(int, input().split())\n"
               "atexit.register(print, a + b)\natexit.register(sys.exit, 3)\n")
    assert verdicts(pool.grade_sync(SUM_STDIN, program)) == ["passed"] * 3


@pytest.mark.parametrize("opened", [
    "open(1, 'w')", "os.fdopen(1, 'w')", "io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, 'w')))"])
def test_a_file_on_fd_1_never_flushed_is_flushed_after_stdout_as_under_python(pool, opened):
    # CPython flushes sys.stdout at exit, then the file object's finalizer flushes it as the
    # modules are torn down: "1" (print) comes before "2" (the file object).
    problem = stdin_problem(("1 2\n", "1\n2\n"))
    program = (f"import io, os\na, b = map(int, input().split())\nout = {opened}\n"
               "out.write(f'{b}\\n')\nprint(a)\n")
    assert verdicts(pool.grade_sync(problem, program)) == ["passed"]


# Output printed by finalizers as the interpreter tears down `__main__` at exit.
TEARDOWN = {
    "del_at_exit": ("class A:\n    def __del__(self):\n        print(n)\n"
                    "n = int(input())\na = A()\n"),
    "del_sees_its_globals": ("n = int(input())\nclass A:\n    def __del__(self):\n"
                             "        print(n * 2)\na = A()\n"),
    "del_in_a_cycle": ("class A:\n    def __del__(self):\n        print(self.n)\n"
                       "a = A()\na.n = int(input())\na.me = a\n"),
    "generator_finally": ("def g():\n    try:\n        yield\n    finally:\n        print(n)\n"
                          "n = int(input())\nit = g()\nnext(it)\n"),
    "definition_order": ("class A:\n    def __init__(self, v):\n        self.v = v\n"
                         "    def __del__(self):\n        print(self.v)\n"
                         "n = int(input())\nb = A(n)\n_c = A(n + 1)\na = A(n + 2)\n"),
    "module_kept_alive": ("import sys\nclass A:\n    def __del__(self):\n        print(7)\n"
                          "a = A()\n_b = A()\nsys.keep = sys.modules[__name__]\n"),
    "after_sys_exit": ("import sys\nclass A:\n    def __del__(self):\n        print(n)\n"
                       "n = int(input())\na = A()\nsys.exit(3)\n"),
    "del_raises": ("class A:\n    def __del__(self):\n        print(n)\n        raise ValueError\n"
                   "n = int(input())\na = A()\n"),
    "file_on_fd1_and_del": ("class A:\n    def __del__(self):\n        print(1)\na = A()\n"
                            "f = open(1, 'w')\nf.write(input() + '\\n')\nprint(2)\n"),
}


@pytest.mark.parametrize("name", sorted(TEARDOWN))
def test_output_of_finalizers_at_exit_is_as_under_python(pool, tmp_path, name):
    # The real thing: `python -I prog.py` (the prelude, then the program; -I: no
    # PYTHONUNBUFFERED from the environment), stdout to a pipe, as the grader's is.
    script = tmp_path / "prog.py"
    script.write_text(PRELUDE + TEARDOWN[name])
    real = subprocess.run([sys.executable, "-I", str(script)], input="5\n", text=True,
                          capture_output=True, timeout=60, check=False)
    assert real.stdout.strip(), real.stderr  # each one prints something at exit
    graded = pool.grade_sync(stdin_problem(("5\n", real.stdout)), TEARDOWN[name])
    assert verdicts(graded) == ["passed" if real.returncode == 0 else "runtime_error"]


def test_a_thread_still_running_is_a_time_limit_as_for_a_real_process(pool):
    program = ("import threading, time\n" + SUM_OK
               + "threading.Thread(target=time.sleep, args=(30,)).start()\n")
    assert verdicts(pool.grade_sync(SUM_STDIN, program, timeout_s=1.0)) == ["time_limit"]


@pytest.mark.parametrize(("returned", "named"), [
    ("object()", "object"), ("(x for x in [a + b])", "generator"), ("{a + b}", "set"),
    ("type('Int', (int,), {})(a + b)", "Int")])
def test_a_value_that_is_not_data_fails_with_a_clear_verdict(pool, returned, named):
    program = f"class Solution:\n    def add(self, a, b):\n        return {returned}\n"
    grade = pool.grade_sync(ADD_FUNCTIONAL, program)
    assert verdicts(grade) == ["wrong_answer"]
    assert "not plain data" in grade.feedback.error and named in grade.feedback.error


def test_a_non_ascii_stderr_on_every_test_is_reported_in_full(pool):
    tests = [(f"{i} {i}\n", f"{2 * i}\n") for i in range(40)]
    program = SUM_OK + "import sys\nsys.stderr.write('\\U0001F600' * 5000)\n"
    grade = pool.grade_sync(stdin_problem(*tests), program)
    assert grade.em == 1 and grade.passed == 40

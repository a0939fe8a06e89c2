"""Probe programs on which the two graders differ, each by a class documented in
docs/grading.md ("Where the two graders differ"). See `tests.probes.probe`.
"""

from __future__ import annotations

from tests.probes.probe import PASS, READ_SUM
from tests.probes.probe import diverges as _div
from tests.probes.probe import probe as _p
from tests.probes.problems import MINMAX, SUM

# Stdin programs where a real process and LiveCodeBench's in-process wrapper disagree.
DIVERGENT = [
    _p("stdin_buffer", SUM, PASS, """
        import sys
        data = sys.stdin.buffer.read().split()
        print(sum(map(int, data[1:])))
    """, official=_div("stdin_buffer", 0)),
    _p("global_statement", SUM, PASS, """
        total = 0
        def add(value):
            global total
            total += value
        input()
        for v in map(int, input().split()):
            add(v)
        print(total)
    """, official=_div("top_level_global", 0)),
    _p("from_sys_import_stdout", SUM, PASS, """
        from sys import stdout
        input()
        stdout.write(str(sum(map(int, input().split()))) + "\\n")
    """, official=_div("imported_stdout", 0)),
    _p("main_guard_not_last", SUM, PASS, """
        def solve():
            input()
            print(sum(map(int, input().split())))

        if __name__ == "__main__":
            solve()

        def unused():
            pass
    """, official=_div("main_guard", 0)),
    _p("main_guard_reversed", SUM, PASS, """
        def solve():
            input()
            print(sum(map(int, input().split())))

        if "__main__" == __name__:
            solve()
    """, official=_div("main_guard", 0)),
    _p("exit_one_after_output", SUM, 0, "import sys\n" + READ_SUM + "print(sum(nums))\nsys.exit(1)",
       official=_div("exit_code", PASS)),
    _p("raise_systemexit_message", SUM, 0, READ_SUM + 'print(sum(nums))\nraise SystemExit("done")',
       official=_div("exit_code", PASS)),
    _p("os_exit_after_flush", SUM, PASS, "import os\n" + READ_SUM
       + "print(sum(nums), flush=True)\nos._exit(0)", official=_div("hard_exit", 0)),
    _p("open_zero", SUM, PASS, "print(sum(map(int, open(0).read().split()[1:])))",
       official=_div("open_zero", 0)),
    _p("uses_getcwd", SUM, PASS, "import os\nhere = os.getcwd()\n" + READ_SUM + "print(sum(nums))",
       official=_div("reliability_guard", 0)),
    _p("quit_after_output", SUM, PASS, READ_SUM + "print(sum(nums))\nquit()",
       official=_div("reliability_guard", 0)),
    _p("imports_resource", SUM, PASS, "import resource\n" + READ_SUM + "print(sum(nums))",
       official=_div("reliability_guard", 0)),
    _p("deletes_files_in_cwd", SUM, PASS, 'import os\nopen("scratch.txt", "w").close()\n'
       'os.remove("scratch.txt")\n' + READ_SUM + "print(sum(nums))",
       official=_div("reliability_guard", 0)),
    _p("os_system", SUM, PASS, 'import os\nos.system("true")\n' + READ_SUM + "print(sum(nums))",
       official=_div("reliability_guard", 0)),
    _p("stdout_closed_after_answer", SUM, PASS, "import sys\n" + READ_SUM
       + "print(sum(nums))\nsys.stdout.close()", official=_div("closed_stdout", 0)),
    _p("fd1_closed_after_flush", SUM, PASS, "import os, sys\n" + READ_SUM
       + "print(sum(nums))\nsys.stdout.flush()\nos.close(1)", official=_div("closed_stdout", 1)),
]

# What `python prog.py` prints as it exits (atexit handlers, file objects left unflushed, the
# finalizers its module teardown runs), which LiveCodeBench's wrapped function never prints.
EXIT_OUTPUT = [
    _p("atexit_prints_answer", SUM, PASS, "import atexit\n" + READ_SUM
       + "atexit.register(print, sum(nums))", official=_div("atexit_output", 0)),
    _p("open_fd1_never_flushed", SUM, PASS, READ_SUM
       + 'out = open(1, "w")\nout.write(f"{sum(nums)}\\n")', official=_div("open_stdout", 0)),
    _p("del_in_a_cycle_prints_answer", SUM, PASS, """
        class Answer:
            def __del__(self):
                print(self.value)
        n = int(input())
        answer = Answer()
        answer.value = sum(map(int, input().split()))
        answer.itself = answer
    """, official=_div("teardown_output", 0)),
]

# Python's limit on converting long integers to text (4300 digits), which LiveCodeBench's
# import raises to 50000 for its grading processes.
INT_DIGITS = [
    _p("converts_a_long_integer", SUM, 0, READ_SUM
       + 'big = int("1" + "0" * 4400)\nprint(sum(nums) + big - big)',
       official=_div("int_digits", PASS)),
]

# Values and processes the judge treats as a real run does, where LiveCodeBench does not.
DIVERGENT_ISOLATION = [
    _p("always_equal_value", MINMAX, 0, """
        class Anything:
            def __eq__(self, other):
                return True
        class Solution:
            def minMax(self, nums):
                return Anything()
    """, official=_div("non_data_return", PASS)),
    _p("thread_still_running", SUM, 0, "import threading, time\n" + READ_SUM
       + "print(sum(nums), flush=True)\nthreading.Thread(target=time.sleep, args=(60,)).start()",
       official=_div("lingering_thread", PASS), slow=True),
]

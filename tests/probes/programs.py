"""Probe programs on which both graders agree (`tests.probes.divergent` has those on which they
differ by a documented class); `ALL_PROBES` is every probe. See `tests.probes.probe`.
"""

from __future__ import annotations

import textwrap

from tests.probes.divergent import DIVERGENT, DIVERGENT_ISOLATION, EXIT_OUTPUT, INT_DIGITS
from tests.probes.probe import PASS, READ_SUM, Probe
from tests.probes.probe import diverges as _div
from tests.probes.probe import probe as _p
from tests.probes.problems import AVERAGE, COUNT, MEAN, MINMAX, PAIRS, SUM

__all__ = ["ALL_PROBES", "Probe"]

STDIN_CORRECT = [
    _p("input_twice", SUM, PASS, READ_SUM + "print(sum(nums))"),
    _p("readline", SUM, PASS, """
        import sys
        n = int(sys.stdin.readline())
        print(sum(int(x) for x in sys.stdin.readline().split()))
    """),
    _p("read_all_split", SUM, PASS, """
        import sys
        data = sys.stdin.read().split()
        print(sum(map(int, data[1:])))
    """),
    _p("readlines", SUM, PASS, """
        import sys
        lines = sys.stdin.readlines()
        print(sum(map(int, lines[1].split())))
    """),
    _p("print_sep_end", SUM, PASS, READ_SUM + 'print("", sum(nums), sep="", end="\\n\\n\\n")'),
    _p("stdout_write", SUM, PASS, """
        import sys
        n = int(input())
        sys.stdout.write(str(sum(map(int, input().split()))) + "\\n")
    """),
    _p("main_function", SUM, PASS, """
        def main():
            input()
            values = [int(v) for v in input().split()]
            print(sum(values))

        main()
    """),
    _p("main_guard_last", SUM, PASS, """
        def solve():
            input()
            print(sum(map(int, input().split())))

        if __name__ == "__main__":
            solve()
    """),
    _p("class_solver", SUM, PASS, """
        class Solver:
            def __init__(self):
                self.n = int(input())
                self.items = list(map(int, input().split()))

            def answer(self):
                return sum(self.items)

        print(Solver().answer())
    """),
    _p("deep_recursion", SUM, PASS, """
        import sys
        sys.setrecursionlimit(100000)
        def total(values, i):
            return 0 if i == len(values) else values[i] + total(values, i + 1)
        input()
        nums = list(map(int, input().split()))
        print(total(nums * 2000, 0) // 2000)
    """),
    _p("prelude_deque", SUM, PASS, """
        input()
        queue = deque(map(int, input().split()))
        acc = 0
        while queue:
            acc += queue.popleft()
        print(acc)
    """),
    _p("prelude_accumulate", SUM, PASS, READ_SUM + "print(list(accumulate(nums))[-1])"),
    _p("float_fstring_int_answer", SUM, PASS, READ_SUM + 'print(f"{float(sum(nums)):.1f}")'),
    _p("padded_output", SUM, PASS, READ_SUM + 'print("   ", sum(nums), "  ")'),
    _p("rebind_input", SUM, PASS, """
        import sys
        input = sys.stdin.readline
        n = int(input())
        print(sum(map(int, input().split())))
    """),
    _p("flush_print", SUM, PASS, READ_SUM + "print(sum(nums), flush=True)"),
    _p("exit_zero_after_output", SUM, PASS, READ_SUM + "print(sum(nums))\nexit(0)"),
    _p("sys_exit_zero", SUM, PASS, "import sys\n" + READ_SUM + "print(sum(nums))\nsys.exit(0)"),
    _p("heapq_counter", SUM, PASS, """
        import heapq
        from collections import Counter
        n = int(input())
        counts = Counter(map(int, input().split()))
        print(sum(k * v for k, v in counts.items()) + sum(heapq.nsmallest(0, [1])))
    """),
    _p("star_unpack", SUM, PASS, """
        import sys
        n, *rest = map(int, sys.stdin.read().split())
        print(sum(rest[:n]))
    """),
    _p("stderr_noise", SUM, PASS, "import sys\n" + READ_SUM
       + 'print("debug", nums, file=sys.stderr)\nprint(sum(nums))'),
    _p("readline_loop_until_empty", SUM, PASS, """
        import sys
        lines = []
        while True:
            line = sys.stdin.readline()
            if not line:
                break
            lines.append(line)
        print(sum(map(int, lines[1].split())))
    """),
    _p("iterate_stdin", SUM, PASS, """
        import sys
        rows = [line for line in sys.stdin]
        print(sum(map(int, rows[1].split())))
    """),
    _p("thread_with_join", SUM, PASS, """
        import threading
        def work():
            input()
            print(sum(map(int, input().split())))
        t = threading.Thread(target=work)
        t.start()
        t.join()
    """),
    _p("input_then_read", SUM, PASS, """
        import sys
        n = int(input())
        print(sum(map(int, sys.stdin.read().split())))
    """),
    _p("input_then_readline", SUM, PASS, """
        import sys
        n = int(input())
        print(sum(map(int, sys.stdin.readline().split())))
    """),
    _p("mean_fixed_decimals", MEAN, PASS, READ_SUM + 'print(f"{sum(nums) / n:.10f}")'),
    _p("mean_round", MEAN, PASS, READ_SUM + "print(round(sum(nums) / n, 10))"),
    _p("count_join", COUNT, PASS, 'print("\\n".join(str(i) for i in range(1, int(input()) + 1)))'),
    _p("count_star_sep", COUNT, PASS, "print(*range(1, int(input()) + 1), sep='\\n')"),
    _p("count_loop_trailing_spaces", COUNT, PASS, """
        for i in range(1, int(input()) + 1):
            print(i, end=" \\n")
    """),
]

STDIN_WRONG = [
    _p("wrong_constant", SUM, 0, "print(0)"),
    _p("wrong_when_n_ge_4", SUM, 2, READ_SUM + "print(sum(nums) + (n >= 4))"),
    _p("wrong_on_negatives", SUM, 3, READ_SUM + "print(sum(abs(v) for v in nums))"),
    _p("wrong_on_big", SUM, 4, READ_SUM + "print(sum(nums) if sum(nums) < 10**12 else 0)"),
    _p("wrong_extra_line", SUM, 0, READ_SUM + "print(sum(nums))\nprint(n)"),
    _p("wrong_label", SUM, 0, READ_SUM + 'print("sum:", sum(nums))'),
    _p("wrong_no_output", SUM, 0, READ_SUM),
    _p("wrong_mean_float_repr", MEAN, 3, READ_SUM + "print(sum(nums) / n)"),
    _p("wrong_mean_two_decimals", MEAN, 3, READ_SUM + 'print("%.2f" % (sum(nums) / n))'),
    _p("wrong_count_one_line", COUNT, 1, "print(*range(1, int(input()) + 1))"),
    _p("wrong_doubled_space", COUNT, 1, """
        n = int(input())
        print("\\n".join(str(i) for i in range(1, n + 1)).replace("2", "2 0"))
    """),
    _p("sys_exit_one_silent", SUM, 0, "import sys\nsys.exit(1)"),
]

STDIN_ERRORS = [
    _p("raise_at_start", SUM, 0, 'raise ValueError("boom")'),
    _p("zero_division_on_n4", SUM, 2, READ_SUM + "print(sum(nums) if n != 4 else 1 // 0)"),
    _p("index_error_on_n1", SUM, 1, READ_SUM + "print(nums[1] - nums[1] + sum(nums))"),
    _p("name_error", SUM, 0, READ_SUM + "print(totl)"),
    _p("syntax_error", SUM, 0, "print(sum(map(int, input().split()))"),
    _p("recursion_error", SUM, 0, "def down(k):\n    return down(k + 1)\ndown(0)"),
    _p("assert_false", SUM, 0, READ_SUM + "assert n > 100\nprint(sum(nums))"),
    _p("memory_bomb", SUM, 0, "block = [0] * (10 ** 10)\nprint(len(block))"),
    _p("string_memory_bomb", SUM, 0, 's = "x" * (1 << 40)\nprint(len(s))'),
    _p("socket_connect", SUM, 0, """
        import socket
        socket.create_connection(("127.0.0.1", 1), timeout=2)
        print(6)
    """),
    _p("huge_output", SUM, 0, """
        import sys
        chunk = "x" * (1 << 20)
        for _ in range(1024):
            sys.stdout.write(chunk)
    """),
]

TIME_LIMITS = [
    _p("infinite_loop", SUM, 0, "while True:\n    pass", slow=True, tags=("ci",)),
    _p("sleep_on_n4", SUM, 2, "import time\n" + READ_SUM + "if n == 4:\n    time.sleep(60)\n"
       "print(sum(nums))", slow=True),
    _p("ignores_sigalrm", SUM, 0, """
        import signal
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            pass
    """, slow=True),
    _p("reads_stdin_forever", SUM, 0, """
        import sys
        while True:
            sys.stdin.read()
    """, slow=True),
]

SOLUTION_MINMAX = """
    class Solution:
        def minMax(self, nums: List[int]) -> List[int]:
            return [min(nums), max(nums)]
"""

FUNCTIONAL = [
    _p("solution_class", MINMAX, PASS, SOLUTION_MINMAX),
    _p("top_level_function", MINMAX, PASS, """
        def minMax(nums):
            return [min(nums), max(nums)]
    """),
    _p("returns_tuple", MINMAX, PASS, """
        class Solution:
            def minMax(self, nums):
                return min(nums), max(nums)
    """),
    _p("helper_and_recursion", MINMAX, PASS, """
        class Solution:
            def _fold(self, nums, i, lo, hi):
                if i == len(nums):
                    return [lo, hi]
                return self._fold(nums, i + 1, min(lo, nums[i]), max(hi, nums[i]))

            def minMax(self, nums: List[int]) -> List[int]:
                return self._fold(nums, 1, nums[0], nums[0])
    """),
    _p("lambda_method", MINMAX, PASS, """
        class Solution:
            minMax = lambda self, nums: [min(nums), max(nums)]
    """),
    _p("prelude_names", MINMAX, PASS, """
        class Solution:
            def minMax(self, nums: List[int]) -> List[int]:
                ordered = sorted(Counter(nums).elements())
                window = deque(ordered)
                return [window[0], window[-1]]
    """),
    _p("sorts_input_in_place", MINMAX, PASS, """
        class Solution:
            def minMax(self, nums):
                nums.sort()
                return [nums[0], nums[-1]]
    """),
    _p("prints_debug", MINMAX, PASS, """
        class Solution:
            def minMax(self, nums):
                print("looking at", nums)
                return [min(nums), max(nums)]
    """),
    _p("lru_cache_prelude", MINMAX, PASS, """
        class Solution:
            def minMax(self, nums):
                @lru_cache(maxsize=None)
                def best(i, pick):
                    return nums[i] if i == len(nums) - 1 else pick(nums[i], best(i + 1, pick))
                return [best(0, min), best(0, max)]
    """),
    _p("one_instance_for_all_tests", MINMAX, 2, """
        class Solution:
            def __init__(self):
                self.calls = 0

            def minMax(self, nums):
                self.calls += 1
                return [min(nums), max(nums) + (self.calls >= 3)]
    """),
    _p("wrong_always", MINMAX, 0, """
        class Solution:
            def minMax(self, nums):
                return [max(nums), min(nums)]
    """),
    _p("wrong_on_long_input", MINMAX, 3, """
        class Solution:
            def minMax(self, nums):
                return [min(nums[:5]), max(nums[:5])]
    """),
    _p("returns_none", MINMAX, 0, "class Solution:\n    def minMax(self, nums):\n        pass"),
    _p("index_error_on_single", MINMAX, 1, """
        class Solution:
            def minMax(self, nums):
                return [min(nums), max(nums[1], *nums)]
    """),
    _p("raises_at_import", MINMAX, 0, textwrap.dedent(SOLUTION_MINMAX)
       + "raise RuntimeError('at import')"),
    _p("syntax_error_functional", MINMAX, 0, "class Solution:\n    def minMax(self, nums)\n"),
    _p("wrong_method_name", MINMAX, 0, """
        class Solution:
            def min_max(self, nums):
                return [min(nums), max(nums)]
    """),
    _p("init_needs_arguments", MINMAX, 0, """
        class Solution:
            def __init__(self, size):
                self.size = size
            def minMax(self, nums):
                return [min(nums), max(nums)]
    """),
    _p("memory_bomb_functional", MINMAX, 0, """
        class Solution:
            def minMax(self, nums):
                block = [0] * (10 ** 10)
                return [min(nums), max(nums)]
    """),
    _p("os_system_functional", MINMAX, 0, """
        import os
        class Solution:
            def minMax(self, nums):
                os.system("true")
                return [min(nums), max(nums)]
    """),
    _p("kill_parent_functional", MINMAX, 0, """
        import os
        class Solution:
            def minMax(self, nums):
                os.kill(os.getppid(), 9)
                return [min(nums), max(nums)]
    """),
    _p("exit_in_method", MINMAX, 0, """
        import sys
        class Solution:
            def minMax(self, nums):
                sys.exit(0)
    """),
    _p("tuple_of_lists", PAIRS, PASS, """
        class Solution:
            def pairUp(self, nums, k):
                return tuple(nums[i:i + k] for i in range(0, len(nums), k))
    """),
    _p("list_of_tuples", PAIRS, 0, """
        class Solution:
            def pairUp(self, nums, k):
                return [tuple(nums[i:i + k]) for i in range(0, len(nums), k)]
    """),
    _p("drops_short_tail", PAIRS, 1, """
        class Solution:
            def pairUp(self, nums, k):
                return [nums[i:i + k] for i in range(0, len(nums) - k + 1, k)]
    """),
    _p("fails_on_empty", PAIRS, 3, """
        class Solution:
            def pairUp(self, nums, k):
                out = [[nums[0]]]
                for v in nums[1:]:
                    (out[-1] if len(out[-1]) < k else out.append([]) or out[-1]).append(v)
                return out
    """),
    _p("average_exact", AVERAGE, PASS, "class Solution:\n    def average(self, nums):\n"
       "        return sum(nums) / len(nums)"),
    _p("average_int_when_whole", AVERAGE, PASS, """
        class Solution:
            def average(self, nums):
                total = sum(nums)
                return total // len(nums) if total % len(nums) == 0 else total / len(nums)
    """),
    _p("average_rounded", AVERAGE, 2, "class Solution:\n    def average(self, nums):\n"
       "        return round(sum(nums) / len(nums), 6)"),
    _p("average_floor", AVERAGE, 0, "class Solution:\n    def average(self, nums):\n"
       "        return sum(nums) // len(nums)"),
    _p("sleep_on_third_call", AVERAGE, 2, """
        import time
        class Solution:
            def average(self, nums):
                if nums == [1, 1, 2]:
                    time.sleep(60)
                return sum(nums) / len(nums)
    """, slow=True, tags=("ci",)),
]

# What the judge/host split must keep as a real run gives it: stderr is never judged (30 MB is
# fine), a closed stdout after the answer is fine, numpy imports and numpy scalars work in
# functional programs; values that are not data fail (as they fail LiveCodeBench's `==`).
FIDELITY = [
    _p("stderr_thirty_megabytes", SUM, PASS, "import sys\n" + READ_SUM
       + "print(sum(nums))\nsys.stderr.write('x' * 30_000_000)"),
    _p("numpy_in_solution", MINMAX, PASS, """
        import numpy as np
        class Solution:
            def minMax(self, nums):
                return [int(np.min(nums)), int(np.max(nums))]
    """),
    _p("numpy_scalars_returned", MINMAX, PASS, """
        import numpy as np
        class Solution:
            def minMax(self, nums):
                values = np.array(nums)
                return [values.min(), values.max()]
    """),
    _p("returns_a_set", MINMAX, 0, """
        class Solution:
            def minMax(self, nums):
                return {min(nums), max(nums)}
    """),
    _p("returns_a_numpy_array", MINMAX, 0, """
        import numpy as np
        class Solution:
            def minMax(self, nums):
                return np.array([min(nums), max(nums)])
    """, official=_div("non_data_return", 1)),
    # Printed by finalizers as `python prog.py` tears down its module, and as LiveCodeBench's
    # wrapped function returns (the objects were its locals).
    _p("del_prints_answer_at_exit", SUM, PASS, """
        class Answer:
            def __del__(self):
                print(self.value)
        n = int(input())
        answer = Answer()
        answer.value = sum(map(int, input().split()))
    """),
    _p("generator_finally_prints_answer", SUM, PASS, """
        def answers():
            try:
                yield
            finally:
                print(total)
        n = int(input())
        total = sum(map(int, input().split()))
        pending = answers()
        next(pending)
    """),
]

ALL_PROBES = (STDIN_CORRECT + STDIN_WRONG + STDIN_ERRORS + TIME_LIMITS + DIVERGENT + EXIT_OUTPUT
              + FUNCTIONAL + FIDELITY + DIVERGENT_ISOLATION + INT_DIGITS)

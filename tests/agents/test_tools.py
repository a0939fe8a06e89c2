"""python_exec: output format, clipping, the fixed limit, bounded concurrency, never raising."""

from __future__ import annotations

import asyncio
import threading
import time

from lcb.agents.tools import MAX_FIELD_CHARS, TIMEOUT_S, make_python_exec
from lcb.agents.tools import clip_output as clip
from tests.helpers_agents import EchoRunner, FakeRun


def run(tool, args: dict) -> str:
    return asyncio.run(tool.ainvoke(args))


def test_reports_exit_code_stdout_and_stderr():
    tool = make_python_exec(runner=lambda code, stdin, *, timeout_s: FakeRun(
        stdout="out-text", stderr="Traceback: boom", exit_code=1))
    text = run(tool, {"code": "raise SystemExit(1)"})
    assert "exit code 1" in text
    assert text.index("out-text") < text.index("Traceback: boom")


def test_code_and_stdin_reach_the_runner_with_our_time_limit():
    runner = EchoRunner()
    tool = make_python_exec(runner=runner)
    run(tool, {"code": "print(input())", "stdin": "7\n", "timeout_s": 999})
    assert runner.calls == [("print(input())", "7\n", TIMEOUT_S)]
    assert TIMEOUT_S == 10.0


def test_timeout_is_reported():
    tool = make_python_exec(runner=lambda code, stdin, *, timeout_s: FakeRun(
        stdout="", exit_code=None, timed_out=True))
    assert "timed out after 10 s" in run(tool, {"code": "while True: pass"})


def test_long_output_is_clipped_head_and_tail():
    big = "a" * 10 * MAX_FIELD_CHARS + "END"
    tool = make_python_exec(runner=lambda code, stdin, *, timeout_s: FakeRun(stdout=big))
    text = run(tool, {"code": "print('a' * 20000)"})
    assert len(text) < 2 * MAX_FIELD_CHARS
    assert "characters cut" in text and text.rstrip().endswith("(empty)")
    assert "END" in clip(big)


def test_runner_failure_becomes_text():
    def broken(code, stdin, *, timeout_s):
        raise OSError("no sandbox")

    text = run(make_python_exec(runner=broken), {"code": "print(1)"})
    assert text.startswith("error:") and "no sandbox" in text


def test_bad_arguments_become_text():
    tool = make_python_exec(runner=EchoRunner())
    assert run(tool, {"stdin": "1"}).startswith("error: bad arguments")
    assert run(tool, {"code": ["print(1)"]}).startswith("error: bad arguments")


def test_runs_in_flight_never_exceed_workers_and_loop_stays_free():
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def slow(code, stdin, *, timeout_s):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.1)
        with lock:
            state["now"] -= 1
        return FakeRun(stdout=code)

    tool = make_python_exec(workers=2, runner=slow)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        beat = asyncio.create_task(ticker())
        outs = await asyncio.gather(*(tool.ainvoke({"code": f"c{i}"}) for i in range(6)))
        beat.cancel()
        return outs, ticks

    outs, ticks = asyncio.run(main())
    assert state["peak"] == 2
    assert [f"c{i}" in out for i, out in enumerate(outs)] == [True] * 6
    assert ticks >= 5  # the event loop kept running while code ran


def test_the_real_sandbox_runs_code_with_stdin():
    text = run(make_python_exec(workers=1), {"code": "import sys\nprint(int(sys.stdin.read()) * 3)",
                                              "stdin": "14\n"})
    assert text.startswith("exit code 0") and "42" in text


def test_the_real_sandbox_reports_a_crash():
    text = run(make_python_exec(workers=1), {"code": "import sys\nsys.stderr.write('bad\\n')\n"
                                                     "raise SystemExit(3)"})
    assert text.startswith("exit code 3") and "bad" in text


def test_importing_the_module_makes_no_thread_pool():
    import subprocess
    import sys

    # Counts the pools lcb.agents.tools creates (LangSmith makes one of its own at import).
    probe = ("import concurrent.futures as cf, sys\n"
             "made = []\n"
             "init = cf.ThreadPoolExecutor.__init__\n"
             "def counting(self, *a, **k):\n"
             "    made.append(sys._getframe(1).f_code.co_filename)\n"
             "    init(self, *a, **k)\n"
             "cf.ThreadPoolExecutor.__init__ = counting\n"
             "import lcb.agents.tools\n"
             "print(sum(name.endswith('/lcb/agents/tools.py') for name in made))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "0"

"""`python_exec`: the agents' one tool, a snippet run in a fresh contained process.

Contract:
- Arguments `code: str` and `stdin: str = ""`. The time limit (10 s) is ours; the model cannot
  change it. The run goes through `lcb.sandbox.python_exec.run_python` (the grader's containment,
  in the run's sandbox tier).
- Runs happen in a thread pool of at most `workers` threads (default: the CPU count), so code
  runs in flight never exceed the cores however many agents call at once, and the event loop is
  never blocked.
- The result is short text: exit code (or the timeout), stdout and stderr, each clipped to
  `MAX_FIELD_CHARS`. The tool never raises into the agent: bad arguments and sandbox failures
  come back as text that starts with `error:`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from lcb.text import OUTPUT_NOTE, THREE_QUARTERS, clip

TIMEOUT_S = 10.0
MAX_FIELD_CHARS = 2000
TOOL_NAME = "python_exec"
DESCRIPTION = (
    "Run a Python 3 snippet in a fresh process and see what it prints. "
    f"Arguments: code (the program), stdin (text fed to standard input, default empty). "
    f"Returns the exit code, stdout and stderr. Each run is stopped after {TIMEOUT_S:g} seconds."
)

Runner = Callable[..., Any]  # run_python(code, stdin, *, timeout_s) -> RunResult


class PythonExecArgs(BaseModel):
    code: str = Field(description="The Python program to run.")
    stdin: str = Field(default="", description="Text given to the program on standard input.")


def clip_output(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """The head (3/4) and the tail of `text` within about `limit` characters, marking the cut
    (`lcb.text.clip` with `THREE_QUARTERS` and `OUTPUT_NOTE`)."""
    return clip(text, limit, head=THREE_QUARTERS, note=OUTPUT_NOTE)


def format_result(result: Any) -> str:
    """The tool's text for a `lcb.sandbox.python_exec.RunResult`."""
    if result.timed_out:
        status = f"timed out after {TIMEOUT_S:g} s (killed)"
    else:
        status = f"exit code {result.exit_code}"
    lines = [status, "stdout:", clip_output(result.stdout) or "(empty)", "stderr:",
             clip_output(result.stderr) or "(empty)"]
    if result.output_truncated:
        lines.append("(output was longer than the sandbox keeps; the rest is lost)")
    return "\n".join(lines)


def _default_runner() -> Runner:
    from lcb.sandbox.python_exec import (
        run_python,  # imported late: the sandbox loads only when code runs
    )

    return run_python


def make_python_exec(*, workers: int | None = None, runner: Runner | None = None,
                     sandbox: str = "process") -> BaseTool:
    """Build a `python_exec` tool with its own pool of at most `workers` concurrent runs in
    the `sandbox` tier ("process" or "bwrap", as `lcb.sandbox.python_exec.run_python` takes).

    `runner` replaces `lcb.sandbox.python_exec.run_python` (tests). The pool's threads are
    daemon-like executor threads; call `tool.metadata["close"]()` to shut it down.
    """
    pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1,
                              thread_name_prefix="python_exec")

    def run_blocking(code: str, stdin: str) -> str:
        try:
            if runner is not None:
                return format_result(runner(code, stdin, timeout_s=TIMEOUT_S))
            return format_result(_default_runner()(code, stdin, timeout_s=TIMEOUT_S,
                                                    sandbox=sandbox))
        except Exception as err:  # noqa: BLE001 - the agent gets text, never an exception
            return f"error: python_exec could not run the code ({type(err).__name__}: {err})"

    async def python_exec(code: str, stdin: str = "") -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, run_blocking, code, stdin)

    def sync_python_exec(code: str, stdin: str = "") -> str:
        return pool.submit(run_blocking, code, stdin).result()

    return StructuredTool.from_function(
        func=sync_python_exec,
        coroutine=python_exec,
        name=TOOL_NAME,
        description=DESCRIPTION,
        args_schema=PythonExecArgs,
        handle_validation_error=_bad_arguments,
        metadata={"close": lambda: pool.shutdown(wait=False, cancel_futures=True)},
    )


def _bad_arguments(err: Exception) -> str:
    return (f"error: bad arguments for {TOOL_NAME}: {err}. "
            'Call it with {"code": "<python program>", "stdin": "<optional input>"}.')


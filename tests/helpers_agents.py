"""Shared helpers for the agent-layer tests: a problem, a model config, a stand-in code runner."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from langchain_core.tools import BaseTool

from lcb.agents.models import ModelConfig
from lcb.agents.tools import make_python_exec
from lcb.data.problems import Mode, Problem, Test
from lcb.teams.common import TeamResult, TeamRuntime
from lcb.teams.solving import solve

MODEL = "scripted-model"


def make_problem(pid: str = "P_1", statement: str = "Read n and print 2*n.") -> Problem:
    """A stdin problem whose statement carries `pid`, so `keyed` scripts can find it."""
    tests = (Test("2\n", "4\n", Mode.STDIN),)
    return Problem(pid, f"title {pid}", f"[{pid}] {statement}", "", Mode.STDIN, None, tests,
                   tests, "easy", "atcoder", "abc1", "2024-01-01")


def model_config(base_url: str, **overrides) -> ModelConfig:
    """A config for the scripted server: fast backoff, short timeout, a few retries."""
    values = dict(base_url=base_url, model_id=MODEL, timeout_s=5.0, max_retries=2,
                  retry_backoff_s=0.01, retry_backoff_max_s=0.05)
    values.update(overrides)
    return ModelConfig(**values)


@dataclass(frozen=True)
class FakeRun:
    """Shaped like `lcb.sandbox.python_exec.RunResult`."""

    stdout: str
    stderr: str = ""
    exit_code: int | None = 0
    timed_out: bool = False
    output_truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0


class EchoRunner:
    """Records calls and answers `ran <code> with <stdin>`, without running anything."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []

    def __call__(self, code: str, stdin: str = "", *, timeout_s: float = 10.0) -> FakeRun:
        self.calls.append((code, stdin, timeout_s))
        return FakeRun(stdout=f"ran {code!r} with {stdin!r}")


def fake_exec_tool(runner: EchoRunner | None = None) -> BaseTool:
    return make_python_exec(workers=2, runner=runner or EchoRunner())


def make_runtime(base_url: str, *, runner: EchoRunner | None = None, **overrides) -> TeamRuntime:
    """A runtime on the scripted server with a stand-in code runner."""
    return TeamRuntime(model_config(base_url, **overrides), python_exec=fake_exec_tool(runner))


def fenced(code: str, text: str = "Here is my solution.") -> str:
    return f"{text}\n```python\n{code}\n```"


def solve_all(
    base_url: str, problems: list[Problem], *, topology: str = "single",
    runner: EchoRunner | None = None, bundle: dict[str, str] | None = None, **overrides,
) -> tuple[list[TeamResult], TeamRuntime]:
    """Solve `problems` concurrently on one runtime (closed afterwards); results in order."""
    runtime = make_runtime(base_url, runner=runner, **overrides)

    async def main() -> list[TeamResult]:
        try:
            return list(await asyncio.gather(
                *(solve(topology, p, runtime, bundle=bundle) for p in problems)))
        finally:
            await runtime.aclose()

    return asyncio.run(main()), runtime

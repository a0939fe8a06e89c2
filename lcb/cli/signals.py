"""SIGTERM for commands that run one asyncio job: stop it as Ctrl-C does, then say so.

`await run_until_term(job)` awaits `job`; a SIGTERM (a scheduler's preemption, `kill`) cancels
it, so its cleanup runs exactly as for Ctrl-C, and then raises `Terminated` instead of
`CancelledError`, so the command can exit 143 (128 + SIGTERM) rather than 130. Outside the main
thread, where no signal handler can be set, the job is simply awaited.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")
EXIT_CODE = 128 + signal.SIGTERM.value


class Terminated(Exception):
    """The job was stopped by SIGTERM (the command exits `EXIT_CODE`, 143)."""


async def run_until_term(job: Awaitable[T]) -> T:
    """Await `job`; SIGTERM cancels it as Ctrl-C does (cleanup runs), then raises `Terminated`."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    hit: list[int] = []

    def on_term() -> None:
        hit.append(signal.SIGTERM)
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        return await job
    try:
        return await job
    except asyncio.CancelledError:
        if hit:
            raise Terminated from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)

"""`GradingPool`: a few slim worker processes shared by every task and thread of a run.

Contract:
- At most `os.cpu_count()` workers (a request for more is capped): more programs running than
  cores would turn slow programs into false time limits. All start at once, in the background,
  when the pool is made; a dead one is replaced on the next call.
- `grade_sync` blocks the calling thread; `await grade(...)` runs the same call on the pool's
  own threads, so any number of asyncio tasks and threads may share one pool.
- The problem's tests travel to the worker once per program (one pickle per call).
- A worker that dies mid-call (which no program should be able to cause) raises `GradingError`
  and is replaced on the next call. Bad arguments raise `ValueError`/`TypeError` at once.
- `close()` stops the workers and kills anything left in their pids cgroups.
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from subprocess import Popen
from typing import Any

from lcb.grading import launch
from lcb.grading.contain import Limits, PidsJail
from lcb.grading.verdicts import Grade
from lcb.grading.worker import WorkerGone, recv_message, send_message
from lcb.problems import Mode, Problem, Test

TIMEOUT_S = 6.0
GRADERS = ("default", "official")
_START_TIMEOUT_S = 60.0


class GradingError(RuntimeError):
    """Grading itself failed (not the program): a worker died or raised."""


@dataclass(eq=False)  # identity semantics: workers live in a set
class _Worker:
    proc: Popen
    jail: PidsJail | None
    pid: int

    @classmethod
    def start(cls, sandbox: str) -> _Worker:
        jail = PidsJail.create(max_tasks=Limits().max_tasks + 32, prefix="lcb-worker")
        proc = launch.start(launch.python_argv("lcb.grading.worker:main", sandbox=sandbox),
                            jail=jail)
        worker = cls(proc, jail, proc.pid)
        try:
            recv_message(proc.stdout.fileno(), deadline=time.monotonic() + _START_TIMEOUT_S)
        except WorkerGone as exc:
            worker.stop()
            raise GradingError(f"a grading worker ({sandbox}) failed to start: {exc}") from None
        return worker

    def call(self, path: str, kwargs: dict, *, budget_s: float) -> Any:
        try:
            send_message(self.proc.stdin.fileno(), (path, kwargs))
        except OSError as exc:  # EPIPE: the worker is gone
            raise WorkerGone(f"cannot reach the worker: {exc}") from None
        ok, value = recv_message(self.proc.stdout.fileno(), deadline=time.monotonic() + budget_s)
        if not ok:
            raise GradingError(f"the grading worker raised:\n{value}")
        return value

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=2.0)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        if self.jail is not None:
            self.jail.kill_all()
            self.jail.remove()


def build_request(problem: Problem, code: str, *, all_tests: bool, grader: str,
                  tests: Sequence[Test] | None, timeout_s: float) -> tuple[str, dict, float]:
    """(worker function, its kwargs, time budget) for one grading call; validates arguments."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    if grader not in GRADERS:
        raise ValueError(f"unknown grader {grader!r}: choose one of {', '.join(GRADERS)}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    chosen = tuple(problem.hidden_tests if tests is None and grader == "default" else tests or ())
    n_tests = len(chosen) or len(problem.public_tests) + len(problem.private_tests)
    budget = (timeout_s + 2.0) * max(1, n_tests) + 30.0
    if grader == "official":
        kwargs = {"problem": problem, "code": code, "all_tests": all_tests,
                  "tests": None if tests is None else tuple(tests), "timeout_s": timeout_s}
        return "lcb.grading.official:grade_official", kwargs, budget
    if problem.mode is Mode.FUNCTIONAL and not problem.fn_name:
        raise ValueError(f"problem {problem.id!r} is functional but has no fn_name")
    limits = Limits.for_functional() if problem.mode is Mode.FUNCTIONAL else Limits.for_stdin()
    kwargs = {"source": code, "mode": problem.mode, "tests": chosen, "fn_name": problem.fn_name,
              "all_tests": all_tests, "timeout_s": float(timeout_s), "limits": limits}
    return "lcb.grading.default:grade_in_worker", kwargs, budget


class GradingPool:
    """Pre-started slim workers (<= cores). Use as a context manager or call `close()`."""

    def __init__(self, workers: int | None = None, *, sandbox: str = "process"):
        launch.check_sandbox(sandbox)
        cores = os.cpu_count() or 1
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        self.size = min(workers or cores, cores)
        self.sandbox = sandbox
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="lcb-grade")
        # Workers are started from these long-lived threads: the kernel's "parent died" signal
        # (bubblewrap's --die-with-parent) fires when the *thread* that forked exits.
        self._launcher = ThreadPoolExecutor(self.size, thread_name_prefix="lcb-grade-launch")
        self._live: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        # A slot holds a worker, a worker still starting (Future), or None (start on demand).
        self._slots: queue.SimpleQueue[_Worker | Future | None] = queue.SimpleQueue()
        for _ in range(self.size):  # start them all now, in parallel, while the caller works
            self._slots.put(self._launcher.submit(self._start))

    def grade_sync(self, problem: Problem, code: str, *, all_tests: bool = False,
                   grader: str = "default", tests: Sequence[Test] | None = None,
                   timeout_s: float = TIMEOUT_S) -> Grade:
        """Grade `code` on `problem` (see `lcb.grading.grade`), blocking this thread."""
        path, kwargs, budget = build_request(problem, code, all_tests=all_tests, grader=grader,
                                             tests=tests, timeout_s=timeout_s)
        worker = self._checkout()
        try:
            return worker.call(path, kwargs, budget_s=budget)
        except WorkerGone as exc:
            self._discard(worker)
            worker = None
            raise GradingError(f"grading worker died while grading {problem.id!r}: {exc}") from None
        finally:
            self._slots.put(worker)

    async def grade(self, problem: Problem, code: str, *, all_tests: bool = False,
                    grader: str = "default", tests: Sequence[Test] | None = None,
                    timeout_s: float = TIMEOUT_S) -> Grade:
        call = functools.partial(self.grade_sync, problem, code, all_tests=all_tests,
                                 grader=grader, tests=tests, timeout_s=timeout_s)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _start(self) -> _Worker:
        worker = _Worker.start(self.sandbox)
        with self._lock:
            self._live.add(worker)
        return worker

    def _checkout(self) -> _Worker:
        if self._closed:
            raise GradingError("the grading pool is closed")
        slot = self._slots.get()
        try:
            if isinstance(slot, Future):
                slot = slot.result()
            if slot is None or slot.proc.poll() is not None:
                if slot is not None:
                    self._discard(slot)
                slot = self._launcher.submit(self._start).result()
        except BaseException:
            self._slots.put(None)
            raise
        return slot

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._live.discard(worker)
        worker.stop()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._launcher.shutdown(wait=True)
        with self._lock:
            workers, self._live = list(self._live), set()
        for worker in workers:
            worker.stop()

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (for diagnostics and tests)."""
        with self._lock:
            return sorted(w.pid for w in self._live if w.proc.poll() is None)

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> GradingPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

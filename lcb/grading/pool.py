"""`GradingPool`: a few slim worker processes shared by every task and thread of a run.

Contract:
- At most `os.cpu_count()` workers (a request for more is capped): more programs running than
  cores would turn slow programs into false time limits. All start at once, in the background,
  when the pool is made; a dead one is replaced on the next call.
- `grade_sync` blocks the calling thread; `await grade(...)` runs the same call on the pool's
  own threads, so any number of asyncio tasks and threads may share one pool.
- The problem's tests travel to the worker once per program (one pickle per call).
- A worker that dies mid-call (which no program should be able to cause) raises `GradingError`
  and is replaced on the next call; so is a worker whose call was interrupted (e.g. by
  KeyboardInterrupt: its reply is never read by a later call). Bad arguments raise
  `ValueError`/`TypeError` at once.
- Workers get plain data (source, `Case` tuples, `Limits`) and answer plain data; the `Grade` is
  built here, so workers never load `lcb.data.problems` or the grade dataclasses.
- `close()` stops the workers and kills anything left in their pids cgroups.
"""

from __future__ import annotations

import asyncio
import functools
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from subprocess import Popen
from typing import Any

from lcb.data.problems import Mode, Problem, Test
from lcb.grading import launch
from lcb.grading.contain import Limits, PidsJail
from lcb.grading.default import grade_from_run
from lcb.grading.grades import Grade
from lcb.grading.process import Case
from lcb.grading.worker import WorkerGone, recv_message, send_message

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
        # Programs run in this jail (`contain.worker_jail`): the worker and a supervisor take 2
        # tasks, the program Limits.max_tasks. Under bubblewrap (no jail inside) keep headroom
        # for bwrap's own processes.
        extra = 2 if sandbox == "process" else 32
        jail = PidsJail.create(max_tasks=Limits().max_tasks + extra, prefix="lcb-worker")
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

    def stop(self, *, kill: bool = False) -> None:
        """End the worker: at EOF it exits on its own; `kill` (a worker busy or out of step)
        does not wait for that."""
        if kill:
            self.proc.kill()
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
                  tests: Sequence[Test] | None, timeout_s: float
                  ) -> tuple[str, dict, float, Callable[[Any], Grade]]:
    """(worker function, its kwargs, time budget, answer -> Grade) for one grading call;
    validates arguments."""
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
        return "lcb.grading.official:grade_official", kwargs, budget, _same
    if problem.mode is Mode.FUNCTIONAL and not problem.fn_name:
        raise ValueError(f"problem {problem.id!r} is functional but has no fn_name")
    limits = Limits.for_functional() if problem.mode is Mode.FUNCTIONAL else Limits.for_stdin()
    # Plain data only (str, tuples): the worker never imports lcb.data.problems or the dataclasses.
    kwargs = {"source": code, "mode": str(problem.mode), "fn_name": problem.fn_name,
              "tests": tuple(Case(t.input, t.output) for t in chosen), "all_tests": all_tests,
              "timeout_s": float(timeout_s), "limits": limits}
    finish = functools.partial(grade_from_run, tests=chosen, all_tests=all_tests)
    return "lcb.grading.default:run_in_worker", kwargs, budget, finish


def _same(grade: Grade) -> Grade:
    return grade


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
        path, kwargs, budget, finish = build_request(
            problem, code, all_tests=all_tests, grader=grader, tests=tests, timeout_s=timeout_s)
        worker = self._checkout()
        try:
            answer = worker.call(path, kwargs, budget_s=budget)
        except GradingError:  # the worker answered (it raised): its pipe is in step, keep it
            raise
        except WorkerGone as exc:
            doomed, worker = worker, None  # cleared first: `finally` must not put it back
            self._discard(doomed, kill=True)
            raise GradingError(f"grading worker died while grading {problem.id!r}: {exc}") from None
        except BaseException:
            # Interrupted mid-call (KeyboardInterrupt, a signal handler's exception, …): the reply
            # is still unread, so the next call would read it. This worker cannot be reused.
            doomed, worker = worker, None
            self._discard(doomed, kill=True)
            raise
        finally:
            self._slots.put(worker)
        return finish(answer)

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

    def _discard(self, worker: _Worker, *, kill: bool = False) -> None:
        with self._lock:
            self._live.discard(worker)
        worker.stop(kill=kill)

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

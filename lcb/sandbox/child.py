"""What runs inside a program's own process (after `contain.enter_child`).

- `run_as_script(code, main=…)`: a stdin program as `python prog.py` would run it, in `main`
  (a `__main__` module, with the prelude already run in it): `sys.std*` are the interpreter's own
  streams, now on the program's fds 0/1/2 (with `.buffer`); the exit status is what Python gives
  (SystemExit rules, 1 after an uncaught exception, traceback on stderr). It ends as the
  interpreter does (`lcb.sandbox.exits`): non-daemon threads joined, the program's `atexit`
  handlers run, `sys.stdout`/`sys.stderr` flushed, then its `__main__` torn down (its objects'
  finalizers run: a program that may have any runs in a `__main__` of its own for that), then
  the file objects it left unflushed.
- `run_functional(...)`: load the program once (prelude + program in a module that is not
  `__main__`), take `Solution()` when the text `class Solution` occurs (one instance for all
  tests) else the module-level function. It talks JSON lines with the judge on its channel (a
  socket, the one descriptor it has beyond 0/1/2), in `wire.frame`s: it answers `ready` (or
  `error`/`memory` with the traceback when loading fails), then for each test `i` it receives
  (the input text): JSON args per line, call, and `value i cpu` with the value in
  `lcb.sandbox.values`' encoding (or `error`/`memory` with the traceback, or `nondata` for a
  value that is not plain data). It never sees an expected output:
  the judge compares. Whatever the program does to this process (patching `json`, writing to
  the channel itself) only changes what it answers, as returning another value would.

These functions never return: they end the process with `os._exit`.
"""

from __future__ import annotations

import atexit
import builtins
import gc
import io
import json
import os
import sys
import time
import traceback
import types
from typing import NoReturn

from lcb.sandbox.exits import exit_status, finalize, may_leave_files, may_tear_down, own_main
from lcb.sandbox.prelude import (
    GUARDED_BUILTINS,
    PRELUDE_CODE,
    compile_after_prelude,
    reliability_guard,
)
from lcb.sandbox.values import NotData
from lcb.sandbox.values import encode as encode_value
from lcb.sandbox.wire import FrameReader, frame
from lcb.text import FEEDBACK_CHARS, clip_feedback

SCRIPT_FILE = "solution.py"
FUNCTIONAL_MODULE = "tmp_sol"  # like LiveCodeBench: not "__main__", so main guards do not run
_HARNESS_FILES = (__file__, compile_after_prelude.__code__.co_filename)  # hidden in tracebacks


def _bind_std_streams(namespace: dict) -> None:
    """Make `sys.std*` text streams on fds 0/1/2 (UTF-8, with `.buffer`).

    In a worker they already are, and are reused: building new ones in every test process costs
    time. A host that replaced them (pytest's capture, an IDE) gets fresh ones, and the names the
    prelude's `from sys import *` bound are updated to match.
    """
    try:
        if [s.fileno() for s in (sys.stdin, sys.stdout, sys.stderr)] == [0, 1, 2]:
            return
    except (AttributeError, ValueError, OSError):
        pass

    def text(fd: int, mode: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding="utf-8", line_buffering=(fd == 2),
                                errors="backslashreplace" if fd == 2 else "strict")

    sys.stdin = sys.__stdin__ = text(0, "r")
    sys.stdout = sys.__stdout__ = text(1, "w")
    sys.stderr = sys.__stderr__ = text(2, "w")
    if "stdin" in namespace:
        namespace.update(stdin=sys.stdin, stdout=sys.stdout, stderr=sys.stderr)


def _program_traceback(exc: BaseException) -> str:
    """The traceback as `python prog.py` would show it: without this harness's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _HARNESS_FILES:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def script_module(filename: str, *, prelude: bool, name: str = "__main__") -> types.ModuleType:
    """A fresh module named `name` (`__file__` = filename), with the prelude run in it if asked."""
    module = types.ModuleType(name)
    module.__dict__.update(__file__=filename, __builtins__=builtins)
    if prelude:
        exec(PRELUDE_CODE, module.__dict__)
    return module


_templates: dict[str, types.ModuleType] = {}


def prelude_module(name: str) -> types.ModuleType:
    """A module named `name` with the prelude run in it, built once per process and cached.

    Only forked children may run programs in it (each gets its own copy-on-write copy), never
    the process that built it. Workers build both templates before forking anything, so a
    program costs neither the prelude's imports nor its name binding.
    """
    if name not in _templates:
        _templates[name] = script_module(SCRIPT_FILE, prelude=True, name=name)
    return _templates[name]


def prepare_script(main: types.ModuleType) -> None:
    """What `run_as_script` sets up before running a program in `main`, done in the process
    that forks the program processes (once, not in every fork): `sys.std*` on fds 0/1/2,
    `sys.argv`, `main` as `sys.modules["__main__"]`, and no `atexit` handler registered (the
    imports of lcb's processes registered theirs; at exit only the program's run). That
    process must not run code of its own in `main` afterwards."""
    namespace = main.__dict__
    _bind_std_streams(namespace)
    atexit._clear()
    sys.argv[:] = [namespace["__file__"]]  # in place: the prelude bound `argv` to this list
    sys.modules["__main__"] = main


def run_as_script(code: types.CodeType | str, *, main: types.ModuleType,
                  after_prelude: bool = True, prepared: bool = False,
                  find_files: bool | None = None, teardown: bool | None = None) -> NoReturn:
    """Run `code` (compiled, or source compiled here) in `main`; exit as Python would.

    Source is compiled as if the prelude were prepended (a `from __future__` import is then a
    SyntaxError) unless `after_prelude` is False. `prepared`: the parent already ran
    `prepare_script(main)`. `find_files`, `teardown`: `may_leave_files(code)` and
    `may_tear_down(code)`, computed here if None (a parent that forks many runs of one program
    computes them once). With `teardown` the program runs in a copy of `main`
    (`exits.own_main`), which its exit tears down.
    """
    status = 1
    try:
        namespace = main.__dict__
        if not prepared:
            prepare_script(main)
        try:
            if isinstance(code, str):
                code = (compile_after_prelude(code, namespace["__file__"]) if after_prelude
                        else compile(code, namespace["__file__"], "exec"))
            if find_files is None:
                find_files = may_leave_files(code)
            if teardown is None:
                teardown = may_tear_down(code)
            if find_files:
                gc.freeze()  # what exists now is not the program's (see lcb.sandbox.exits)
            # No name here may hold the program's own namespace: its teardown must free it.
            exec(code, own_main(main) if teardown else namespace)
            status = 0
        except SystemExit as exc:
            status = exit_status(exc)
        except BaseException as exc:
            sys.stderr.write(_program_traceback(exc))
            status = 1
        status = finalize(status, find_files=bool(find_files), teardown=bool(teardown))
    finally:
        os._exit(status)


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _failure_text(exc: BaseException) -> str:
    return clip_feedback(_program_traceback(exc), FEEDBACK_CHARS)


def _load(code: types.CodeType, source: str, fn_name: str):
    namespace = prelude_module(FUNCTIONAL_MODULE).__dict__  # our own copy: we are a fork
    for name in GUARDED_BUILTINS:  # the prelude ran before the guard; LiveCodeBench's after it
        namespace[name] = getattr(builtins, name)
    exec(code, namespace)
    if "class Solution" in source:  # LiveCodeBench's own rule for LeetCode-style programs
        return getattr(namespace["Solution"](), fn_name)
    if fn_name not in namespace:
        raise NameError(f"the program defines no function {fn_name!r}")
    return namespace[fn_name]


def _failed(index: int, exc: BaseException, cpu: float) -> bytes:
    kind = "memory" if isinstance(exc, MemoryError) else "error"
    return frame(kind, index, f"{cpu:.6f}", payload=_failure_text(exc).encode("utf-8",
                                                                               "replace"))


def _answer(method, index: int, text: str) -> bytes:
    """Call the method on one test's input; the answer carries the value as data."""
    started = time.process_time()
    try:
        result = method(*[json.loads(line) for line in text.split("\n")])
    except BaseException as exc:  # SystemExit and KeyboardInterrupt are program failures too
        return _failed(index, exc, time.process_time() - started)
    cpu = f"{time.process_time() - started:.6f}"
    try:
        return frame("value", index, cpu, payload=encode_value(result).encode())
    except NotData as exc:
        return frame("nondata", index, cpu, payload=str(exc).encode())
    except BaseException as exc:  # an item's .item() raised, memory ran out while encoding, ...
        return _failed(index, exc, float(cpu))


def run_functional(code: types.CodeType, *, source: str, fn_name: str, chan: int) -> NoReturn:
    try:
        reliability_guard()
        try:
            method = _load(code, source, fn_name)
        except BaseException as exc:
            _send(chan, _failed(-1, exc, 0.0))
            os._exit(0)
        _send(chan, frame("ready", -1, 0))
        requests = FrameReader(chan, limit=1 << 40)  # the judge's frames: no deadline
        while (request := requests.next(None)) is not None:
            fields, data = request
            _send(chan, _answer(method, int(fields[0]), data.decode("utf-8", "surrogatepass")))
    finally:
        os._exit(0)

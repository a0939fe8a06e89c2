"""The official grader's program side: LiveCodeBench's `run_test`, in the program's process.

`child_main(source, tests_fd=…, chan=…)` runs in a process forked by the program host (its own
uid, Landlock, rlimits: see `lcb.sandbox.host`). It reads LiveCodeBench's `input_output` JSON
from the tests memfd, calls `run_test` as LiveCodeBench does (`run_segments`: again on the
remaining tests after each failure with `all_tests`), and writes to its channel one heartbeat
byte each time `run_test` arms its per-test alarm (`.`) or cancels it (`,`), then `!` and the
result as JSON: `[[start, [codes], metadata], ...]` (1 = passed; LiveCodeBench's -1/-2/-3/-4
kept).

By LiveCodeBench's design the program shares this process with the expected outputs and can
forge that result; it still cannot reach lcb (see `lcb.sandbox`). Slim: the zygote
imports this module (and, on the first official request, LiveCodeBench's code) before it forks.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn

INSTALL_HINT = (
    "the official grader needs LiveCodeBench's grading code: "
    "pip install --no-deps nvidia-livecodebench==26.3 && pip install numpy"
)
HEARTBEAT, DISARMED, RESULT = b".", b",", b"!"
_EXIT_CRASH = 3


class OfficialGraderMissing(RuntimeError):
    """LiveCodeBench's grading package (or numpy, which it imports) is not installed."""


# The int-to-str digit limit LiveCodeBench's import set (its metrics module calls
# `sys.set_int_max_str_digits(50000)` at import): its grading processes inherit it.
_official_digits: dict[str, int] = {}


def require_official() -> ModuleType:
    """Import LiveCodeBench's `testing_util`, or raise `OfficialGraderMissing` saying how to.

    The import would raise the int-to-str digit limit for the whole process; the process's own
    limit is put back at once (lcb's readers refuse longer integers, and a default-graded
    program gets Python's limit, as under `python prog.py`). The limit the import set is kept
    for `run_segments`, which grades with it, as LiveCodeBench's processes do."""
    limit = sys.get_int_max_str_digits()
    try:
        from livecodebench.evaluation import testing_util
    except ImportError as exc:
        raise OfficialGraderMissing(f"{INSTALL_HINT} ({exc})") from None
    finally:
        if sys.get_int_max_str_digits() != limit:
            _official_digits["digits"] = sys.get_int_max_str_digits()
            sys.set_int_max_str_digits(limit)
    return testing_util


def _code(value: object) -> int:
    """Normalize one official result: True -> 1, False -> -2, error codes kept."""
    if hasattr(value, "item"):  # numpy scalars and arrays, as LiveCodeBench unwraps them
        value = value.item(0)
    if value is True:
        return 1
    if isinstance(value, int) and not isinstance(value, bool) and value in (-1, -2, -3, -4):
        return value
    try:
        return 1 if bool(value > 0) else -2
    except Exception:
        return -2


def _jsonable(metadata: object) -> dict:
    if not isinstance(metadata, dict):
        return {}
    return {str(k): v if isinstance(v, int | float | str) else str(v)
            for k, v in metadata.items()}


def run_segments(code: str, tests: dict, *, timeout_s: int, all_tests: bool) -> list[list]:
    """Call `run_test` in THIS process (a disposable one: it disables os functions), with the
    int-to-str digit limit LiveCodeBench's import set (see `require_official`).

    `tests` is LiveCodeBench's `input_output` dict. With `all_tests`, run again on the tests
    after each failure until all have a verdict.
    """
    import builtins
    import shutil
    import subprocess

    testing_util = require_official()
    if "digits" in _official_digits:  # this process is LiveCodeBench's: its limit applies
        sys.set_int_max_str_digits(_official_digits["digits"])
    saved = [(vars(m), dict(vars(m))) for m in (os, shutil, subprocess, builtins)]
    n_tests, start, segments = len(tests["inputs"]), 0, []
    while start < n_tests:
        for namespace, copy in saved:  # run_test's guard cannot be applied twice
            namespace.update(copy)
        part = {"inputs": tests["inputs"][start:], "outputs": tests["outputs"][start:],
                "fn_name": tests.get("fn_name")}
        results, metadata = testing_util.run_test({"input_output": json.dumps(part)},
                                                  test=code, timeout=timeout_s)
        codes = [_code(value) for value in results]
        segments.append([start, codes, _jsonable(metadata)])
        start += len(codes)
        if not all_tests or not codes or all(c == 1 for c in codes):
            break
    return segments


def _install_heartbeat(chan: int) -> None:
    """Make every `signal.alarm` call also tell the judge: `HEARTBEAT` when it arms an alarm
    (run_test arms one per test, and one around loading the program), `DISARMED` when it
    cancels it (the test ended: LiveCodeBench's own work follows, comparing or parsing)."""
    real_alarm = signal.alarm

    def alarm(seconds: int) -> int:
        os.write(chan, HEARTBEAT if seconds > 0 else DISARMED)
        return real_alarm(seconds)

    signal.alarm = alarm


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def child_main(source: str, *, tests_fd: int, chan: int, timeout_s: int,
               all_tests: bool) -> NoReturn:
    """Body of the official program process: run, send the result, exit without cleanup."""
    status = _EXIT_CRASH
    try:
        tests = json.loads(_read_all(tests_fd))
        os.close(tests_fd)
        _install_heartbeat(chan)
        segments = run_segments(source, tests, timeout_s=timeout_s, all_tests=all_tests)
        _write_all(chan, RESULT + json.dumps(segments).encode())
        status = 0
    except BaseException:  # a SystemExit or crash escaping run_test: LiveCodeBench's -1
        status = _EXIT_CRASH
    finally:
        os._exit(status)


def input_output(tests: Sequence[Any], fn_name: str | None) -> str:
    """LiveCodeBench's `input_output` JSON for tests with `.input`/`.output` (or pairs)."""
    pairs = [(t.input, t.output) if hasattr(t, "input") else tuple(t) for t in tests]
    return json.dumps({"inputs": [p[0] for p in pairs], "outputs": [p[1] for p in pairs],
                       "fn_name": fn_name})

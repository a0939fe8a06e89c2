"""How a stdin program's process ends: as CPython's interpreter ends `python prog.py`.

`finalize(status, find_files=…)` does, in the program's process after its code ran, what
`Py_FinalizeEx` does that a program can see, and returns the exit status (`exit_status` gives
the status a `SystemExit` asks for):
1. non-daemon threads are joined (`threading._shutdown`);
2. the `atexit` handlers run, most recent first; one that raises, `SystemExit` included, is
   printed to stderr ("Exception ignored in atexit callback") and the status does not change;
3. `sys.stdout` and `sys.stderr` are flushed (a closed one is skipped; a failed flush makes the
   status 120);
4. with `find_files`, the file objects the program left unflushed are flushed (an
   `open(1, "w")` written to and never closed), as their finalizers flush them when the
   interpreter tears down its modules: after `sys.stdout`, their failures ignored.

What it leaves out: other finalizers (`__del__` of the program's objects) and the teardown's
order among file objects; the caller ends the process with `os._exit` right after.
Stdlib only: zygotes import it before forking.
"""

from __future__ import annotations

import atexit
import gc
import io
import sys
import types
from itertools import compress, repeat


def exit_status(exc: SystemExit) -> int:
    """The status `python prog.py` exits with after `SystemExit(exc.code)`."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flush_std_streams() -> int:
    """Flush stdout and stderr as CPython does at exit: a closed stream is skipped; a failed
    flush makes the exit status 120."""
    status = 0
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not getattr(stream, "closed", False):
                stream.flush()
        except Exception:
            status = 120
    return status


_FILE_LAYERS = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom, io.BufferedRWPair)
# Names a program uses to make a file object it could write to and leave unflushed.
_FILE_MAKERS = frozenset({"open", "fdopen", "FileIO", "TextIOWrapper", "BufferedWriter",
                          "BufferedRandom", "BufferedRWPair", "makefile"})


def may_leave_files(code: types.CodeType) -> bool:
    """Whether a program's code names something that makes a file object (`open`, `os.fdopen`,
    `io.TextIOWrapper`, ...), as a name or a string constant. Only such a program's process
    looks for file objects left unflushed at exit: the search costs a test process about
    twenty copy-on-write faults, too dear for every test of every program. (A program that
    assembles the name at run time is not searched; it loses only output it never flushed.)
    """
    stack = [code]
    while stack:
        code = stack.pop()
        if not _FILE_MAKERS.isdisjoint(code.co_names) or not _FILE_MAKERS.isdisjoint(
                const for const in code.co_consts if isinstance(const, str)):
            return True
        stack += [const for const in code.co_consts if isinstance(const, types.CodeType)]
    return False


def _flush_program_files() -> None:
    """Flush the file objects the program left alive, as their finalizers do when CPython
    tears down its modules at exit (an `open(1, "w")` written to but never flushed).

    Only the program's objects are found: everything older was frozen (`gc.freeze`) before
    the program ran, and `gc.get_objects` skips frozen objects. A flush that fails is ignored,
    as CPython ignores it then (outside `-X dev`); the exit status does not change.
    """
    try:
        objects = gc.get_objects()
        kinds = set(map(type, objects))
        if not any(map(issubclass, kinds, repeat(_FILE_LAYERS))):
            return
        kinds = {kind for kind in kinds if issubclass(kind, _FILE_LAYERS)}
        files = list(compress(objects, map(kinds.__contains__, map(type, objects))))
    except Exception:  # noqa: BLE001 - out of memory, or a type that will not say: skip
        return
    del objects
    files.sort(key=lambda f: not isinstance(f, io.TextIOWrapper))  # text first: it feeds a buffer
    for file in files:
        try:
            if not file.closed:
                file.flush()
        except BaseException:  # noqa: BLE001 - ignored at exit, as by the interpreter
            pass


def finalize(status: int, *, find_files: bool) -> int:
    """End the program as `Py_FinalizeEx` does; return the exit status.

    Non-daemon threads are joined, then the `atexit` handlers run (most recent first; one that
    raises, SystemExit included, is printed to stderr and ignored), then `sys.stdout` and
    `sys.stderr` are flushed (a failure makes the status 120), then, if `find_files`, other
    file objects.
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # wait for non-daemon threads, as interpreter exit does
    if atexit._ncallbacks():
        atexit._run_exitfuncs()
    status = _flush_std_streams() or status
    if find_files:
        _flush_program_files()
    return status

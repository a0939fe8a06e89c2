"""How a stdin program's process ends: as CPython's interpreter ends `python prog.py`.

`finalize(status, find_files=…, teardown=…)` does, in the program's process after its code
ran, what `Py_FinalizeEx` does that a program can see, and returns the exit status
(`exit_status` gives the status a `SystemExit` asks for):
1. non-daemon threads are joined (`threading._shutdown`);
2. the `atexit` handlers run, most recent first; one that raises, `SystemExit` included, is
   printed to stderr ("Exception ignored in atexit callback") and the status does not change;
3. `sys.stdout` and `sys.stderr` are flushed (a closed one is skipped; a failed flush makes the
   status 120);
4. with `find_files`, the file objects the program left unflushed are flushed (an
   `open(1, "w")` written to and never closed), as their finalizers flush them when the
   interpreter tears down its modules: after `sys.stdout`, their failures ignored (text
   layers before the buffers under them: in a teardown the collector's order might close a
   file's descriptor before its text is written);
5. with `teardown`, the program's `__main__` is torn down as the interpreter tears down its
   modules (`tear_down_main`): its objects' finalizers run (`__del__`, a suspended
   generator's `finally`), in the order CPython's garbage collector gives them, and what they
   printed is flushed at the end, as `sys.stdout`'s own finalizer flushes it, failures
   ignored (the status does not change).

Both are done only for programs that need them (`may_leave_files`, `may_tear_down`: read once
from the program's code by the process that forks its tests), so other programs pay nothing.
What it leaves out: finalizers of objects reachable from other modules (which CPython clears
after `sys.stdout` is gone: what they print is lost there too), and the exact order of
several finalizers where CPython's depends on when its collector last ran; the caller ends the
process with `os._exit` right after. Stdlib only: zygotes import it before forking.
"""

from __future__ import annotations

import atexit
import gc
import io
import sys
import types
import weakref
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


# inspect.CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR (inspect itself is slow to import)
_SUSPENDABLE = 0x20 | 0x80 | 0x200


def may_tear_down(code: types.CodeType) -> bool:
    """Whether a program's code may leave objects whose finalizers print at exit: it names
    `__del__` (a method, a name or a string constant) or defines a generator or coroutine
    function (a suspended one runs its `finally` when collected; a generator expression
    cannot hold one). Only such a program's `__main__` is torn down at exit (`finalize`).
    """
    stack = [code]
    while stack:
        code = stack.pop()
        if code.co_name == "__del__" or "__del__" in code.co_names or "__del__" in code.co_consts:
            return True
        if code.co_flags & _SUSPENDABLE and code.co_name != "<genexpr>":
            return True
        stack += [const for const in code.co_consts if isinstance(const, types.CodeType)]
    return False


def own_main(template: types.ModuleType) -> dict:
    """A fresh `__main__` for a program to be torn down at exit: a copy of `template` (the
    prelude's module, frozen in the host with everything else, so never collected), put in
    `sys.modules`; returns its namespace. Nothing else refers to it, as in `python prog.py`."""
    main = types.ModuleType(template.__name__)
    main.__dict__.update(template.__dict__)
    sys.modules["__main__"] = main
    return main.__dict__


def tear_down_main() -> None:
    """Let the program's `__main__` go as CPython's module teardown does: it leaves
    `sys.modules` and is collected with the cycles its functions make (the finalizers of what
    only it held run, while its names still hold their values); if something else keeps the
    module alive, its names are then set to None, those with one leading underscore first,
    and what that frees is collected."""
    try:
        alive = weakref.ref(sys.modules.pop("__main__"))
    except (KeyError, TypeError):  # the program took it away, or put a non-module there
        alive = None
    gc.collect()
    main = alive() if alive is not None else None
    if main is None:
        return
    namespace = main.__dict__
    del main
    names = [name for name in namespace if isinstance(name, str) and name != "__builtins__"]
    private = [name for name in names if name[:1] == "_" and name[1:2] != "_"]
    for name in private + names:
        if namespace.get(name) is not None:
            namespace[name] = None
    del namespace
    gc.collect()


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


def finalize(status: int, *, find_files: bool, teardown: bool = False) -> int:
    """End the program as `Py_FinalizeEx` does; return the exit status.

    Non-daemon threads are joined, then the `atexit` handlers run (most recent first; one that
    raises, SystemExit included, is printed to stderr and ignored), then `sys.stdout` and
    `sys.stderr` are flushed (a failure makes the status 120), then, if `find_files`, other
    file objects, then, if `teardown`, the program's `__main__` (made by `own_main`) is torn
    down and the std streams are flushed again (failures ignored).
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # wait for non-daemon threads, as interpreter exit does
    if atexit._ncallbacks():
        atexit._run_exitfuncs()
    status = _flush_std_streams() or status
    if find_files:
        _flush_program_files()
    if teardown:
        tear_down_main()
        # What the finalizers printed: CPython's sys.stdout flushes it in its own finalizer,
        # where a failure is ignored.
        _flush_std_streams()
    return status

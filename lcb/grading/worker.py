"""A slim, single-threaded grading worker: `python -s -c '…main()'` started by `GradingPool`.

It imports only the stdlib, the prelude modules and lcb's grading modules (never LangChain), so
forking a supervisor from it is cheap and safe. Protocol on its stdin/stdout: length-prefixed
pickles. The parent sends `(function_path, kwargs)` ("module:function"); the worker calls it and
answers `(True, value)` or `(False, traceback_text)`. It answers `{"pid": …}` once at start and
exits at EOF. The worker is a child subreaper and dies with its parent, so nothing a program
forks outlives a grading call or the pool.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import time
import traceback
from typing import Any

from lcb.grading.contain import become_subreaper, die_with_parent, kill_descendants
from lcb.grading.prelude import import_prelude_modules
from lcb.grading.process import sweep_stale_workdirs

_HEADER = 8


class WorkerGone(RuntimeError):
    """The worker exited, or sent nothing before the deadline."""


def send_message(fd: int, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(len(data).to_bytes(_HEADER, "big") + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WorkerGone(f"no answer within the deadline ({got}/{size} bytes read)")
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            raise WorkerGone("the worker closed its pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_message(fd: int, *, deadline: float | None = None) -> Any:
    """The next message; raises `WorkerGone` at EOF or when `deadline` (monotonic) passes."""
    size = int.from_bytes(_read_exactly(fd, _HEADER, deadline), "big")
    return pickle.loads(_read_exactly(fd, size, deadline))


def resolve(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _warm_up() -> None:
    """Do once here what every forked supervisor would otherwise redo: imports, templates."""
    import_prelude_modules()
    from lcb.grading import child, default  # noqa: F401  (the default grader's code)

    for name in ("__main__", child.FUNCTIONAL_MODULE):
        child.prelude_module(name)
    sweep_stale_workdirs()


def main() -> None:
    """Serve calls until the parent closes the pipe."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints must not corrupt the protocol
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool decides when we stop
    die_with_parent()
    become_subreaper()
    _warm_up()
    send_message(proto_out, {"pid": os.getpid()})
    while True:
        try:
            path, kwargs = recv_message(proto_in)
        except WorkerGone:
            break
        try:
            answer = (True, resolve(path)(**kwargs))
        except Exception:
            answer = (False, traceback.format_exc())
        kill_descendants(settle_s=2.0)
        send_message(proto_out, answer)
    kill_descendants(settle_s=2.0)
    os._exit(0)

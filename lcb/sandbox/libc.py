"""The C library, loaded once per process, and the errno check of its calls.

`libc()` is `ctypes.CDLL(None, use_errno=True)`, opened on first use and cached (zygotes call
it before forking, so a program host never opens it again). `check(result, what)` returns a
call's result, or raises `OSError(errno, "<what>: <strerror>")` when it is negative (the C
convention for prctl, mount, unshare and syscall). Stdlib only.
"""

from __future__ import annotations

import ctypes
import functools
import os


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> int:
    """`result`, or OSError with the call's errno when it is negative."""
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result

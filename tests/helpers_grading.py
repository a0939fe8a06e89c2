"""Problem builders for grading and containment tests (imported explicitly by test modules)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

from lcb.data.problems import Mode, Problem, Test


def make_problem(tests: list[tuple[str, str]], *, mode: Mode = Mode.STDIN,
                 fn_name: str | None = None, public: list[tuple[str, str]] = (),
                 pid: str = "t_1") -> Problem:
    """A problem whose hidden tests are `tests` as (input, expected output) pairs."""
    if mode is Mode.FUNCTIONAL and fn_name is None:
        raise ValueError("a functional problem needs fn_name")
    return Problem(
        id=pid, title=f"test problem {pid}", statement="(test)",
        starter_code="class Solution:\n    pass\n" if mode is Mode.FUNCTIONAL else "",
        mode=mode, fn_name=fn_name,
        public_tests=tuple(Test(i, o, mode) for i, o in public),
        private_tests=tuple(Test(i, o, mode) for i, o in tests),
        difficulty="easy", platform="atcoder", contest_id="c1", contest_date="2024-01-01",
    )


def stdin_problem(*pairs: tuple[str, str]) -> Problem:
    return make_problem(list(pairs))


def functional_problem(fn_name: str, *pairs: tuple[str, str]) -> Problem:
    return make_problem(list(pairs), mode=Mode.FUNCTIONAL, fn_name=fn_name)


SUM_STDIN = stdin_problem(("1 2\n", "3\n"), ("10 20\n", "30\n"), ("-5 5\n", "0\n"))
ADD_FUNCTIONAL = functional_problem("add", ("1\n2", "3"), ("10\n20", "30"), ("-5\n5", "0"))


FORK_BOMB = """\
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""


def setsid_escape(marker: str, then: str) -> str:
    """A program that leaves a detached grandchild (its argv carries `marker`), then runs `then`."""
    return f"""\
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", {marker!r}])
    os._exit(0)
{then}"""


@contextmanager
def loopback_listener() -> Iterator[int]:
    """A listening TCP socket on 127.0.0.1 that accepts nothing; yields its port. Tests that
    probe the network use it: they never send traffic off this machine."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]

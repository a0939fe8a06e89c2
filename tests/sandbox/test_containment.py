"""Hostile programs, one property each. Every test runs inside an outer pids-cgroup guard
(tests/cgroup_guard.py), so a containment bug fails the test instead of hurting the machine, and
the guard's task list proves that no process of a graded program survived.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from cgroup_guard import pids_guard
from helpers_grading import (
    ADD_FUNCTIONAL,
    FORK_BOMB,
    SUM_STDIN,
    loopback_listener,
    setsid_escape,
    stdin_problem,
)

from lcb.grading import GradingPool, Verdict
from lcb.sandbox import landlock
from lcb.sandbox.contain import Limits

GUARD_PIDS = 400
SUM_OK = "a, b = map(int, input().split())\nprint(a + b)\n"


def marked_processes(marker: str) -> list[int]:
    """Live processes whose command line carries `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _grade_in_pool(problem, code, marker, sandbox, kwargs):
    with GradingPool(1, sandbox=sandbox) as pool:
        started = time.monotonic()
        grade = pool.grade_sync(problem, code, **kwargs)
        elapsed = time.monotonic() - started
        survivors = marked_processes(marker) if marker else []
        after = pool.grade_sync(SUM_STDIN, SUM_OK)  # the pool still works afterwards
    return grade, elapsed, survivors, after.em


def guarded_grade(problem, code, *, marker=None, sandbox="process", **kwargs):
    """Grade in a fresh pool inside a pids guard; assert nothing survives; return details."""
    with pids_guard(max_pids=GUARD_PIDS) as guard:
        grade, elapsed, survivors, after = guard.call(
            _grade_in_pool, problem, code, marker, sandbox, kwargs, timeout_s=120)
        assert survivors == [], f"program processes outlived the grading call: {survivors}"
        assert guard.survivors(settle_s=5.0) == []
        assert not [p for p in guard.path.iterdir() if p.is_dir()], "a jail was left behind"
    assert after == 1, "the pool failed to grade a correct program after the hostile one"
    return grade, elapsed


def first(grade) -> Verdict:
    return grade.outcomes[0].verdict


def test_infinite_loop_is_killed_on_time():
    grade, elapsed = guarded_grade(SUM_STDIN, "while True:\n    pass\n", timeout_s=1.0)
    assert first(grade) is Verdict.TIME_LIMIT and len(grade.outcomes) == 1
    assert 1.0 <= grade.outcomes[0].wall_s < 3.0 and elapsed < 6.0


@pytest.mark.slow
def test_default_time_limit_costs_at_most_six_seconds_plus_margin():
    program = "def add(a, b):\n    while True:\n        pass\n"
    grade, elapsed = guarded_grade(ADD_FUNCTIONAL, program)
    assert first(grade) is Verdict.TIME_LIMIT
    assert 6.0 <= grade.outcomes[0].wall_s < 7.5 and elapsed < 9.0


def test_program_ignoring_sigalrm_is_still_killed():
    program = ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
               "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.alarm(1)\n"
               "while True:\n    pass\n")
    grade, elapsed = guarded_grade(SUM_STDIN, program, timeout_s=1.0)
    assert first(grade) is Verdict.TIME_LIMIT and elapsed < 6.0


def test_fork_bomb_is_bounded_and_leaves_no_process():
    marker = f"bomb-{uuid.uuid4().hex}"
    program = f"import sys\nsys.argv.append({marker!r})\n" + FORK_BOMB
    grade, elapsed = guarded_grade(SUM_STDIN, program, marker=marker, timeout_s=1.0)
    assert first(grade) is Verdict.TIME_LIMIT and elapsed < 15.0


def test_memory_bomb_fails_cleanly_in_functional_mode(monkeypatch):
    monkeypatch.setenv("LCB_FUNCTIONAL_MEMORY_BYTES", str(512 << 20))
    program = "def add(a, b):\n    hog = []\n    while True:\n        hog.append(bytes(1 << 24))"
    grade, _ = guarded_grade(ADD_FUNCTIONAL, program)
    assert first(grade) is Verdict.MEMORY_LIMIT


def test_memory_bomb_fails_cleanly_in_stdin_mode(monkeypatch):
    monkeypatch.setenv("LCB_SANDBOX_MEMORY_BYTES", str(512 << 20))
    grade, _ = guarded_grade(SUM_STDIN, "hog = [bytearray(1 << 24) for _ in range(10_000)]\n")
    assert first(grade) in (Verdict.MEMORY_LIMIT, Verdict.RUNTIME_ERROR)


def test_a_gigabyte_of_output_is_cut_off_quickly():
    program = "import sys\nmib = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(mib)"
    grade, elapsed = guarded_grade(SUM_STDIN, program)
    assert first(grade) is Verdict.OUTPUT_LIMIT and elapsed < 5.0
    assert len(grade.feedback.actual) <= 2200


def test_setsid_grandchild_does_not_survive_the_grading_call():
    marker = f"escape-{uuid.uuid4().hex}"
    program = setsid_escape(marker, then=SUM_OK)
    grade, _ = guarded_grade(SUM_STDIN, program, marker=marker)
    assert grade.em == 1


def test_killing_the_parent_does_not_kill_the_worker():
    # The parent is the program's own host. The program's process sits in a Landlock domain
    # nested in its host's, so the signal is refused and the program fails on its own account;
    # without that scoping (Landlock ABI < 6) the host dies and grading failed (infra, on a
    # fresh slot too). Either way the pool goes on (see guarded_grade).
    program = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(3)\n"
    grade, _ = guarded_grade(SUM_STDIN, program)
    expected = Verdict.RUNTIME_ERROR if landlock.abi() >= 6 else Verdict.INFRA
    assert first(grade) is expected and grade.em == 0


def test_deleting_files_in_cwd_touches_nothing_outside(tmp_path):
    sentinel = tmp_path / "keep.txt"
    sentinel.write_text("precious")
    program = ("import os, shutil\nhere = os.getcwd()\nprint(len(os.listdir(here)))\n"
               "for name in os.listdir(here):\n    os.remove(name)\n"
               "shutil.rmtree(here)\n")
    grade, _ = guarded_grade(stdin_problem(("", "0\n")), program)
    assert grade.em == 1, "the program should start in an empty directory of its own"
    assert sentinel.read_text() == "precious"
    assert str(tmp_path) != os.getcwd() and Path.cwd().exists()


def test_recursion_beyond_the_limit_is_a_runtime_error():
    program = "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(10 ** 6))\n"
    grade, _ = guarded_grade(stdin_problem(("", "1000000\n")), program)
    assert first(grade) is Verdict.RUNTIME_ERROR and "RecursionError" in grade.feedback.error


def test_deep_recursion_within_the_prelude_limit_passes():
    program = "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(40000))\n"
    grade, _ = guarded_grade(stdin_problem(("", "40000\n")), program)
    assert grade.em == 1


@pytest.mark.slow
def test_unbounded_recursion_with_raised_limit_fails_cleanly():
    program = ("import sys\nsys.setrecursionlimit(10 ** 9)\n"
               "def f(n):\n    return 1 + f(n + 1)\nprint(f(0))\n")
    grade, _ = guarded_grade(stdin_problem(("", "0\n")), program, timeout_s=3.0)
    assert first(grade) in (Verdict.RUNTIME_ERROR, Verdict.MEMORY_LIMIT, Verdict.TIME_LIMIT)


def test_reading_stdin_forever_gets_eof():
    program = ("import sys\ntotal = 0\nfor line in sys.stdin:\n    total += len(line.split())\n"
               "while sys.stdin.read(1) or sys.stdin.buffer.read():\n    pass\nprint(total)\n")
    grade, elapsed = guarded_grade(stdin_problem(("1 2\n3\n", "3\n")), program, timeout_s=5.0)
    assert grade.em == 1 and grade.outcomes[0].wall_s < 2.0


def test_tcp_is_closed_in_the_process_tier_too():
    # Landlock (ABI >= 4) takes TCP away from programs in the process tier: a program that
    # connects to a listener on this host's loopback gets an error. Loopback only: tests never
    # send traffic anywhere else.
    from lcb.sandbox import landlock

    if landlock.abi() < 4:
        pytest.skip("this kernel's Landlock has no network rules")
    with loopback_listener() as port:
        program = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                   "    print('connected')\nexcept OSError:\n    print('blocked')\n")
        grade, _ = guarded_grade(stdin_problem(("", "blocked\n")), program)
    assert grade.em == 1


def test_bwrap_tier_has_no_network():
    with loopback_listener() as port:
        program = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                   "    print('connected')\nexcept OSError:\n    print('blocked')\n")
        grade, _ = guarded_grade(stdin_problem(("", "blocked\n")), program, sandbox="bwrap")
    assert grade.em == 1


def test_bwrap_tier_root_is_read_only(tmp_path):
    target = tmp_path / "written.txt"
    program = (f"try:\n    open({str(target)!r}, 'w').write('x')\n    print('wrote')\n"
               "except OSError:\n    print('read-only')\n")
    grade, _ = guarded_grade(stdin_problem(("", "read-only\n")), program, sandbox="bwrap")
    assert grade.em == 1 and not target.exists()


def test_bwrap_tier_contains_a_fork_bomb():
    grade, elapsed = guarded_grade(SUM_STDIN, FORK_BOMB, sandbox="bwrap", timeout_s=1.0)
    assert first(grade) is Verdict.TIME_LIMIT and elapsed < 15.0


def test_os_system_is_blocked_in_functional_mode(tmp_path):
    flag = tmp_path / "ran"
    program = f"import os\ndef add(a, b):\n    os.system('touch {flag}')\n    return a + b\n"
    grade, _ = guarded_grade(ADD_FUNCTIONAL, program)
    assert first(grade) is Verdict.RUNTIME_ERROR and not flag.exists()


def test_functional_program_killing_its_host_is_contained():
    # The host is the program's own side: killing it ends nothing of lcb's. The judge talks to
    # the program directly and times each test itself, so the answers are still judged as
    # given; nothing of the program survives and the pool goes on (see guarded_grade).
    program = ("import ctypes, os\ndef add(a, b):\n"
               "    ctypes.CDLL(None).kill(os.getppid(), 9)\n    return a + b\n")
    grade, _ = guarded_grade(ADD_FUNCTIONAL, program)
    assert [o.verdict for o in grade.outcomes] == [Verdict.PASSED] * 3


def _grade_while_worker_dies():
    with GradingPool(1) as pool:
        pool.grade_sync(SUM_STDIN, SUM_OK)  # start the worker
        [victim] = pool.worker_pids()
        threading.Timer(1.0, os.kill, (victim, signal.SIGKILL)).start()
        started = time.monotonic()
        grade = pool.grade_sync(stdin_problem(("1 2\n", "3\n")), "while True:\n    pass\n",
                                timeout_s=3.0)
        elapsed = time.monotonic() - started
        recovered = pool.grade_sync(SUM_STDIN, SUM_OK).em
        replaced = pool.worker_pids() != [victim]
    return [o.verdict for o in grade.outcomes], elapsed, recovered, replaced


@pytest.mark.slow
def test_a_worker_killed_mid_call_is_replaced_and_the_program_graded_again():
    # Grading failed, not the program: it is graded again on a fresh slot, to its real verdict.
    with pids_guard(max_pids=GUARD_PIDS) as guard:
        verdicts, elapsed, recovered, replaced = guard.call(_grade_while_worker_dies,
                                                            timeout_s=60)
        assert guard.survivors(settle_s=5.0) == []
    assert verdicts == [Verdict.TIME_LIMIT] and elapsed < 12.0
    assert recovered == 1 and replaced


def _grade_without_cgroups(problem, code, marker, timeout_s):
    """The fallback path: no cgroups (as for non-root users or cgroup v2), only the subreaper
    sweep (and, as root, the program uid's RLIMIT_NPROC)."""
    import lcb.sandbox.cgroups as cgroups

    cgroups.CGROUP_ROOT = "/nonexistent-cgroup-root"
    with GradingPool(1) as pool:
        grade = pool.grade_sync(problem, code, timeout_s=timeout_s)
        jails = [slot.jail for slot in pool._live]
        survivors = marked_processes(marker)
    return grade, survivors, jails


@pytest.mark.parametrize("kind", ["setsid", "fork_bomb"])
def test_without_cgroups_the_subreaper_sweep_leaves_no_process(kind):
    marker = f"fallback-{uuid.uuid4().hex}"
    program = (setsid_escape(marker, then=SUM_OK) if kind == "setsid"
               else f"import sys\nsys.argv.append({marker!r})\n" + FORK_BOMB)
    with pids_guard(max_pids=GUARD_PIDS) as guard:
        grade, survivors, jails = guard.call(_grade_without_cgroups, SUM_STDIN, program, marker,
                                             1.0, timeout_s=60)
        assert survivors == [] and guard.survivors(settle_s=5.0) == []
    assert jails == [None]
    assert first(grade) is (Verdict.PASSED if kind == "setsid" else Verdict.TIME_LIMIT)


@pytest.mark.parametrize("limit", [Limits().max_tasks])
def test_jail_cap_is_below_the_guard_cap(limit):
    assert limit + 32 < GUARD_PIDS  # the guard must outlast the jails it contains

"""A program cannot turn its own failure into `infra` through its host (red-team F1, F3, F9).

The program's host runs as the program's uid: the kernel lets a process of the same uid change
another's limits and scheduling (F1: the seccomp filter refuses them on any pid but the
caller's, and refuses `sched_setaffinity`, F9), and the host empties the program's working
directory between tests whatever the program made of it (F3: `workdirs.reset_workdir`). Each
attack below got `infra` on two slots before; now the program gets its own verdict on the first
try. Grading runs inside a pids-cgroup guard, and nothing of a program may survive it.
"""

from __future__ import annotations

import os
import stat
import time

import pytest
from cgroup_guard import pids_guard
from helpers_grading import stdin_problem

from lcb.grading import GradingPool
from lcb.sandbox import seccomp
from lcb.sandbox.workdirs import make_workdir, remove_tree, reset_workdir

GUARD_PIDS = 400
TWO_TESTS = stdin_problem(("1 2\n", "3\n"), ("10 20\n", "30\n"))
NEEDS_SECCOMP = pytest.mark.skipif(not seccomp.available(), reason="no seccomp filter here")


def _grade_counting(jobs):
    """Grade (problem, code) jobs in order on one pool: (verdicts, tries, error) of each."""
    with GradingPool(1) as pool:
        attempt, tries = pool._attempt, []

        def counted(*args):
            tries.append(1)
            return attempt(*args)

        pool._attempt = counted
        results = []
        for problem, code in jobs:
            tries.clear()
            grade = pool.grade_sync(problem, code)
            results.append(([o.verdict.value for o in grade.outcomes], len(tries),
                            grade.feedback.error if grade.feedback else ""))
        return results


def guarded(jobs):
    with pids_guard(max_pids=GUARD_PIDS) as guard:
        result = guard.call(_grade_counting, jobs, timeout_s=150)
        assert guard.survivors(settle_s=5.0) == [], "a process outlived the grading"
    return result


# --- F1 / F9: limits and scheduling of the host ----------------------------------------------

# Each call is harmless as made (it sets what the host already has), so that without the
# filter the program is graded and prints what it was allowed; only reading a limit stays open.
HOST_CALLS = """\
import ctypes, os, resource
host = os.getppid()
libc = ctypes.CDLL(None, use_errno=True)
IOPRIO_SET, IOPRIO_GET = {"x86_64": (251, 252), "aarch64": (30, 31)}[os.uname().machine]
def outcome(call):
    try:
        call()
        return "allowed"
    except PermissionError:
        return "refused"
def ioprio_same():
    now = libc.syscall(IOPRIO_GET, 1, host)  # IOPRIO_WHO_PROCESS
    if libc.syscall(IOPRIO_SET, 1, host, now) < 0:  # unchanged
        raise OSError(ctypes.get_errno(), "ioprio_set")
print(*[outcome(call) for call in (
    lambda: resource.prlimit(host, resource.RLIMIT_CORE),
    lambda: resource.prlimit(host, resource.RLIMIT_CORE, (0, 0)),
    lambda: os.setpriority(os.PRIO_PROCESS, host, os.getpriority(os.PRIO_PROCESS, host)),
    lambda: os.sched_setscheduler(host, os.SCHED_OTHER, os.sched_param(0)),
    lambda: os.sched_setparam(host, os.sched_param(0)),
    ioprio_same,
    lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)),
    lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),
    lambda: os.nice(0))])
"""
HOST_CALLS_EXPECTED = " ".join(["allowed"] + ["refused"] * 6 + ["allowed"] * 2) + "\n"
# The red team's t03: lower the host's limits, then fail; the host broke before it reported.
STARVES_HOST = """\
import os, resource
try:
    resource.prlimit(os.getppid(), resource.RLIMIT_{which}, (0 if "{which}" == "NPROC" else 4,) * 2)
except PermissionError:
    pass
print(4)
"""


@NEEDS_SECCOMP
def test_a_program_cannot_change_its_hosts_limits_or_scheduling():
    [(verdicts, tries, error)] = guarded([(stdin_problem(("", HOST_CALLS_EXPECTED)),
                                           HOST_CALLS)])
    assert (verdicts, tries) == (["passed"], 1), error


@NEEDS_SECCOMP
@pytest.mark.parametrize("which", ["NOFILE", "NPROC"])
def test_a_program_that_starves_its_host_of_descriptors_gets_its_own_verdict(which):
    [(verdicts, tries, _)] = guarded([(TWO_TESTS, STARVES_HOST.format(which=which))])
    assert (verdicts, tries) == (["wrong_answer"], 1)


# --- F3: whatever a program makes of its working directory ------------------------------------

CHMOD_ZERO = "import os\nopen('f', 'w').close()\nos.chmod('.', 0)\nprint(4)\n"
REPLACED = """\
import os
here = os.getcwd()
os.chdir("/")
try:
    os.rename(here, here + ".old")
except OSError:  # where Landlock's rule lies on this directory it cannot be moved
    os.chmod(here, 0)
else:
    {replace}
print(4)
"""
DEEP = """\
import os
for _ in range(1500):
    os.mkdir("d")
    os.chdir("d")
os.mkdir("locked")
open("locked/f", "w").close()
os.chmod("locked", 0)
os.chmod(".", 0o500)
print(4)
"""


def test_a_program_that_wrecks_its_working_directory_gets_its_own_verdict():
    jobs = [(TWO_TESTS, CHMOD_ZERO),
            (TWO_TESTS, REPLACED.format(replace="open(here, 'w').close()")),
            (TWO_TESTS, REPLACED.format(replace="os.symlink('/nonexistent', here)")),
            (TWO_TESTS, DEEP)]
    results = guarded(jobs)
    assert [(verdicts, tries) for verdicts, tries, _ in results] == [(["wrong_answer"], 1)] * 4


@pytest.mark.parametrize("wreck", ["chmod", "file", "dangling", "fifo", "gone"])
def test_reset_workdir_makes_a_wrecked_directory_empty_again(wreck):
    workdir = make_workdir("lcb-prog-")
    before = os.getcwd()
    try:
        os.chdir(workdir)
        open("left", "w").close()
        os.chdir("/")
        if wreck == "chmod":
            os.chmod(workdir, 0)
        else:
            remove_tree(workdir)
            {"file": lambda: open(workdir, "w").close(),
             "dangling": lambda: os.symlink("/nonexistent-lcb-target", workdir),
             "fifo": lambda: os.mkfifo(workdir), "gone": lambda: None}[wreck]()
        reset_workdir(workdir)
        assert os.getcwd() == workdir and os.listdir(".") == []
        assert stat.S_IMODE(os.lstat(workdir).st_mode) == 0o700
    finally:
        os.chdir(before)
        remove_tree(workdir)
    assert not os.path.lexists(workdir)


@pytest.mark.slow  # 10 s: a chain of 3000 directories
def test_reset_workdir_empties_deep_and_locked_trees_without_recursion():
    workdir = make_workdir("lcb-prog-")
    before = os.getcwd()
    try:
        os.chdir(workdir)
        for _ in range(3000):  # far deeper than the interpreter's recursion limit
            os.mkdir("d")
            os.chdir("d")
        open("f", "w").close()
        os.mkdir("locked")
        open("locked/f", "w").close()
        os.chmod("locked", 0)
        os.chmod(".", 0o500)
        os.chdir(workdir)
        for name in ("a", "b"):
            os.makedirs(f"{name}/x/y")
            open(f"{name}/x/y/z", "w").close()
            os.chmod(f"{name}/x", 0)
        started = time.monotonic()
        reset_workdir(workdir)
        assert os.listdir(workdir) == [] and os.getcwd() == workdir
        assert time.monotonic() - started < 10.0
    finally:
        os.chdir(before)
        remove_tree(workdir)
    assert not os.path.lexists(workdir)

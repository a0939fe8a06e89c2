"""The documented memory cap is the cap (issue #21, item 6).

The address-space rlimit does not count memfd pages that are not mapped, nor tmpfs or shared
memory. As root with a memory cgroup, the program's processes run in a memory group of their
own, nested in the slot's, whose limit its host sets to that program's own cap, exactly, so
whatever a program holds counts and the OOM killer chooses among the program's processes only
(red-team F2: it chose the host before; F10: the cap had 96 MiB of headroom); without a memory
cgroup, seccomp refuses memfd_create. Every test runs inside an outer pids-cgroup guard.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cgroup_guard import pids_guard
from helpers_grading import ADD_FUNCTIONAL, stdin_problem

from lcb.grading import GradingPool

GUARD_PIDS = 400
MIB = 1 << 20
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the memory cgroup needs root")

MEMFDS = """\
import os
held = []
block = b"x" * (16 << 20)
for i in range(40):
    fd = os.memfd_create(f"hoard{i}")
    os.write(fd, block)
    held.append(fd)
print(16 * len(held))
"""
# Files in /tmp and /dev/shm (each a tmpfs of the program's own as root), then ordinary memory.
TMPFS = """\
held = 0
block = b"x" * (16 << 20)
for where, count in (("/tmp", 15), ("/dev/shm", 3)):
    for i in range(count):
        try:
            with open(f"{where}/hoard{i}", "wb") as out:
                out.write(block)
            held += 16
        except OSError:
            break
hog = bytearray(200 << 20)
hog[::4096] = b"x" * len(hog[::4096])
print(held + 200)
"""
SHM_ONLY = """\
held = 0
block = b"x" * (16 << 20)
for i in range(40):
    try:
        with open(f"/dev/shm/hoard{i}", "wb") as out:
            out.write(block)
        held += 16
    except OSError:
        break
print(held)
"""
ORDINARY = """\
hog = bytearray(200 << 20)
hog[::4096] = b"x" * len(hog[::4096])
print(len(hog) >> 20)
"""
# Red-team F2: 192 MiB of memfds kept across exec, then `head` fills files in its private /tmp,
# 240 MB in all, beyond the cap and beyond the old cap plus headroom (the shell dies with the
# first `head` that does). No process's RSS holds these pages, so among processes of equal OOM
# score the host had the largest, and the OOM killer chose it: `infra` on both tries.
HIDES_FROM_RSS = """\
import os
block = b"x" * (16 << 20)
for i in range(12):
    os.write(os.memfd_create(f"hoard{i}", 0), block)  # kept open across exec
del block
os.execv("/bin/sh", ["sh", "-c", "i=0; while [ $i -lt 15 ]; do i=$((i+1)); "
                     "head -c 16000000 /dev/zero > f$i || kill -9 $$; done; echo 4"])
"""
# Red-team F10: how much a program holds before it is killed, reported as it goes.
HOLDS_UNTIL_KILLED = """\
import os, sys
held = b"x" * (200 << 20)
block, total = b"x" * (4 << 20), 200
while True:
    os.write(os.memfd_create("hoard"), block)
    total += 4
    print(total, file=sys.stderr, flush=True)
"""
# A functional program under its own, larger cap holds 400 MiB of memfds: allowed there.
FUNCTIONAL_MEMFDS = """\
import os
held = []
class Solution:
    def add(self, a, b):
        while len(held) < 25:
            fd = os.memfd_create("hoard")
            os.write(fd, b"x" * (16 << 20))
            held.append(fd)
        return a + b
"""


def _grade_all(jobs, cgroups: bool):
    os.environ["LCB_SANDBOX_MEMORY_BYTES"] = str(256 * MIB)
    os.environ["LCB_FUNCTIONAL_MEMORY_BYTES"] = str(1024 * MIB)
    if not cgroups:  # as for a non-root user or cgroup v2: no jail, no memory group
        import lcb.sandbox.cgroups as cgroups_module

        cgroups_module.CGROUP_ROOT = "/nonexistent-cgroup-root"
    with GradingPool(1) as pool:
        grades = [pool.grade_sync(problem, code) for problem, code in jobs]
        [slot] = pool._live
        memory = slot.jail.paths.get("memory") if slot.jail else None
        used = int(Path(memory, "memory.usage_in_bytes").read_text()) if memory else None
        return grades, dict(pool.isolation), used


def guarded(jobs, *, cgroups: bool = True):
    with pids_guard(max_pids=GUARD_PIDS) as guard:
        result = guard.call(_grade_all, jobs, cgroups, timeout_s=120)
        assert guard.survivors(settle_s=5.0) == [], "a process outlived the grading"
    return result


def verdict(grade) -> str:
    return grade.outcomes[0].verdict.value


def needs_memory_cgroup() -> None:
    if not Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        pytest.skip("no cgroup-v1 memory controller")


@ROOT_ONLY
def test_memfds_beyond_the_cap_are_a_memory_limit():
    needs_memory_cgroup()
    (memfds, ordinary), isolation, used = guarded([
        (stdin_problem(("", "640\n")), MEMFDS), (stdin_problem(("", "200\n")), ORDINARY)])
    assert verdict(memfds) == "memory_limit", memfds.feedback
    assert ordinary.em == 1, ordinary.feedback
    assert used < 200 * MIB  # what the programs held went with them
    assert isolation["memory_per_program"]


@pytest.mark.slow
@ROOT_ONLY
def test_tmpfs_and_shm_count_against_each_programs_own_cap():
    needs_memory_cgroup()
    # Under a 256 MiB stdin cap: 288 MiB of tmpfs files plus 200 MiB of memory get
    # memory_limit, /dev/shm alone holds at most its 64 MiB, 200 MiB of ordinary memory passes;
    # a functional program graded before and after keeps its own 1 GiB cap (400 MiB of memfds
    # pass there), so the limit follows each program's mode both ways.
    (functional, tmpfs, shm, ordinary, again), _, used = guarded([
        (ADD_FUNCTIONAL, FUNCTIONAL_MEMFDS), (stdin_problem(("", "488\n")), TMPFS),
        (stdin_problem(("", "640\n")), SHM_ONLY), (stdin_problem(("", "200\n")), ORDINARY),
        (ADD_FUNCTIONAL, FUNCTIONAL_MEMFDS)])
    assert verdict(tmpfs) == "memory_limit", tmpfs.feedback
    assert shm.em == 0 and int(shm.feedback.actual) <= 64, shm.feedback
    assert ordinary.em == 1, ordinary.feedback
    assert (functional.em, again.em) == (1, 1), (functional.feedback, again.feedback)
    assert used < 200 * MIB


def test_without_a_memory_cgroup_memfd_is_refused():
    # Nothing would count unmapped memfd pages against the cap: programs get no memfd.
    (memfds, ordinary), isolation, _ = guarded([
        (stdin_problem(("", "640\n")), MEMFDS), (stdin_problem(("", "200\n")), ORDINARY)],
        cgroups=False)
    assert memfds.em == 0 and "PermissionError" in memfds.feedback.error, memfds.feedback
    assert ordinary.em == 1, ordinary.feedback
    assert not isolation["memory_per_program"]


@ROOT_ONLY
def test_the_oom_killer_picks_the_programs_process_never_its_host():
    needs_memory_cgroup()
    (hidden, ordinary), isolation, used = guarded([
        (stdin_problem(("", "4\n")), HIDES_FROM_RSS), (stdin_problem(("", "200\n")), ORDINARY)])
    assert verdict(hidden) == "memory_limit", hidden.feedback
    assert ordinary.em == 1, ordinary.feedback
    assert isolation["memory_per_program"] and used < 200 * MIB


@ROOT_ONLY
def test_the_cap_is_the_cap_not_the_cap_plus_headroom():
    needs_memory_cgroup()
    [grade], _, _ = guarded([(stdin_problem(("", "never\n")), HOLDS_UNTIL_KILLED)])
    assert verdict(grade) == "memory_limit", grade.feedback
    held = [int(line) for line in grade.feedback.error.split() if line.isdigit()]
    assert held and 200 < max(held) < 256, held  # MiB, under LCB_SANDBOX_MEMORY_BYTES

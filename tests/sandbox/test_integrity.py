"""Grader integrity: a program can never see the answers, forge a verdict, or reach lcb.

One property per test, each written as the attack a determined model-written program would try,
so that each fails if its layer is removed. Every test runs inside an outer pids-cgroup guard
(tests/cgroup_guard.py) and checks that nothing of the program survives it.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from cgroup_guard import pids_guard
from helpers_grading import ADD_FUNCTIONAL, SUM_STDIN, functional_problem, stdin_problem

from lcb.grading import GradingPool
from lcb.sandbox import landlock
from lcb.sandbox.python_exec import run_python
from tests.scripted_server import scripted_fixture  # noqa: F401

GUARD_PIDS = 400
REPO = Path(__file__).resolve().parents[2]
SUM_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
SUM_WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"
ADD_OK = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the uid layer needs lcb to run as root")


def guarded(fn, *args, timeout_s: float = 150.0):
    """`fn(*args)` in a child inside a fresh pids guard; nothing may survive it."""
    with pids_guard(max_pids=GUARD_PIDS) as guard:
        result = guard.call(fn, *args, timeout_s=timeout_s)
        assert guard.survivors(settle_s=5.0) == [], "a process outlived the grading"
    return result


def _grade_in_order(jobs, size=1, env=None):
    """Grade (problem, code, options) jobs in order on one fresh pool."""
    os.environ.update(env or {})
    with GradingPool(size) as pool:
        return [pool.grade_sync(problem, code, **options) for problem, code, options in jobs]


def verdicts(grade) -> list[str]:
    return [o.verdict.value for o in grade.outcomes]


# The hostile programs below attack only processes inside their test's own guard cgroup (the
# pool, its judges, zygotes and hosts): were containment broken, nothing outside the test could
# be hit.
IN_MY_GUARD = """\
import os
def guard_of(pid):
    for line in open(f"/proc/{pid}/cgroup").read().splitlines():
        if line.split(":")[1] == "pids":
            parts = line.split(":", 2)[2].split("/")
            return next((p for p in parts if p.startswith("lcb-test-")), None)
def in_my_guard():
    mine = guard_of("self")
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                if mine and guard_of(pid) == mine:
                    yield pid
            except OSError:
                pass
"""


# (a) No code runs in lcb's processes: the program cannot even open their descriptors.

REACH_LCB = IN_MY_GUARD + """\
import os, pickle
class Bomb:
    def __reduce__(self):
        return (os.system, ("touch FLAG_PATH",))
forged = pickle.dumps((True, Bomb()))
frame = len(forged).to_bytes(8, "big") + forged
def ancestors():
    pid = str(os.getpid())
    while pid not in ("0", "1"):
        try:
            status = open(f"/proc/{pid}/status").read()
        except OSError:
            return
        pid = status.split("PPid:")[1].split()[0]
        yield pid
# lcb's processes in this guard, if it can see them; else its ancestors and pids near its own
mine = os.getpid()
targets = set(in_my_guard()) | set(ancestors()) | {str(p) for p in range(mine - 300, mine + 300)}
targets.discard(str(mine))
assert next(ancestors(), None), "not even its parent to attack: the probe is broken"
opened = 0
for pid in sorted(targets):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            target = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        opened += 1
        try:
            os.write(target, frame)
        except OSError:
            pass
        os.close(target)
print(opened)
"""


def test_a_program_cannot_reach_the_descriptors_of_any_lcb_process(tmp_path):
    flag = tmp_path / "unpickled"
    problem = stdin_problem(("", "0\n"))
    hostile, right, wrong = guarded(_grade_in_order, [
        (problem, REACH_LCB.replace("FLAG_PATH", str(flag)), {}), (SUM_STDIN, SUM_OK, {}),
        (SUM_STDIN, SUM_WRONG, {})])
    assert hostile.em == 1, f"it opened lcb's descriptors: {hostile.feedback}"
    assert not flag.exists()
    assert (right.em, wrong.em) == (1, 0)


# (b) A hostile program changes no other program's grade, before or beside it.

HOSTILE = IN_MY_GUARD + f"""\
import os, signal, subprocess, sys
for pid in list(in_my_guard()):
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(int(pid), sig)
        except OSError:
            pass
for path in ("/tmp/answers", "/dev/shm/answers", os.path.expanduser("~/answers")):
    try:
        open(path, "w").write("3\\n30\\n0\\n")
    except OSError:
        pass
subprocess.Popen([sys.executable, "-c", "import os; os.setsid(); [0 for _ in iter(int, 1)]"])
{REACH_LCB.replace("FLAG_PATH", "/tmp/never")}
"""


def _hostile_beside_others():
    with GradingPool(2) as pool:
        results: dict[str, object] = {}
        hostile = threading.Thread(target=lambda: results.update(
            hostile=pool.grade_sync(SUM_STDIN, HOSTILE, timeout_s=2.0)))
        hostile.start()
        time.sleep(0.3)
        beside = [pool.grade_sync(SUM_STDIN, SUM_OK), pool.grade_sync(SUM_STDIN, SUM_WRONG),
                  pool.grade_sync(ADD_FUNCTIONAL, ADD_OK)]
        hostile.join()
        after = [pool.grade_sync(SUM_STDIN, SUM_OK), pool.grade_sync(SUM_STDIN, SUM_WRONG),
                 pool.grade_sync(ADD_FUNCTIONAL, ADD_OK)]
    return results["hostile"], beside, after


def test_a_hostile_program_changes_no_other_programs_grade():
    hostile, beside, after = guarded(_hostile_beside_others)
    assert hostile.em == 0
    assert [g.em for g in beside] == [1, 0, 1], [g.feedback for g in beside]
    assert [g.em for g in after] == [1, 0, 1], [g.feedback for g in after]


# (c) No expected output and no other test is in a program's memory or call stack.

SCAN = """\
import os
def scan(tag, own, forbidden):
    found = set()
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            start, end = (int(x, 16) for x in span.split("-"))
            if "r" not in perms or end - start > 1 << 30:
                continue
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except (OSError, OverflowError, ValueError):
                continue
            at = chunk.find(tag)
            while at >= 0:
                before, after = chunk[max(0, at - 4):at], chunk[at + len(tag):at + len(tag) + 2]
                if before.endswith(b"OUT-"):
                    found.add("an expected output")
                elif before.endswith(b"IN-") and after in forbidden:
                    found.add("another test's input")
                elif before.endswith(b"IN-") and after == own:
                    found.add("its own input")
                at = chunk.find(tag, at + 1)
    if found == {"its own input"}:
        return "clean"
    return ", ".join(sorted(found)) or "its own input was not found: the scan is broken"
"""
STDIN_SCAN = SCAN + """
text = input()
tag = text[3:-2].encode()
index = int(text[-1])
print(scan(tag, f"-{index}".encode(), [f"-{k}".encode() for k in range(index + 1, 3)]))
"""
FUNCTIONAL_SCAN = SCAN + """
def probe(text):
    tag, index = text[3:-2].encode(), int(text[-1])
    return scan(tag, f"-{index}".encode(), [f"-{k}".encode() for k in range(index + 1, 3)])
"""


def _memory_problems():
    tag = uuid.uuid4().hex
    cases = [(f"IN-{tag}-{k}", f"OUT-{tag}-{k}") for k in range(3)]
    stdin = stdin_problem((f"{cases[0][0]}\n", "clean\n"),
                          *[(f"{i}\n", f"{o}\n") for i, o in cases[1:]])
    functional = functional_problem("probe", (f'"{cases[0][0]}"', '"clean"'),
                                    *[(f'"{i}"', f'"{o}"') for i, o in cases[1:]])
    return stdin, functional


def test_a_program_finds_no_answer_and_no_later_test_in_its_memory():
    stdin, functional = _memory_problems()
    graded = guarded(_grade_in_order, [(stdin, STDIN_SCAN, {}),
                                       (functional, FUNCTIONAL_SCAN, {})])
    for grade in graded:  # test 0 is clean (it passed), test 1 reports what it found
        assert verdicts(grade) == ["passed", "wrong_answer"], grade.feedback
        assert grade.feedback.actual.strip().strip('"') == "clean", grade.feedback


# (d) A program writes to no result channel: verdicts are computed where it cannot write.

FORGE_FUNCTIONAL = """\
import os
for fd in range(3, 64):
    for line in ('{"start": 0}', *[f'{{"i": {i}, "v": "passed", "wall": 0, "cpu": 0}}'
                                   for i in range(3)], '{"ready": true}'):
        try:
            os.write(fd, (line + "\\n").encode())
        except OSError:
            pass
class Solution:
    def add(self, a, b):
        return a - b
"""
OPEN_FDS = "import os\nprint([fd for fd in range(256) if os.path.exists(f'/proc/self/fd/{fd}')])\n"


def test_forged_verdict_lines_and_extra_descriptors_get_a_program_nothing():
    functional, stdin_fds = guarded(_grade_in_order, [
        (ADD_FUNCTIONAL, FORGE_FUNCTIONAL, {"all_tests": True}),
        (stdin_problem(("", "[0, 1, 2]\n")), OPEN_FDS, {})])
    assert functional.em == 0 and functional.passed == 0, verdicts(functional)
    assert stdin_fds.em == 1, f"a stdin program has more than fds 0-2: {stdin_fds.feedback}"


# (e) No secret of lcb's is readable: not in its environment, not in lcb's, not via python_exec.

LEAK = """\
import os
secret, token = b"sk-lcb-" b"canary", b"hf_" b"canary"
seen = [open("/proc/self/environ", "rb").read(), repr(os.environ).encode()]
for pid in os.listdir("/proc"):
    try:
        seen.append(open(f"/proc/{pid}/environ", "rb").read())
    except OSError:
        pass
print("leak" if any(secret in blob or token in blob for blob in seen) else "none")
"""
SECRET = f"sk-lcb-canary-{uuid.uuid4().hex}"
# A process that holds the key as lcb's CLI does: in the environment it was started with
# (which /proc/<pid>/environ shows), grading the leak probe and running it as python_exec.
HOLDER = f"""\
import sys
sys.path.insert(0, {str(REPO / "tests")!r})
from helpers_grading import stdin_problem
from lcb.grading import GradingPool
from lcb.sandbox.python_exec import run_python
LEAK = {{leak!r}}
with GradingPool(1) as pool:
    grade = pool.grade_sync(stdin_problem(("", "none\\n")), LEAK)
print(grade.em, repr(run_python(LEAK).stdout), repr(run_python(LEAK, sandbox="bwrap").stdout))
"""


def _leaks():
    import subprocess
    import sys

    env = {**os.environ, "OPENAI_API_KEY": SECRET, "HF_TOKEN": "hf_canary_token"}
    done = subprocess.run([sys.executable, "-c", HOLDER.format(leak=LEAK)], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def test_no_program_or_snippet_reads_an_api_key():
    assert guarded(_leaks) == "1 'none\\n' 'none\\n'\n"


def _batch_with_a_leaking_tool_call(base_url, data, out_dir):
    import subprocess

    from helpers_runner import entry_argv, subprocess_env

    env = {**subprocess_env(base_url), "OPENAI_API_KEY": SECRET, "HF_TOKEN": "hf_canary_token"}
    subprocess.run(entry_argv("--batch", "--data", str(data), "--out-dir", str(out_dir)),
                   env=env, capture_output=True, timeout=120, check=True, cwd=REPO)
    return sorted(p.name for p in (out_dir / "transcripts").iterdir())


@pytest.mark.slow
def test_a_leaking_python_exec_call_puts_no_key_in_the_transcript(scripted, tmp_path):
    import gzip

    from helpers_runner import RIGHT, problem_ids, script, write_problems
    from scripted_server import Reply, ToolCall

    [qid] = problem_ids(1)
    data = write_problems(tmp_path / "rows.jsonl", [qid])
    server = scripted(script({qid: [Reply.calls(ToolCall("python_exec", {"code": LEAK})),
                                    RIGHT]}))
    names = guarded(_batch_with_a_leaking_tool_call, server.base_url, data, tmp_path / "out")
    text = gzip.decompress((tmp_path / "out" / "transcripts" / names[0]).read_bytes()).decode()
    assert SECRET not in text and "hf_canary_token" not in text
    assert "stdout:\\nnone" in text  # the tool ran, and found nothing


# (f) A program cannot reset or stretch its deadline.

STOP_THE_HOST = """\
import os, signal, time
parent = os.getppid()
os.kill(parent, signal.SIGSTOP)
end = time.monotonic() + {spin}
while time.monotonic() < end:
    pass
os.kill(parent, signal.SIGCONT)
print(3)
"""
STALL_THE_CHANNEL = """\
import os, time
def _open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
CHANNEL = next(fd for fd in range(3, 1024) if _open(fd))  # the one descriptor past stderr
class Solution:
    def add(self, a, b):
        end = time.monotonic() + 4
        while time.monotonic() < end:
            os.write(CHANNEL, b"{")
            time.sleep(0.05)
        return a + b
"""


def _timed(jobs):
    started = time.monotonic()
    grades = _grade_in_order(jobs)
    return grades, time.monotonic() - started


@pytest.mark.slow
def test_a_program_cannot_stretch_its_time_limit():
    one_test = stdin_problem(("1 2\n", "3\n"))
    grades, elapsed = guarded(_timed, [
        (one_test, STOP_THE_HOST.format(spin=3), {"timeout_s": 1.0}),
        (ADD_FUNCTIONAL, STALL_THE_CHANNEL, {"timeout_s": 1.0})])
    # The program's process cannot signal its host (a nested Landlock domain): stopping it is
    # refused, so the program fails on its own account, never as a time limit bought by a
    # silent host; a channel kept busy does not stop the clock.
    stopped, stalled = grades
    if landlock.abi() >= 6:
        assert verdicts(stopped) == ["runtime_error"], stopped.feedback
        assert "PermissionError" in stopped.feedback.error
    else:  # no scoping: the host is lost, graded again, then infra (never a time limit)
        assert verdicts(stopped) in (["time_limit"], ["infra"]), stopped.feedback
    assert verdicts(stalled) == ["time_limit"], stalled.feedback
    assert elapsed < 20.0  # each is stopped within its limit plus the judge's slack


# (g) No remount and no write outside its own directories, whatever the tier.

PROBE = uuid.uuid4().hex[:12]
OUTSIDE = (REPO / "lcb" / "grading" / "compare.py", Path(f"/etc/lcb-escape-{PROBE}"),
           Path(f"/var/tmp/lcb-escape-{PROBE}"), REPO / f"escape-{PROBE}.txt")
ESCAPE = f"""\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
remounted = libc.mount(None, b"/", None, 32 | 4096, None) == 0
wrote = []
for path in {tuple(str(p) for p in OUTSIDE)!r}:
    try:
        open(path, "a").close()
        wrote.append(path)
    except OSError:
        pass
caps = open("/proc/self/status").read().split("CapEff:")[1].split()[0]
print("remounted" if remounted else "no remount", wrote, caps)
"""


@ROOT_ONLY
@pytest.mark.parametrize("sandbox", ["process", "bwrap"])
def test_no_remount_and_no_write_outside_its_directories_as_root(sandbox):
    before = OUTSIDE[0].stat().st_mtime
    expected = "no remount [] 0000000000000000\n"
    [grade] = guarded(_grade_in_order_tier, [(stdin_problem(("", expected)), ESCAPE, {})],
                      sandbox)
    assert grade.em == 1, grade.feedback
    assert OUTSIDE[0].stat().st_mtime == before
    assert not any(path.exists() for path in OUTSIDE[1:])


def _grade_in_order_tier(jobs, sandbox):
    with GradingPool(1, sandbox=sandbox) as pool:
        return [pool.grade_sync(problem, code, **options) for problem, code, options in jobs]


# (h) No memory kept beyond the cap through memfd, /dev/shm or System V shared memory.

MEMFD = """\
import os
fd = os.memfd_create("hoard")
block = b"x" * (16 << 20)
for _ in range(40):
    os.write(fd, block)
print("held")
"""
SHM_FILE = """\
open("/tmp/lcb-left-behind", "w").write("answers")
block = b"x" * (16 << 20)
with open("/dev/shm/hoard", "wb") as out:
    for _ in range(40):
        out.write(block)
print("held")
"""
SYSV = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
segment = libc.shmget(0x1cb, 32 << 20, 0o1666)
print("made" if segment >= 0 else "refused")
"""
LEFT_BEHIND = """\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print(sorted(os.listdir("/dev/shm")) + [p for p in ["/tmp/lcb-left-behind"] if
      os.path.exists(p)], libc.shmget(0x1cb, 0, 0) >= 0)
"""


def _memory_after(jobs):
    os.environ["LCB_SANDBOX_MEMORY_BYTES"] = str(256 << 20)
    with GradingPool(1) as pool:
        grades = [pool.grade_sync(problem, code, **options) for problem, code, options in jobs]
        [slot] = pool._live
        memory = slot.jail.paths.get("memory") if slot.jail else None
        used = int(Path(memory, "memory.usage_in_bytes").read_text()) if memory else None
    return grades, used


@ROOT_ONLY
def test_memfd_and_shared_memory_count_against_the_cap_and_do_not_outlive_the_program():
    held = stdin_problem(("", "held\n"))
    (memfd, shm, sysv, after), used = guarded(_memory_after, [
        (held, MEMFD, {}), (held, SHM_FILE, {}), (stdin_problem(("", "made\n")), SYSV, {}),
        (stdin_problem(("", "[] False\n")), LEFT_BEHIND, {})])
    assert memfd.em == 0 and verdicts(memfd)[0] in ("memory_limit", "runtime_error")
    assert shm.em == 0
    assert sysv.em == 1, sysv.feedback  # it may make one: it dies with its program
    assert after.em == 1, f"the next program found what the last one left: {after.feedback}"
    assert used is None or used < 200 << 20


# (i) A program cannot starve another graded beside it into a time limit.

SPINNERS = """\
import os, time
for _ in range(60):
    if os.fork() == 0:
        os.setsid()
        os.sched_setaffinity(0, range(os.cpu_count()))
        while True:
            pass
time.sleep(5)
"""
HEAVY = "s = 0\nfor i in range(6_000_000):\n    s += i\nprint(s)\n"


def _starve():
    os.environ["LCB_PIN_CPUS"] = "0"  # fairness must come from the cpu cgroups alone
    with GradingPool(2) as pool:
        spinning = threading.Thread(target=pool.grade_sync, args=(
            stdin_problem(("", "\n")), SPINNERS), kwargs={"timeout_s": 6.0})
        spinning.start()
        time.sleep(1.0)
        grade = pool.grade_sync(stdin_problem(("", f"{sum(range(6_000_000))}\n")), HEAVY,
                                timeout_s=2.0)
        spinning.join()
    return grade


@pytest.mark.slow
@ROOT_ONLY
def test_a_program_with_sixty_spinners_does_not_starve_its_neighbour():
    if not Path("/sys/fs/cgroup/cpu/cgroup.procs").exists():
        pytest.skip("no cgroup-v1 cpu controller")
    # Alone it takes about 0.4 s here; among 61 spinners and no cpu cgroups, about 3 s.
    grade = guarded(_starve)
    assert grade.em == 1, grade.feedback
    assert grade.outcomes[0].wall_s < 2.0


# Landlock's network rules close TCP in the process tier (bwrap closes the whole network).

@pytest.mark.skipif(landlock.abi() < 4, reason="this kernel's Landlock has no network rules")
def test_python_exec_has_no_tcp_in_the_process_tier():
    from helpers_grading import loopback_listener

    with loopback_listener() as port:
        code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                "    print('connected')\nexcept OSError:\n    print('blocked')\n")
        assert guarded(run_python, code).stdout == "blocked\n"


# Without root's layers (as a non-root user gets: no uid of its own, no private /tmp), Landlock
# still keeps a program to its own directory, and the directory goes with the program.

OWN_DIR_ONLY = """\
import os
outside = []
for path in ("/tmp/lcb-fallback-probe", "/dev/shm/lcb-fallback-probe"):
    try:
        open(path, "w").close()
        outside.append(path)
    except OSError:
        pass
open("mine.txt", "w").write("x")
print(outside, os.path.basename(os.getcwd()).startswith("lcb-prog-"))
"""


def _without_root_layers(temp: str):
    import lcb.sandbox.slot as slot

    slot.can_switch_uid = lambda: False
    # The pool's work dirs go to a temp dir of this test's own: in /tmp, those of another
    # suite running beside this one would count as left behind.
    os.environ["TMPDIR"] = temp
    with GradingPool(1) as pool:
        grades = [pool.grade_sync(stdin_problem(("", "[] True\n")), OWN_DIR_ONLY),
                  pool.grade_sync(SUM_STDIN, SUM_OK), pool.grade_sync(SUM_STDIN, SUM_WRONG)]
        isolation = dict(pool.isolation)
    left = {n for n in os.listdir(temp) if n.startswith("lcb-prog-")}
    return grades, isolation, left


@pytest.mark.skipif(landlock.abi() < 1, reason="no Landlock")
def test_without_root_layers_landlock_keeps_a_program_to_its_directory(tmp_path):
    (probe, right, wrong), isolation, left = guarded(_without_root_layers, str(tmp_path))
    assert isolation["uid"] is None and not isolation["private_tmp"]
    assert probe.em == 1, probe.feedback
    assert (right.em, wrong.em) == (1, 0) and left == set()
    assert not Path("/tmp/lcb-fallback-probe").exists()


# Found by a red-team pass: kernel keyrings outlive a program and, world-readable, reach every
# later program of any uid; /proc and the cgroup files were side channels between programs.

KEYRING_WRITE = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
data = b"3 30 0"
key = libc.syscall(248, b"user", b"lcb-redteam", data, len(data), -4)  # add_key
if key >= 0:
    libc.syscall(250, 5, key, 0x3F3F3F3F)  # KEYCTL_SETPERM: anyone may read it
print("stored" if key >= 0 else "refused")
"""
KEYRING_READ = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
found = [line for line in open("/proc/keys") if "lcb-redteam" in line]
for line in found:
    buffer = ctypes.create_string_buffer(64)
    if libc.syscall(250, 11, int(line.split()[0], 16), buffer, 64) >= 0:  # KEYCTL_READ
        print("read", buffer.value)
print(len(found))
"""
NO_USER_NAMESPACE = """\
import ctypes
print(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))
"""
WHO_I_SEE = """\
import os
uids = set()
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            uids.add(os.stat(f"/proc/{pid}").st_uid)
        except OSError:
            pass
try:
    os.listdir("/sys/fs/cgroup/memory")
    cgroups = "readable"
except OSError:
    cgroups = "closed"
print(uids == {os.getuid()}, cgroups)
"""


def _keyrings_and_proc():
    with GradingPool(2) as pool:
        grades = [pool.grade_sync(stdin_problem(("", "refused\n")), KEYRING_WRITE),
                  pool.grade_sync(stdin_problem(("", "0\n")), KEYRING_READ),
                  pool.grade_sync(stdin_problem(("", "-1\n")), NO_USER_NAMESPACE),
                  pool.grade_sync(stdin_problem(("", "True closed\n")), WHO_I_SEE)]
    return grades, run_python(KEYRING_READ).stdout


@ROOT_ONLY
def test_no_keyring_no_user_namespace_and_no_one_else_in_proc():
    grades, snippet = guarded(_keyrings_and_proc)
    assert [g.em for g in grades] == [1, 1, 1, 1], [g.feedback for g in grades]
    assert snippet == "0\n"


COLLIDING_KEYS = """\
import json, os, stat, time
# The answer a dict of 60k keys that all hash to 0 would encode to, written straight to the
# channel (building such a dict here would itself take quadratic time).
pairs = [[k * ((1 << 61) - 1), 0] for k in range(1, 60_001)]
value = json.dumps({"dict": pairs}).encode()
answer = b"value 0 0.0 %d\\n" % len(value) + value
chan = next(fd for fd in range(3, 64) if os.path.exists(f"/proc/self/fd/{fd}")
            and stat.S_ISSOCK(os.fstat(fd).st_mode))
class Solution:
    def add(self, a, b):
        os.write(chan, answer)
        time.sleep(30)
"""


def test_colliding_dict_keys_do_not_wedge_the_judge():
    # Hashed into a dict in the judge, these keys cost it about 20 s here; compared unhashed,
    # well under a second.
    started = time.monotonic()
    [grade] = guarded(_grade_in_order, [(ADD_FUNCTIONAL, COLLIDING_KEYS, {"timeout_s": 60.0})])
    assert verdicts(grade)[0] == "wrong_answer", grade.feedback
    assert time.monotonic() - started < 10.0

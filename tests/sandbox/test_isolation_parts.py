"""The parts the grading boundary is built from, one property each: values as data, the
channels, claims, cgroups, Landlock, uids, the readable view, the judge's checks."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from collections import Counter, OrderedDict, defaultdict
from pathlib import Path

import pytest

from lcb.grading.default import check_default_run
from lcb.grading.official import check_official_run
from lcb.sandbox import claims, landlock, privilege, seccomp, values, wire
from lcb.sandbox.cgroups import Jail
from lcb.sandbox.judge import HostLost, check_report
from lcb.sandbox.mounts import blocked_ancestor
from lcb.sandbox.slot import Slot, SlotGone
from lcb.sandbox.visible import ROOT, read_roots

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def in_child(fn) -> tuple[int, str]:
    """Run `fn()` in a forked child; (exit status, what it returned as text)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, str(fn()).encode())
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001
            os.write(write, f"{type(exc).__name__}: {exc}".encode())
            os._exit(1)
    os.close(write)
    out = b""
    while chunk := os.read(read, 65536):
        out += chunk
    os.close(read)
    return os.waitpid(pid, 0)[1], out.decode()


# --- values ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2**70, -(2**200), 1.5, -0.0, float("inf"), "text", "",
    [1, [2, (3, 4)]], (1, "a"), ((),), {"k": [1]}, OrderedDict(a=1), Counter("aab"),
    defaultdict(list, {"x": [1]})])
def test_plain_values_cross_unchanged(value):
    decoded = values.decode(values.encode(value))
    assert decoded == value and repr(decoded) == repr(dict(value) if type(value) in (
        OrderedDict, Counter, defaultdict) else value)


def test_the_distinctions_equality_makes_survive():
    assert values.decode(values.encode((1, 2))) != [1, 2]      # a tuple is not a list
    assert values.decode(values.encode([(1, 2)])) != [[1, 2]]  # nested tuples stay tuples
    assert values.decode(values.encode({1: 2})) != {"1": 2}    # key types stay
    assert type(values.decode(values.encode(2.0))) is float
    assert math.isnan(values.decode(values.encode(float("nan"))))


@pytest.mark.parametrize("value", [{1: 2}, {(1, 2): None}, {None: 0, "a": 1}])
def test_a_dict_with_a_key_that_is_not_text_equals_nothing(value):
    decoded = values.decode(values.encode(value))
    assert decoded != value and decoded != decoded and [decoded] != [value]
    assert repr(decoded) == repr(value)
    assert values.decode('{"dict": [[[1], 2]]}') != {}  # a forged list key: equal to nothing


def test_colliding_keys_cost_the_judge_linear_time():
    # Every key k * (2**61 - 1) hashes to 0: hashed into a dict, 200k of them would take the
    # judge hours; decoded as an unequal dict they are read once.
    text = json.dumps({"dict": [[k * ((1 << 61) - 1), 0] for k in range(1, 200_001)]})
    started = time.monotonic()
    decoded = values.decode(text)
    assert decoded != {} and time.monotonic() - started < 2.0


def test_numpy_scalars_cross_as_their_value():
    numpy = pytest.importorskip("numpy")
    assert values.decode(values.encode([numpy.int64(3), numpy.float64(0.5)])) == [3, 0.5]
    with pytest.raises(values.NotData, match="ndarray"):
        values.encode(numpy.array([1, 2]))


@pytest.mark.parametrize("value", [
    object(), {1, 2}, (x for x in "ab"), type("Int", (int,), {})(3), type("L", (list,), {})()])
def test_what_is_not_data_is_refused_by_name(value):
    with pytest.raises(values.NotData, match="not plain data"):
        values.encode(value)


@pytest.mark.parametrize("text", [
    '{"tuple": 3}', '{"x": 1}', '{"int": "zz"}', '{"dict": [1]}',
    "[" * 5000 + "]" * 5000, "1" * 5000, "not json"])
def test_forged_encodings_are_refused_not_believed(text):
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)  # the judge's (a library in this process may raise it)
    try:
        with pytest.raises(values.NotData):
            values.decode(text)
    finally:
        sys.set_int_max_str_digits(limit)


# --- wire ------------------------------------------------------------------------------------

def test_a_frame_over_the_limit_is_refused_before_it_is_read():
    read, write = os.pipe()
    os.write(write, (10**9).to_bytes(8, "big"))
    with pytest.raises(wire.ChannelError, match="over the 100-byte limit"):
        wire.read_frame(read, limit=100)
    os.close(read)
    os.close(write)


def test_frames_carry_json_only():
    read, write = os.pipe()
    wire.write_frame(write, {"id": 1, "run": [1, "x"]})
    assert wire.read_frame(read, limit=1000) == {"id": 1, "run": [1, "x"]}
    os.write(write, (3).to_bytes(8, "big") + b"\x80\x04.")  # a pickle is not JSON
    with pytest.raises(wire.ChannelError, match="not JSON"):
        wire.read_frame(read, limit=1000)


def test_unexpected_descriptors_are_closed_and_the_packet_refused():
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    spare = os.open(os.devnull, os.O_RDONLY)
    wire.send(mine, {"op": "x"}, [spare, spare])
    with pytest.raises(wire.ChannelError, match="unexpected descriptors"):
        wire.recv(theirs, max_fds=1)
    assert len(os.listdir("/proc/self/fd")) == len(set(os.listdir("/proc/self/fd")))
    os.close(spare)


def test_a_frame_that_is_malformed_or_over_the_limit_is_garbage():
    mine, theirs = socket.socketpair()
    reader = wire.FrameReader(theirs.fileno(), limit=64)
    mine.sendall(wire.frame("value", 0, payload=b"[1]") + b"value 1 x\n" + b"v 2 99999\n")
    soon = time.monotonic() + 5
    assert reader.next(deadline=soon) == ([b"value", b"0"], b"[1]")
    with pytest.raises(wire.ChannelError, match="length"):
        reader.next(deadline=soon)
    with pytest.raises(wire.ChannelError, match="over the limit"):
        reader.next(deadline=soon)
    mine.sendall(b"x" * 300)
    with pytest.raises(wire.ChannelError, match="too long"):
        reader.next(deadline=soon)


# --- the judge's and the pool's checks -------------------------------------------------------

def test_a_host_report_is_checked_field_by_field():
    good = {"status": 0, "timed_out": False, "wall": 0.1, "cpu": 0.1, "stderr": "", "oom": False}
    assert check_report(good)["wall"] == 0.1
    for bad in ({**good, "wall": -1}, {k: v for k, v in good.items() if k != "status"},
                {**good, "status": "zero"}):
        with pytest.raises(HostLost):
            check_report(bad)


def test_a_judge_answer_is_checked_against_its_schema():
    run = {"results": [{"i": 0, "v": "passed", "wall": 0.1, "cpu": 0.0}], "compile_error": None,
           "wall_s": 0.2}
    assert check_default_run(run, 1)["results"][0]["v"] == "passed"
    for results in ([{"i": 5, "v": "passed", "wall": 0, "cpu": 0}],
                    [{"i": 0, "v": "forged", "wall": 0, "cpu": 0}],
                    [{"i": True, "v": "passed", "wall": 0, "cpu": 0}]):
        with pytest.raises((ValueError, TypeError, KeyError)):
            check_default_run({**run, "results": results}, 1)
    with pytest.raises((ValueError, TypeError)):
        check_official_run({"segments": [["x", [1], {}]], "killed": False, "wall_s": 0,
                            "cpu_s": 0})


ECHO_WRONG_ID = """\
import json, os, sys
from lcb.sandbox import wire
request = wire.read_frame(0, limit=1 << 20)
wire.write_frame(1, {"id": request["id"] + 1, "ok": True, "run": {}})
"""


def test_an_answer_out_of_step_is_never_taken_for_the_request():
    judge = subprocess.Popen([sys.executable, "-c", ECHO_WRONG_ID], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, cwd=ROOT)
    zygote = subprocess.Popen([sys.executable, "-c", "pass"])
    slot = Slot(judge, zygote, None, [], open(os.devnull, "rb"))
    with pytest.raises(SlotGone, match="out of step"):
        slot.call({"kind": "default"}, budget_s=10.0)
    slot.stop(kill=True)


# --- claims ----------------------------------------------------------------------------------

def test_live_uid_claims_never_share_a_uid(monkeypatch):
    monkeypatch.setenv(claims.UIDS_ENV, "4000000-4000002")
    held = [claims.claim_uid() for _ in range(3)]
    assert sorted(c.uid for c in held) == [4000000, 4000001, 4000002]
    with pytest.raises(claims.UidsExhausted):
        claims.claim_uid()
    held[1].release()
    again = claims.claim_uid()
    assert again.uid == held[1].uid
    for claim in (held[0], held[2], again):
        claim.release()


def test_a_claims_directory_others_can_enter_is_refused(monkeypatch, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root's claims live in /run")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    (tmp_path / f"lcb-claims-{os.geteuid()}").mkdir(mode=0o755)
    with pytest.raises(claims.UidsExhausted, match="mode 0700"):
        claims.claims_dir()


def test_cpu_claims_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(claims.PIN_ENV, "0")
    assert claims.claim_cpu() is None


# --- cgroups, uids, Landlock, the view -------------------------------------------------------

@ROOT_ONLY
def test_a_jail_caps_memory_and_kills_every_member():
    jail = Jail.create(max_tasks=16, memory_bytes=64 << 20, prefix="lcb-unittest")
    if jail is None or "memory" not in jail.paths:
        pytest.skip("no cgroup-v1 pids and memory controllers")
    try:
        limit = Path(jail.paths["memory"], "memory.limit_in_bytes").read_text()
        assert int(limit) == 64 << 20 and jail.oom_kills() is not None
        proc = subprocess.Popen(["/bin/sh", "-c", 'echo $$ > "$1"; exec sleep 60', "sh",
                                 jail.procs_files()[0]])
        deadline = time.monotonic() + 5
        while not jail.members() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert jail.members() == [proc.pid]
        assert jail.kill_all() and jail.members() == []
        assert not Path(f"/proc/{proc.pid}").exists()  # killed and reaped (by kill_all)
    finally:
        jail.remove()
    assert not any(Path(p).exists() for p in jail.paths.values())


@ROOT_ONLY
def test_dropping_to_the_program_uid_leaves_no_capability():
    status, out = in_child(lambda: (privilege.drop_to(2147400255), privilege.effective_caps(),
                                    os.getuid(), os.getgroups())[1:])
    assert status == 0 and out == "(0, 2147400255, [])"


@pytest.mark.skipif(landlock.abi() < 1, reason="no Landlock")
def test_landlock_confines_reads_and_writes(tmp_path):
    (tmp_path / "mine").mkdir()
    secret = Path(ROOT, "README.md")

    def probe():
        landlock.restrict(landlock.build(read=["/usr", "/proc"], write=[str(tmp_path / "mine")]))
        (tmp_path / "mine" / "ok").write_text("x")
        outcomes = []
        for attempt in (secret.read_text, lambda: (tmp_path / "out").write_text("x")):
            try:
                attempt()
                outcomes.append("allowed")
            except PermissionError:
                outcomes.append("denied")
        return outcomes

    assert in_child(probe) == (0, "['denied', 'denied']")


def test_programs_may_read_the_interpreter_but_not_lcb_or_its_data():
    roots = read_roots().read
    assert not any(ROOT == r or ROOT.startswith(r.rstrip("/") + "/") for r in roots)
    assert os.path.realpath(sys.base_prefix) in roots
    if os.path.realpath(sys.prefix).startswith(ROOT + "/"):
        assert os.path.realpath(sys.prefix) in roots  # a venv inside the checkout is fine


def installed_layout(base: Path) -> Path:
    """A venv's site-packages under `base` that holds an installed lcb beside other packages."""
    site = base / "venv" / "lib" / "python3.x" / "site-packages"
    for name in ("lcb/data/sample", "lcb-0.1.0.dist-info", "numpy"):
        (site / name).mkdir(parents=True)
    for name, text in (("lcb/__init__.py", "SECRET = 1\n"), ("lcb/data/sample/test.jsonl", "{}"),
                       ("lcb-0.1.0.dist-info/RECORD", "lcb/__init__.py\n"),
                       ("numpy/__init__.py", "X = 1\n"), ("six.py", "Y = 2\n"),
                       ("__editable__.lcb-0.1.0.pth", "/elsewhere\n")):
        (site / name).write_text(text)
    return site


def test_an_installed_lcb_is_taken_out_of_its_site_packages_entry_by_entry(tmp_path,
                                                                          monkeypatch):
    from lcb.sandbox.visible import own_paths

    site = installed_layout(tmp_path)
    own = own_paths(str(site))
    assert own == tuple(str(site / n) for n in ("__editable__.lcb-0.1.0.pth", "lcb",
                                                  "lcb-0.1.0.dist-info"))
    monkeypatch.setattr(sys, "path", [str(site)])
    visible = read_roots(own)
    assert {str(site / "numpy"), str(site / "six.py")} <= set(visible.read)
    assert str(site) in visible.listed and set(visible.hidden) == set(own)
    assert not any(p == o or p.startswith(o + "/") or o.startswith(p + "/")
                   for p in visible.read for o in own)
    assert own_paths(ROOT) == (os.path.realpath(ROOT),)  # a checkout is lcb's whole


def test_a_view_shows_a_directory_whole_but_covers_what_it_hides():
    from lcb.sandbox.mounts import _steps

    steps = _steps(["/v", "/v/site/numpy", "/v/site/six.py", "/v/site/lcb/vendored"],
                   ["/v/site/lcb", "/elsewhere/lcb"])
    assert steps == [("bind", "/v"), ("cover", "/v/site/lcb"),
                     ("bind", "/v/site/lcb/vendored")]


@ROOT_ONLY
def test_a_view_over_a_locked_home_keeps_packages_and_hides_lcb():
    import shutil
    import tempfile

    from lcb.sandbox import mounts
    from lcb.sandbox.visible import own_paths

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    try:
        site = installed_layout(base / "home")
        (base / "home" / "private.txt").write_text("a home's files")
        (base / "home").chmod(0o700)
        own = own_paths(str(site))
        wanted = [str(site / "numpy"), str(site / "six.py"), str(site)]

        def probe():
            mounts.readable_view(wanted, 2147400255, hidden=own)
            return [os.path.exists(site / name) and bool((site / name).read_text()) for name in
                    ("numpy/__init__.py", "six.py", "lcb/__init__.py",
                     "lcb-0.1.0.dist-info/RECORD", "__editable__.lcb-0.1.0.pth")
                    ] + [(base / "home" / "private.txt").exists()]

        assert in_child(probe) == (0, str([True, True, False, False, False, False]))
    finally:
        shutil.rmtree(base)


@pytest.mark.skipif(not seccomp.available(), reason="no seccomp filter for this machine")
def test_without_a_network_namespace_seccomp_refuses_every_socket():
    # The no-root fallback: no socket() of any family (so no UDP and no abstract unix socket
    # reaches another program), no memfd beyond an unenforced cap, no shared System V IPC;
    # a socketpair still works.
    import ctypes

    def probe():
        seccomp.install(sockets=False, memory=False, ipc=False)
        outcomes = []
        for attempt in (lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
                        lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM),
                        lambda: os.memfd_create("hoard"), socket.socketpair):
            try:
                attempt()
                outcomes.append("allowed")
            except PermissionError:
                outcomes.append("refused")
        libc = ctypes.CDLL(None, use_errno=True)
        outcomes.append("refused" if libc.shmget(0, 4096, 0o1600) < 0 else "allowed")
        return outcomes

    assert in_child(probe) == (0, str(["refused"] * 3 + ["allowed", "refused"]))
    assert in_child(lambda: (seccomp.install(), socket.socket().close())[0]) == (0, "True")


@ROOT_ONLY
@pytest.mark.skipif(not seccomp.available(), reason="no seccomp filter for this machine")
def test_seccomp_keeps_limits_and_scheduling_to_the_caller_itself():
    # Red-team F1/F9: a process of the program's uid (its host) is out of reach: no new limit,
    # priority, policy, I/O priority or CPU set for it, nor for "every process of my uid";
    # the caller's own (pid 0) and reading another's limits still work. Run as a uid of its
    # own, outside lcb's range, so that "every process of my uid" is this child alone.
    import ctypes
    import resource
    import signal

    def probe():
        privilege.drop_to(2147399990)
        other = os.fork()
        if other == 0:  # the same uid, as a program's host is
            signal.pause()
            os._exit(0)
        seccomp.install()
        libc = ctypes.CDLL(None, use_errno=True)
        ioprio_set = {"x86_64": 251, "aarch64": 30}[os.uname().machine]

        def ioprio(which: int, who: int) -> None:
            if libc.syscall(ioprio_set, which, who, 0) < 0:
                raise OSError(ctypes.get_errno(), "ioprio_set")

        calls = (lambda: resource.prlimit(other, resource.RLIMIT_CORE, (0, 0)),
                 lambda: os.setpriority(os.PRIO_PROCESS, other, 0),
                 lambda: os.setpriority(os.PRIO_USER, 0, 0),
                 lambda: os.sched_setscheduler(other, os.SCHED_OTHER, os.sched_param(0)),
                 lambda: os.sched_setparam(other, os.sched_param(0)),
                 lambda: ioprio(1, other), lambda: ioprio(3, 0),
                 lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)),
                 lambda: resource.prlimit(other, resource.RLIMIT_CORE),
                 lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),
                 lambda: os.setpriority(os.PRIO_PROCESS, 0, 0), lambda: ioprio(1, 0),
                 lambda: os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)))
        outcomes = []
        for call in calls:
            try:
                call()
                outcomes.append("allowed")
            except PermissionError:
                outcomes.append("refused")
        os.kill(other, signal.SIGKILL)
        os.waitpid(other, 0)
        return outcomes

    assert in_child(probe) == (0, str(["refused"] * 8 + ["allowed"] * 5))


def test_the_view_finds_the_topmost_directory_others_cannot_enter():
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    base.chmod(0o755)
    locked = base / "home"
    (locked / "py" / "lib").mkdir(parents=True)
    locked.chmod(0o700)
    try:
        assert blocked_ancestor(str(locked / "py" / "lib")) == str(locked)
        assert blocked_ancestor("/usr/lib") is None
    finally:
        shutil.rmtree(base)


def _import_from_under_tmp(directory):
    from helpers_grading import stdin_problem

    import lcb.sandbox.launch as launch
    from lcb.grading import GradingPool

    launch.site_paths = lambda: [str(directory)]  # as a venv installed under /tmp would be
    with GradingPool(1) as pool:
        program = "import lcbkeepprobe\nprint(lcbkeepprobe.VALUE)\n"
        return pool.grade_sync(stdin_problem(("", "kept\n")), program).em


@ROOT_ONLY
def test_an_interpreter_under_tmp_stays_importable_beneath_a_programs_private_tmp():
    # CI may clone the project (and its venv) under /tmp, which each program's private tmpfs
    # covers: the interpreter's directories there are bound back, read-only.
    import shutil
    import tempfile

    from cgroup_guard import pids_guard

    directory = Path(tempfile.mkdtemp(prefix="lcb-keep-", dir="/tmp"))
    directory.chmod(0o755)
    (directory / "lcbkeepprobe.py").write_text("VALUE = 'kept'\n")
    (directory / "lcbkeepprobe.py").chmod(0o644)
    try:
        with pids_guard(max_pids=200) as guard:
            assert guard.call(_import_from_under_tmp, directory, timeout_s=60) == 1
    finally:
        shutil.rmtree(directory)

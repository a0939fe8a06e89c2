"""Programs graded side by side cannot pool what they learn (issue #21, item 2).

In functional mode a program learns whether each answer was right (test i + 1 comes only after
test i passed). Were a socket open between programs graded at once, explorers could tell a
program that computes nothing every answer. Each slot has a network namespace of its own as
root (its loopback is down), and without one the seccomp filter refuses `socket()`; these tests
hold either way. Every test runs inside an outer pids-cgroup guard.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import uuid
from contextlib import ExitStack

import pytest
from cgroup_guard import pids_guard
from helpers_grading import functional_problem, stdin_problem

from lcb.grading import GradingPool

GUARD_PIDS = 400


def guarded(fn, *args, timeout_s: float = 120.0):
    with pids_guard(max_pids=GUARD_PIDS) as guard:
        result = guard.call(fn, *args, timeout_s=timeout_s)
        assert guard.survivors(settle_s=5.0) == [], "a process outlived the grading"
    return result


def free_udp_ports(count: int) -> int:
    """A first port of `count` consecutive ones that are free on 127.0.0.1 now."""
    for _ in range(100):
        first = 20000 + int.from_bytes(os.urandom(2), "big") % 40000
        with ExitStack() as held:
            try:
                for port in range(first, first + count):
                    sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return first
    raise RuntimeError("no free UDP ports")


def _grade_at_once(jobs, slots):
    """Grade every (problem, code) job at the same time, each on a slot of its own."""
    os.cpu_count = lambda: slots  # the pool caps slots at the core count; this child only
    with GradingPool(slots) as pool:
        grades: list = [None] * len(jobs)

        def grade(i: int) -> None:
            grades[i] = pool.grade_sync(*jobs[i])

        threads = [threading.Thread(target=grade, args=(i,)) for i in range(len(jobs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return grades, dict(pool.isolation)


# --- one program, and this test's own sockets -------------------------------------------------

SEND_TO_THE_TEST = """\
import socket
sent = []
for family, address in ((socket.AF_INET, ("127.0.0.1", {port})), (socket.AF_UNIX, {name!r})):
    try:
        socket.socket(family, socket.SOCK_DGRAM).sendto(b"answers", address)
        sent.append(family.name)
    except OSError:
        pass
print(sent)
"""


def _grade_one(problem, code):
    with GradingPool(1) as pool:
        return pool.grade_sync(problem, code), dict(pool.isolation)


def test_a_programs_datagrams_reach_no_other_process():
    # What a program sends to 127.0.0.1 or to an abstract unix socket reaches nobody: this
    # test's own sockets listen there (a program graded beside it would be no easier to reach).
    name = f"\0lcb-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, \
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as unix:
        udp.bind(("127.0.0.1", 0))
        unix.bind(name)
        code = SEND_TO_THE_TEST.format(port=udp.getsockname()[1], name=name)
        grade, isolation = guarded(_grade_one, stdin_problem(("", "[]\n")), code)
        # Both sockets are local: a datagram that was delivered is already queued here.
        arrived = select.select([udp, unix], [], [], 0)[0]
    assert arrived == [], "a program's datagram reached a process outside its slot"
    assert grade.em == 1, grade.feedback
    assert isolation["netns"] or isolation["seccomp"]


# --- two programs graded at once ----------------------------------------------------------------

RECEIVE = """\
import select, socket, time
listening = []
for kind, family, address in (("udp", socket.AF_INET, ("127.0.0.1", {port})),
                              ("unix", socket.AF_UNIX, {name!r})):
    try:
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind(address)
        listening.append((kind, sock))
    except OSError:
        pass
got = set()
end = time.monotonic() + 1.5
while listening and time.monotonic() < end:
    ready = select.select([s for _, s in listening], [], [], max(0.0, end - time.monotonic()))[0]
    for kind, sock in list(listening):
        if sock in ready:
            _, peer = sock.recvfrom(64)
            got.add(kind)
            try:
                sock.sendto(b"ack", peer)
            except OSError:
                pass
print(sorted(got))
"""
SEND = """\
import socket, time
targets = []
for kind, family, mine, theirs in (("udp", socket.AF_INET, ("127.0.0.1", 0), ("127.0.0.1", {port})),
                                   ("unix", socket.AF_UNIX, {name!r} + "-s", {name!r})):
    try:
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind(mine)
        sock.settimeout(0.02)
        targets.append((kind, sock, theirs))
    except OSError:
        pass
acked = set()
end = time.monotonic() + 1.5
while targets and time.monotonic() < end:
    for target in list(targets):
        kind, sock, theirs = target
        try:
            sock.sendto(b"answers", theirs)
            sock.recvfrom(8)
            acked.add(kind)
            targets.remove(target)
        except OSError:
            pass
print(sorted(acked))
"""


@pytest.mark.slow
def test_two_programs_graded_at_once_cannot_exchange_a_datagram():
    # UDP on 127.0.0.1 and an abstract unix socket: each tried for 1.5 s, both ways (the
    # receiver acknowledges what it gets).
    port, name = free_udp_ports(1), f"\0lcb-pool-{uuid.uuid4().hex}"
    silent = stdin_problem(("", "[]\n"))
    (receiver, sender), _ = guarded(_grade_at_once, [
        (silent, RECEIVE.format(port=port, name=name)),
        (silent, SEND.format(port=port, name=name))], 2)
    assert receiver.em == 1, f"the receiver heard the sender: {receiver.feedback}"
    assert sender.em == 1, f"the sender was answered: {sender.feedback}"


# --- the collusion of the report: two explorers and a listener ---------------------------------

COLLUDE = """\
import json, socket, time
PORTS = {{"T": {port}, "F": {port} + 1, "L": {port} + 2}}
ME, PEERS, DEFAULT, PATIENCE = {me!r}, {peers!r}, {default!r}, {patience!r}
known = {{}}
try:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", PORTS[ME]))
except OSError:
    sock = None


def pump(until, done):
    # Take in what peers tell (acknowledging it) until `done()` or the time `until`.
    while sock is not None and not done():
        left = until - time.monotonic()
        if left <= 0:
            return
        sock.settimeout(left)
        try:
            data, peer = sock.recvfrom(4096)
        except OSError:
            return
        if data == b"ack":
            acks.append(peer[1])
            continue
        told = json.loads(data)
        known[str(told["x"])] = told["v"]
        sock.sendto(b"ack", peer)


acks = []


def tell(x, v):
    # A confirmed answer, to every peer, until each acknowledges it (2 s at most).
    for peer in PEERS:
        end = time.monotonic() + 2
        while sock is not None and time.monotonic() < end and PORTS[peer] not in acks:
            try:
                sock.sendto(json.dumps({{"x": x, "v": v}}).encode(), ("127.0.0.1", PORTS[peer]))
            except OSError:
                return
            pump(time.monotonic() + 0.05, lambda: PORTS[peer] in acks)
        acks.clear()


class Solution:
    def __init__(self):
        self.pending = None

    def f(self, x):
        if self.pending is not None:  # this call is the proof that the last answer passed
            tell(*self.pending)
        key = str(x)
        pump(time.monotonic() + PATIENCE, lambda: key in known)
        value = known.get(key, DEFAULT)
        self.pending = (x, value)
        return value
"""


@pytest.mark.slow
def test_explorers_cannot_tell_a_listener_the_answers():
    # The report's attack, graded as `lcb score --jobs 3` grades three samples of a problem at
    # once: T answers True and F False when no one knows better, each tells the others every
    # answer confirmed by the next test's arrival; L computes nothing and answers only what it
    # is told. The tests repeat an input, as LiveCodeBench's sometimes do, so the confirmed
    # answers cover all three. With a channel between slots L passes 3/3 (checked on the code
    # before the fix); without one it fails at test 0.
    port = free_udp_ports(3)
    problem = functional_problem("f", ("10", "true"), ("20", "false"), ("10", "true"))
    roles = {"T": (["F", "L"], True, 0.0), "F": (["L"], False, 1.5), "L": ([], None, 3.0)}
    jobs = [(problem, COLLUDE.format(port=port, me=me, peers=peers, default=default,
                                     patience=patience))
            for me, (peers, default, patience) in roles.items()]
    (explorer_t, explorer_f, listener), isolation = guarded(_grade_at_once, jobs, 3)
    assert [o.verdict.value for o in explorer_t.outcomes] == ["passed", "wrong_answer"]
    assert listener.em == 0 and listener.outcomes[0].verdict.value == "wrong_answer", (
        f"the listener was told the answers: {listener.feedback}")
    assert explorer_f.em == 0
    assert isolation["netns"] or isolation["seccomp"]


# --- no socket at all: the page cache (red-team F4) --------------------------------------------

# Samples graded one after another, or side by side, shared what they learned through the page
# cache of a system file: evict its pages (posix_fadvise DONTNEED), cache some (one byte read
# each), and read the pattern back without caching anything (preadv RWF_NOWAIT, mincore,
# cachestat). Each probe here says whether it was refused.
PAGE_CACHE_PROBES = """\
import ctypes, errno, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
CACHESTAT, MINCORE = 451, {"x86_64": 27, "aarch64": 232}[os.uname().machine]
fd = os.open(os.__file__, os.O_RDONLY)  # a file every program reads
view = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
page = mmap.mmap(-1, 4096)
def raw(number, *args):
    if libc.syscall(number, *args) < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
def outcome(call):
    try:
        call()
        return "allowed"
    except OSError as exc:
        return "refused" if exc.errno in (errno.EPERM, errno.EOPNOTSUPP) else "allowed"
probes = (
    lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED),
    lambda: os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT),
    lambda: raw(MINCORE, ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(page))),
                ctypes.c_size_t(4096), ctypes.create_string_buffer(1)),
    lambda: raw(CACHESTAT, fd, ctypes.create_string_buffer(16), ctypes.create_string_buffer(40),
                0),
    lambda: view.madvise(21),  # MADV_PAGEOUT
)
print(*[outcome(probe) for probe in probes])
"""


def test_a_program_can_neither_evict_nor_probe_the_page_cache():
    grade, isolation = guarded(_grade_one, stdin_problem(("", "refused " * 4 + "refused\n")),
                               PAGE_CACHE_PROBES)
    if not isolation["seccomp"]:
        pytest.skip("no seccomp filter here")
    assert grade.em == 1, grade.feedback

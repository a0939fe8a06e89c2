"""A grading slot: one judge and one zygote, in their own cgroups, with their own program uid.

`Slot.start(sandbox, judge=…)` starts both (the judge's entry point is the caller's: the pool
hands it `lcb.grading.judging.main`, which serves with `lcb.sandbox.judge.serve`; the zygote is
`lcb.sandbox.zygote`; each a fresh interpreter, under bubblewrap for "bwrap"), joined by a
seqpacket socket:
- the zygote and every program it forks live in the slot's jail (`cgroups.Jail`): pids.max,
  a memory limit (the larger program cap plus `MEMORY_HEADROOM`, room for the zygote and its
  hosts), a cpu group of equal weight. The program's own processes run in a memory group
  nested in the slot's (`cgroups.PROGRAM_GROUP`): the zygote gets descriptors on its limit
  and its `tasks` file; each program's host sets the limit to that program's own cap
  exactly when it is loaded (`lcb.sandbox.host.confine`), and each program process joins
  the group right after its fork. So what a program holds (shared memory, tmpfs and memfds
  included) counts against its cap, and when it runs out the kernel kills one of the
  program's processes, never its host or the zygote. lcb's processes also ask for an OOM
  score of -1000 (it takes CAP_SYS_RESOURCE, which a container often lacks: they then keep
  the score they inherit) and the program's side sets +1000, for a machine-wide OOM;
- as root, the slot claims a uid of its own (`lcb.sandbox.claims`) that its programs run as,
  and, where one is free, a CPU that its judge, zygote and programs are pinned to;
- the judge (no program ever forks from it) answers the pool's JSON requests.
`call(request, budget_s=…)` sends one request and returns the answer's `run` (the caller
checks it against its schema: `lcb.grading.default.check_default_run`,
`lcb.grading.official.check_official_run`): an answer that is late or out of step (another id)
raises `SlotGone`, one whose judge could not grade `JudgeRaised`, and the pool discards the
slot. `stop()` ends both
processes and kills whatever is left in the jail. `isolation` says how programs are confined.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any, NoReturn

from lcb.sandbox import claims, launch, wire
from lcb.sandbox.cgroups import Jail
from lcb.sandbox.contain import MEMORY_HEADROOM, Limits
from lcb.sandbox.privilege import can_switch_uid

ANSWER_LIMIT = 64 << 20
_START_TIMEOUT_S = 60.0
_ids = itertools.count(1)


class SlotGone(RuntimeError):
    """The slot's judge exited, sent nothing in time, or sent something out of step."""


class SlotFailed(RuntimeError):
    """The slot could not start: its message says why (the tier cannot run here)."""


def _program_cap() -> int:
    """The larger program cap (0: a cap is disabled, so none)."""
    caps = (Limits.for_functional().memory_bytes, Limits.for_stdin().memory_bytes)
    return 0 if 0 in caps else max(caps)


def slot_memory_bytes() -> int:
    """The jail's memory limit: the larger program cap plus headroom (0: a cap is disabled)."""
    cap = _program_cap()
    return cap + MEMORY_HEADROOM if cap else 0


class Slot:
    def __init__(self, judge: subprocess.Popen, zygote: subprocess.Popen, jail: Jail | None,
                 held: list[claims.Claim], log: Any):
        self.judge, self.zygote, self.jail, self.held, self.log = judge, zygote, jail, held, log
        self.pid = judge.pid
        self.isolation: dict = {}

    @classmethod
    def start(cls, sandbox: str, *, judge: Callable[[int, int | None], NoReturn]) -> Slot:
        """Start a slot whose judge runs `judge(peer_fd, cpu)` (a module-level function: the
        judge's interpreter imports it by name) beside a fresh zygote."""
        extra = 16 if sandbox == "process" else 48  # the zygote, a host; bwrap's own processes
        jail = Jail.create(max_tasks=Limits().max_tasks + extra, program_bytes=_program_cap(),
                           memory_bytes=slot_memory_bytes(), prefix="lcb-slot")
        uid = claims.claim_uid() if can_switch_uid() else None
        cpu = claims.claim_cpu()
        held = [c for c in (uid, cpu) if c is not None]
        log = tempfile.TemporaryFile()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pin = cpu.value if cpu else None
        program = jail.open_program_files() if jail is not None else None
        limit, tasks = program or (None, None)
        passed = (theirs.fileno(), *(program or ()))
        try:
            zygote = launch.start(
                launch.python_argv("lcb.sandbox.zygote:main", sandbox=sandbox, role="zygote",
                                   args=(theirs.fileno(), uid.value if uid else None, pin,
                                         limit, tasks)),
                jail=jail, pass_fds=passed, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=log, oom_score_adj=-1000)
            judge_proc = launch.start(
                launch.python_argv(launch.entry_of(judge), sandbox=sandbox, role="judge",
                                   args=(mine.fileno(), pin)),
                jail=None, pass_fds=(mine.fileno(),), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, fixed_hashes=False)
        finally:
            mine.close()
            theirs.close()
            for fd in program or ():
                os.close(fd)
        slot = cls(judge_proc, zygote, jail, held, log)
        slot._hello(sandbox)
        return slot

    def _hello(self, sandbox: str) -> None:
        try:
            hello = wire.read_frame(self.judge.stdout.fileno(), limit=1 << 20,
                                    deadline=time.monotonic() + _START_TIMEOUT_S)
        except wire.ChannelError as exc:
            tail = self.log_tail()
            self.stop(kill=True)
            raise SlotFailed(f"a grading slot ({sandbox}) failed to start ({exc}){tail}"
                             ) from None
        if not isinstance(hello, dict) or "error" in hello or "zygote" not in hello:
            reason = hello.get("error") if isinstance(hello, dict) else hello
            tail = self.log_tail()
            self.stop(kill=True)
            raise SlotFailed(f"sandbox {sandbox!r} cannot run programs here: {reason}{tail}")
        self.isolation = dict(hello["zygote"].get("isolation") or {})

    def log_tail(self, limit: int = 2000) -> str:
        """What the judge and zygote last wrote to stderr, as ": <text>" for error messages."""
        try:
            size = os.fstat(self.log.fileno()).st_size
            text = os.pread(self.log.fileno(), limit, max(0, size - limit)).decode("utf-8",
                                                                                  "replace")
        except (OSError, ValueError):
            return ""
        return f": {' '.join(text.split())}" if text.strip() else ""

    def alive(self) -> bool:
        return self.judge.poll() is None and self.zygote.poll() is None

    def call(self, request: dict, *, budget_s: float) -> dict:
        rid = next(_ids)
        try:
            wire.write_frame(self.judge.stdin.fileno(), {**request, "id": rid})
            answer = wire.read_frame(self.judge.stdout.fileno(), limit=ANSWER_LIMIT,
                                     deadline=time.monotonic() + budget_s)
        except (OSError, wire.ChannelError) as exc:
            raise SlotGone(str(exc)) from None
        if not isinstance(answer, dict) or answer.get("id") != rid:
            raise SlotGone("the judge answered out of step")
        if answer.get("ok") is not True:
            raise JudgeRaised(str(answer.get("error", "no reason given"))[-4000:])
        return answer.get("run")

    def stop(self, *, kill: bool = False) -> None:
        """End the slot: at EOF the judge exits and closes the zygote's socket; `kill` (a
        slot busy or out of step) does not wait for that."""
        for proc in (self.judge, self.zygote):
            if kill:
                proc.kill()
        try:
            self.judge.stdin.close()
        except OSError:
            pass
        for proc in (self.judge, self.zygote):
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pipe in (self.judge.stdout,):
            pipe.close()
        if self.jail is not None:
            self.jail.kill_all()
            self.jail.remove()
        for claim in self.held:
            claim.release()
        self.log.close()


class JudgeRaised(RuntimeError):
    """The judge answered in step but could not grade (its traceback is the message)."""

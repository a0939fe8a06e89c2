"""Stdin tests on the program host's side: queued by the judge, run back to back, reported in
batches.

The judge sends tests ahead (`{"op": "stdin", "first": k, "timeout", "fail_fast"}` with the
input and stdout memfds of tests k, k+1, … in pairs). The host runs them in order, each in a
fresh process forked from the prepared program (`child.run_as_script`), and answers
`{"reports": [...]}` with one report per test (`i`, wait status, time, the tail of its stderr,
whether the memory cgroup killed it), gathering reports for up to `BATCH_S` so that neither side
wakes up once per test. A report never waits longer than that: when the next test is still
running `BATCH_S` after the oldest held report, the host wakes and sends them (the judge waits
for each message only a test's time limit plus `judge.HOST_SLACK_S`). It stops early,
answering `{"reports": [...], "stopped": true}`, at the judge's `stop` (the judge found a wrong
answer) and, when `fail_fast`, at the first process that did not exit cleanly (a failure
whatever it printed). A running test hears the judge only after `QUIET_S`: a short test is
never interrupted by the next request arriving.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections import deque

from lcb.sandbox import wire
from lcb.sandbox.hosting import ProgramHost, rlimits, run_to_end
from lcb.sandbox.process import StderrTail, spawn
from lcb.sandbox.workdirs import reset_workdir

BATCH_S = 0.05
QUIET_S = 0.05
_PACKET_ROOM = wire.PACKET_BYTES - 4096


class StdinRun:
    """The host's queue of stdin tests and its outbox of reports."""

    def __init__(self, host: ProgramHost, ctl: socket.socket):
        self.host, self.ctl = host, ctl
        self.queue: deque[tuple[int, int, int]] = deque()  # (index, input fd, stdout fd)
        self.timeout, self.fail_fast = 6.0, True
        self.outbox: list[dict] = []
        self.outbox_bytes, self.since = 0, time.monotonic()
        self.stop_asked = self.ended = False

    def add(self, message: dict, fds: list[int]) -> None:
        if len(fds) % 2 or not isinstance(message.get("first"), int):
            wire.close_all(fds)
            raise wire.ChannelError("a stdin request needs an index and fds in pairs")
        self.timeout = float(message["timeout"])
        self.fail_fast = bool(message["fail_fast"])
        for offset in range(len(fds) // 2):
            self.queue.append((message["first"] + offset, fds[2 * offset], fds[2 * offset + 1]))

    def run(self) -> None:
        """Run the queue; report; return when it is empty or the run stopped."""
        while self.queue:
            self._poll()
            if self.stop_asked:
                return self._stop()
            report = self._one(*self.queue.popleft())
            if self.ended:
                raise wire.ChannelError("the judge ended the program")
            self._post(report)
            if self.stop_asked or (self.fail_fast and not _clean(report)):
                return self._stop()
            if (not _clean(report) or self.outbox_bytes > _PACKET_ROOM // 2
                    or time.monotonic() - self.since > BATCH_S):
                self._flush()
        self._flush()

    def _one(self, index: int, in_fd: int, out_fd: int) -> dict:
        reset_workdir(self.host.workdir)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        started = time.monotonic()
        pid = spawn(self.host.script, fds=(in_fd, out_fd, err_w), scope=self.host.scope,
                    rlimits=rlimits(self.host, self.timeout + 1))
        for fd in (err_w, in_fd, out_fd):
            os.close(fd)
        # Reports held for a batch leave at `since + BATCH_S` even while this test runs: the
        # judge must hear of a finished test about when it ended, whatever this one takes.
        wake = (self.since + BATCH_S, self._flush) if self.outbox else None
        report = run_to_end(self.host, pid, started, deadline=started + self.timeout,
                            stderr=StderrTail(err_r), ctl=self.ctl,
                            control_from=started + QUIET_S, on_control=self._control,
                            wake=wake)
        return {"i": index, **report}

    def _control(self, message: dict, fds: list[int]) -> bool:
        """A message that arrived while a test ran: more tests (queued), or stop (kill)."""
        if message.get("op") == "stdin":
            self.add(message, fds)
            return False
        wire.close_all(fds)
        if message.get("op") in ("stop", "end"):
            self.stop_asked = True
            self.ended = message.get("op") == "end"
            return True
        return False

    def _poll(self) -> None:
        """Take what the judge sent meanwhile, without waiting."""
        while select.select([self.ctl], [], [], 0)[0]:
            message, fds = wire.recv(self.ctl, max_fds=wire.MAX_FDS)
            self._control(message, fds)
            if self.ended:
                raise wire.ChannelError("the judge ended the program")

    def _post(self, report: dict) -> None:
        if not self.outbox:
            self.since = time.monotonic()
        self.outbox.append(report)
        self.outbox_bytes += len(report["stderr"]) * 12 + 160  # its JSON at most (escapes)

    def _flush(self, **extra: bool) -> None:
        if self.outbox or extra:
            wire.send(self.ctl, {"reports": self.outbox, **extra})
        self.outbox, self.outbox_bytes = [], 0

    def _stop(self) -> None:
        while self.queue:
            _, in_fd, out_fd = self.queue.popleft()
            os.close(in_fd)
            os.close(out_fd)
        self.stop_asked = False
        self._flush(stopped=True)


def _clean(report: dict) -> bool:
    """A process that exited with status 0 before its deadline."""
    status = report["status"]
    return not report["timed_out"] and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0

"""The judge's plumbing: its handles on the zygote and program hosts, and its serve loop.

A judge is a slim grading worker, one per slot, started beside its zygote (`lcb.sandbox.zygote`,
reached on the seqpacket socket `peer_fd`) from an entry point the pool hands to the slot
(`lcb.grading.judging.main`, which calls `serve` here with grading's request handler). It
holds the tests and computes every verdict; no program ever runs in it or is forked from it:
it sends a program's source to the zygote as a memfd, gets a control socket to the new program
host (`lcb.sandbox.host`), hands it each test's input, reads what the program wrote, and
compares with the expected output itself (`lcb.grading`'s mode drivers do, through the handles
here).

Protocol with the pool, on stdin/stdout: length-prefixed JSON frames (`lcb.sandbox.wire`).
- Once at start: `{"pid", "zygote": {"pid", "isolation"}}`, or `{"error"}` when the zygote
  could not start (the pool raises it as a `GradingError` naming the reason).
- Then per request `{"id", "kind", ...}`: one answer `{"id", "ok": true, "run": ...}` (the
  handler's result) or `{"id", "ok": false, "error": traceback}`. EOF ends it.

`Zygote` and `HostHandle` are the judge's handles on those two processes. A host runs as the
program does (the program cannot signal it where Landlock scopes signals; see
`lcb.sandbox.landlock`), and may be lost: a host that stops answering (`HostLost`) fails that
program's grading (its verdict is `infra`, and the pool grades it again on a fresh slot, where
a host lost at the same test again makes that test the program's `runtime_error`), never
another program, and the zygote kills what is left of it. A zygote that goes away
(`ZygoteLost`) ends the judge (the pool starts a new slot).
"""

from __future__ import annotations

import math
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from lcb.sandbox import wire
from lcb.sandbox.contain import Limits, die_with_parent
from lcb.sandbox.privilege import make_undumpable
from lcb.sandbox.process import memfd

REQUEST_LIMIT = 1 << 34   # the pool is trusted; tests of one problem can reach gigabytes
HOST_SLACK_S = 5.0        # beyond a test's time limit, for the host to kill, reap and reply
_START_S = 60.0


class HostLost(RuntimeError):
    """The program's host went away, or (`timed_out`) stopped answering in time."""

    def __init__(self, message: str, *, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


class ZygoteLost(RuntimeError):
    """The zygote went away: this judge can grade nothing more (the pool starts a new slot)."""


def check_report(message: dict) -> dict:
    """A host's exit report, checked field by field."""
    try:
        report = {"status": int(message["status"]), "timed_out": bool(message["timed_out"]),
                  "wall": float(message["wall"]), "cpu": float(message["cpu"]),
                  "stderr": str(message["stderr"]), "oom": bool(message["oom"])}
    except (KeyError, TypeError, ValueError):
        raise HostLost(f"the program's host sent a malformed report: {sorted(message)}") from None
    if not (0 <= report["wall"] < math.inf and 0 <= report["cpu"] < math.inf):
        raise HostLost("the program's host sent times that are not times")
    return report


class HostHandle:
    """The judge's end of one program host's control socket (the host's own state is
    `lcb.sandbox.hosting.ProgramHost`)."""

    def __init__(self, sock: socket.socket, hello: dict):
        self.sock, self.hello, self.lost = sock, hello, False

    def send(self, message: dict, fds: list[int] | tuple[int, ...] = ()) -> None:
        try:
            wire.send(self.sock, message, fds)
        except wire.ChannelError as exc:
            self.lost = True
            raise HostLost(f"the program's host is gone ({exc})") from None

    def reply(self, *, deadline: float, timeout_ok: bool = False) -> dict | None:
        """The host's next message; None at the deadline if `timeout_ok`."""
        try:
            message, _ = wire.recv(self.sock, deadline=deadline)
        except wire.ChannelTimeout:
            if timeout_ok:
                return None
            self.lost = True
            raise HostLost("the program's host did not answer in time", timed_out=True) from None
        except wire.ChannelError as exc:
            self.lost = True
            raise HostLost(f"the program's host is gone ({exc})") from None
        return message

    def request_reply(self, *, deadline: float) -> dict:
        """The next report, checked (the request was sent earlier)."""
        return self._checked(self.reply(deadline=deadline))

    def _checked(self, message: dict | None) -> dict:
        try:
            return check_report(message or {})
        except HostLost:
            self.lost = True
            raise

    def kill(self) -> None:
        """Ask the host to kill the program's running process (its report follows; a host
        whose process already ended ignores it)."""
        try:
            self.send({"op": "kill"})
        except HostLost:
            pass

    def exit_report(self, *, grace_s: float) -> dict | None:
        """The report of the host's running process: wait `grace_s`, then have it killed and
        wait `HOST_SLACK_S` more. None when the host is lost."""
        try:
            message = self.reply(deadline=time.monotonic() + grace_s, timeout_ok=True)
            if message is None:
                self.kill()
                message = self.reply(deadline=time.monotonic() + HOST_SLACK_S)
            return self._checked(message)
        except HostLost:
            return None

    def close(self) -> None:
        if not self.lost:
            try:
                wire.send(self.sock, {"op": "end"})
            except wire.ChannelError:
                self.lost = True
        self.sock.close()


class Zygote:
    """The judge's end of its zygote's socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.hello, _ = wire.recv(sock, deadline=time.monotonic() + _START_S)

    def _call(self, message: dict, fds: list[int] | tuple[int, ...] = (), *, max_fds: int = 0
              ) -> tuple[dict, list[int]]:
        try:
            wire.send(self.sock, message, fds)
            answer, got = wire.recv(self.sock, max_fds=max_fds,
                                    deadline=time.monotonic() + 30.0)
        except wire.ChannelError as exc:
            raise ZygoteLost(f"the zygote is gone ({exc})") from None
        if "error" in answer:
            wire.close_all(got)
            raise ZygoteLost(f"the zygote refused {message.get('op')!r}: {answer['error']}")
        return answer, got

    def open_host(self, *, source: str, mode: str, fn_name: str | None,
                  limits: Limits) -> HostHandle:
        """Take the zygote's spare host and load the program into it; the host's hello says
        ready, compile_error or setup_error."""
        _, fds = self._call({"op": "host", "mode": mode}, max_fds=1)
        if len(fds) != 1:
            wire.close_all(fds)
            raise ZygoteLost("the zygote handed out no host")
        host = HostHandle(socket.socket(fileno=fds[0]), {})
        program = memfd("program", source.encode("utf-8", "surrogatepass"))
        try:
            host.send({"op": "load", "mode": mode, "fn_name": fn_name,
                       "limits": limits._asdict()}, [program])
            host.hello = host.reply(deadline=time.monotonic() + _START_S)
        except HostLost as exc:
            host.hello = {"setup_error": str(exc)}
        finally:
            os.close(program)
        return host

    def abort(self) -> None:
        """Kill every process of the current program (its host included)."""
        self._call({"op": "abort"})


def serve(peer_fd: int, cpu: int | None, handle: Callable[[Zygote, dict], Any]) -> NoReturn:
    """Serve the pool's requests until it closes the pipe (pinned to `cpu` if given): each
    request goes to `handle(zygote, request)`, whose plain-data result is the answer's `run`.
    A `ZygoteLost` it raises ends this judge; any other exception fails that request only."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints must not corrupt the protocol
    make_undumpable()
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pool decides when we stop
    sys.set_int_max_str_digits(4300)  # see values.decode: no long decimal is ever converted
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    zygote = Zygote(socket.socket(fileno=peer_fd))
    if not zygote.hello.get("ready"):
        wire.write_frame(proto_out, {"error": zygote.hello.get("error", "the zygote failed")})
        os._exit(1)
    wire.write_frame(proto_out, {"pid": os.getpid(), "zygote": zygote.hello})
    while True:
        try:
            request = wire.read_frame(proto_in, limit=REQUEST_LIMIT)
        except wire.ChannelError:
            break
        rid = request.get("id") if isinstance(request, dict) else None
        try:
            answer = {"id": rid, "ok": True, "run": handle(zygote, request)}
        except ZygoteLost as exc:
            wire.write_frame(proto_out, {"id": rid, "ok": False, "error": str(exc)})
            os._exit(1)
        except Exception:
            answer = {"id": rid, "ok": False, "error": traceback.format_exc()[-4000:]}
        wire.write_frame(proto_out, answer)
    os._exit(0)

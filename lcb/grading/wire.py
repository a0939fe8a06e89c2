"""Data-only channels between lcb's processes: JSON, size-capped, never a pickle.

- Pipes (pool <-> judge): frames of an 8-byte big-endian length and a UTF-8 JSON document.
  `write_frame(fd, value)`; `read_frame(fd, limit=…, deadline=…)` refuses a frame over `limit`
  bytes before reading it, and raises `ChannelError` at EOF, at the deadline or for bad JSON.
- Seqpacket sockets (judge <-> zygote, judge <-> program host): one JSON object per packet,
  with file descriptors attached (SCM_RIGHTS). `send(sock, message, fds)`;
  `recv(sock, max_fds=…, deadline=…)` returns (message, fds) and closes whatever arrived
  with a packet it rejects (truncated, too many fds, not a JSON object).
- `LineReader`: newline-terminated JSON objects from an untrusted stream (a program's
  functional-mode channel), each capped and awaited until a deadline.

Whoever reads a message validates its fields; these functions only guarantee plain JSON data of
bounded size. Stdlib only.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
from typing import Any

_HEADER = 8
PACKET_BYTES = 1 << 16  # control packets are small: programs and tests travel as memfds
MAX_FDS = 250           # descriptors one packet may carry (the kernel's SCM_MAX_FD is 253)


class ChannelError(RuntimeError):
    """The peer is gone, sent nothing before the deadline, or sent something malformed."""


class ChannelTimeout(ChannelError):
    """Nothing arrived before the deadline (the channel itself may still be fine)."""


def _wait_readable(fd: int, deadline: float | None) -> None:
    if deadline is None:
        return
    left = deadline - time.monotonic()
    if left <= 0 or not select.select([fd], [], [], left)[0]:
        raise ChannelTimeout("no message before the deadline")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_frame(fd: int, value: Any) -> None:
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    write_all(fd, len(data).to_bytes(_HEADER, "big") + data)


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < size:
        _wait_readable(fd, deadline)
        chunk = os.read(fd, min(size - got, 1 << 20))
        if not chunk:
            raise ChannelError(f"the peer closed the channel ({got}/{size} bytes read)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, *, limit: int, deadline: float | None = None) -> Any:
    size = int.from_bytes(_read_exactly(fd, _HEADER, deadline), "big")
    if size > limit:
        raise ChannelError(f"a {size}-byte message is over the {limit}-byte limit")
    return loads(_read_exactly(fd, size, deadline))


def loads(data: bytes) -> Any:
    """Plain JSON data from untrusted bytes, or `ChannelError`."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ChannelError(f"not JSON: {type(exc).__name__}") from None


def send(sock: socket.socket, message: dict, fds: tuple[int, ...] | list[int] = ()) -> None:
    data = json.dumps(message, separators=(",", ":")).encode("utf-8")
    if len(data) > PACKET_BYTES:
        raise ChannelError(f"control message of {len(data)} bytes is over {PACKET_BYTES}")
    try:
        if fds:
            socket.send_fds(sock, [data], list(fds))
        else:
            sock.send(data)
    except OSError as exc:
        raise ChannelError(f"cannot send: {exc}") from None


def recv(sock: socket.socket, *, max_fds: int = 0, deadline: float | None = None
         ) -> tuple[dict, list[int]]:
    """The next packet as (JSON object, received fds). EOF and bad packets raise."""
    _wait_readable(sock.fileno(), deadline)
    try:
        data, fds, flags, _ = socket.recv_fds(sock, PACKET_BYTES, max(max_fds, 1))
    except OSError as exc:
        raise ChannelError(f"cannot receive: {exc}") from None
    try:
        if not data:
            raise ChannelError("the peer closed the channel")
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) > max_fds:
            raise ChannelError("a packet was cut short or carried unexpected descriptors")
        message = loads(data)
        if not isinstance(message, dict):
            raise ChannelError("a packet is not a JSON object")
    except ChannelError:
        close_all(fds)
        raise
    return message, fds


def close_all(fds: list[int] | tuple[int, ...]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class LineReader:
    """JSON objects, one per line, from an untrusted stream descriptor."""

    def __init__(self, fd: int, *, limit: int):
        self.fd, self.limit = fd, limit
        self.buf, self.scanned = bytearray(), 0

    def next(self, deadline: float | None) -> dict | None:
        """The next object; None at EOF. Raises `ChannelTimeout` at the deadline (None: wait
        as long as it takes), and `ChannelError` for a line that is too long, not JSON, or not
        an object."""
        while (end := self.buf.find(b"\n", self.scanned)) < 0:
            self.scanned = len(self.buf)
            if self.scanned > self.limit:
                raise ChannelError(f"a message over the {self.limit}-byte limit")
            _wait_readable(self.fd, deadline)
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line = bytes(self.buf[:end])
        del self.buf[:end + 1]
        self.scanned = 0
        if len(line) > self.limit:
            raise ChannelError(f"a message over the {self.limit}-byte limit")
        message = loads(line)
        if not isinstance(message, dict):
            raise ChannelError("a message is not a JSON object")
        return message


def send_line(fd: int, message: dict, deadline: float) -> None:
    """Write one JSON line to a non-blocking stream descriptor before `deadline`."""
    view = memoryview((json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8"))
    while view:
        try:
            view = view[os.write(fd, view):]
            continue
        except BlockingIOError:
            pass
        except OSError as exc:
            raise ChannelError(f"cannot write: {exc}") from None
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([], [fd], [], left)[1]:
            raise ChannelTimeout("the peer stopped reading before the deadline")

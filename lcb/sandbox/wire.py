"""Data-only channels between lcb's processes: JSON, size-capped, never a pickle.

- Pipes (pool <-> judge): frames of an 8-byte big-endian length and a UTF-8 JSON document
  (a lone surrogate, which a program or a test may hold, travels in its `surrogatepass` form,
  which `json.loads` of bytes reads back).
  `write_frame(fd, value)`; `read_frame(fd, limit=…, deadline=…)` refuses a frame over `limit`
  bytes before reading it, and raises `ChannelError` at EOF, at the deadline or for bad JSON.
- Seqpacket sockets (judge <-> zygote, judge <-> program host): one JSON object per packet,
  with file descriptors attached (SCM_RIGHTS). `send(sock, message, fds)`;
  `recv(sock, max_fds=…, deadline=…)` returns (message, fds) and closes whatever arrived
  with a packet it rejects (truncated, too many fds, not a JSON object).
- `FrameReader` / `frame`: a header line and a length-prefixed payload on a stream (a program's
  functional-mode channel), each capped and awaited until a deadline; payloads are text the
  reader decodes itself (an input, or a value in `lcb.sandbox.values`' encoding).

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
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8",
                                                                              "surrogatepass")
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


class FrameReader:
    """Frames from a stream descriptor: a header line of space-separated ASCII fields whose
    last one is the payload's length, then the payload. Used for the functional channel, where
    the program's process may write anything: a header too long or malformed, or a payload over
    `limit`, is a `ChannelError`; the deadline a `ChannelTimeout`."""

    HEADER_LIMIT = 256

    def __init__(self, fd: int, *, limit: int):
        self.fd, self.limit, self.buf = fd, limit, bytearray()

    def _fill(self, deadline: float | None) -> bool:
        _wait_readable(self.fd, deadline)
        chunk = os.read(self.fd, 1 << 16)
        self.buf += chunk
        return bool(chunk)

    def next(self, deadline: float | None) -> tuple[list[bytes], bytes] | None:
        """(header fields but the length, payload); None at EOF between frames. A deadline
        of None waits as long as it takes."""
        while (end := self.buf.find(b"\n")) < 0:
            if len(self.buf) > self.HEADER_LIMIT:
                raise ChannelError("a frame header is too long")
            if not self._fill(deadline):
                if self.buf:
                    raise ChannelError("the channel closed inside a frame")
                return None
        fields = bytes(self.buf[:end]).split(b" ")
        del self.buf[:end + 1]
        if not fields[-1].isdigit() or int(fields[-1]) > self.limit:
            raise ChannelError("a frame's length is missing or over the limit")
        size = int(fields[-1])
        while len(self.buf) < size:
            if not self._fill(deadline):
                raise ChannelError("the channel closed inside a frame")
        payload = bytes(self.buf[:size])
        del self.buf[:size]
        return fields[:-1], payload


def frame(*fields: object, payload: bytes = b"") -> bytes:
    """One frame for `FrameReader`."""
    return " ".join(map(str, (*fields, len(payload)))).encode() + b"\n" + payload


def send_all(fd: int, data: bytes, deadline: float) -> None:
    """Write `data` to a non-blocking stream descriptor before `deadline`."""
    view = memoryview(data)
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

"""A one-slot (or n-slot) server's queue for the scripted server, as llama.cpp's server has it.

Contract of `Slots(n, closing)`:
- At most `n` requests hold a slot at a time; the others wait in arrival order (FIFO) with no
  byte sent: the connection was accepted and the request read, and nothing comes back until
  a slot frees (a client sees a server that is busy, not one that is down).
- `take(sock)` waits for a slot; it returns False, leaving the queue, when the client hangs up
  while queued (llama.cpp drops a queued task whose connection closed) or the server closes.
  `give()` frees the slot it took.
- `queued` is how many wait now, `peak_queued` the most that ever waited at once, `served`
  how many took a slot; `wait_queued(n)` waits until `n` requests wait (a test's way to know
  that the server is busy and a request is queued behind it).
"""

from __future__ import annotations

import select
import socket
import threading
from collections import deque

POLL_S = 0.02  # how often a queued request looks at its socket


def hung_up(sock: socket.socket) -> bool:
    """True when the peer closed `sock` (checked without waiting)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and not sock.recv(1, socket.MSG_PEEK)
    except (OSError, ValueError):
        return True


class Slots:
    """The queue in front of `n` slots (module docstring)."""

    def __init__(self, n: int, closing: threading.Event):
        if n < 1:
            raise ValueError(f"a server needs at least one slot, got {n}")
        self.n, self._closing = n, closing
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()
        self._busy = 0
        self.peak_queued = 0
        self.served = 0

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def take(self, sock: socket.socket) -> bool:
        """Wait for a slot (module docstring); False: the client left, or the server closes."""
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            self.peak_queued = max(self.peak_queued, len(self._queue))
            self._cond.notify_all()
        while True:
            with self._cond:
                if self._queue[0] is ticket and self._busy < self.n:
                    self._queue.popleft()
                    self._busy += 1
                    self.served += 1
                    self._cond.notify_all()
                    return True
                self._cond.wait(POLL_S)
            if self._closing.is_set() or hung_up(sock):
                with self._cond:
                    self._queue.remove(ticket)
                    self._cond.notify_all()
                return False

    def give(self) -> None:
        """Free a slot taken with `take`."""
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def wait_queued(self, n: int = 1, timeout: float = 10.0) -> bool:
        """Wait until at least `n` requests are queued; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._queue) >= n, timeout)

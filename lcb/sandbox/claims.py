"""Machine-wide claims on things one grading slot or run must have alone: a uid, a CPU.

A claim is an exclusive `flock` on `<claims dir>/<kind>-<n>.lock`, held for the claim's life
(the kernel drops it when the holder dies), so every lcb process on the machine sees it. The
claims directory is its owner's alone (`/run/lcb-claims` for root, else
`$TMPDIR/lcb-claims-<uid>`, mode 0700): no program can take or squat a claim.

- `claim_uid()` (lcb as root): a uid for one slot's or one python_exec run's programs, so
  programs graded side by side cannot signal, trace or read one another, RLIMIT_NPROC counts
  one program's tasks, and whatever a uid owns belongs to one program. `$LCB_SANDBOX_UIDS` =
  `FIRST-LAST` sets the range (default 2147400000-2147400255: no account has such uids);
  `UidsExhausted` when all are taken.
- `claim_cpu()`: one CPU of those this process may use, for one grading slot: its judge, zygote,
  host and program then share a core (a round trip between them stays on it) and never take
  another slot's. None when every allowed CPU is claimed (the slot then runs unpinned), or when
  `$LCB_PIN_CPUS` is `0`.

Stdlib only.
"""

from __future__ import annotations

import fcntl
import os
import stat

from lcb.sandbox.workdirs import temp_root

UIDS_ENV = "LCB_SANDBOX_UIDS"
PIN_ENV = "LCB_PIN_CPUS"
DEFAULT_RANGE = (2147400000, 2147400255)


class UidsExhausted(RuntimeError):
    """Every uid of the range is claimed (or the range is unusable)."""


class Claim:
    """One claimed value; `release()` (or the holder's death) frees it."""

    __slots__ = ("value", "_fd")

    def __init__(self, value: int, fd: int):
        self.value, self._fd = value, fd

    @property
    def uid(self) -> int:
        return self.value

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __repr__(self) -> str:
        return f"Claim({self.value})"


def uid_range() -> tuple[int, int]:
    raw = os.environ.get(UIDS_ENV, "").strip()
    if not raw:
        return DEFAULT_RANGE
    first, sep, last = raw.partition("-")
    try:
        low, high = int(first), int(last)
    except ValueError:
        low = high = -1
    if not sep or not 0 < low <= high < 2**32 - 1:
        raise ValueError(f"${UIDS_ENV}={raw!r}: expected FIRST-LAST, e.g. 2147400000-2147400255")
    return low, high


def claims_dir() -> str:
    """This user's own directory for claims (made 0700 on first use; refused otherwise)."""
    euid = os.geteuid()
    if euid == 0 and os.path.isdir("/run") and os.access("/run", os.W_OK):
        path = "/run/lcb-claims"
    else:
        path = os.path.join(temp_root(), f"lcb-claims-{euid}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != euid or info.st_mode & 0o077:
        raise UidsExhausted(f"{path} must be a directory of uid {euid} with mode 0700")
    return path


def _try(kind: str, value: int) -> Claim | None:
    fd = os.open(os.path.join(claims_dir(), f"{kind}-{value}.lock"),
                 os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return Claim(value, fd)


def claim_uid() -> Claim:
    """A uid no other live claim holds, starting at a pid-dependent place in the range."""
    low, high = uid_range()
    size = high - low + 1
    start = os.getpid() % size
    for offset in range(size):
        found = _try("uid", low + (start + offset) % size)
        if found is not None:
            return found
    raise UidsExhausted(f"all {size} sandbox uids ({low}-{high}) are in use; widen "
                        f"${UIDS_ENV}")


def claim_cpu() -> Claim | None:
    """A CPU of this process's affinity that no other slot holds, or None."""
    if os.environ.get(PIN_ENV, "").strip() == "0":
        return None
    for cpu in sorted(os.sched_getaffinity(0)):
        found = _try("cpu", cpu)
        if found is not None:
            return found
    return None

"""One writer per output: an exclusive, non-blocking `flock` held while a batch or a scoring runs.

Contract:
- `OutputLock.acquire` takes the lock or raises `OutputError` at once, naming the output and the
  holder's pid and start time (read from the lock file). Nothing but the lock file (and the
  directories it needs) is touched before the lock is held, so a refused run writes nothing.
- The holder writes `{"pid", "started_at", "by"}` into the lock file: advice for the message,
  never the lock itself. The kernel drops a `flock` when its holder dies, so a lock file left by
  a killed process blocks nobody; the next holder overwrites its stale content.
- `release` (also on errors and Ctrl-C, through `with`) removes the lock file while still holding
  the lock, and the directories `acquire` created when they are left empty. Because the file can
  be removed, `acquire` checks after locking that the path still names the file it locked.
- The lock is advisory: it keeps out other lcb processes, not editors or `rm`. It relies on
  `flock`, which local Linux/macOS filesystems honour; some network filesystems do not. The
  descriptor is not inherited by child processes (PEP 446), so grading workers and the
  programs they run never keep a dead batch's lock alive.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from lcb.runs.rundir import OutputError, RunPaths, now_iso

LOCK_NAME = ".lock"
_ATTEMPTS = 5  # a path removed between open and flock (the holder just left) is tried again


class OutputLock:
    """An exclusive lock on one output, kept in the lock file `path`.

    `subject` is the output it guards and `flag` the option that chose it, both for the message.

    >>> with OutputLock(Path("out.jsonl.lock"), subject=Path("out.jsonl")):  # doctest: +SKIP
    ...     append_records()
    """

    def __init__(self, path: Path, *, subject: Path, flag: str = "--out", by: str = "lcb run"):
        self.path, self.subject, self.flag, self.by = path, subject, flag, by
        self._fd: int | None = None
        self._created: list[Path] = []

    def acquire(self) -> None:
        """Take the lock, or raise `OutputError` when another process holds it."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this OutputLock")
        self._created = _missing_dirs(self.path.parent)
        try:
            for _ in range(_ATTEMPTS):
                fd = self._open()
                self._lock(fd)
                if _names(self.path, fd):
                    self._fd = fd
                    self._write_owner(fd)
                    return
                os.close(fd)
            raise OutputError(f"could not lock {self.path}: it kept being replaced; try again")
        except OutputError:
            self._remove_created()
            raise

    def release(self) -> None:
        """Drop the lock and remove its file (and the directories `acquire` made, if empty)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # still locked: nobody can take this file between here and close
        os.close(self._fd)
        self._fd = None
        self._remove_created()

    def _remove_created(self) -> None:
        for directory in self._created:  # deepest first; a non-empty one stays
            with contextlib.suppress(OSError):
                directory.rmdir()
        self._created = []

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OutputError(f"cannot create the lock file {self.path}: {exc}") from None

    def _lock(self, fd: int) -> None:
        """Lock `fd`; raise `OutputError` naming the holder when someone else has it."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_owner(fd)
            os.close(fd)
            raise OutputError(self._refusal(holder)) from None
        except OSError as exc:
            os.close(fd)
            raise OutputError(f"cannot lock {self.path} ({exc}); the filesystem may not "
                              "support file locks: choose an output on a local disk") from None

    def _refusal(self, holder: dict[str, Any]) -> str:
        who = holder.get("by") or "lcb process"
        pid = holder.get("pid", "unknown")
        started = holder.get("started_at", "at an unknown time")
        return (f"{self.subject} is in use by another {who} (pid {pid}, started {started}); "
                f"wait for it to finish or choose another {self.flag}")

    def _write_owner(self, fd: int) -> None:
        owner = {"pid": os.getpid(), "started_at": now_iso(), "by": self.by}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(owner) + "\n").encode("utf-8"), 0)

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def run_lock(paths: RunPaths) -> OutputLock:
    """The lock of a batch's output: `DIR/.lock` for `--out-dir DIR`, `FILE.lock` for `--out`."""
    if paths.out_dir is None:
        return file_lock(paths.predictions)
    return OutputLock(paths.out_dir / LOCK_NAME, subject=paths.out_dir, flag="--out-dir")


def file_lock(path: Path, *, by: str = "lcb run") -> OutputLock:
    """The lock of a single output file: the sibling `<name>.lock`."""
    return OutputLock(path.with_name(path.name + ".lock"), subject=path, flag="--out", by=by)


def _missing_dirs(directory: Path) -> list[Path]:
    """The directories `directory.mkdir(parents=True)` would create, deepest first."""
    missing: list[Path] = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    return missing


def _names(path: Path, fd: int) -> bool:
    """True when `path` still names the file open on `fd` (a releasing holder may unlink it)."""
    try:
        on_disk, opened = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (on_disk.st_dev, on_disk.st_ino) == (opened.st_dev, opened.st_ino)


def _read_owner(fd: int) -> dict[str, Any]:
    """The holder's advisory content; {} while it is still being written or when garbled."""
    try:
        owner = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}

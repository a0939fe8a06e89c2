"""Programs' working directories: made, emptied between runs, removed, swept after a crash.

- `make_workdir(prefix)`: a new private directory under the temp dir (`temp_root()`).
- `reset_workdir(path)`: make it an empty directory of ours again, and our cwd, before each
  program process. It never raises for anything a program can do to its directory (the host
  runs as the program's uid and owns it): a directory chmodded to 0 (inside or itself) is
  opened up again, a file, fifo or dangling symlink put in its place is removed and the
  directory made anew, directories nested thousands deep are emptied without recursion. An
  error it cannot repair is left for the next program process to meet.
  Landlock: where lcb runs as root each program has its own `/tmp`, and Landlock's rule lies on
  that `/tmp`, so a directory made anew is as writable as the first; otherwise the rule lies
  on this directory (an O_PATH descriptor taken when the ruleset was built), which a program
  cannot rename or remove (that needs a right on the temp dir it does not have), so it is
  emptied in place and keeps its inode. Without Landlock there is no rule to keep.
- `remove_tree(path)`: remove it and everything in it; never raises.
- `sweep_stale_workdirs()`: remove directories whose creator died before cleaning up.

Stdlib only; no `shutil` (it pulls in bz2 and lzma, and recurses once per directory level).
"""

from __future__ import annotations

import os
import re
import stat

_WORKDIR_NAME = re.compile(r"lcb-(?:prog|exec)-(\d+)-[0-9a-f]{12}")


def temp_root() -> str:
    """The temp directory, as `tempfile.gettempdir()` picks it (without importing tempfile)."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        path = os.environ.get(name)
        if path and os.path.isdir(path):
            return path
    return "/tmp"


def make_workdir(prefix: str = "lcb-prog-") -> str:
    """A new private directory under the temp dir (cheaper than `tempfile.mkdtemp` in a fork)."""
    path = os.path.join(temp_root(), f"{prefix}{os.getpid()}-{os.urandom(6).hex()}")
    os.mkdir(path, 0o700)
    return path


def reset_workdir(workdir: str) -> None:
    """Empty `workdir` and make it our cwd, whatever the last program process did to it (see
    the module docstring); never raises."""
    try:
        _restore(workdir)
        os.chdir(workdir)
        _empty_cwd()
    except OSError:
        pass  # nothing a program can do leads here; what is left, its next process meets


def remove_tree(path: str) -> None:
    """Remove `path` and whatever is in it; never raises (the cwd is kept)."""
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    try:
        here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            os.chmod(path, 0o700)
            os.chdir(path)
            _empty_cwd()
            os.fchdir(here)
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass
    finally:
        try:
            os.fchdir(here)
        except OSError:
            pass
        os.close(here)


def sweep_stale_workdirs() -> None:
    """Remove working directories whose creator died before cleaning up (it was killed)."""
    root = temp_root()
    for name in os.listdir(root):
        match = _WORKDIR_NAME.fullmatch(name)
        if match and not os.path.exists(f"/proc/{match[1]}"):
            remove_tree(os.path.join(root, name))


def _restore(path: str) -> None:
    """`path` a directory of ours with mode 0700 again (OSError if that fails)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        os.mkdir(path, 0o700)
        return
    if not stat.S_ISDIR(info.st_mode):  # a file, fifo or (dangling) symlink in its place
        os.unlink(path)
        os.mkdir(path, 0o700)
    elif stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)


def _empty_cwd() -> None:
    """Remove everything beneath the current directory, which stays: depth first, by name
    from the directory being emptied (no recursion, no descriptor or path per level), each
    directory opened up before it is entered. What cannot be removed is left. (Under Landlock
    each removal walks up to the rule's directory, so a chain of n directories costs O(n^2):
    a parent is listed again only when it had other subdirectories.)"""
    entered: list[tuple[str, int, bool]] = []  # (name, inode, its parent has others) per level
    stuck: set[int] = set()                    # directories that could not be entered or removed
    scan = True
    while True:
        sub, others = _unlink_files(stuck) if scan else (None, False)
        if sub is not None:
            try:
                os.chmod(sub.name, 0o700)
                os.chdir(sub.name)
                entered.append((sub.name, sub.inode(), others))
            except OSError:
                stuck.add(sub.inode())
            scan = True
            continue
        if not entered:
            return
        name, inode, scan = entered.pop()
        os.chdir("..")
        try:
            os.rmdir(name)
        except OSError:
            stuck.add(inode)


def _unlink_files(stuck: set[int]) -> tuple[os.DirEntry | None, bool]:
    """Unlink every entry of the cwd that is not a directory; return a subdirectory to empty
    (not one of `stuck`; None when none is left) and whether there are others."""
    found, others = None, False
    try:
        with os.scandir(".") as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.inode() not in stuck:
                        others = found is not None
                        found = found or entry
                    continue
                try:
                    os.unlink(entry.name)
                except OSError:
                    pass
    except OSError:
        pass
    return found, others

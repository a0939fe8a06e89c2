"""Mount namespaces for programs run as an unprivileged uid (lcb as root only).

- `readable_view(paths, uid)`: in the zygote, once. Its own mount namespace in which every
  directory of `paths` (the interpreter, its libraries) can be read by `uid`: where an ancestor
  cannot be searched by others (the usual `/root` of a pyenv or conda install, mode 0700), a
  tmpfs covers that ancestor and read-only bind mounts of exactly the needed directories are put
  back beneath it. Everything else under it (home directories, caches, data) disappears from the
  view. Returns what it bound.
- `private_tmp(tmp_root, tmp_bytes=…, shm_bytes=…)`: in a program's host, per program. A new
  mount and IPC namespace with a fresh size-capped tmpfs on `tmp_root` (the program's `/tmp`,
  holding its working directory) and on `/dev/shm`; System V shared memory limited to
  `shm_bytes`; and a fresh `/proc` with `hidepid=invisible`, in which the program sees only
  processes of its own uid (not lcb's, not other programs': no `/proc/<pid>/comm`, `cmdline` or
  `schedstat` to read across). All of it disappears with the last process of the program, so
  nothing a program writes there outlives it or reaches the next program.

Mount changes never propagate back to the host (every mount is made private first). Needs
CAP_SYS_ADMIN; raises OSError otherwise. Stdlib only (ctypes).
"""

from __future__ import annotations

import ctypes
import functools
import os
import stat
from collections.abc import Iterable

_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    _check(_libc().mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)),
           f"mount {target}")


def _new_namespace(flags: int) -> None:
    _check(_libc().unshare(flags), "unshare")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)


def _searchable(path: str) -> bool:
    """Whether a uid that owns nothing and is in no group can traverse `path`."""
    return bool(os.stat(path).st_mode & stat.S_IXOTH)


def blocked_ancestor(path: str) -> str | None:
    """The top-most directory on the way to `path` (included) that others cannot search."""
    current = "/"
    for part in [p for p in os.path.abspath(path).split("/") if p]:
        current = os.path.join(current, part)
        if not _searchable(current):
            return current
    return None


def readable_view(paths: Iterable[str], uid: int) -> list[str]:
    """Enter a mount namespace where `paths` are readable by `uid`; return the binds made."""
    wanted = [os.path.abspath(p) for p in paths if os.path.isdir(p)]
    covers: dict[str, list[str]] = {}
    for path in wanted:
        top = blocked_ancestor(path)
        if top is None:
            continue
        if top == path:
            raise OSError(f"{path} is not readable by other users (mode "
                          f"{stat.filemode(os.stat(path).st_mode)}): programs run as uid {uid} "
                          "could not use it; make it world-readable (chmod o+rx)")
        covers.setdefault(top, []).append(path)
    for top, inside in covers.items():  # a directory below another one is bound with it
        covers[top] = _outermost(inside)
    _new_namespace(_CLONE_NEWNS)
    bound: list[str] = []
    for top, inside in covers.items():
        held = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in inside}
        _mount("tmpfs", top, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
        bound += _bind_back(held)
    return bound


def _bind_back(held: dict[str, int]) -> list[str]:
    """Bind each directory (held open from before it was covered) back, read-only, where it
    was; closes the descriptors."""
    try:
        for path, fd in held.items():
            os.makedirs(path, 0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
            _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)
    finally:
        for fd in held.values():
            os.close(fd)
    return list(held)


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths that are not inside another one of them."""
    paths = [os.path.abspath(p) for p in paths]
    return [p for p in paths
            if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in paths)]


def private_tmp(tmp_root: str, *, tmp_bytes: int, shm_bytes: int,
                keep: Iterable[str] = ()) -> bool:
    """Enter new mount and IPC namespaces with fresh, capped tmpfs on `tmp_root`, /dev/shm,
    and a `/proc` that hides other uids' processes; the `keep` directories that lie under
    `tmp_root` (a venv or interpreter installed there) are bound back read-only. False when
    /proc could not be remounted (the rest holds)."""
    root = os.path.abspath(tmp_root).rstrip("/") + "/"
    kept = [p for p in _outermost(keep) if p.startswith(root) and os.path.isdir(p)]
    _new_namespace(_CLONE_NEWNS | _CLONE_NEWIPC)
    # Held open in the new namespace (a bind's source must be in it), before /tmp is covered.
    held = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in kept}
    _mount("tmpfs", tmp_root, "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"mode=1777,size={tmp_bytes},nr_inodes=65536")
    _bind_back(held)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV,
               f"mode=1777,size={shm_bytes},nr_inodes=4096")
    pages = max(1, shm_bytes // os.sysconf("SC_PAGE_SIZE"))
    for name, value in (("shmmax", shm_bytes), ("shmall", pages)):
        try:
            with open(f"/proc/sys/kernel/{name}", "w") as fh:
                fh.write(str(value))
        except OSError:
            pass  # a read-only /proc/sys (some containers): the memory cgroup still bounds it
    try:
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "hidepid=invisible")
    except OSError:
        return False
    return True

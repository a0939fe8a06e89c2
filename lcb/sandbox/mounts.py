"""Namespaces for programs run as an unprivileged uid (lcb as root only): mounts, IPC, network.

- `readable_view(paths, uid, hidden=…)`: in the zygote, once. Its own mount namespace in which
  every path of `paths` (the interpreter, its libraries; files too) can be read by `uid`: where
  an ancestor cannot be searched by others (the usual `/root` of a pyenv or conda install, mode
  0700), a tmpfs covers that ancestor and read-only bind mounts of exactly the needed paths are
  put back beneath it. Everything else under it (home directories, caches, data) disappears
  from the view, and so do the `hidden` paths (lcb's own, in a directory that is put back
  whole): an empty tmpfs (a directory) or `/dev/null` (a file) covers each. Returns what it
  bound.
- `private_tmp(tmp_root, tmp_bytes=…, shm_bytes=…, keep=…, hidden=…)`: in a program's host, per
  program. A new mount and IPC namespace with a fresh size-capped tmpfs on `tmp_root` (the
  program's `/tmp`, holding its working directory; `keep` paths under it are put back and
  `hidden` ones covered, as above) and on `/dev/shm`; System V shared memory limited to
  `shm_bytes`; and a fresh `/proc` with `hidepid=invisible`, in which the program sees only
  processes of its own uid (not lcb's, not other programs': no `/proc/<pid>/comm`, `cmdline` or
  `schedstat` to read across). All of it disappears with the last process of the program, so
  nothing a program writes there outlives it or reaches the next program.
- `private_network()`: in a zygote (and a python_exec helper), once. A new network namespace
  with only a loopback device, down: no socket of its programs reaches any other process's
  (UDP, abstract unix sockets and all), and they reach no network. Programs of one slot share
  it one after another; nothing of one outlives it (see `lcb.sandbox.zygote`).

Mount changes never propagate back to the host (every mount is made private first). Needs
CAP_SYS_ADMIN; raises OSError (`private_network`: returns False) otherwise. Stdlib only
(ctypes).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from lcb.sandbox.libc import check, libc

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    check(libc().mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)),
          f"mount {target}")


def _new_namespace(flags: int) -> None:
    check(libc().unshare(flags), "unshare")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)


def _searchable(path: str) -> bool:
    """Whether a uid that owns nothing and is in no group can traverse `path`."""
    return bool(os.stat(path).st_mode & stat.S_IXOTH)


def blocked_ancestor(path: str) -> str | None:
    """The top-most directory on the way to `path` (included, if a directory) that others
    cannot search."""
    current = "/"
    parts = [p for p in os.path.abspath(path).split("/") if p]
    if parts and not os.path.isdir(path):
        parts = parts[:-1]  # a file is not searched: only the directories above it
    for part in parts:
        current = os.path.join(current, part)
        if not _searchable(current):
            return current
    return None


def readable_view(paths: Iterable[str], uid: int, *, hidden: Iterable[str] = ()) -> list[str]:
    """Enter a mount namespace where `paths` are readable by `uid` and `hidden` ones are not;
    return the binds made."""
    wanted = [os.path.abspath(p) for p in paths if os.path.exists(p)]
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
    hidden = [os.path.abspath(p) for p in hidden]
    _new_namespace(_CLONE_NEWNS)
    bound: list[str] = []
    for top, inside in covers.items():
        steps = _steps(inside, [h for h in hidden if _beneath(h, top)])
        held = _hold(steps)
        _mount("tmpfs", top, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
        bound += _lay_out(steps, held)
    return bound


def _beneath(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def _steps(wanted: Iterable[str], hidden: Iterable[str]) -> list[tuple[str, str]]:
    """The mounts that show `wanted` and hide `hidden` beneath a fresh, empty tmpfs: ("bind",
    path) for a wanted path not already shown by a bind above it, ("cover", path) for a hidden
    path that a bind above it would show; parents first."""
    marks = {os.path.abspath(p): "bind" for p in wanted}
    marks.update({os.path.abspath(p): "cover" for p in hidden})
    steps = []
    for path in sorted(marks, key=lambda p: p.count("/")):
        above, kind = os.path.dirname(path), marks[path]
        while above not in marks and above != "/":
            above = os.path.dirname(above)
        shown = marks.get(above) == "bind"
        if (kind == "bind") != shown:  # a bind where nothing shows it, a cover where it does
            steps.append((kind, path))
    return steps


def _hold(steps: list[tuple[str, str]]) -> dict[str, int]:
    """Descriptors of the paths to bind back, opened before a tmpfs covers them."""
    return {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for kind, path in steps
            if kind == "bind"}


def _lay_out(steps: list[tuple[str, str]], held: dict[str, int]) -> list[str]:
    """Make the `_steps` mounts (binds read-only, from the `held` descriptors, which are
    closed); return the paths bound."""
    try:
        for kind, path in steps:
            if kind == "bind":
                is_dir = stat.S_ISDIR(os.fstat(held[path]).st_mode)
            else:
                is_dir = os.path.isdir(path)
            if kind == "cover" and is_dir:  # root's alone: a mount point for a bind below
                _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=64k")
                continue
            source = "/dev/null" if kind == "cover" else f"/proc/self/fd/{held[path]}"
            _mount_point(path, is_dir)
            _mount(source, path, None, _MS_BIND | _MS_REC)
            _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)
    finally:
        for fd in held.values():
            os.close(fd)
    return [path for kind, path in steps if kind == "bind"]


def _mount_point(path: str, is_dir: bool) -> None:
    """Make `path` (on a fresh tmpfs) a directory or an empty file to mount on, if missing."""
    if os.path.lexists(path):
        return
    if is_dir:
        os.makedirs(path, 0o755, exist_ok=True)
        return
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))


def private_tmp(tmp_root: str, *, tmp_bytes: int, shm_bytes: int,
                keep: Iterable[str] = (), hidden: Iterable[str] = ()) -> bool:
    """Enter new mount and IPC namespaces with fresh, capped tmpfs on `tmp_root`, /dev/shm,
    and a `/proc` that hides other uids' processes; the `keep` paths that lie under `tmp_root`
    (a venv or interpreter installed there) are bound back read-only, without the `hidden`
    ones. False when /proc could not be remounted (the rest holds)."""
    root = os.path.abspath(tmp_root)
    steps = _steps([p for p in keep if _beneath(os.path.abspath(p), root) and
                    os.path.exists(p)], [h for h in hidden if _beneath(os.path.abspath(h), root)])
    _new_namespace(_CLONE_NEWNS | _CLONE_NEWIPC)
    held = _hold(steps)  # opened in the new namespace (a bind's source must be in it)
    _mount("tmpfs", tmp_root, "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"mode=1777,size={tmp_bytes},nr_inodes=65536")
    _lay_out(steps, held)
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


def private_network() -> bool:
    """Enter a new network namespace (only a loopback device, down); False where this process
    may not (no CAP_SYS_ADMIN): nothing changed then."""
    return libc().unshare(_CLONE_NEWNET) == 0

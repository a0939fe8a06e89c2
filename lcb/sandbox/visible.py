"""What programs may read: an allow-list of paths, without lcb's own files.

`read_roots()` (in a zygote or python_exec helper, once) starts from the system directories,
the interpreter's prefixes and every directory on `sys.path`, and takes out lcb's own paths
(`own_paths()`): where lcb runs from a checkout, the whole checkout (its code, the bundled
sample tests and solutions, results written there); where lcb is installed (a wheel in
`site-packages`), the `lcb` package and its install records (`lcb-*.dist-info`, `.egg-info`,
`.egg-link`, its `.pth` files) in that directory. A candidate that holds one of them is not
dropped: it is opened up entry by entry (`listed`: its names may be listed, nothing beneath it
read), each entry that holds nothing of lcb's readable whole, so `site-packages` stays
importable (numpy and all) while `lcb` in it does not. A candidate beneath lcb's own path
stays readable (a venv inside the checkout).

Landlock (`lcb.sandbox.landlock`) enforces the list; the mount views (`lcb.sandbox.mounts`)
put back `read` and `listed` paths and cover `hidden` ones. Stdlib only.
"""

from __future__ import annotations

import os
import re
import sys
from typing import NamedTuple

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(PACKAGE)  # the checkout, or the site-packages lcb is installed in
# /sys only for the CPU topology numerical libraries read: not /sys/fs/cgroup, whose counters
# (memory peaks, OOM kills of other slots) would be a channel between programs.
SYSTEM_ROOTS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc",
                "/proc", "/sys/devices/system/cpu", "/dev")
# lcb's entries in a directory it is installed in (wheel, egg, editable install records).
_OWN_ENTRY = re.compile(r"lcb|lcb-[^-]+(-py[\d.]+)?\.(dist-info|egg-info)|lcb\.egg-link"
                        r"|(__editable__\.)?lcb(-[^-]+)?\.pth|__editable___lcb_.+_finder\.py")
_INSTALLED = re.compile(r"lcb-[^-]+(-py[\d.]+)?\.(dist-info|egg-info)")


class Visible(NamedTuple):
    """The allow-list: `read` (with everything beneath), `listed` (names only: directories
    that hold lcb's own entries), `hidden` (lcb's own paths inside a listed directory)."""

    read: tuple[str, ...]
    listed: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()


def own_paths(root: str = ROOT) -> tuple[str, ...]:
    """lcb's own paths: the checkout `root`, or, where `root` holds an installed lcb (its
    `lcb-<version>.dist-info` or `.egg-info`), lcb's entries in it."""
    root = os.path.realpath(root)
    try:
        names = os.listdir(root)
    except OSError:
        return (root,)
    if not any(_INSTALLED.fullmatch(name) for name in names):
        return (root,)
    return tuple(sorted(os.path.join(root, n) for n in names if _OWN_ENTRY.fullmatch(n)))


def read_roots(own: tuple[str, ...] | None = None) -> Visible:
    """The allow-list for programs (see module docstring); `own` defaults to `own_paths()`."""
    own = own_paths() if own is None else own
    paths = [*SYSTEM_ROOTS, sys.base_prefix, sys.prefix, sys.exec_prefix, *sys.path]
    read: list[str] = []
    listed: list[str] = []
    for path in paths:
        if path and os.path.isdir(path):
            _admit(os.path.realpath(path), own, read, listed)
    hidden = [o for o in own if any(_holds(d, o) for d in listed)]
    return Visible(*(tuple(dict.fromkeys(p)) for p in (read, listed, hidden)))


def _holds(directory: str, path: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


def _admit(path: str, own: tuple[str, ...], read: list[str], listed: list[str]) -> None:
    """File `path` as readable, or, when it holds lcb's own paths, as listed with its entries
    filed in turn; lcb's own paths themselves are left out."""
    if path in own:
        return
    if not any(_holds(path, o) for o in own):
        read.append(path)
        return
    listed.append(path)
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return
    for name in names:
        _admit(os.path.join(path, name), own, read, listed)

"""Start lcb's helper interpreters (judges, zygotes, python_exec helpers), contained.

`python_argv(entry, sandbox=…, role=…, args=…)` is the command line of a fresh interpreter
that calls `entry(*args)` ("module:function"; `entry_of(function)` gives it for a function in
hand): the project's venv interpreter with `-s -S` (no site module) and a scrubbed environment
(`worker_env()`: PYTHONHASHSEED=0, so every zygote hashes alike and verdicts do not depend on
which slot ran a program). With `sandbox="bwrap"` it
runs under bubblewrap (`bwrap_flags(role)`): no network, read-only root, private /tmp, own PID,
IPC and UTS namespaces, killed with its parent, and no capabilities (`--cap-drop ALL`) except,
for a zygote or python_exec helper run by root, the few it needs to confine programs (switch
them to their uid, mount their private /tmp, kill them). As root no user namespace is made: a
real uid switch needs the host's uids.
`start(argv, jail=…)` starts it in its own session, inside the given cgroups when there are some,
with the given OOM score (both set by a tiny `sh` before exec, so no `preexec_fn` runs in a
threaded parent). Both are best effort: lowering the score below what the process inherits
takes CAP_SYS_RESOURCE, which a container often lacks (Docker's default set does not have it:
the zygote then keeps the score it inherits, usually 0, and says so in its
`isolation["oom_score_adj"]`); what keeps a slot's OOM kills among the program's processes is
the program's own memory group (`lcb.sandbox.cgroups`), not the score.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lcb.registry import SANDBOXES
from lcb.sandbox.cgroups import Jail
from lcb.sandbox.contain import SAFE_PATH

ROOT = str(Path(__file__).resolve().parents[2])
BWRAP_FLAGS = (
    "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
    "--die-with-parent", "--new-session",
    "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
    "--chdir", "/tmp", "--cap-drop", "ALL",
)
CONFINING_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN", "CAP_KILL", "CAP_CHOWN")
ROLES = ("judge", "zygote", "exec")
BWRAP_ADVICE = (
    "sandbox 'bwrap' needs bubblewrap on PATH: install it (Debian/Ubuntu: "
    "`apt-get install -y bubblewrap`; Fedora: `dnf install bubblewrap`) or use sandbox 'process'"
)


class SandboxUnavailable(RuntimeError):
    """The requested sandbox tier cannot run on this machine; the message says how to fix it."""


def check_sandbox(sandbox: str) -> None:
    """Raise at configuration time: ValueError for an unknown tier, SandboxUnavailable if absent."""
    if sandbox not in SANDBOXES:
        raise ValueError(f"unknown sandbox {sandbox!r}: choose one of {', '.join(SANDBOXES)}")
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        raise SandboxUnavailable(BWRAP_ADVICE)


def worker_env() -> dict[str, str]:
    return {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1"}


def bwrap_flags(role: str) -> list[str]:
    """bubblewrap's options for a helper of `role` ("judge", "zygote" or "exec")."""
    if role not in ROLES:
        raise ValueError(f"unknown helper role {role!r}")
    flags = list(BWRAP_FLAGS)
    if os.geteuid() != 0:
        flags.insert(0, "--unshare-user")  # bwrap needs one to sandbox an unprivileged user
    elif role != "judge":
        for cap in CONFINING_CAPS:
            flags += ["--cap-add", cap]
    if role == "judge":
        flags.insert(0, "--unshare-cgroup-try")
    return flags


def entry_of(function: Callable[..., Any]) -> str:
    """`function`'s "module:name", for `python_argv` (a module-level function only: the fresh
    interpreter imports it by that name)."""
    module, name = function.__module__, function.__qualname__
    if "." in name or "<" in name:
        raise ValueError(f"{module}.{name} is not a module-level function")
    return f"{module}:{name}"


def python_argv(entry: str, *, sandbox: str = "process", role: str = "exec",
                args: tuple = ()) -> list[str]:
    check_sandbox(sandbox)
    module, _, function = entry.partition(":")
    # -S: `site` does not run (the import lines of .pth files, e.g. an editable install's
    # finder, would load pathlib and more into every zygote, and every fork would carry them).
    # What programs see of it is restored: the directories it would add to sys.path (programs
    # and the official grader import installed packages, numpy, … as before) and the builtins
    # it defines (`exit`, `quit`, `help`, …).
    boot = (f"import sys; sys.path.insert(0, {ROOT!r}); sys.path += {site_paths()!r}; "
            "import site; site.setquit(); site.setcopyright(); site.sethelper(); "
            f"from {module} import {function}; {function}(*{tuple(args)!r})")
    argv = [sys.executable, "-s", "-S", "-c", boot]
    if sandbox == "bwrap":
        bwrap = shutil.which("bwrap")
        assert bwrap is not None
        argv = [bwrap, *bwrap_flags(role), *_keep_visible(), "--", *argv]
    return argv


@functools.cache
def site_paths() -> list[str]:
    """What `site` adds to sys.path in this interpreter: its site-packages directories and the
    directory lines of their .pth files (their `import` lines are not run)."""
    try:
        import site

        dirs = site.getsitepackages()
    except (ImportError, AttributeError):
        return []
    paths: list[str] = []
    for sitedir in dirs:
        if not os.path.isdir(sitedir):
            continue
        paths.append(sitedir)
        for name in sorted(os.listdir(sitedir)):
            if not name.endswith(".pth"):
                continue
            try:
                with open(os.path.join(sitedir, name), encoding="utf-8") as fh:
                    lines = fh.read().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    path = os.path.join(sitedir, line)
                    if os.path.isdir(path):
                        paths.append(path)
    return list(dict.fromkeys(paths))


def _keep_visible() -> list[str]:
    """Read-only binds, over the private /tmp, of the code and interpreter the helper needs
    (a checkout or venv that lives under /tmp would otherwise vanish inside the sandbox)."""
    needed = {ROOT, sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent)}
    binds: list[str] = []
    for path in sorted(needed):
        if Path(path).is_relative_to("/tmp"):
            binds += ["--ro-bind", path, path]
    return binds


_JOIN = ('adj=$1; shift; [ "$adj" = - ] || echo "$adj" 2>/dev/null > /proc/self/oom_score_adj; '
         'while [ "$1" != -- ]; do echo $$ 2>/dev/null > "$1"; shift; done; shift; exec "$@"')


def start(argv: list[str], *, jail: Jail | None, stdin: int | None = subprocess.PIPE,
          stdout: int | None = subprocess.PIPE, stderr: Any = None,
          pass_fds: tuple[int, ...] = (), oom_score_adj: int | None = None,
          fixed_hashes: bool = True) -> subprocess.Popen:
    """Start `argv` in its own session, inside `jail`'s cgroups if given (joined before exec:
    whatever cannot be joined is skipped), with `oom_score_adj` if given. `fixed_hashes`
    (zygotes, python_exec: programs hash alike everywhere) sets PYTHONHASHSEED=0; a judge runs
    with random string hashes, so a program cannot aim colliding keys at it."""
    if jail is not None or oom_score_adj is not None:
        procs = jail.procs_files() if jail is not None else []
        adj = "-" if oom_score_adj is None else str(oom_score_adj)
        argv = ["/bin/sh", "-c", _JOIN, "lcb-join", adj, *procs, "--", *argv]
    env = worker_env()
    if not fixed_hashes:
        del env["PYTHONHASHSEED"]
    return subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env,
                            cwd="/", start_new_session=True, close_fds=True, pass_fds=pass_fds)

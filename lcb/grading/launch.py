"""Start lcb's helper interpreters (grading workers, python_exec supervisors), contained.

`python_argv(entry, sandbox=…)` is the command line of a fresh interpreter that calls `entry`
("module:function"): the project's venv interpreter with `-s -S` (no site module) and a scrubbed
environment (`worker_env()`: PYTHONHASHSEED=0, so every worker hashes alike and verdicts do not
depend on which worker ran a program). With `sandbox="bwrap"` it runs under bubblewrap: no
network, read-only root, private /tmp, own PID namespace, killed with its parent.
`start(argv, jail=…)` starts it in its own session, inside the given pids cgroup when there is one
(joined by a tiny `sh` before exec, so no `preexec_fn` runs in a threaded parent).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lcb.grading.contain import SAFE_PATH, PidsJail

SANDBOXES = ("process", "bwrap")
ROOT = str(Path(__file__).resolve().parents[2])
BWRAP_FLAGS = (
    "--unshare-all", "--die-with-parent", "--new-session",
    "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
    "--chdir", "/tmp",
)
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


def python_argv(entry: str, *, sandbox: str = "process") -> list[str]:
    check_sandbox(sandbox)
    module, _, function = entry.partition(":")
    # -S: `site` does not run (the import lines of .pth files, e.g. an editable install's
    # finder, would load pathlib and more into every worker, and every fork would carry them).
    # What programs see of it is restored: the directories it would add to sys.path (programs
    # and the official grader import installed packages, numpy, … as before) and the builtins
    # it defines (`exit`, `quit`, `help`, …).
    boot = (f"import sys; sys.path.insert(0, {ROOT!r}); sys.path += {site_paths()!r}; "
            "import site; site.setquit(); site.setcopyright(); site.sethelper(); "
            f"from {module} import {function}; {function}()")
    argv = [sys.executable, "-s", "-S", "-c", boot]
    if sandbox == "bwrap":
        bwrap = shutil.which("bwrap")
        assert bwrap is not None
        argv = [bwrap, *BWRAP_FLAGS, *_keep_visible(), "--", *argv]
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
    """Read-only binds, over the private /tmp, of the code and interpreter the worker needs
    (a checkout or venv that lives under /tmp would otherwise vanish inside the sandbox)."""
    needed = {ROOT, sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent)}
    binds: list[str] = []
    for path in sorted(needed):
        if Path(path).is_relative_to("/tmp"):
            binds += ["--ro-bind", path, path]
    return binds


def start(argv: list[str], *, jail: PidsJail | None, stderr: int | None = None
          ) -> subprocess.Popen:
    """Start `argv` with piped stdin/stdout, in its own session, inside `jail` if given."""
    if jail is not None:
        join = 'echo $$ 2>/dev/null > "$0"; exec "$@"'  # cannot join: run unjailed'
        argv = ["/bin/sh", "-c", join, os.path.join(jail.path, "cgroup.procs"), *argv]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            env=worker_env(), cwd="/", start_new_session=True, close_fds=True)

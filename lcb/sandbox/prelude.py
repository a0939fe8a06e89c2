"""LiveCodeBench's import prelude and our restatement of its `reliability_guard`.

The prelude is what LiveCodeBench puts before every program, in both modes: star-imports of 18
stdlib modules, plain imports of 16 of them, and a recursion limit of 50000. It is why programs may
use `List[int]`, `deque` or `gcd` without importing them. Zygotes import `PRELUDE_MODULES` once, so
running the prelude in a forked child costs dictionary copies, not imports.

`reliability_guard()` disables the same functions LiveCodeBench disables (it is a guard against
accidents, not a security boundary): process control and file removal in `os`, three `shutil`
functions, `subprocess.Popen`, `quit` and `help`, and the imports of resource, psutil, joblib,
ipdb and tkinter. Memory caps are set separately (before the guard, which blocks `resource`).
"""

from __future__ import annotations

import _ast
import builtins
import importlib
import os
import sys
import types
from typing import Any

PRELUDE_MODULES = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
    "statistics", "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing",
)
_PLAIN_IMPORTS = tuple(m for m in PRELUDE_MODULES if m not in ("builtins", "typing"))

PRELUDE = (
    "".join(f"from {name} import *\n" for name in PRELUDE_MODULES)
    + "".join(f"import {name}\n" for name in _PLAIN_IMPORTS)
    + "sys.setrecursionlimit(50000)\n"
)
PRELUDE_CODE = compile(PRELUDE, "<lcb-prelude>", "exec")

_OS_DISABLED = (
    "kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
    "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
    "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir",
)
GUARDED_BUILTINS = ("quit", "help")
_SHUTIL_DISABLED = ("rmtree", "move", "chown")
_BLOCKED_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter")


class _PatchingLoader:
    """Wraps a module's loader: after the module runs, the named attributes become None."""

    def __init__(self, loader: Any, attrs: tuple[str, ...]):
        self.loader, self.attrs = loader, attrs

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        for attr in self.attrs:
            setattr(module, attr, None)


class _DisableOnImport:
    """A meta-path finder that disables attributes of one module when it is first imported."""

    def __init__(self, module: str, attrs: tuple[str, ...]):
        self.module, self.attrs = module, attrs

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.module:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find else None
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.attrs)
                return spec
        return None


def _disable(module: str, attrs: tuple[str, ...]) -> None:
    """Set `module.<attr>` to None now, or as soon as the module is imported.

    Importing `subprocess` just to disable it would cost a functional program ~6 ms (it pulls
    in threading); workers do not import it, so the guard patches it on first import instead.
    """
    if module in sys.modules:
        for attr in attrs:
            setattr(sys.modules[module], attr, None)
    else:
        sys.meta_path.insert(0, _DisableOnImport(module, attrs))


_FUTURE_ERROR = "from __future__ imports must occur at the beginning of the file"


def compile_after_prelude(source: str, filename: str) -> types.CodeType:
    """Compile `source` as the part after the prelude; raises SyntaxError like compiling both.

    The prelude is prepended as LiveCodeBench does, so `from __future__` imports, legal at the
    top of a program alone, are a syntax error here just as they are in the official grader.
    """
    tree = compile(source, filename, "exec", _ast.PyCF_ONLY_AST)
    for node in tree.body:
        if isinstance(node, _ast.ImportFrom) and node.module == "__future__":
            raise SyntaxError(_FUTURE_ERROR, (filename, node.lineno, node.col_offset + 1,
                                              source.splitlines()[node.lineno - 1]))
    return compile(tree, filename, "exec")


def import_prelude_modules() -> None:
    """Import every prelude module now (in the zygote), so programs only bind names."""
    for name in PRELUDE_MODULES:
        importlib.import_module(name)


def reliability_guard() -> None:
    """Disable what LiveCodeBench's `reliability_guard` disables, in this process, for good."""
    for name in GUARDED_BUILTINS:
        setattr(builtins, name, None)
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in _OS_DISABLED:
        setattr(os, name, None)
    _disable("shutil", _SHUTIL_DISABLED)
    _disable("subprocess", ("Popen",))
    for name in _BLOCKED_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]

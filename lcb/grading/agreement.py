"""Where the default and the official grader part on a program, and why: the divergence classes.

Contract:
- `first_failure(grade)`: in a grade record (`Grade.to_record()`), None when every test passed,
  else the index of the first test that did not pass.
- `compare(code, mode=..., default=..., official=..., n_public=0)` takes the two graders' grade
  records of one program. They agree when both pass, or both first fail at the same test. The
  official grader runs the `n_public` public tests first (the default one only the private
  ones), so its indices are shifted by them; when both fail but the official grader failed on
  a public test, the two failures cannot be compared and count as agreeing. A grade that is
  `infra` (grading failed) is not compared: `Compared(agree=None, divergence=None)`. Otherwise
  `divergence` names the class of the first rule in `RULES` that fits, or `UNEXPLAINED`.
- A rule fits on evidence only: the program doing the thing (read from its syntax tree) and
  the two grades showing what the class predicts (which grader fails first, with which verdict,
  and, where the official code says it in a recognisable way, its error text). The classes are
  those of docs/grading.md ("Where the two graders differ"), in its order, then `PUBLIC_TESTS`:
  the official grader failed on a public test, which the default grader does not run. A class
  explains a failure on a public test only on evidence the verdict alone does not give there:
  the official error's words, or, for a class in which the output is lost, no output at all.
  A program that merely fails a public test (a wrong answer, with output) is `PUBLIC_TESTS`,
  whatever its text does.
- `summarize_agreement(lines)`: the `agreement` block of `lcb score --grader both` (see
  docs/grading.md), over result lines that carry `official` and `agree`.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

UNEXPLAINED = "unexplained"
PUBLIC_TESTS = "public_tests"
# What LiveCodeBench's reliability_guard sets to None (os, shutil, subprocess, builtins) or
# blocks as a module (sys.modules[name] = None), for stdin programs too.
GUARDED = frozenset(
    [f"os.{name}" for name in (
        "kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
        "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod",
        "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir")]
    + ["shutil.rmtree", "shutil.move", "shutil.chown", "subprocess"])
GUARDED_CALLS = frozenset({"quit", "help"})
BLOCKED_MODULES = frozenset({"ipdb", "joblib", "resource", "psutil", "tkinter"})
_GUARD_ERRORS = ("'NoneType' object is not callable", "None in sys.modules")


@dataclass(frozen=True)
class Compared:
    """How two grades of one program compare: `agree` None when either is `infra`."""

    agree: bool | None
    divergence: str | None


class Program:
    """What a program's text does, as the rules ask it (nothing is run)."""

    def __init__(self, code: str):
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            tree = ast.Module(body=[], type_ignores=[])
        self.body = tree.body
        self.used: set[str] = set()      # dotted names: "sys.stdin.buffer.read", "os.getcwd"
        self.calls: set[str] = set()     # names called bare: "quit", "exit", "open"
        self.modules: set[str] = set()   # imported modules
        self.imported: set[str] = set()  # names imported from a module: "sys.stdout"
        self.calls_with: set[tuple[str, object]] = set()  # (callee, first constant argument)
        self.has_global = self.raises_exit = self.finalizes = False
        for node in ast.walk(tree):
            self._note(node)

    def _note(self, node: ast.AST) -> None:
        if isinstance(node, ast.Attribute):
            self.used.add(_dotted(node))
        elif isinstance(node, ast.Import):
            self.modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            self.modules.add(node.module)
            self.imported |= {f"{node.module}.{alias.name}" for alias in node.names}
            self.used |= self.imported
        elif isinstance(node, ast.Call):
            callee = _dotted(node.func)
            if isinstance(node.func, ast.Name):
                self.calls.add(callee)
            if node.args and isinstance(node.args[0], ast.Constant):
                self.calls_with.add((callee, node.args[0].value))
        elif isinstance(node, ast.Global):
            self.has_global = True
        elif isinstance(node, ast.Yield | ast.YieldFrom | ast.AsyncFunctionDef) or (
                isinstance(node, ast.FunctionDef) and node.name == "__del__"):
            self.finalizes = True  # an object whose finalizer may print at exit
        elif isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            self.raises_exit |= _dotted(raised) == "SystemExit"

    def uses(self, name: str) -> bool:
        """True when a dotted name is `name` or starts with it (`os.getcwd` for `os`)."""
        return any(u == name or u.startswith(name + ".") for u in self.used)

    def uses_stdin_buffer(self) -> bool:
        return any("stdin.buffer" in u for u in self.used)

    def odd_main_guard(self) -> bool:
        """A top-level `if __name__ == "__main__"` that is not the last statement, or is
        written the other way round: LiveCodeBench unwraps only the last, written so."""
        for position, node in enumerate(self.body):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
                sides = [node.test.left, *node.test.comparators]
                names = [isinstance(s, ast.Name) and s.id == "__name__" for s in sides]
                mains = [isinstance(s, ast.Constant) and s.value == "__main__" for s in sides]
                if any(names) and any(mains):
                    return position != len(self.body) - 1 or not names[0]
        return False


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):  # open(0).read: the call's own name is noted separately
        parts.append("()")
    return ".".join(reversed(parts))


def first_failure(grade: Mapping[str, Any]) -> int | None:
    """None when the grade passed, else the index of its first test that did not pass."""
    if grade.get("em") == 1:
        return None
    feedback = grade.get("feedback")
    if isinstance(feedback, dict) and isinstance(feedback.get("test_index"), int):
        return feedback["test_index"]
    verdicts = list(grade.get("verdicts") or ())
    return next((i for i, v in enumerate(verdicts) if v != "passed"), len(verdicts))


@dataclass(frozen=True)
class _Case:
    """One disagreement as the rules see it (`d`, `o`: first failures, None = passed)."""

    program: Program
    mode: str
    d: int | None
    o: int | None
    default: Mapping[str, Any]
    official: Mapping[str, Any]

    def official_fails_first(self, *verdicts: str, says: tuple[str, ...] = (),
                             silent: bool = False) -> bool:
        """The official grader fails a test the default grader passed, with one of `verdicts`
        (and, given `says`, an error holding one of those texts). A public test (`o` < 0),
        which the default grader never ran, needs evidence of the class's own: the error's
        words (`says`) or, for a class in which the output is lost (`silent`), no output at
        all; a plain verdict there may be the program's own failure (`PUBLIC_TESTS`)."""
        if (self.o is None or (self.d is not None and self.o >= self.d)
                or _verdict(self.official) not in verdicts):
            return False
        if says:
            return any(text in _error(self.official) for text in says)
        return self.o >= 0 or (silent and not _actual(self.official).strip())

    def default_fails_first(self, *verdicts: str) -> bool:
        return (self.d is not None and (self.o is None or self.d < self.o)
                and _verdict(self.default) in verdicts)


def _verdict(grade: Mapping[str, Any]) -> str:
    feedback = grade.get("feedback")
    if isinstance(feedback, dict) and feedback.get("verdict"):
        return str(feedback["verdict"])
    return next((v for v in grade.get("verdicts") or () if v != "passed"), "passed")


def _error(grade: Mapping[str, Any]) -> str:
    feedback = grade.get("feedback")
    return str(feedback.get("error") or "") if isinstance(feedback, dict) else ""


def _actual(grade: Mapping[str, Any]) -> str:
    feedback = grade.get("feedback")
    return str(feedback.get("actual") or "") if isinstance(feedback, dict) else ""


def _stdin(rule: Callable[[_Case, Program], bool]) -> Callable[[_Case], bool]:
    return lambda case: case.mode == "stdin" and rule(case, case.program)


def _guarded(p: Program) -> bool:
    return (any(p.uses(name) for name in GUARDED) or bool(p.calls & GUARDED_CALLS)
            or bool(p.modules & BLOCKED_MODULES))


def _exits(p: Program) -> bool:
    return (bool(p.calls & {"exit", "quit"}) or p.uses("sys.exit") or p.raises_exit)


RULES: tuple[tuple[str, Callable[[_Case], bool]], ...] = (
    ("stdin_buffer", _stdin(lambda c, p: p.uses_stdin_buffer() and c.official_fails_first(
        "runtime_error", says=("buffer",)))),
    ("top_level_global", _stdin(lambda c, p: p.has_global and c.official_fails_first(
        "runtime_error", "compile_error", says=("NameError", "SyntaxError", "global")))),
    ("imported_stdout", _stdin(lambda c, p: "sys.stdout" in p.imported
                               and c.official_fails_first("wrong_answer", silent=True))),
    ("main_guard", _stdin(lambda c, p: p.odd_main_guard()
                          and c.official_fails_first("wrong_answer", silent=True))),
    ("exit_code", _stdin(lambda c, p: _exits(p) and c.default_fails_first("runtime_error"))),
    ("hard_exit", _stdin(lambda c, p: p.uses("os._exit") and c.official_fails_first(
        "runtime_error", says=("without a result",)))),
    ("open_zero", _stdin(lambda c, p: ("open", 0) in p.calls_with
                         and c.official_fails_first("wrong_answer"))),
    ("reliability_guard", _stdin(lambda c, p: _guarded(p) and c.official_fails_first(
        "runtime_error", says=_GUARD_ERRORS))),
    ("closed_stdout", _stdin(lambda c, p: (p.uses("sys.stdout.close") or ("os.close", 1)
                                           in p.calls_with)
                             and c.official_fails_first("runtime_error"))),
    ("atexit_output", _stdin(lambda c, p: "atexit" in p.modules
                             and c.official_fails_first("wrong_answer", silent=True))),
    ("open_stdout", _stdin(lambda c, p: bool({("open", 1), ("os.fdopen", 1)} & p.calls_with)
                           and c.official_fails_first("wrong_answer", silent=True))),
    ("teardown_output", _stdin(lambda c, p: p.finalizes
                               and c.official_fails_first("wrong_answer", silent=True))),
    ("lingering_thread", _stdin(lambda c, p: (p.uses("threading.Thread") or p.uses(
        "threading.Timer")) and c.default_fails_first("time_limit"))),
    ("int_digits", lambda c: c.default_fails_first("runtime_error")
     and "Exceeds the limit" in _error(c.default) and "integer string" in _error(c.default)),
    ("non_data_return", lambda c: c.mode == "functional" and c.d is not None
     and _verdict(c.default) == "wrong_answer" and "not plain data" in _error(c.default)),
    (PUBLIC_TESTS, lambda c: c.d is None and c.o is not None and c.o < 0),
)
CLASSES = tuple(name for name, _ in RULES) + (UNEXPLAINED,)


def compare(code: str, *, mode: str, default: Mapping[str, Any], official: Mapping[str, Any],
            n_public: int = 0) -> Compared:
    """Whether the two grades agree and, if not, the divergence class (module contract)."""
    if "infra" in (default.get("verdicts") or ()) or "infra" in (official.get("verdicts") or ()):
        return Compared(None, None)
    d, o = first_failure(default), first_failure(official)
    o = None if o is None else o - n_public
    if d == o or (d is not None and o is not None and o < 0):
        return Compared(True, None)
    case = _Case(Program(code), mode, d, o, default, official)
    return Compared(False, next((name for name, fits in RULES if fits(case)), UNEXPLAINED))


def summarize_agreement(lines: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The `agreement` block over result lines graded by both graders (None: no such line).

    `n`: lines compared (both grades made, neither `infra`); `n_agree`; `rate` = n_agree / n
    (same outcome: both pass, or the same first failing test); `same_em_rate`: the share with
    the same em (what pass@1 sees); `n_not_compared`: lines with an official grade that were
    not compared; `by_class`: disagreements per class (every class, in `CLASSES` order);
    `disagreements`: each one's line, id, class and both graders' verdicts."""
    both = [line for line in lines if isinstance(line.get("official"), dict)]
    if not both:
        return None
    compared = [line for line in both if line.get("agree") is not None]
    agree = sum(1 for line in compared if line["agree"])
    same_em = sum(1 for line in compared if int(line["em"]) == int(line["official"]["em"]))
    counts = Counter(str(line.get("divergence")) for line in compared if not line["agree"])
    return {
        "n": len(compared), "n_agree": agree,
        "rate": agree / len(compared) if compared else 0.0,
        "same_em_rate": same_em / len(compared) if compared else 0.0,
        "n_not_compared": len(both) - len(compared),
        "by_class": {name: counts.get(name, 0) for name in CLASSES},
        "disagreements": [
            {"line": line.get("line"), "id": line.get("id"), "class": line.get("divergence"),
             "default": list(line.get("verdicts") or ()),
             "official": list(line["official"].get("verdicts") or ())}
            for line in compared if not line["agree"]],
    }

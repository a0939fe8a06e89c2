"""Building blocks for the hand-written sample problems.

A sample problem is plain data: metadata, a statement body, constraints and test cases. The
expected output of every generated case comes from the problem module's own oracle, written
independently of the shipped reference solution (lcb/data/sample/solutions/<id>.py), so the
tests that grade the reference solution compare two separate implementations.

The statement's examples are rendered from the public cases, the way LiveCodeBench statements
show their samples, so examples and public tests can never disagree.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    """One test. `explanation` is shown under the example when the case is public."""

    input: str
    output: str
    explanation: str = ""


@dataclass(frozen=True)
class SampleProblem:
    """A sample problem in the terms of a `code_generation_lite` row."""

    id: str
    title: str
    platform: str  # atcoder | codeforces | leetcode
    contest_id: str
    contest_date: str  # ISO date-time, as LiveCodeBench stores it
    difficulty: str  # easy | medium | hard
    body: str
    constraints: str
    public: tuple[Case, ...]
    private: tuple[Case, ...]
    starter_code: str = ""
    func_name: str | None = None

    @property
    def testtype(self) -> str:
        return "functional" if self.func_name else "stdin"

    @property
    def statement(self) -> str:
        """The full statement text: body, examples and constraints in the platform's layout."""
        if self.platform == "leetcode":
            return _leetcode_statement(self)
        if self.platform == "atcoder":
            return _atcoder_statement(self)
        return _codeforces_statement(self)


def date(day: str) -> str:
    """`2023-05-13` -> `2023-05-13T00:00:00`, LiveCodeBench's contest_date format."""
    return f"{day}T00:00:00"


def stdin_cases(oracle: Callable[[str], str], inputs: Iterable[str]) -> tuple[Case, ...]:
    """Cases whose expected output is the oracle's answer for each input."""
    return tuple(Case(text, oracle(text)) for text in inputs)


def fn_input(*args: object) -> str:
    """Functional test input: one JSON value per line, one per argument, no trailing newline."""
    return "\n".join(json.dumps(arg) for arg in args)


def fn_cases(oracle: Callable[..., object], arg_lists: Iterable[tuple]) -> tuple[Case, ...]:
    """Functional cases: each argument tuple with the oracle's return value as JSON."""
    return tuple(Case(fn_input(*args), json.dumps(oracle(*args))) for args in arg_lists)


def explained(case: Case, explanation: str) -> Case:
    return Case(case.input, case.output, explanation)


def lines(*rows: object) -> str:
    """Stdin text: each row on its own line (sequences joined by spaces), newline-terminated."""
    out = []
    for row in rows:
        is_seq = isinstance(row, list | tuple)
        out.append(" ".join(map(str, row)) if is_seq else str(row))
    return "\n".join(out) + "\n"


def starter_params(starter_code: str) -> list[str]:
    """Parameter names (without self) of the method declared by LeetCode starter code."""
    tree = ast.parse(starter_code + "pass\n")
    method = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    return [arg.arg for arg in method.args.args[1:]]


def _examples_stdin(problem: SampleProblem, *, colon: str) -> str:
    parts = []
    for number, case in enumerate(problem.public, start=1):
        parts.append(f"Sample Input {number}{colon}\n\n{case.input.rstrip()}\n\n"
                     f"Sample Output {number}{colon}\n\n{case.output.rstrip()}")
        if case.explanation and problem.platform == "atcoder":
            parts.append(case.explanation)
    return "\n\n".join(parts)


def _atcoder_statement(problem: SampleProblem) -> str:
    return (f"{problem.body}\n\nConstraints\n\n\n{problem.constraints}\n\n"
            f"{_examples_stdin(problem, colon='')}")


def _codeforces_statement(problem: SampleProblem) -> str:
    text = f"{problem.body}\n\n{_examples_stdin(problem, colon=':')}"
    notes = [case.explanation for case in problem.public if case.explanation]
    if notes:
        text += "\n\nNote\n\n" + "\n\n".join(notes)
    return text


def _leetcode_statement(problem: SampleProblem) -> str:
    names = starter_params(problem.starter_code)
    parts = [problem.body]
    for number, case in enumerate(problem.public, start=1):
        values = [json.loads(line) for line in case.input.split("\n")]
        pairs = zip(names, values, strict=True)
        shown = ", ".join(f"{name} = {_compact(value)}" for name, value in pairs)
        example = (f"Example {number}:\n\nInput: {shown}\n"
                   f"Output: {_compact(json.loads(case.output))}")
        if case.explanation:
            example += f"\nExplanation: {case.explanation}"
        parts.append(example)
    parts.append(f"Constraints:\n\n{problem.constraints}")
    return "\n \n".join(parts)


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))

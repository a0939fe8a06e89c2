"""Prompts: LiveCodeBench's template, role prompt files, placeholders and the output contract."""

from __future__ import annotations

import ast
import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from lcb.agents import prompts
from lcb.agents.prompts import (
    OUTPUT_CONTRACT,
    PromptError,
    fill_placeholders,
    load_role_prompt,
    placeholders_in,
    question_prompt,
    seed_bundle,
    with_contract,
)
from lcb.data.problems import Mode, Problem
from lcb.data.problems import Test as Case
from lcb.extract import extract_code

OFFICIAL_SOURCE = (
    Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    / "site-packages" / "livecodebench" / "prompts" / "code_generation.py"
)


def _official_from_source() -> Callable:
    """LiveCodeBench's template function, compiled from its source file without its imports."""
    tree = ast.parse(OFFICIAL_SOURCE.read_text(encoding="utf-8"))
    wanted = {"PromptConstants", "get_generic_question_template_answer"}
    nodes = [n for n in tree.body if getattr(n, "name", None) in wanted]
    assert len(nodes) == 2, "official template source changed shape"
    namespace: dict = {}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(OFFICIAL_SOURCE), "exec"), namespace)
    return namespace["get_generic_question_template_answer"]


@pytest.fixture(scope="module")
def official() -> Callable:
    """The official function, imported when the package imports (it needs optional packages
    such as `datasets` and `anthropic`), else compiled from its source file."""
    before = set(sys.modules)
    try:
        module = importlib.import_module("livecodebench.prompts.code_generation")
        return module.get_generic_question_template_answer
    except ImportError:
        return _official_from_source()
    finally:  # a failed import may leave half-initialised livecodebench packages behind
        for name in set(sys.modules) - before:
            if name.startswith("livecodebench"):
                del sys.modules[name]


def make_problem(statement: str, starter: str = "", fn_name: str | None = None) -> Problem:
    mode = Mode.FUNCTIONAL if starter else Mode.STDIN
    test = Case(input="SECRET_PUBLIC_INPUT\n", output="SECRET_PUBLIC_OUTPUT\n", mode=mode)
    hidden = Case(input="SECRET_PRIVATE_INPUT\n", output="1\n", mode=mode)
    return Problem(id="p", title="T", statement=statement, starter_code=starter, mode=mode,
                   fn_name=fn_name, public_tests=(test,), private_tests=(hidden,),
                   difficulty="easy", platform="atcoder", contest_id="c", contest_date="d")


PROBLEMS = [
    make_problem("Given N, print 2N.\n\nSample Input 1\n\n3\n\nSample Output 1\n\n6"),
    make_problem("Print the sum of A and B.\nConstraints: 1 <= A, B <= 10^9 — é ü 日本"),
    make_problem("Return the sum of nums.",
                 "class Solution:\n    def total(self, nums: List[int]) -> int:\n        ",
                 "total"),
    make_problem("  leading spaces and a trailing newline\n",
                 "class Solution:\n    def f(self, s: str, k: int) -> bool:\n        ", "f"),
]


@pytest.mark.parametrize("problem", PROBLEMS, ids=["stdin", "unicode", "functional", "edges"])
def test_question_prompt_equals_official(problem: Problem, official: Callable) -> None:
    theirs = official(types.SimpleNamespace(question_content=problem.statement,
                                            starter_code=problem.starter_code))
    assert question_prompt(problem) == theirs


def test_question_prompt_layout() -> None:
    stdin = question_prompt(PROBLEMS[0])
    assert stdin.startswith("### Question:\nGiven N, print 2N.")
    assert "```python\n# YOUR CODE HERE\n```\n\n" in stdin
    assert stdin.endswith("### Answer: (use the provided format with backticks)\n\n")
    functional = question_prompt(PROBLEMS[2])
    assert f"```python\n{PROBLEMS[2].starter_code}\n```" in functional
    assert "YOUR CODE HERE" not in functional and "stdin" not in functional


@pytest.mark.parametrize("problem", PROBLEMS)
def test_question_prompt_hides_tests(problem: Problem) -> None:
    assert "SECRET" not in question_prompt(problem)


def test_template_stub_is_not_extracted_as_a_program() -> None:
    assert extract_code(question_prompt(PROBLEMS[0])) is None


@pytest.mark.parametrize(
    ("topology", "role"),
    [(t, r) for t, roles in prompts.SEED_ROLES.items() for r in roles],
)
def test_every_seed_role_file_exists_and_is_short(topology: str, role: str) -> None:
    path = prompts.role_path(topology, role)
    assert path == prompts.PROMPTS_ROOT / topology / "lcb" / f"{role}.txt"
    text = load_role_prompt(topology, role)
    assert 5 <= len(text.splitlines()) <= 20, f"{path}: {len(text.splitlines())} lines"
    assert "```" not in text, "the output contract belongs to code, not to role files"


def test_seed_roles_match_the_files_on_disk() -> None:
    for topology, roles in prompts.SEED_ROLES.items():
        assert prompts.available_roles(topology) == list(roles)


def test_seed_bundle() -> None:
    bundle = seed_bundle("sequential")
    assert list(bundle) == list(prompts.SEED_ROLES["sequential"])
    assert seed_bundle("sequential", ["coder"]) == {"coder": bundle["coder"]}
    assert all(text == text.strip() and text for text in bundle.values())
    with pytest.raises(TypeError, match="not a single str"):
        seed_bundle("single", "solver")


def test_placeholders_only_in_manager() -> None:
    for topology, roles in prompts.SEED_ROLES.items():
        for role, text in seed_bundle(topology, roles).items():
            expected = {"workers"} if (topology, role) == ("centralized", "manager") else set()
            assert placeholders_in(text) == expected, (topology, role)


def test_fill_placeholders() -> None:
    manager = load_role_prompt("centralized", "manager")
    filled = fill_placeholders(manager, workers="- coder: writes the program")
    assert "{workers}" not in filled and "- coder: writes the program" in filled
    assert fill_placeholders("keep {x} and {}", workers="w") == "keep {x} and {}"
    assert fill_placeholders("{workers}", workers="{workers}") == "{workers}"
    with pytest.raises(PromptError, match="no value"):
        fill_placeholders(manager)
    with pytest.raises(PromptError, match="unknown placeholder"):
        fill_placeholders(manager, workers="w", team="t")


def test_contract_is_appended_after_the_prompt() -> None:
    role = load_role_prompt("single", "solver")
    full = with_contract(role + "\n\n")
    assert full == f"{role}\n\n{OUTPUT_CONTRACT}"
    assert "```python" in OUTPUT_CONTRACT and "exactly one" in OUTPUT_CONTRACT


def test_contract_mode_wording() -> None:
    stdin = with_contract("Solve.", mode=Mode.STDIN)
    functional = with_contract("Solve.", mode="functional", fn_name="maxSum")
    assert stdin.startswith("Solve.\n\n" + OUTPUT_CONTRACT)
    assert "standard input" in stdin and "`maxSum`" not in stdin
    assert "`maxSum`" in functional and "starter code" in functional
    assert stdin != functional
    with pytest.raises(PromptError, match="unknown mode 'batch'"):
        with_contract("Solve.", mode="batch")
    with pytest.raises(TypeError):
        with_contract(None)  # type: ignore[arg-type]


def test_missing_role_file_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "single" / "lcb").mkdir(parents=True)
    (tmp_path / "single" / "lcb" / "solver.txt").write_text("Solve it.\n", encoding="utf-8")
    with pytest.raises(PromptError) as caught:
        load_role_prompt("single", "critic", root=tmp_path)
    message = str(caught.value)
    assert str(tmp_path / "single" / "lcb" / "critic.txt") in message
    assert "solver" in message
    assert load_role_prompt("single", "solver", root=tmp_path) == "Solve it."


def test_empty_role_file_and_unknown_topology(tmp_path: Path) -> None:
    folder = tmp_path / "single" / "lcb"
    folder.mkdir(parents=True)
    (folder / "solver.txt").write_text("  \n", encoding="utf-8")
    with pytest.raises(PromptError, match="is empty"):
        load_role_prompt("single", "solver", root=tmp_path)
    with pytest.raises(PromptError, match="no role prompts for topology 'mesh'"):
        seed_bundle("mesh", root=tmp_path)


@pytest.mark.parametrize("name", ["../single", "Solver", "", "a/b", "x.txt"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(PromptError, match="invalid"):
        load_role_prompt("single", name)
    with pytest.raises(PromptError, match="invalid topology"):
        load_role_prompt(name, "solver")

"""The layer rule: lcb's imports run down, never up (docs/architecture.md).

Layers, lowest first: the top-level modules `lcb/<name>.py` (standard library and third-party
packages only), data, grading and sandbox, agents, teams, runs, optimize, report and grid, cli.
Every import counts, at module level or inside a function, `import x` or `from x import y`,
relative ones resolved; only imports under `if TYPE_CHECKING:` are left out (they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

LCB = Path(__file__).resolve().parents[1] / "lcb"
LAYERS = {"data": 1, "grading": 2, "sandbox": 2, "agents": 3, "teams": 4, "runs": 5,
          "optimize": 6, "report": 7, "grid": 7, "cli": 8}
TOP = 0  # lcb/<name>.py and the lcb package itself


def module_name(path: Path) -> str:
    parts = list(path.relative_to(LCB.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolved(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module or name) for every import that runs, at any depth."""
    module, is_package = module_name(path), path.name == "__init__.py"
    pending: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"), str(path))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolved(node, module, is_package)
            yield node.lineno, source
            yield from ((node.lineno, f"{source}.{alias.name}") for alias in node.names)
        pending.extend(ast.iter_child_nodes(node))


def part_of(module: str) -> str | None:
    """The subpackage of a dotted name, "lcb" for a top-level module; None outside lcb."""
    parts = module.split(".")
    if parts[0] != "lcb":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "lcb"


def _sources() -> list[Path]:
    """lcb's modules: the .py files of its packages (not the sample set's reference programs)."""
    def in_package(path: Path) -> bool:
        folders = path.relative_to(LCB).parents  # up to "." (lcb itself)
        return all((LCB / folder / "__init__.py").is_file() for folder in folders)

    return sorted(path for path in LCB.rglob("*.py") if in_package(path))


def _edges() -> Iterator[tuple[str, int, str, str, str]]:
    """(file, line, imported name, importer's part, imported part) of every lcb import."""
    for path in _sources():
        importer = part_of(module_name(path))
        assert importer is not None
        for line, name in imports(path):
            imported = part_of(name)
            if imported is not None:
                yield str(path.relative_to(LCB.parent)), line, name, importer, imported


def _up(importer: str, imported: str) -> bool:
    if importer == "lcb":  # a top-level module: no lcb subpackage at all
        return imported != "lcb"
    return LAYERS.get(imported, TOP) > LAYERS[importer]


def test_every_subpackage_has_a_layer():
    packages = {path.relative_to(LCB).parts[0] for path in _sources() if path.parent != LCB}
    assert packages, f"no lcb subpackage found under {LCB}"
    assert packages <= set(LAYERS), f"give these a layer: {sorted(packages - set(LAYERS))}"


def test_no_import_runs_up_the_layers():
    up = {(file, line, name) for file, line, name, importer, imported in _edges()
          if _up(importer, imported)}
    # `from lcb.runs.extract import x` is one import of lcb.runs.extract, not two
    found = sorted(f"{file}:{line} imports {name}" for file, line, name in up
                   if (file, line, name.rpartition(".")[0]) not in up)
    assert not found, "imports that run up the layers:\n" + "\n".join(found)


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of `graph`: its nodes in order, the first repeated at the end (None: none)."""
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for after in sorted(graph.get(node, ())):
            if state.get(after) == "open":
                return [*path[path.index(after):], after]
            found = None if after in state else visit(after)
            if found:
                return found
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        found = None if node in state else visit(node)
        if found:
            return found
    return None


def module_graph(*prefixes: str) -> dict[str, set[str]]:
    """Module -> the modules it imports, among the modules named `prefix...`. A package's
    `__init__` is left out: it runs before any of its modules, whoever imports them."""
    modules = {module_name(path): path for path in _sources()}
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        if module in packages or not module.startswith(prefixes):
            continue
        for _, name in imports(path):
            while name and name not in modules:  # `from m import f` names m.f: back to m
                name = name.rpartition(".")[0]
            if name.startswith(prefixes) and name not in packages and name != module:
                graph.setdefault(module, set()).add(name)
    return graph


def test_subpackages_import_one_another_without_cycles():
    graph: dict[str, set[str]] = {}
    for _, _, _, importer, imported in _edges():
        if importer != imported:
            graph.setdefault(importer, set()).add(imported)
    found = find_cycle(graph)
    assert found is None, f"an import cycle between lcb's parts: {' -> '.join(found or ())}"


def test_grading_and_sandbox_modules_import_one_another_without_cycles():
    found = find_cycle(module_graph("lcb.grading.", "lcb.sandbox."))
    assert found is None, f"an import cycle: {' -> '.join(found or ())}"


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]


@pytest.mark.parametrize(("source", "expected"), [
    ("from lcb.runs.extract import x\n", ["lcb.runs.extract", "lcb.runs.extract.x"]),
    ("def f():\n    import lcb.cli.options\n", ["lcb.cli.options"]),
    ("from ..runs import extract\n", ["lcb.runs", "lcb.runs.extract"]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import lcb.cli\nelse:\n"
     "    import lcb.io\n", ["typing", "typing.TYPE_CHECKING", "lcb.io"]),
])
def test_the_scan_sees_every_import_that_runs(tmp_path, monkeypatch, source, expected):
    package = tmp_path / "lcb" / "teams"
    package.mkdir(parents=True)
    (package / "probe.py").write_text(source, encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.LCB", tmp_path / "lcb")
    assert sorted(name for _, name in imports(package / "probe.py")) == sorted(expected)


@pytest.mark.parametrize(("importer", "imported", "up"), [
    ("teams", "runs", True), ("grid", "cli", True), ("lcb", "data", True),
    ("grading", "sandbox", False), ("sandbox", "grading", False), ("report", "grid", False),
    ("agents", "lcb", False), ("lcb", "lcb", False), ("cli", "data", False),
])
def test_the_layer_order(importer, imported, up):
    assert _up(importer, imported) is up

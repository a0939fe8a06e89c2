"""Commands that answer at once: help, and the commands that need no model, import no model stack.

Each case runs `lcb` in a fresh interpreter (as a user does) and lists which of the packages
behind model calls (`MODEL_STACK`) that process imported. Help of every command, the commands
`score`, `problems`, `grid status` and `report`, and a batch or an optimizer job refused before
any work must import none of them: they are what made `lcb --help` and such errors take seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers_grid import small_grid

MODEL_STACK = ("openai", "langchain_core", "langchain_openai", "langgraph", "dspy", "litellm",
               "torch")
COMMANDS = ("run", "demo", "score", "problems", "splits", "optimize", "grid", "report",
            "compare")

# Runs `lcb` with the given arguments, then writes which MODEL_STACK packages are loaded (at
# exit, so whatever the command imported while it ran counts) to the file named first.
_AUDIT = """
import atexit, json, sys
where, stack, argv = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3:]
def _write():
    with open(where, "w") as out:
        json.dump(sorted(name for name in stack if name in sys.modules), out)
atexit.register(_write)
if argv[:1] == ["HELP"]:
    from typer.testing import CliRunner
    from lcb.cli import load_commands
    app, runner = load_commands(), CliRunner()
    results = [runner.invoke(app, [*words, "--help"]) for words in json.loads(sys.argv[4])]
    assert all(r.exit_code == 0 and "Usage" in r.output for r in results), results
else:
    sys.argv = ["lcb", *argv]
    from lcb.cli import main
    main()
"""


def imported_model_stack(tmp_path: Path, *argv: str
                         ) -> tuple[list[str], subprocess.CompletedProcess]:
    """Run `lcb argv` in a fresh interpreter: (model-stack packages it imported, the process)."""
    where = tmp_path / "imported.json"
    env = {**os.environ, "VLLM_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_ID": "m"}
    done = subprocess.run([sys.executable, "-c", _AUDIT, str(where), json.dumps(MODEL_STACK),
                           *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=env)
    assert where.exists(), done.stderr
    return json.loads(where.read_text()), done


def test_help_of_every_command_imports_no_model_stack(tmp_path):
    helps = [[], *([c] for c in COMMANDS), ["grid", "run"], ["grid", "status"]]
    imported, done = imported_model_stack(tmp_path, "HELP", json.dumps(helps))
    assert done.returncode == 0, done.stderr
    assert imported == []


def test_the_audit_sees_a_command_that_loads_the_model_stack(tmp_path):
    """A batch with work loads it (then fails at the endpoint check: nothing listens)."""
    imported, done = imported_model_stack(tmp_path, "run", "--data", "sample", "--limit", "1",
                                          "--out", str(tmp_path / "out.jsonl"))
    assert done.returncode == 1 and "Model endpoint check failed" in done.stderr, done.stderr
    assert {"openai", "langchain_core", "langgraph"} & set(imported)


@pytest.mark.parametrize(("argv", "said"), [
    (["--data", "MISSING"], "no such file or directory"),
    (["--data", "sample", "--limit", "0"], "selects no problem"),
    (["--data", "sample", "--cache", "FILE"], "--cache"),
    (["--data", "sample", "--out", "FILE", "--retry-errors"], "--retry-errors"),
])
def test_a_batch_refused_before_any_work_loads_no_model_stack(tmp_path, argv, said):
    (tmp_path / "file").write_text("x")
    argv = [str(tmp_path / "missing") if a == "MISSING" else str(tmp_path / "file")
            if a == "FILE" else a for a in argv]
    imported, done = imported_model_stack(tmp_path, "run", *argv)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert imported == []


@pytest.mark.parametrize(("argv", "said"), [
    (["--method", "nope"], "unknown optimizer method 'nope'"),
    pytest.param(["--method", "tavo", "--topology", "single"], "optimizes multi-agent teams",
                 marks=pytest.mark.slow),
    (["--method", "gepa", "--set", "nope=1"], "unknown setting 'nope' of method 'gepa'"),
    pytest.param(["--method", "gepa", "--team-size", "7"], "7", marks=pytest.mark.slow),
    (["--method", "gepa", "--data", "MISSING"], "no such file or directory"),
    pytest.param(["--method", "gepa", "--cache", "FILE"], "--cache", marks=pytest.mark.slow),
])
def test_an_optimizer_job_refused_before_any_work_loads_no_model_stack(tmp_path, argv, said):
    (tmp_path / "file").write_text("x")
    argv = [str(tmp_path / "missing") if a == "MISSING" else str(tmp_path / "file")
            if a == "FILE" else a for a in argv]
    topology = [] if "--topology" in argv else ["--topology", "sequential"]
    imported, done = imported_model_stack(tmp_path, "optimize", *topology, *argv, "--out",
                                          str(tmp_path / "job"))
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert imported == [] and not (tmp_path / "job").exists()


def test_problems_imports_no_model_stack(tmp_path):
    imported, done = imported_model_stack(tmp_path, "problems", "--data", "sample", "--limit",
                                          "3")
    assert done.returncode == 0, done.stderr
    assert imported == [] and len(done.stdout.splitlines()) == 1 + 3  # a header, 3 rows


@pytest.mark.slow
def test_score_and_report_import_no_model_stack(tmp_path):
    results = tmp_path / "scored" / "results.jsonl"
    imported, done = imported_model_stack(tmp_path, "score", "--data", "sample",
                                          "--references", "--limit", "2", "--jobs", "1",
                                          "--out", str(results))
    assert done.returncode == 0, done.stderr
    assert imported == [] and len(results.read_text().splitlines()) == 2
    imported, done = imported_model_stack(tmp_path, "report", str(results.parent), "--out",
                                          str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    assert imported == [] and (tmp_path / "report" / "index.html").exists()


def test_grid_status_imports_no_model_stack(tmp_path):
    spec = tmp_path / "grid.yaml"
    spec.write_text(yaml.safe_dump(small_grid("http://127.0.0.1:9/v1")))
    imported, done = imported_model_stack(tmp_path, "grid", "status", str(spec))
    assert done.returncode == 0, done.stderr
    assert imported == [] and "pending" in done.stdout

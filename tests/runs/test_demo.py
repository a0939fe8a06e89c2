"""The demo: the two built-in problems with a scripted endpoint, and the no-endpoint fallback."""

import asyncio
import io
import subprocess

import pytest
from rich.console import Console
from typer.testing import CliRunner

from lcb.cli import app
from lcb.data.datasets import Selection, load_problems
from lcb.data.samples import DEMO_IDS, reference_solution, sample_ids
from lcb.runs.demo import grade_references, run_demo
from tests.helpers_runner import REPO, entry_argv, model_config, subprocess_env
from tests.scripted_server import (
    keyed,
    scripted_fixture,  # noqa: F401
)

NO_SERVER = "http://127.0.0.1:9/v1"


def capture() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=160, color_system=None), buffer


def test_demo_with_an_endpoint_prints_code_and_every_test(scripted):
    problems = load_problems("sample", selection=Selection(only=DEMO_IDS)).problems
    assert [p.mode.value for p in problems] == ["stdin", "functional"]
    answers = {p.statement[:80]: [f"Here it is.\n```python\n{reference_solution(p.id)}\n```"]
               for p in problems}
    server = scripted(keyed(answers, default=["OK"]))
    console, buffer = capture()
    code = asyncio.run(run_demo(model_config(server.base_url), console=console))
    output = buffer.getvalue()
    assert code == 0
    for problem in problems:
        assert problem.id in output
        first_line = reference_solution(problem.id).strip().splitlines()[0]
        assert first_line in output
        total = len(problem.hidden_tests)
        assert f"{total}/{total} hidden tests passed: solved" in output
    assert output.count("passed") >= sum(len(p.hidden_tests) for p in problems)
    assert "Reference solutions" not in output


def test_demo_without_an_endpoint_says_so_and_grades_reference_solutions():
    console, buffer = capture()
    code = asyncio.run(run_demo(model_config(NO_SERVER), console=console))
    output = buffer.getvalue()
    assert code == 0
    assert f"No model endpoint answered at {NO_SERVER}" in output
    for hint in ("VLLM_BASE_URL", "llama.cpp", "Ollama", "MODEL_ID"):
        assert hint in output
    assert "Reference solutions of the sample set (NOT model output)" in output
    assert all(sid in output for sid in sample_ids())


def test_reference_solutions_all_pass():
    console, _ = capture()
    summary = asyncio.run(grade_references(console))
    assert summary["n"] == len(sample_ids()) and summary["em"] == 1.0


@pytest.mark.slow
def test_entry_point_with_no_arguments_runs_the_demo_offline():
    proc = subprocess.run(entry_argv(), cwd=REPO, env=subprocess_env(NO_SERVER),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "No model endpoint answered" in proc.stdout
    assert "NOT model output" in proc.stdout


def test_lcb_demo_command_without_an_endpoint_exits_zero():
    result = CliRunner().invoke(app, ["demo"], env={"VLLM_BASE_URL": NO_SERVER})
    assert result.exit_code == 0, result.output
    assert "No model endpoint answered" in result.output
    assert "NOT model output" in result.output

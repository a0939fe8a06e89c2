"""The command-line surface: `-h`, `--version`, metavars, choice lists and the optimizer job's
generation flags."""

import json
import re

import pytest
import typer
from typer.testing import CliRunner

import lcb
from lcb.cli import app
from lcb.cli.optimize_cmd import METHODS, PHASES
from lcb.cli.optimize_cmd import _entry_app as job_entry
from lcb.cli.options import COMMUNICATIONS
from lcb.cli.run_cmd import _Entry
from lcb.cli.run_cmd import _entry_app as team_entry
from tests.helpers_optimize import TeamModel, marker, sample_problems
from tests.helpers_runner import MODEL
from tests.scripted_server import message_text, scripted_fixture  # noqa: F401

COMMANDS = ("run", "demo", "score", "problems", "splits", "optimize")
ENTRY = _Entry(topology="single", prog="python -m topologies.single.lcb.langgraph_lcb")
# What typer shows for an option without a metavar of its own: never in our help.
TYPER_TYPES = re.compile(r"<(bool|str|int|float|path|text|int range|float range)>")


def invoke(target, *args, env=None, **kw):
    base = {"VLLM_BASE_URL": "http://127.0.0.1:9/v1", "MODEL_ID": MODEL, "COLUMNS": "200"}
    return CliRunner().invoke(target, list(args), env={**base, **(env or {})}, **kw)


def helps():
    """(name, help text via -h) of the root, every command and both seed entry points."""
    yield "lcb", invoke(app, "-h")
    for command in COMMANDS:
        yield command, invoke(app, command, "-h")
    yield "team entry", invoke(team_entry, "-h", obj=ENTRY)
    yield "job entry", invoke(job_entry, "-h")


def test_h_is_help_everywhere_and_shows_no_typer_type_names():
    seen = []
    for name, result in helps():
        assert result.exit_code == 0, (name, result.output)
        assert "Usage:" in result.output and "-h" in result.output, name
        assert not TYPER_TYPES.search(result.output), (name, TYPER_TYPES.findall(result.output))
        seen.append(name)
    assert len(seen) == len(COMMANDS) + 3


def test_help_option_matches_long_form():
    assert invoke(app, "run", "-h").output == invoke(app, "run", "--help").output


def test_version_prints_the_package_version():
    result = invoke(app, "--version")
    assert result.exit_code == 0
    assert result.output == f"lcb {lcb.__version__}\n"


@pytest.mark.parametrize(("command", "shown"), [
    ("run", ["<single|independent|sequential|centralized|decentralized>", "<default|official>",
             "<process|bwrap>", "<freeform|semi_structured|structured_soft>",
             "<easy|medium|hard>", "<atcoder|leetcode|codeforces>"]),
    ("score", ["<default|official|both>", "<process|bwrap>", "<easy|medium|hard>"]),
    ("problems", ["<easy|medium|hard>", "<atcoder|leetcode|codeforces>"]),
    ("optimize", ["METHOD", "Optimizer method: identity, gepa, mipro, mamut_gepa, tavo,",
                  "maspo, hivemind, mapro, maspob", "<optimize|validate|test|all>",
                  "<process|bwrap>",
                  "<single|independent|sequential|centralized|decentralized>",
                  "<freeform|semi_structured|structured_soft>", "<lcb>"]),
])
def test_help_lists_the_choices(command, shown):
    output = invoke(app, command, "-h").output
    for choices in shown:
        assert choices in output, choices


@pytest.mark.parametrize(("command", "metavars"), [
    ("run", {"--concurrency": "N", "--problem-timeout": "SECONDS", "--samples": "N",
             "--request-timeout": "SECONDS", "--top-p": "P", "--max-tokens": "N",
             "--temperature": "FLOAT", "--out-dir": "DIR", "--model": "MODEL", "--seed": "SEED",
             "--batch": "", "--thinking": ""}),
    ("score", {"--predictions": "PRED.jsonl", "--jobs": "N", "--missing-as-fail": ""}),
    ("optimize", {"--out": "DIR", "--budget": "N", "--splits": "FILE",
                  "--request-timeout": "SECONDS"}),
])
def test_options_carry_real_metavars(command, metavars):
    click_app = typer.main.get_command(app)
    params = {p.opts[0]: p for p in click_app.commands[command].params}
    assert {name: params[name].metavar for name in metavars} == metavars


def test_spelled_out_choices_equal_their_registries():
    from lcb.optimize.job import JobPhase
    from lcb.optimize.methods import OPTIMIZERS
    from lcb.teams.formats import CommFormat

    assert COMMUNICATIONS == tuple(CommFormat)
    assert METHODS == tuple(OPTIMIZERS)  # the same keys, in the grid's order
    assert PHASES == tuple(JobPhase)


def test_help_names_the_model_defaults():
    from lcb.agents.models import ModelConfig

    defaults = ModelConfig("http://h/v1", "m")
    params = {p.name: p for p in typer.main.get_command(app).commands["run"].params}
    expected = {"temperature": defaults.temperature, "top_p": defaults.top_p,
                "max_tokens": defaults.max_tokens, "request_timeout": int(defaults.timeout_s)}
    for name, value in expected.items():
        assert f"(default {value};" in params[name].help, name
    assert defaults.thinking is None and "thinking off" in params["thinking"].help


def test_a_job_flag_that_does_not_parse_still_ends_stdout_with_the_json_line(tmp_path):
    result = invoke(job_entry, "--method", "identity", "--topology", "single", "--out",
                    str(tmp_path / "job"), "--top-p", "2")
    assert result.exit_code == 2
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert line["status"] == "error" and "--top-p" in line["error"]
    assert not (tmp_path / "job").exists()


def test_the_job_samples_optimize_only_and_records_its_generation_settings(scripted, tmp_path):
    problems = sample_problems()
    server = scripted(TeamModel(problems))
    out = tmp_path / "job"
    result = invoke(job_entry, "--method", "identity", "--topology", "single", "--out", str(out),
                    "--data", "sample", "--budget", "0", "--temperature", "0.4", "--top-p",
                    "0.5", "--max-tokens", "300", "--no-thinking",
                    env={"VLLM_BASE_URL": server.base_url, "LCB_MAX_TOKENS": "999"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["status"] == "complete"
    spec = json.loads((out / "job.json").read_text())
    assert (spec["temperature"], spec["top_p"]) == (0.4, 0.5)
    assert (spec["max_tokens"], spec["thinking"]) == (300, False)
    team = [body for body in server.chat_requests()
            if any(marker(p) in message_text(body) for p in problems)]
    assert team  # identity optimizes nothing: these are validation and test runs, greedy
    for body in team:
        assert (body["temperature"], body["max_completion_tokens"]) == (0.0, 300)
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
    records = [json.loads(line) for path in sorted((out / "evals").glob("*.jsonl"))
               for line in path.read_text().splitlines()]
    assert len(records) == len(team)
    assert {json.dumps(r["generation"], sort_keys=True) for r in records} == {json.dumps(
        {"temperature": 0.0, "top_p": 0.5, "max_tokens": 300, "thinking": False,
         "timeout_s": 120.0, "queue_timeout_s": 1800.0}, sort_keys=True)}


@pytest.mark.parametrize("demo_args", [("demo",), ()])
def test_the_demo_takes_the_generation_flags(monkeypatch, demo_args):
    import lcb.runs.demo

    seen = []

    async def fake_demo(config, *, topology):
        seen.append((config, topology))
        return 0

    monkeypatch.setattr(lcb.runs.demo, "run_demo", fake_demo)
    target, kw = (app, {}) if demo_args else (team_entry, {"obj": ENTRY})
    result = invoke(target, *demo_args, "--temperature", "0.3", "--no-thinking",
                    "--max-tokens", "64", **kw)
    assert result.exit_code == 0, result.output
    ((config, topology),) = seen
    assert (config.temperature, config.thinking, config.max_tokens, topology) == (
        0.3, False, 64, "single")

"""`lcb problems`: listing, JSON lines, skipped rows on stderr, one-line errors with status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from click.testing import CliRunner
from helpers_data import (
    FAKE_SHA,
    functional_row,
    make_hub_cache,
    mixed_rows,
    stdin_row,
    write_jsonl,
    write_parquet,
)

from lcb.cli import app

REPO = Path(__file__).resolve().parents[2]
EXPECTED_P2 = {"id": "p2", "mode": "functional", "difficulty": "medium", "platform": "leetcode",
               "contest_date": "2023-06-15T00:00:00", "n_public": 1, "n_private": 1,
               "fn_name": "addTwo"}


def lcb(*args: str, **env: str):
    """Run `lcb <args>` in-process (as a command group, whatever else is registered)."""
    runner = CliRunner(env={"COLUMNS": "200", **env})
    return runner.invoke(typer.main.get_group(app), list(args), prog_name="lcb")


def json_lines(result) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture
def jsonl(tmp_path):
    return write_jsonl(tmp_path / "rows.jsonl", mixed_rows())


def test_json_lists_every_row_of_a_jsonl_file(jsonl):
    result = lcb("problems", "--data", str(jsonl), "--json")
    assert result.exit_code == 0, result.output
    listed = json_lines(result)
    assert [row["id"] for row in listed] == ["p1", "p2", "p3", "p4", "p5", "p6"]
    assert listed[1] == EXPECTED_P2
    assert listed[0]["mode"] == "stdin" and listed[0]["fn_name"] is None
    assert listed[0]["n_private"] == 2
    assert f"source: local {jsonl}" in result.stderr


def test_json_for_parquet_and_directory_matches_jsonl(tmp_path, jsonl):
    parquet = write_parquet(tmp_path / "rows.parquet", mixed_rows())
    folder = tmp_path / "dir"
    write_jsonl(folder / "1.jsonl", mixed_rows()[:3])
    write_parquet(folder / "2.parquet", mixed_rows()[3:])
    expected = json_lines(lcb("problems", "--data", str(jsonl), "--json"))
    for source in (parquet, folder):
        result = lcb("problems", "--data", str(source), "--json")
        assert result.exit_code == 0, result.output
        assert json_lines(result) == expected


def test_filters_and_only_order_reach_the_loader(jsonl):
    result = lcb("problems", "--data", str(jsonl), "--json", "--only", "p6,p2", "--only", "p1")
    assert [row["id"] for row in json_lines(result)] == ["p6", "p2", "p1"]
    result = lcb("problems", "--data", str(jsonl), "--json", "--difficulty", "HARD",
                 "--platform", "leetcode")
    assert [row["id"] for row in json_lines(result)] == ["p5"]
    result = lcb("problems", "--data", str(jsonl), "--json", "--start-date", "2023-06-01",
                 "--end-date", "2023-09-30", "--offset", "1", "--limit", "2")
    assert [row["id"] for row in json_lines(result)] == ["p3", "p4"]


def test_table_shows_the_selected_problems(jsonl):
    result = lcb("problems", "--data", str(jsonl), "--platform", "leetcode",
                 TTY_COMPATIBLE="1", NO_COLOR="1")  # the terminal view
    assert result.exit_code == 0, result.output
    assert "2 problem(s)" in result.stdout
    assert "p2" in result.stdout and "p5" in result.stdout and "p1" not in result.stdout
    assert "addTwo" in result.stdout and "functional" in result.stdout


def test_piped_listing_is_tab_separated_with_every_column_whole(tmp_path):
    long_title = "A title far longer than any terminal column: " + "word " * 30
    row = stdin_row("p_with_a_rather_long_identifier_that_a_table_would_fold")
    row["question_title"] = long_title + "\twith a tab\nand a line break"
    path = write_jsonl(tmp_path / "rows.jsonl", [row, functional_row("p2")])
    result = lcb("problems", "--data", str(path), COLUMNS="80")  # CliRunner: not a terminal
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split("\t") == ["id", "title", "mode", "difficulty", "platform", "date",
                                    "public", "private", "fn_name"]
    first, second = (line.split("\t") for line in lines[1:])
    assert first[0] == "p_with_a_rather_long_identifier_that_a_table_would_fold"
    assert first[1] == long_title + " with a tab and a line break"
    assert second[0] == "p2" and second[-1] == "addTwo" and len(lines) == 3
    assert "2 problem(s)" in result.stderr and "━" not in result.stdout


def test_skipped_rows_are_reported_on_stderr(tmp_path):
    bad = functional_row("badmeta")
    bad["metadata"] = "{}"
    path = write_jsonl(tmp_path / "rows.jsonl", [stdin_row("ok"), bad],
                       extra_lines={1: "{not json"})
    result = lcb("problems", "--data", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert [row["id"] for row in json_lines(result)] == ["ok"]
    assert "skipped 2 row(s)" in result.stderr
    assert f"{path}:2: not valid JSON" in result.stderr
    assert "badmeta" in result.stderr and "func_name" in result.stderr


def _one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0]


def test_errors_are_one_line_and_exit_2(tmp_path, jsonl):
    _one_line_error(lcb("problems", "--data", str(tmp_path / "nope.jsonl")),
                    "nope.jsonl", "no such file")
    _one_line_error(lcb("problems", "--data", str(jsonl), "--release", "v1", "--start-date",
                        "2023-02-31"), "--start-date", "2023-02-31")
    broken = write_jsonl(tmp_path / "broken.jsonl", [stdin_row("a")], extra_lines={0: "{"})
    _one_line_error(lcb("problems", "--data", str(broken), "--strict"), "broken.jsonl:1",
                    "--strict")


def test_bad_release_and_uncached_hub_exit_2(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    _one_line_error(lcb("problems", "--release", "release_v9"), "--release 'release_v9'")
    _one_line_error(lcb("problems"), "test.jsonl", "--data PATH")


def test_bad_choice_is_a_usage_error():
    result = lcb("problems", "--difficulty", "impossible")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "impossible" in result.output


def test_help_explains_every_option():
    result = lcb("problems", "--help")
    assert result.exit_code == 0
    for option in ("--data", "--release", "--revision", "--limit", "--offset", "--only",
                   "--difficulty", "--platform", "--start-date", "--end-date", "--strict",
                   "--json"):
        assert option in result.stdout, option
    assert "release_latest" in result.stdout and "sample" in result.stdout


@pytest.mark.slow
def test_hub_listing_from_env_configured_offline_cache(tmp_path):
    """A separate process: huggingface_hub reads HF_HUB_CACHE/HF_HUB_OFFLINE from the env."""
    cache = tmp_path / "cache"
    make_hub_cache(cache, {"test.jsonl": [stdin_row("1873_A"), stdin_row("1873_B")],
                           "test2.jsonl": [functional_row("2900")]})
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("LCB_HF_REVISION", None)
    code = ("import sys, typer; from lcb.cli import app; "
            "typer.main.get_group(app).main(sys.argv[1:], prog_name='lcb')")
    done = subprocess.run([sys.executable, "-c", code, "problems", "--json", "--release",
                           "release_v2"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [
        "1873_A", "1873_B", "2900"]
    assert FAKE_SHA in done.stderr and "EvalIdMismatch" not in done.stderr


def test_every_registered_command_is_known_to_the_lazy_loader():
    from lcb.cli import COMMAND_MODULES, load_commands

    app = load_commands()
    registered = {command.name for command in app.registered_commands}
    groups = {group.name for group in app.registered_groups}  # `lcb grid ...`
    assert registered | groups == set(COMMAND_MODULES) and not registered & groups


def test_lcb_score_does_not_import_langchain_or_the_optimizers():
    code = ("import sys; sys.argv = ['lcb', 'score', '--help']\n"
            "from lcb.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in sys.modules if m.startswith(('langchain', 'lcb.optimize'))]\n"
            "print('HEAVY', heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout


def test_hub_errors_point_to_the_sample_set(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    _one_line_error(lcb("problems", "--release", "release_v9"), "--data sample")
    _one_line_error(lcb("problems"), "--data sample")

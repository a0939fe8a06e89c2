"""Every command the README shows exists and runs (CONTRIBUTING.md, "Docs").

The README's fenced `bash` blocks are read as a shell reads them: backslash continuations
joined, comments dropped, `&&` chains split, leading `VAR=value` words kept apart. Then each
command is checked by its program:
- `lcb …` (or `.venv/bin/lcb …`): parsed by the real command with click's own parser (every
  subcommand, flag, choice and argument checked; nothing runs). Those that need neither a model
  nor the hub (`lcb demo` with no endpoint, `lcb problems` and `lcb score` on `--data sample`,
  `lcb report`) also run for real, in the README's order, in a temporary folder.
- `python -m M …` (or `.venv/bin/python -m M …`): the seed's entry points are parsed as the
  `lcb` command they are (`lcb run --topology T`, `lcb optimize`); any other module must exist,
  and its `--help` must name every flag the line uses.
- an install, the environment or a third-party server (`SKIPPED`): not run, with the reason.
- anything else fails: a new kind of command needs a rule here.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
NO_SERVER = "http://127.0.0.1:9/v1"  # nothing listens there: `lcb demo` takes its offline path
MAX_README_LINES = 200  # issue #22: the README is a front door, the reference lives in docs/

# Leading words of a command -> why this test does not run it.
SKIPPED: dict[tuple[str, ...], str] = {
    ("python3", "-m", "venv"): "creates the virtual environment",
    ("pip",): "installs packages",
    ("apt-get",): "installs Debian packages",
    ("export",): "sets the shell's environment",
    ("llama-server",): "llama.cpp's model server: needs llama.cpp and a GGUF model file",
    ("python", "-m", "llama_cpp.server"): "llama-cpp-python's model server: needs that "
                                          "package and a GGUF model file",
}
SKIPPED_SERVERS = [words for words, why in SKIPPED.items() if "model server" in why]
# `lcb` commands run for real: (subcommand, the --data it must name, or None for any).
OFFLINE = {"demo": None, "problems": "sample", "score": "sample", "report": None}


class CommandError(AssertionError):
    """A README command that names a command, module or flag that does not exist."""


@dataclass(frozen=True)
class Command:
    """One command of a README `bash` block: its words (`.venv/bin/` dropped from the first)."""

    text: str
    argv: tuple[str, ...]

    @property
    def skip_reason(self) -> str | None:
        for words, reason in SKIPPED.items():
            if self.argv[:len(words)] == words:
                return reason
        return None

    @property
    def lcb_args(self) -> list[str] | None:
        """The arguments after `lcb`, or None when the program is not lcb."""
        return list(self.argv[1:]) if self.argv[0] == "lcb" else None

    @property
    def runs_offline(self) -> bool:
        args = self.lcb_args
        if not args or args[0] not in OFFLINE:
            return False
        data = OFFLINE[args[0]]
        return data is None or _value_of(args, "--data") == data


def _value_of(args: list[str], flag: str) -> str | None:
    for i, word in enumerate(args):
        if word == flag and i + 1 < len(args):
            return args[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def bash_blocks(text: str) -> list[str]:
    """The bodies of the fenced ```bash blocks of a Markdown text."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def parse_line(line: str) -> list[Command]:
    """The commands of one logical shell line (`&&` splits a chain; `VAR=value` words and
    `.venv/bin/` before the program are dropped, `python3` other than `-m venv` is `python`)."""
    words = shlex.split(line, comments=True)
    commands, current = [], []
    for word in [*words, "&&"]:
        if word in ("&&", ";", "||"):
            if current:
                commands.append(_command(current))
            current = []
        elif word in ("|", "&", ">", ">>", "<"):
            raise CommandError(f"`{line}`: pipes and redirections are not checked here; "
                               "show the plain command")
        else:
            current.append(word)
    return commands


def _command(words: list[str]) -> Command:
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]
    program = words[0].removeprefix(".venv/bin/")
    if program == "python3" and words[1:3] != ["-m", "venv"]:
        program = "python"
    return Command(shlex.join(words), (program, *words[1:]))


def readme_commands(text: str | None = None) -> list[Command]:
    """Every command of the README's `bash` blocks, in order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    commands = []
    for block in bash_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            commands.extend(parse_line(line))
    return commands


def check(command: Command) -> None:
    """Raise `CommandError` unless `command` names a real command with real flags."""
    if command.skip_reason is not None:
        return
    if command.lcb_args is not None:
        return check_lcb(command.lcb_args)
    if command.argv[0] == "python" and command.argv[1:2] == ("-m",) and len(command.argv) > 2:
        return check_module(command.argv[2], list(command.argv[3:]))
    raise CommandError(f"`{command.text}`: no rule for {command.argv[0]!r} in tests/"
                       "test_readme.py (check it like lcb, or skip it with a reason)")


def check_lcb(args: list[str]) -> None:
    """Parse `lcb ARGS` with the real command, as click would before running it."""
    from lcb.cli import app

    command, name, rest = typer.main.get_command(app), "lcb", list(args)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        word = rest.pop(0)
        if word not in command.commands:
            raise CommandError(f"`{name} {word}`: no such command (known: "
                               f"{', '.join(sorted(command.commands))})")
        command, name = command.commands[word], f"{name} {word}"
    try:
        command.make_context(name, rest)
    except Exception as exc:  # click's usage errors (typer vendors click), or its Exit
        if getattr(exc, "exit_code", None) == 0:  # --help, --version
            return
        message = exc.format_message() if hasattr(exc, "format_message") else repr(exc)
        raise CommandError(f"`{shlex.join([name, *rest])}`: {message}") from None


def check_module(module: str, args: list[str]) -> None:
    """`python -m MODULE ARGS`: a seed entry point is parsed as its lcb command; any other
    module must exist and its `--help` must name every flag in `args`."""
    from lcb.cli.run_cmd import ENTRY_MODULES

    if not _module_exists(module):
        raise CommandError(f"`python -m {module}`: no module {module!r}")
    topologies = {path: topology for topology, path in ENTRY_MODULES.items()}
    if module in topologies:
        return check_lcb(["run", "--topology", topologies[module], *args])
    if module == "optimizers.protocol.run":
        return check_lcb(["optimize", *args])
    flags = [word.split("=", 1)[0] for word in args if re.match(r"--?[A-Za-z]", word)]
    if not flags:
        return
    shown = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, timeout=120,
                           capture_output=True, text=True)
    for flag in flags:
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", shown.stdout):
            raise CommandError(f"`python -m {module}`: its --help names no {flag}")


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


COMMANDS = readme_commands()


def test_the_readme_is_a_front_door():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_README_LINES
    assert COMMANDS, "no bash block found"


@pytest.mark.parametrize("command", COMMANDS, ids=[c.text[:60] for c in COMMANDS])
def test_every_readme_command_exists_with_its_flags(command):
    if command.skip_reason is not None:
        pytest.skip(f"not run: {command.skip_reason}")
    check(command)


def _run_offline(commands: list[Command], folder: Path, monkeypatch) -> None:
    from lcb.cli import app

    monkeypatch.chdir(folder)
    env = {"VLLM_BASE_URL": NO_SERVER, "MODEL_ID": None, "OPENAI_API_KEY": None}
    for command in commands:
        result = CliRunner().invoke(app, command.lcb_args, env=env)
        assert result.exit_code == 0, f"`{command.text}` exited {result.exit_code}:\n" + (
            result.output[-3000:])


def test_the_sample_set_commands_run_offline(tmp_path, monkeypatch):
    quick = [c for c in COMMANDS if c.runs_offline and c.lcb_args[0] in ("problems", "score")]
    assert {c.lcb_args[0] for c in quick} == {"problems", "score"}
    _run_offline(quick, tmp_path, monkeypatch)


@pytest.mark.slow
def test_the_five_minute_path_runs_offline_as_the_readme_shows(tmp_path, monkeypatch):
    offline = [c for c in COMMANDS if c.runs_offline]
    assert {c.lcb_args[0] for c in offline} == set(OFFLINE)
    _run_offline(offline, tmp_path, monkeypatch)
    report = next(c for c in offline if c.lcb_args[0] == "report")
    assert (tmp_path / _value_of(report.lcb_args, "--out") / "index.html").is_file()


ALIAS_FLAGS = ("--alias", "--model_alias")  # llama-server's, llama-cpp-python's


def server_recipes(text: str) -> list[tuple[Command, dict[str, str]]]:
    """Each README block that starts a local model server: its command and the variables the
    block exports."""
    recipes = []
    for block in bash_blocks(text):
        commands = [c for line in block.replace("\\\n", " ").splitlines()
                    for c in parse_line(line)]
        servers = [c for c in commands if c.skip_reason and "model server" in c.skip_reason]
        exported = dict(word.split("=", 1) for c in commands if c.argv[0] == "export"
                        for word in c.argv[1:])
        recipes += [(server, exported) for server in servers]
    return recipes


def test_each_local_server_recipe_points_lcb_at_the_model_it_serves():
    """As written, a recipe's exports name the server's port and alias; lcb's check passes
    against a server that serves that alias alone (a stand-in for the real one)."""
    import asyncio

    from lcb.agents.check import check_endpoint
    from lcb.agents.models import ModelConfig
    from tests.scripted_server import scripted_server

    recipes = server_recipes(README.read_text(encoding="utf-8"))
    assert len(recipes) == len(SKIPPED_SERVERS)
    for server, exported in recipes:
        args = list(server.argv)
        alias = next(v for flag in ALIAS_FLAGS if (v := _value_of(args, flag)) is not None)
        where = f"http://localhost:{_value_of(args, '--port')}/v1"
        assert (exported.get("VLLM_BASE_URL"), exported.get("MODEL_ID")) == (where, alias), (
            f"`{server.text}` needs `export VLLM_BASE_URL={where} MODEL_ID={alias}` after it")
        with scripted_server(["OK"], models=[alias]) as stand_in:
            env = {"VLLM_BASE_URL": stand_in.base_url, "MODEL_ID": exported["MODEL_ID"]}
            with pytest.MonkeyPatch.context() as patch:
                for name, value in env.items():
                    patch.setenv(name, value)
                asyncio.run(check_endpoint(ModelConfig.from_env()))


@pytest.mark.parametrize(("line", "needle"), [
    ("lcb run --data sample --no-such-flag", "No such option"),
    ("lcb frobnicate --data sample", "no such command"),
    ("lcb grid frobnicate grid.yaml", "no such command"),
    ("lcb run --grader both", "'both' is not one of"),
    ("lcb compare results/a", "Missing argument"),
    ("python -m topologies.nowhere.lcb.langgraph_lcb --batch", "no module"),
    ("python -m topologies.single.lcb.langgraph_lcb --batch --no-such-flag", "No such option"),
    ("python -m optimizers.protocol.aggregate runs/ --no-such-flag", "names no --no-such-flag"),
    ("curl https://example.com", "no rule"),
    ("lcb problems --data sample | head", "pipes"),
])
def test_the_check_fails_on_what_does_not_exist(line, needle):
    with pytest.raises(CommandError, match=re.escape(needle)):
        for command in parse_line(line):
            check(command)


def test_the_parser_reads_lines_as_a_shell_does():
    text = ("```bash\nVLLM_BASE_URL=x .venv/bin/lcb run \\\n  --limit 4   # a comment\n"
            "python3 -m venv .venv && .venv/bin/pip install -e '.[a,b]'\n```\n"
            "```python\nlcb not-bash\n```\n")
    assert [c.argv for c in readme_commands(text)] == [
        ("lcb", "run", "--limit", "4"), ("python3", "-m", "venv", ".venv"),
        ("pip", "install", "-e", ".[a,b]")]


def _ci_commands() -> set[tuple[str, ...]]:
    """The commands of `.ci/run`, without pip's `-q`."""
    commands = set()
    for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines():
        if line.startswith((".venv/", "python3 ")):
            for command in parse_line(line.split(" >", 1)[0]):
                commands.add(tuple(word for word in command.argv if word != "-q"))
    return commands


def test_ci_installs_and_tests_as_the_readme_says():
    ci = _ci_commands()
    steps = [c for c in COMMANDS if c.argv[0] == "pip" or c.argv[:3] == ("python3", "-m", "venv")
             or c.argv[:3] == ("python", "-m", "pytest")]
    assert len(steps) >= 5, [c.text for c in steps]
    for command in steps:
        assert command.argv in ci, f"the README says `{command.text}`; .ci/run does not"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md", "docs/run.md",
                                  "docs/benchmarks.md", "docs/architecture.md"])
def test_the_front_pages_link_to_what_exists(page):
    source = REPO / page
    text = re.sub(r"```.*?```", "", source.read_text(encoding="utf-8"), flags=re.DOTALL)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (source.parent / path).resolve() if path else source
        assert linked.exists(), f"{page} links to {target}: no such file"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page} links to {target}: no such heading"

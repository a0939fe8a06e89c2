"""The `lcb` typer application; each command lives in its own module of this package.

Contract:
- Every command takes `-h` as well as `--help` (`HELP_OPTIONS`), and `lcb --version` prints
  `lcb <version>` (the package's `__version__`).
- Help shows a real metavar for every option: flags show none (not `<bool>`), an option without
  its own metavar gets one from its type (`N`, `FLOAT`, `TEXT`, `PATH`, `FILE`, `DIR`), and
  fixed choices stay listed (`<a|b|c>`).
- `LcbTyper` is a `typer.Typer` whose commands are `LcbCommand`s; the seed entry points build
  their single-command apps with `entry_app()`, so they get the same help.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

HELP_OPTIONS = ["-h", "--help"]
_TYPE_METAVARS = {int: "N", float: "FLOAT", str: "TEXT"}


def type_metavar(param: Any) -> str | None:
    """The metavar help shows for `param` when it has none of its own (None: keep typer's)."""
    if getattr(param, "is_flag", False):
        return ""
    desc = getattr(param, "type_descriptor", None)
    if desc is None or desc.is_choice:
        return None
    if desc.is_path:
        info = desc.parameter_info
        return "DIR" if not info.file_okay else "FILE" if not info.dir_okay else "PATH"
    annotation = desc.annotation
    if desc.is_list:
        annotation = getattr(annotation, "__args__", (str,))[0]
    return _TYPE_METAVARS.get(annotation)


def _with_help_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    settings = {"help_option_names": HELP_OPTIONS, **(kwargs.get("context_settings") or {})}
    return {**kwargs, "context_settings": settings}


def _give_metavars(params: list[Any]) -> None:
    for param in params:
        if param.metavar is None:
            param.metavar = type_metavar(param)


def _plain_help_option(option: Any) -> Any:
    if option is not None:
        option.metavar = ""
    return option


class _LcbHelp:
    """`-h` beside `--help` and real metavars, for a command and the group alike."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **_with_help_options(kwargs))  # type: ignore[call-arg]
        _give_metavars(self.params)  # type: ignore[attr-defined]

    def get_help_option(self, ctx: Any) -> Any:
        return _plain_help_option(super().get_help_option(ctx))  # type: ignore[misc]


class LcbCommand(_LcbHelp, TyperCommand):
    """A typer command with `-h` and real metavars (see the module docstring)."""


class LcbGroup(_LcbHelp, TyperGroup):
    """The `lcb` command group, with the same help as its commands."""


class LcbTyper(typer.Typer):
    """A `typer.Typer` whose commands default to `LcbCommand`."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or LcbCommand, **kwargs)


def entry_app() -> LcbTyper:
    """A single-command app for a seed entry point (`python -m ...`)."""
    return LcbTyper(add_completion=False, pretty_exceptions_enable=False)


app = LcbTyper(
    name="lcb",
    cls=LcbGroup,
    help=(
        "Run single- and multi-agent LLM teams on LiveCodeBench problems, grade programs the way "
        "LiveCodeBench grades them, and optimize the teams' prompts.\n\n"
        "The model endpoint is read from VLLM_BASE_URL, MODEL_ID and OPENAI_API_KEY."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from lcb import __version__

        typer.echo(f"lcb {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print lcb's version and exit.")] = False,
) -> None:
    """Keep `lcb` a command group even while only one command is registered."""

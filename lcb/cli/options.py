"""Options shared by commands that select problems (`problems`, `run`, `demo`, `score`).

Two ways in, one set of definitions:
- `@with_data_options` adds every shared option (`--data --release --revision --limit --offset
  --only --difficulty --platform --start-date --end-date --strict`) to a typer command and
  passes them, validated, as one `data_options: DataOptions` argument.
- Or declare the `Annotated` aliases below (`DataOpt`, `LimitOpt`, …) yourself and call
  `build_data_options(...)`.

`load_or_exit(options)` loads the problems; an unusable source or bad filter value prints one
line naming the bad input on stderr and exits with status 2 (no traceback).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from lcb.data.datasets import DIFFICULTIES, PLATFORMS, DataError, Loaded, Selection, load_problems
from lcb.data.hub import DEFAULT_RELEASE, HUB_DATASET, REVISION_ENV
from lcb.grading.launch import SANDBOXES
from lcb.grading.pool import GRADERS

Difficulty = StrEnum("Difficulty", {name: name for name in DIFFICULTIES})
Platform = StrEnum("Platform", {name: name for name in PLATFORMS})
# `--grader` and `--sandbox` of the commands that grade (`run`, `score`): one set of choices.
Grader = StrEnum("Grader", {name: name for name in GRADERS})
Sandbox = StrEnum("Sandbox", {name: name for name in SANDBOXES})
GRADER_HELP = ("default: lcb's grader on the private tests (for untrusted programs). official: "
               "LiveCodeBench's own run_test on public then private tests (reproduces "
               "leaderboard numbers; a program can forge its own result there).")
SANDBOX_HELP = ("How graded programs and python_exec runs are contained. process: their own "
                "uid (as root), Landlock, rlimits, cgroups. bwrap: also bubblewrap (no "
                "network at all, read-only root, PID namespace).")

_PANEL = "Problem selection"


def _option(*names: str, help: str, **extra: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=_PANEL, **extra)


DataOpt = Annotated[str | None, _option(
    "--data", metavar="PATH|HF_NAME|sample",
    help=f"Problem source: a JSONL/Parquet file of LiveCodeBench rows, a directory of them, "
         f"'sample' (the bundled sample set) or a hub dataset id. Default: the hub dataset "
         f"{HUB_DATASET}.")]
ReleaseOpt = Annotated[str, _option(
    "--release", help="Hub release: release_v1..release_v6, release_latest, vN (one version) "
                      "or vA_vB (a range). Ignored for local files.")]
RevisionOpt = Annotated[str | None, _option(
    "--revision", help=f"Hub branch, tag or commit to fetch (default: ${REVISION_ENV} or main); "
                       f"the resolved commit is recorded.")]
LimitOpt = Annotated[int | None, _option(
    "--limit", min=0, help="Take at most N rows after the filters and --offset (the first N "
                           "of release_v1 are the eval set); unusable rows among them are "
                           "reported, not replaced.")]
OffsetOpt = Annotated[int, _option(
    "--offset", min=0, help="Skip the first K rows that pass the filters.")]
OnlyOpt = Annotated[list[str] | None, _option(
    "--only", metavar="ID[,ID…]",
    help="Only these question IDs, in the order given (repeat or separate with commas).")]
DifficultyOpt = Annotated[Difficulty | None, _option(
    "--difficulty", case_sensitive=False, help="Only problems of this difficulty.")]
PlatformOpt = Annotated[Platform | None, _option(
    "--platform", case_sensitive=False, help="Only problems from this platform.")]
StartDateOpt = Annotated[str | None, _option(
    "--start-date", metavar="YYYY-MM-DD", help="Only problems whose contest date is on or after "
                                               "this day.")]
EndDateOpt = Annotated[str | None, _option(
    "--end-date", metavar="YYYY-MM-DD", help="Only problems whose contest date is on or before "
                                             "this day.")]
StrictOpt = Annotated[bool, _option(
    "--strict", help="Stop at the first malformed row (or unknown --only ID) instead of "
                     "reporting it and going on.")]


@dataclass(frozen=True)
class DataOptions:
    """The validated shared options: where the problems come from and which to keep."""

    data: str | None
    release: str
    revision: str | None
    selection: Selection
    strict: bool

    def load(self) -> Loaded:
        """Load the selected problems; raises `DataError` for an unusable source."""
        return load_problems(self.data, release=self.release, selection=self.selection,
                             strict=self.strict, revision=self.revision)


def split_ids(values: list[str] | None) -> tuple[str, ...]:
    """`--only` values, each possibly comma- or space-separated, flattened in order."""
    return tuple(i for value in values or () for i in re.split(r"[,\s]+", value) if i)


def build_data_options(
    *, data: str | None = None, release: str = DEFAULT_RELEASE, revision: str | None = None,
    limit: int | None = None, offset: int = 0, only: list[str] | None = None,
    difficulty: str | None = None, platform: str | None = None,
    start_date: str | None = None, end_date: str | None = None, strict: bool = False,
) -> DataOptions:
    """Validate the shared options; a bad value exits with status 2 and a one-line message."""
    try:
        selection = Selection(
            limit=limit, offset=offset, only=split_ids(only),
            difficulty=str(difficulty) if difficulty else None,
            platform=str(platform) if platform else None,
            start_date=start_date, end_date=end_date,
        )
    except ValueError as exc:
        fail(str(exc))
    return DataOptions(data=data, release=release, revision=revision, selection=selection,
                       strict=strict)


_SHARED = (
    ("data", DataOpt, None), ("release", ReleaseOpt, DEFAULT_RELEASE),
    ("revision", RevisionOpt, None), ("limit", LimitOpt, None), ("offset", OffsetOpt, 0),
    ("only", OnlyOpt, None), ("difficulty", DifficultyOpt, None),
    ("platform", PlatformOpt, None), ("start_date", StartDateOpt, None),
    ("end_date", EndDateOpt, None), ("strict", StrictOpt, False),
)


def with_data_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a typer command the shared options; it receives them as `data_options`.

    Example:
        >>> @app.command()  # doctest: +SKIP
        ... @with_data_options
        ... def problems(*, data_options: DataOptions, json: bool = False) -> None: ...
    """
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
           if p.name != "data_options"]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                annotation=alias) for name, alias, default in _SHARED]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name, _, _ in _SHARED}
        return command(**kwargs, data_options=build_data_options(**values))

    params = own + shared
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def fail(message: str, *, code: int = 2) -> NoReturn:
    """Print `error: message` on stderr and exit with `code` (no traceback)."""
    Console(stderr=True, soft_wrap=True).print(f"error: {message}", markup=False, highlight=False)
    raise typer.Exit(code)


def load_or_exit(options: DataOptions) -> Loaded:
    """`options.load()`, turning a `DataError` into a one-line error and exit status 2."""
    try:
        return options.load()
    except DataError as exc:
        fail(str(exc))


def report_skipped(loaded: Loaded, *, console: Console | None = None) -> None:
    """List the skipped rows with their reasons (on stderr by default)."""
    if not loaded.skipped:
        return
    out = console or Console(stderr=True, soft_wrap=True)
    out.print(f"skipped {len(loaded.skipped)} row(s):", markup=False, highlight=False)
    for entry in loaded.skipped:
        out.print(f"  {entry.row_id}: {entry.reason}", markup=False, highlight=False)

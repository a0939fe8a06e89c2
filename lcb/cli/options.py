"""Options shared by several commands: problem selection and generation settings.

Two ways in, one set of definitions:
- `@with_data_options` adds every problem-selection option (`--data --release --revision
  --limit --offset --only --difficulty --platform --start-date --end-date --strict`) to a typer
  command and passes them, validated, as one `data_options: DataOptions` argument.
  `@with_generation_options` adds `--temperature --top-p --max-tokens --thinking/--no-thinking
  --request-timeout` (`run`, `demo`, `optimize` and the seed entry points) and passes them as
  `generation: GenerationOptions`; `generation.overrides()` holds only the flags given, so the
  `LCB_*` variables read by `ModelConfig.from_env` fill in the rest (a flag beats its variable).
- Or declare the `Annotated` aliases below (`DataOpt`, `LimitOpt`, …) yourself and call
  `build_data_options(...)`.

`load_or_exit(options)` loads the problems; an unusable source or bad filter value prints one
line naming the bad input on stderr and exits with status 2 (no traceback).
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from lcb.data.datasets import DIFFICULTIES, PLATFORMS, DataError, Loaded, Selection, load_problems
from lcb.data.hub import DEFAULT_RELEASE, HUB_DATASET, REVISION_ENV
from lcb.registry import COMMUNICATIONS, GRADERS, SANDBOXES, TOPOLOGIES

# The choices come from `lcb.registry`, not from the teams and the grader themselves: importing
# the teams loads LangChain and LangGraph (seconds), which `lcb --help` must not wait for.
Communication = StrEnum("Communication", {name: name for name in COMMUNICATIONS})
Topology = StrEnum("Topology", {name: name for name in TOPOLOGIES})
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


def choices_metavar(choices: tuple[str, ...]) -> str:
    """Help's display of fixed choices for an option that checks its value itself."""
    return f"<{'|'.join(choices)}>"


def _option(*names: str, help: str, **extra: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=_PANEL, **extra)


DataOpt = Annotated[str | None, _option(
    "--data", metavar="PATH|HF_NAME|sample",
    help=f"Problem source: a JSONL/Parquet file of LiveCodeBench rows, a directory of them, "
         f"'sample' (the bundled sample set) or a hub dataset id. Default: the hub dataset "
         f"{HUB_DATASET}.")]
ReleaseOpt = Annotated[str, _option(
    "--release", metavar="RELEASE",
    help="Hub release: release_v1..release_v6, release_latest, vN (one version) or vA_vB (a "
         "range). Ignored for local files.")]
RevisionOpt = Annotated[str | None, _option(
    "--revision", metavar="REV",
    help=f"Hub branch, tag or commit to fetch (default: ${REVISION_ENV} or main); the resolved "
         f"commit is recorded.")]
LimitOpt = Annotated[int | None, _option(
    "--limit", min=0, help="Take at most N rows after the filters and --offset (the first N "
                           "of release_v1 are the eval set); unusable rows among them are "
                           "reported, not replaced.")]
OffsetOpt = Annotated[int, _option(
    "--offset", min=0, metavar="K", help="Skip the first K rows that pass the filters.")]
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
Shared = tuple[tuple[str, Any, Any], ...]


def _with_group(command: Callable[..., Any], shared: Shared, keyword: str,
                build: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with the options `shared` (name, annotated type, default) added to its
    signature; it receives `build(**their values)` as the argument `keyword`."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
           if p.name != keyword]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                               annotation=alias) for name, alias, default in shared]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name, _, _ in shared}
        return command(**kwargs, **{keyword: build(**values)})

    params = own + added
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def with_data_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a typer command the shared options; it receives them as `data_options`.

    Example:
        >>> @app.command()  # doctest: +SKIP
        ... @with_data_options
        ... def problems(*, data_options: DataOptions, json: bool = False) -> None: ...
    """
    return _with_group(command, _SHARED, "data_options", build_data_options)


_GEN_PANEL = "Generation"


def _number(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise typer.BadParameter(f"{raw!r} is not a number") from None


def _top_p(raw: str) -> float:
    value = _number(raw)
    if not 0 < value <= 1:
        raise typer.BadParameter(f"{value} is not in the range 0<x<=1")
    return value


def _seconds(raw: str) -> float:
    value = _number(raw)
    if not 0 < value < math.inf:
        raise typer.BadParameter(f"{value} is not a positive number of seconds")
    return value


def _gen_option(*names: str, help: str, **extra: Any) -> Any:
    return typer.Option(*names, help=help, rich_help_panel=_GEN_PANEL, **extra)


# The defaults named in the help texts are `ModelConfig`'s (a test keeps them equal).
TemperatureOpt = Annotated[float | None, _gen_option(
    "--temperature", min=0.0, metavar="FLOAT",
    help="Sampling temperature (default 0.2; $LCB_TEMPERATURE).")]
TopPOpt = Annotated[float | None, _gen_option(
    "--top-p", parser=_top_p, metavar="P",
    help="Nucleus sampling: sample among the likeliest tokens whose probabilities add up to P, "
         "0 < P <= 1 (default 0.9; $LCB_TOP_P).")]
MaxTokensOpt = Annotated[int | None, _gen_option(
    "--max-tokens", min=1, metavar="N",
    help="Most tokens one model reply may have; a longer one is cut and marked truncated "
         "(default 4096; $LCB_MAX_TOKENS).")]
ThinkingOpt = Annotated[bool | None, _gen_option(
    "--thinking/--no-thinking",
    help="Ask the chat template to think first, or not (vLLM's chat_template_kwargs "
         "enable_thinking, sent with the vLLM extras). Default: the extras as they are "
         "(thinking off); $LCB_THINKING (1/0).")]
RequestTimeoutOpt = Annotated[float | None, _gen_option(
    "--request-timeout", parser=_seconds, metavar="SECONDS",
    help="Seconds an answer may go silent between two chunks before the request is given up "
         "and retried (default 120; $LCB_REQUEST_TIMEOUT).")]
QueueTimeoutOpt = Annotated[float | None, _gen_option(
    "--queue-timeout", parser=_seconds, metavar="SECONDS",
    help="Seconds a model request may wait for its answer to begin: a busy server queues "
         "requests, and a queued request has not gone silent (default 1800; "
         "$LCB_QUEUE_TIMEOUT).")]

MaxRequestsOpt = Annotated[int, typer.Option(
    "--max-requests", min=1, metavar="N", rich_help_panel="Model endpoint",
    help="Model requests in flight at most (sent and not answered yet, those queued at the "
         "server included); an optimizer job's team runs and its reflection calls to the same "
         "endpoint share them.")]


@dataclass(frozen=True)
class GenerationOptions:
    """The generation flags as given (None: not given, so `LCB_*` or the default applies)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    thinking: bool | None = None
    request_timeout: float | None = None
    queue_timeout: float | None = None

    def overrides(self) -> dict[str, Any]:
        """The `ModelConfig` fields the flags set, for `ModelConfig.from_env(**overrides)`."""
        fields = {"temperature": self.temperature, "top_p": self.top_p,
                  "max_tokens": self.max_tokens, "thinking": self.thinking,
                  "timeout_s": self.request_timeout, "queue_timeout_s": self.queue_timeout}
        return {name: value for name, value in fields.items() if value is not None}


_GENERATION: Shared = (
    ("temperature", TemperatureOpt, None), ("top_p", TopPOpt, None),
    ("max_tokens", MaxTokensOpt, None), ("thinking", ThinkingOpt, None),
    ("request_timeout", RequestTimeoutOpt, None), ("queue_timeout", QueueTimeoutOpt, None),
)


def with_generation_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a typer command the generation flags; it receives them as `generation`."""
    return _with_group(command, _GENERATION, "generation", GenerationOptions)


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

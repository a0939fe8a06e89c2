"""The grid spec's field rules and its engine sections: what `lcb.grid.spec` builds on.

Contract:
- Text rules: `plain_text` refuses a control character (a newline in `slurm.partition` would
  add an `#SBATCH` line); `matching(pattern, what)` also requires a full match of `pattern`;
  `inside_grid_folder` keeps a relative path without `..`. `PlainText`, `FolderName` and
  `Int` (a strict integer: `true` is none) are the annotated types the spec's fields use.
- `Strict`: every section refuses unknown fields and is frozen.
- `SlurmSpec` (`slurm:`), `RaySpec` (`ray:`) and `LimitsSpec` (`limits:`, the retries, time
  limit and budgets of `lcb.grid.limits`); `parse_duration` reads `90s`, `45m`, `12h`, `2d`
  or plain seconds, positive and finite.
"""

from __future__ import annotations

import math
import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

Int = Annotated[int, Field(strict=True)]


def plain_text(text: str) -> str:
    """Text with no control character (module docstring)."""
    bad = next((ch for ch in text if ord(ch) < 32 or ord(ch) == 127), None)
    if bad is not None:
        raise ValueError(f"holds the control character {bad!r}: refused, since it would reach "
                         "sbatch, a command line, a log or a path as it is")
    return text


def matching(pattern: str, what: str) -> Any:
    """A validator: plain text that `pattern` matches whole (`what` names it in the error)."""
    rule = re.compile(pattern)

    def check(text: str) -> str:
        plain_text(text)
        if not rule.fullmatch(text):
            raise ValueError(f"{text!r} is not {what}")
        return text

    return AfterValidator(check)


def inside_grid_folder(text: str) -> str:
    """A folder inside the grid folder: relative, no `..`."""
    path = PurePosixPath(plain_text(text))
    if path.is_absolute() or ".." in path.parts or "\\" in text:
        raise ValueError(f"{text!r} must stay inside the grid folder: a relative path "
                         "without '..'")
    return text


PlainText = Annotated[str, AfterValidator(plain_text)]
NAME_RULE = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
FolderName = Annotated[str, matching(NAME_RULE, "a folder name (letters, digits, '_', '.', "
                                                 "'-'; not first)")]


class Strict(BaseModel):
    """A spec section: unknown fields are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SlurmSpec(Strict):
    """The Slurm array's settings (`--executor slurm`, through submitit).

    `cluster: local` runs the array as processes on this machine without Slurm (submitit's
    local executor), a dry run of the Slurm path."""

    partition: Annotated[str, matching(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*",
                                        "a partition or a comma-separated list")] | None = None
    time_limit_min: int = Field(default=24 * 60, ge=1)
    array_parallelism: int = Field(default=64, ge=1)
    cpus_per_task: int = Field(default=4, ge=1)
    mem_gb: float | None = Field(default=None, gt=0)
    log_folder: Annotated[str, AfterValidator(inside_grid_folder)] = ".grid/slurm"
    cluster: Literal["slurm", "local"] = "slurm"


def parse_duration(value: float | str) -> float:
    """Seconds in `90s`, `45m`, `12h`, `2d` or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration (e.g. 90s, 45m, 12h, 2d)")
    text = str(value).strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(text[-1:])
    try:
        seconds = float(text[:-1] if scale else text) * (scale or 1)
    except ValueError:
        raise ValueError(f"{value!r} is not a duration (e.g. 90s, 45m, 12h, 2d)") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{value!r} is not a positive duration")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


class LimitsSpec(Strict):
    """What the grid may spend (`lcb grid run`'s flags of the same names win over these)."""

    retries: Int = Field(default=0, ge=0)
    retry_wait: Duration = 30.0
    job_time_limit: Duration | None = None
    token_budget: Int | None = Field(default=None, ge=1)
    time_budget: Duration | None = None


class RaySpec(Strict):
    """The Ray settings (`--executor ray`): an existing cluster, or a local instance."""

    address: PlainText | None = None
    num_cpus: int | None = Field(default=None, ge=1)
    cpus_per_job: float = Field(default=1, gt=0)
    max_retries: int = Field(default=3, ge=0)

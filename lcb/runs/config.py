"""`RunConfig`: everything one batch needs, and its JSON form for the manifest.

`samples` is how many times the team solves each problem (with distinct request seeds, see
`lcb.runs.outcomes.sample_seed`); 1, the default, is one record per problem as always.
`cache` is the response cache's directory and `replay` answers every call from it alone
(`lcb.agents.cache`; a call not stored fails its sample with "not in the cache").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lcb.data.datasets import Selection

if TYPE_CHECKING:
    from lcb.agents.models import ModelConfig
    from lcb.runs.rundir import RunPaths
    from lcb.teams.options import TeamOptions


@dataclass(frozen=True)
class RunConfig:
    """Everything a batch needs. `command` is the command line, kept in the manifest."""

    topology: str
    model: ModelConfig
    paths: RunPaths
    data: str | None = None
    release: str = "release_v1"
    revision: str | None = None
    strict: bool = False
    selection: Selection = field(default_factory=Selection)
    team: TeamOptions | None = None  # size, communication format, active agents (multi-agent)
    concurrency: int = 8
    resume: bool = False
    seed: int = 0
    samples: int = 1
    grader: str = "default"
    sandbox: str = "process"
    grade_workers: int | None = None
    problem_timeout_s: float = 1800.0
    retry_errors: bool = False
    max_consecutive_errors: int = 10
    progress_interval_s: float = 10.0
    command: tuple[str, ...] = ()
    cache: Path | None = None  # the response cache's directory (`lcb.agents.cache`)
    replay: bool = False  # answer from the cache alone: no endpoint check, no request

    def __post_init__(self) -> None:
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) \
                or self.samples < 1:
            raise ValueError(f"samples must be a whole number of 1 or more, got {self.samples!r}")
        if self.replay and self.cache is None:
            raise ValueError("--replay runs from the cache alone: name it with --cache DIR")

    def to_record(self) -> dict[str, Any]:
        """JSON-able config for the manifest (the model's api key is redacted by the model)."""
        return {
            "topology": self.topology, "model": self.model.to_record(), "data": self.data,
            "team": self.team.to_record() if self.team else None,
            "release": self.release, "revision": self.revision, "selection": asdict(self.selection),
            "concurrency": self.concurrency, "seed": self.seed, "samples": self.samples,
            "grader": self.grader, "sandbox": self.sandbox,
            "problem_timeout_s": self.problem_timeout_s,
            "max_consecutive_errors": self.max_consecutive_errors,
            "predictions": str(self.paths.predictions),
            "cache": None if self.cache is None else str(self.cache), "replay": self.replay,
        }

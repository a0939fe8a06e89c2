"""The files of an optimizer job directory (`--out DIR`) and the rules for reusing one.

Layout:
    DIR/job.json              `JobSpec`: method, cell, seed, budget, sampling, reflection model,
                              split sizes; plus the derived `conformant` flag and `deviations`
    DIR/history.jsonl         one `HistoryEntry` per line: each candidate bundle with its scores,
                              charged rollouts so far and uncharged (reflection) usage so far;
                              the last line of a finished optimization has kind "final"
    DIR/selection.json        `SelectionDecision`: seed vs incumbent on the full validation split;
                              sealed once (never rewritten) before any test row is loaded
    DIR/evals/<phase>_<label>.jsonl   evaluation records (lcb.runs.records format, one per item,
                              plus `phase`, `bundle`, `bundle_hash`); appended, so they resume
                              per item
                              (`read_evaluations`); `paired_outcomes` joins two of them by id
    DIR/test.json             `TestReport`: the seed and deployed bundles' test scores
    DIR/result.json           `JobResult`: baseline and deployed pass@1, Δ in points, and the
                              per-item paired outcomes on the test split (what aggregate reads)

A job whose settings differ from the standard (`STANDARD`: budget 600, temperature 0.2, top-p
0.9, the task model as reflection model, splits 150/50/50) is non-conformant; `job.json` says so
and lists why. `open_job_dir` refuses to reuse a directory for other settings and refuses to
restart an interrupted optimization silently (a fresh `--out` or `restart_optimization=True`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field, model_validator

from lcb.optimize.bundle import bundle_hash
from lcb.runs.records import RecordsError, pass_at_1, read_records
from lcb.runs.rundir import now_iso, write_json

STANDARD_SPLIT_SIZES = {"train": 150, "validation": 50, "test": 50}
STANDARD: dict[str, Any] = {"budget": 600, "temperature": 0.2, "top_p": 0.9,
                            "reflection_model": None, "split_sizes": STANDARD_SPLIT_SIZES}
M = TypeVar("M", bound=BaseModel)


class ArtifactError(ValueError):
    """A job artifact that is missing or malformed, or a job dir that cannot be used as asked."""


class InterruptedOptimization(ArtifactError):
    """The directory holds an optimization that stopped before its final entry."""


class Artifact(StrEnum):
    JOB = "job.json"
    HISTORY = "history.jsonl"
    SELECTION = "selection.json"
    EVALS = "evals"
    TEST = "test.json"
    RESULT = "result.json"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class JobSpec(_Model):
    """`job.json`. `reflection_model` None means the task model (the standard)."""

    method: str
    dataset: str = "lcb"
    topology: str
    model: str
    seed: int = Field(ge=0)
    team_size: int | None = None
    communication: str | None = None
    budget: int = Field(default=600, ge=0)
    temperature: float = 0.2
    top_p: float = 0.9
    reflection_model: str | None = None
    split_sizes: dict[str, int] = Field(default_factory=lambda: dict(STANDARD_SPLIT_SIZES))
    data: str | None = None
    release: str = "release_v1"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def deviations(self) -> list[str]:
        """Every setting that differs from `STANDARD`, as `name=value (standard: x)`."""
        own = {"budget": self.budget, "temperature": self.temperature, "top_p": self.top_p,
               "reflection_model": None if self.reflection_model in (None, self.model)
               else self.reflection_model, "split_sizes": self.split_sizes}
        return [f"{key}={own[key]!r} (standard: {value!r})"
                for key, value in STANDARD.items() if own[key] != value]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def conformant(self) -> bool:
        return not self.deviations

    @property
    def cell(self) -> tuple:
        """(dataset, topology, team size, communication, model): what seeds are paired over."""
        return (self.dataset, self.topology, self.team_size, self.communication, self.model)


class HistoryEntry(_Model):
    """One line of `history.jsonl`."""

    kind: Literal["candidate", "final"] = "candidate"
    iteration: int = Field(ge=0)
    bundle: dict[str, str]
    bundle_hash: str = ""
    parent: str | None = None
    scores: dict[str, float] = Field(default_factory=dict)
    charged: int = Field(ge=0)
    uncharged: dict[str, dict[str, int]] = Field(default_factory=dict)
    note: str = ""
    time: str = Field(default_factory=now_iso)

    @model_validator(mode="after")
    def _hash(self) -> HistoryEntry:
        actual = bundle_hash(self.bundle)
        if self.bundle_hash and self.bundle_hash != actual:
            raise ValueError(f"bundle_hash {self.bundle_hash} does not match the bundle "
                             f"({actual})")
        object.__setattr__(self, "bundle_hash", actual)
        return self


class SelectionDecision(_Model):
    """`selection.json`: the sealed deploy decision of the final validation."""

    deployed: Literal["seed", "incumbent"]
    seed_hash: str
    incumbent_hash: str
    deployed_bundle: dict[str, str]
    seed_score: float
    incumbent_score: float
    n_items: int = Field(ge=0)
    rule: str = "deploy the incumbent only if strictly better on the full validation split"
    sealed_at: str = Field(default_factory=now_iso)

    @classmethod
    def decide(cls, *, seed: Mapping[str, str], incumbent: Mapping[str, str], seed_score: float,
               incumbent_score: float, n_items: int) -> SelectionDecision:
        """Deploy `incumbent` only when it differs from `seed` and scored strictly higher."""
        seed_h, inc_h = bundle_hash(seed), bundle_hash(incumbent)
        better = inc_h != seed_h and incumbent_score > seed_score
        return cls(deployed="incumbent" if better else "seed", seed_hash=seed_h,
                   incumbent_hash=inc_h, deployed_bundle=dict(incumbent if better else seed),
                   seed_score=seed_score, incumbent_score=incumbent_score, n_items=n_items)


class ItemOutcome(_Model):
    """One test item: did the baseline (seed bundle) and the deployed bundle pass it (0/1)?"""

    id: str
    baseline: Literal[0, 1]
    deployed: Literal[0, 1]


class ScoreSummary(_Model):
    bundle_hash: str
    n: int = Field(ge=0)
    passed: int = Field(ge=0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def score(self) -> float:
        return self.passed / self.n if self.n else 0.0


class TestReport(_Model):
    """`test.json`: the test phase of both bundles (greedy, uncharged, paired seeds)."""

    __test__ = False  # not a pytest test class, despite the name

    seed: ScoreSummary
    deployed: ScoreSummary
    deployed_label: Literal["seed", "incumbent"]
    usage: dict[str, dict[str, int]] = Field(default_factory=dict)


class JobResult(_Model):
    """`result.json`. Scores are pass@1 fractions; `delta_points` = 100 × (deployed − baseline)."""

    baseline: float
    deployed: float
    delta_points: float
    deployed_label: Literal["seed", "incumbent"]
    items: list[ItemOutcome]

    @classmethod
    def from_items(cls, items: list[ItemOutcome], *, deployed_label: str) -> JobResult:
        base, dep = _rates(items)
        return cls(baseline=base, deployed=dep, delta_points=100 * (dep - base),
                   deployed_label=deployed_label, items=items)

    @model_validator(mode="after")
    def _consistent(self) -> JobResult:
        ids = [item.id for item in self.items]
        if len(set(ids)) != len(ids):
            raise ValueError("items list an id twice")
        if not self.items:
            return self
        base, dep = _rates(self.items)
        for name, got, want in (("baseline", self.baseline, base),
                                ("deployed", self.deployed, dep),
                                ("delta_points", self.delta_points, 100 * (dep - base))):
            if abs(got - want) > 1e-6:
                raise ValueError(f"{name}={got} disagrees with the items ({want})")
        return self


def _rates(items: list[ItemOutcome]) -> tuple[float, float]:
    return (pass_at_1((i.id, i.baseline) for i in items),
            pass_at_1((i.id, i.deployed) for i in items))


# --- reading and writing ------------------------------------------------------------------
def read_model(path: Path, model: type[M]) -> M:
    """Parse one JSON artifact; a missing or malformed file raises `ArtifactError` naming it."""
    try:
        return model.model_validate_json(Path(path).read_bytes())
    except FileNotFoundError:
        raise ArtifactError(f"{path} does not exist") from None
    except ValidationError as exc:
        raise ArtifactError(f"{path} is not a valid {model.__name__}: {_first(exc)}") from None


def _first(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    count = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where + ': ' if where else ''}{error['msg']}{count}"


def write_model(path: Path, value: BaseModel) -> Path:
    """Write an artifact atomically (pretty JSON, computed fields included)."""
    write_json(Path(path), value.model_dump(mode="json"))
    return Path(path)


def append_history(job_dir: Path, entry: HistoryEntry) -> None:
    """Append one entry to `history.jsonl` and flush it to disk."""
    path = Path(job_dir) / Artifact.HISTORY
    with path.open("a", encoding="utf-8") as handle:
        handle.write(entry.model_dump_json() + "\n")
        handle.flush()


def read_history(job_dir: Path) -> list[HistoryEntry]:
    """Every entry of `history.jsonl` (empty when absent); a cut-off last line is ignored."""
    path = Path(job_dir) / Artifact.HISTORY
    if not path.exists():
        return []
    # Text after the last newline is a line cut short by a kill (or ""): it is left out.
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    entries = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                entries.append(HistoryEntry.model_validate_json(line))
            except ValidationError as exc:
                raise ArtifactError(f"{path}:{number}: {_first(exc)}") from None
    return entries


def seal_selection(job_dir: Path, decision: SelectionDecision) -> Path:
    """Write `selection.json` once; a different existing decision raises `ArtifactError`."""
    path = Path(job_dir) / Artifact.SELECTION
    if path.exists():
        sealed = read_model(path, SelectionDecision)
        if sealed.model_dump(exclude={"sealed_at"}) != decision.model_dump(exclude={"sealed_at"}):
            raise ArtifactError(f"{path} is already sealed with a different decision "
                                f"({sealed.deployed}); a selection is never rewritten")
        return path
    return write_model(path, decision)


def read_selection(job_dir: Path) -> SelectionDecision:
    """The sealed decision; raises `ArtifactError` when it is missing or malformed."""
    return read_model(Path(job_dir) / Artifact.SELECTION, SelectionDecision)


def eval_path(job_dir: Path, *, phase: str, label: str) -> Path:
    """Where the evaluation records of bundle `label` in `phase` go (`evals/<phase>_<label>`)."""
    if phase not in ("validate", "test") or label not in ("seed", "incumbent", "deployed"):
        raise ValueError(f"no evaluation file for phase={phase!r}, label={label!r}")
    return Path(job_dir) / Artifact.EVALS / f"{phase}_{label}.jsonl"


def read_evaluations(job_dir: Path, *, phase: str, label: str) -> dict[str, dict[str, Any]]:
    """The evaluation records of one bundle and phase, by item id (for per-item resume).

    A line cut short by a kill is dropped from the file, so the next append starts clean.
    """
    try:
        records = read_records(eval_path(job_dir, phase=phase, label=label), repair=True)
    except RecordsError as exc:
        raise ArtifactError(str(exc)) from None
    return {str(record["id"]): record for record in records}


def paired_outcomes(baseline: Mapping[str, Mapping[str, Any]],
                    deployed: Mapping[str, Mapping[str, Any]],
                    ids: Sequence[str]) -> list[ItemOutcome]:
    """`ItemOutcome`s of `ids` from two records-by-id maps; a missing item raises."""
    missing = [i for i in ids if i not in baseline or i not in deployed]
    if missing:
        raise ArtifactError(f"{len(missing)} test item(s) lack a baseline or deployed record, "
                            f"e.g. {missing[:3]}: finish the evaluation first")
    return [ItemOutcome(id=i, baseline=int(baseline[i]["em"]), deployed=int(deployed[i]["em"]))
            for i in ids]


# --- the job directory guard ---------------------------------------------------------------
def open_job_dir(out: Path, spec: JobSpec, *, restart_optimization: bool = False) -> Path:
    """Create `out` for `spec`, or reuse it when it holds the same job.

    Raises `ArtifactError` when `out` is non-empty but holds no job.json or another job's
    settings, and `InterruptedOptimization` when its history stops before a final entry
    (unless `restart_optimization`, which moves the old history aside and starts over).
    """
    out = Path(out)
    job = out / Artifact.JOB
    if out.exists() and any(out.iterdir()):
        if not job.exists():
            raise ArtifactError(f"--out {out} is not empty and holds no {Artifact.JOB}: "
                                "choose a fresh --out")
        _same_settings(read_model(job, JobSpec), spec, out)
        _check_history(out, restart=restart_optimization)
        return out
    out.mkdir(parents=True, exist_ok=True)
    write_model(job, spec)
    return out


def _same_settings(found: JobSpec, spec: JobSpec, out: Path) -> None:
    old, new = found.model_dump(), spec.model_dump()
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if changed:
        detail = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed)
        raise ArtifactError(f"--out {out} holds a job with other settings ({detail}): choose "
                            "a fresh --out")


def _check_history(out: Path, *, restart: bool) -> None:
    history = read_history(out)
    if not history or history[-1].kind == "final":
        return
    if restart:
        path = out / Artifact.HISTORY
        path.rename(path.with_name(f"history.interrupted.{now_iso().replace(':', '')}.jsonl"))
        return
    last = history[-1]
    raise InterruptedOptimization(
        f"the optimization in {out} was interrupted (iteration {last.iteration}, "
        f"{last.charged} rollouts charged) and does not restart silently: choose a fresh --out, "
        f"or pass the explicit restart flag to discard that history and start again")

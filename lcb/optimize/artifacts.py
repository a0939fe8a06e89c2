"""The files of an optimizer job directory (`--out DIR`) and the rules for reusing one.

Layout:
    DIR/job.json              `JobSpec`: method, cell, seed, budget, task sampling (temperature,
                              top-p, max tokens, thinking), reflection model
                              and sampling, data source (release, revision), how the splits were
                              drawn (sizes, rule, digest), grader, sandbox, `opt_tests`, the
                              method's full settings, the seed prompts' hashes; `conformance`
                              (`lcb.optimize.conformance`) with the derived `conformant` and
                              `deviations`; `provenance` (`lcb.optimize.provenance`)
    DIR/seed_bundle.json      the seed bundle `{role: text}`, pinned by the job's first run
    DIR/history.jsonl         one `HistoryEntry` per line: each candidate bundle with its scores,
                              each proposal (kept or not, and why), charged rollouts so far and
                              uncharged usage per kind so far; the last line of a finished
                              optimization has kind "final"
    DIR/rollouts.jsonl, transcripts/, calls.jsonl.gz, checkpoint.json, ledger.json
                              the optimize phase's journal (`lcb.optimize.journal`,
                              `lcb.optimize.calls`, `lcb.optimize.recorder`)
    DIR/selection.json        `SelectionDecision`: seed vs incumbent on the full validation split;
                              sealed once (never rewritten) before any test row is loaded
    DIR/evals/<phase>_<label>.jsonl   evaluation records (lcb.runs.records format, one per item,
                              plus `phase`, `bundle`, `bundle_hash`); appended, so they resume
                              per item
                              (`read_evaluations`); `paired_outcomes` joins two of them by id
    DIR/test.json             `TestReport`: the seed and deployed bundles' test scores
    DIR/result.json           `JobResult`: baseline and deployed pass@1, Δ in points, and the
                              per-item paired outcomes on the test split (what aggregate reads),
                              and `cost` (charged, proposals, uncharged calls per kind)

A job is conformant when it meets every requirement of the standard protocol
(`lcb.optimize.conformance`); `job.json` lists each with the value seen. When a directory
may be reused, and the pinned seed bundle: `lcb.optimize.jobdir`. What is not a setting
(`NOT_SETTINGS`: provenance, the judged conformance) may differ between sessions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field, model_validator

from lcb.io import BadJson, json_text, loads, write_json
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.conformance import STANDARD_SPLIT_SIZES, Requirement
from lcb.registry import FEEDBACK_MODES, SELECTIONS
from lcb.runs.records import RecordsError, pass_at_1, read_records
from lcb.runs.rundir import now_iso

NOT_SETTINGS = frozenset({"provenance", "conformance", "conformant", "deviations",
                          "allow_small_budget"})
M = TypeVar("M", bound=BaseModel)


class ArtifactError(ValueError):
    """A job artifact that is missing or malformed, or a job dir that cannot be used as asked."""


class Artifact(StrEnum):
    JOB = "job.json"
    HISTORY = "history.jsonl"
    SELECTION = "selection.json"
    EVALS = "evals"
    TEST = "test.json"
    RESULT = "result.json"
    SEED = "seed_bundle.json"
    CURVE = "curve.json"  # --curve (lcb.optimize.curves)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class JobSpec(_Model):
    """`job.json`: the settings of one job, how they were judged, and where it ran."""

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
    max_tokens: int = Field(default=4096, ge=1)
    thinking: bool | None = None
    reflection_model: str | None = None
    reflection_sampling: dict[str, Any] = Field(default_factory=dict)
    split_sizes: dict[str, int] = Field(default_factory=lambda: dict(STANDARD_SPLIT_SIZES))
    data: str | None = None
    release: str = "release_v1"
    revision: str | None = None
    test_rule: str | None = None
    splits_digest: str | None = None
    grader: str = "default"
    sandbox: str = "process"
    opt_tests: int | None = Field(default=None, ge=1)
    method_settings: dict[str, Any] = Field(default_factory=dict)
    selection: Literal[SELECTIONS] = "validation"  # type: ignore[valid-type]
    selection_split: dict[str, Any] | None = None  # the train carve under selection "train"
    feedback: Literal[FEEDBACK_MODES] = "full"  # type: ignore[valid-type]
    uncharged_cost: float = Field(default=0.0, ge=0)  # budget units per uncharged call
    allow_small_budget: bool = False  # ran below its method's minimum (not a setting: a rerun's)
    seed_prompts: dict[str, str] = Field(default_factory=dict)
    conformance: list[Requirement] = Field(default_factory=list)
    provenance: dict[str, Any] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def deviations(self) -> list[str]:
        """The unmet requirements, as `name=seen (expected: x)`."""
        return [req.deviation() for req in self.conformance if not req.met]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def conformant(self) -> bool:
        """Judged and every requirement met (a spec never judged is not conformant)."""
        return bool(self.conformance) and all(req.met for req in self.conformance)

    def settings(self) -> dict[str, Any]:
        """What the same-settings check compares: everything but `NOT_SETTINGS`, as JSON."""
        return self.model_dump(mode="json", exclude=set(NOT_SETTINGS))

    @property
    def cell(self) -> tuple:
        """(dataset, topology, team size, communication, model): what seeds are paired over."""
        return (self.dataset, self.topology, self.team_size, self.communication, self.model)


class HistoryEntry(_Model):
    """One line of `history.jsonl`: a scored candidate, a proposal (kept or not), or the final
    incumbent. Proposal fields: `roles` changed, where it was `scored_on`, `accepted`, and for a
    rejected one the stage that dropped it (`rejected_by`) and the `reason`."""

    kind: Literal["candidate", "proposal", "final"] = "candidate"
    iteration: int = Field(ge=0)
    bundle: dict[str, str]
    bundle_hash: str = ""
    parent: str | None = None
    scores: dict[str, float] = Field(default_factory=dict)
    charged: int = Field(ge=0)
    # per kind: calls, tokens (None: no call reported usage; lcb.agents.usage), ...
    uncharged: dict[str, dict[str, int | None]] = Field(default_factory=dict)
    note: str = ""
    roles: list[str] = Field(default_factory=list)
    scored_on: str | None = None
    accepted: bool | None = None
    rejected_by: Literal["minibatch", "validator", "gate", "budget"] | None = None
    reason: str = ""
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
    cost: dict[str, Any] | None = None  # budget, charged, proposals, accepted, uncharged/kind

    @classmethod
    def from_items(cls, items: list[ItemOutcome], *, deployed_label: str,
                   cost: dict[str, Any] | None = None) -> JobResult:
        base, dep = _rates(items)
        return cls(baseline=base, deployed=dep, delta_points=100 * (dep - base),
                   deployed_label=deployed_label, items=items, cost=cost)

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
        handle.write(history_line(entry))
        handle.flush()


def history_line(entry: HistoryEntry) -> str:
    """One `history.jsonl` line. Not `model_dump_json`: a proposed prompt may hold a lone
    surrogate, which pydantic's JSON can neither write nor read (`lcb.io.json_text` can)."""
    return json_text(entry.model_dump(mode="json"), separators=(",", ":")) + "\n"


def read_history(job_dir: Path) -> list[HistoryEntry]:
    """Every entry of `history.jsonl` (empty when absent); a cut-off last line is ignored."""
    path = Path(job_dir) / Artifact.HISTORY
    if not path.exists():
        return []
    # Text after the last newline is a line cut short by a kill (or ""): it is left out.
    lines = path.read_bytes().split(b"\n")[:-1]
    entries = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                entries.append(HistoryEntry.model_validate(loads(line)))
            except BadJson as exc:  # a resumed job would retrace the wrong path: refuse
                raise ArtifactError(f"{path}:{number}: {exc}") from None
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
    curve = phase == "validate" and re.fullmatch(r"curve_[0-9a-f]{12}", label) is not None
    if phase not in ("validate", "test") or (
            label not in ("seed", "incumbent", "deployed") and not curve):
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

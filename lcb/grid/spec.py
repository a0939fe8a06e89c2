"""The grid spec (`grid.yaml`): axes, shared settings, models and exclusions, checked by pydantic.

Contract:
- `load_spec(path)` reads a YAML file into a `GridSpec` and raises `SpecError` whose message
  names the file and every bad field by its dotted path (`models.qwen.endpoints.0: ...`);
  unknown fields are errors too, so a typo never silently does nothing.
- `kind` is `optimize` (each job is one `lcb optimize` job) or `run` (each job is one `lcb run`
  batch); a setting that only one kind takes (`budget`, `opt_tests`, `selection`,
  `feedback`, `uncharged_cost`, `curve`, `allow_small_budget`, `method_settings` and the
  `methods` axis for optimize; `grader`, `limit` for run) is refused on the other.
- Axes: `methods`, `topologies`, `team_sizes`, `communications`, `models`, `seeds`. Values are
  checked against the known ones (`lcb.registry`'s `METHODS`, `TOPOLOGIES`, `COMMUNICATIONS`),
  an axis given is neither empty nor repeats a value, and `true` is no seed or team size.
  `team_sizes` and `communications` may be left out (the team's default size, `freeform`).
- A model is a short name (the layout's folder) mapping to its id, the base URLs serving it
  (none: the worker's `VLLM_BASE_URL`) and the name of the variable holding its API key.
- `exclude` is a list of partial matches over the axes (`method`, `topology`, `team_size`,
  `communication`, `model`, `seed`): a job matching every key of one entry is left out. A key's
  value is one value, a list (any of them) or `{not: value-or-list}` (anything else). A plain
  value must be on its axis (a typo would match nothing); a value under `not` must be on its
  axis too, or for `method` and `topology` any known one (a typo there would match
  everything; "single only with identity, gepa, mipro" holds whatever the axis lists). A
  key never matches a job without its axis: `single` has no team size
  or communication (`{method: tavo, team_size: {not: 4}}` keeps tavo's `single` jobs).
- `out` (default `runs`) and a relative `data` path are relative to the spec file's folder,
  which is also where jobs run (`GridSpec.base`).
- Hostile text is refused, naming the field: every string that reaches sbatch, submitit, a
  command line, a log or a path holds no control character (a newline would add an `#SBATCH`
  line); a model's name is a folder name (letters, digits, `_`, `.`, `-`, not first), its id
  holds no white space, `api_key_env` is a variable name, `slurm.partition` a partition list
  and `slurm.log_folder` stays inside the grid folder (relative, no `..`).
  The rules and the engine sections (`slurm`, `ray`, `limits`) live in
  `lcb.grid.spec_fields`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from lcb.grid.spec_fields import (
    FolderName,
    Int,
    LimitsSpec,
    PlainText,
    RaySpec,
    SlurmSpec,
    Strict,
    matching,
    plain_text,
)
from lcb.registry import (
    COMMUNICATIONS,
    DEFAULT_COMMUNICATION,
    FEEDBACK_MODES,
    GRADERS,
    METHODS,
    SANDBOXES,
    SELECTIONS,
    SINGLE,
    TOPOLOGIES,
)

AXES = ("method", "topology", "team_size", "communication", "model", "seed")
KNOWN = {"method": METHODS, "topology": TOPOLOGIES}
TEAM_AXES = ("team_size", "communication")  # the axes a `single` job does not have
Scalar = str | int


class SpecError(ValueError):
    """A grid spec that cannot be used; the message names the file and the fields."""



class ModelSpec(Strict):
    """One task model: its id, the base URLs serving it, the variable holding its key."""

    id: Annotated[str, matching(r"\S+", "a model id (no white space)")]
    endpoints: tuple[PlainText, ...] = ()
    api_key_env: Annotated[str, matching(r"[A-Za-z_][A-Za-z0-9_]*",
                                          "an environment variable's name")] | None = None

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"an endpoint must start with http:// or https://, got {url!r}")
        return tuple(dict.fromkeys(url.rstrip("/") for url in urls))


class Sampling(Strict):
    """Generation flags given to every job (None: the job's default)."""

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    thinking: bool | None = None
    request_timeout: float | None = Field(default=None, gt=0)
    queue_timeout: float | None = Field(default=None, gt=0)


class Settings(Strict):
    """Settings shared by every job of the grid (None: the command's default)."""

    budget: int | None = Field(default=None, ge=0)
    data: PlainText | None = None
    release: FolderName | None = None
    opt_tests: int | None = Field(default=None, ge=1)
    grader: Literal[GRADERS] | None = None  # type: ignore[valid-type]
    sandbox: Literal[SANDBOXES] | None = None  # type: ignore[valid-type]
    concurrency: int | None = Field(default=None, ge=1)
    max_requests: int | None = Field(default=None, ge=1)
    limit: int | None = Field(default=None, ge=1)
    selection: Literal[SELECTIONS] | None = None  # type: ignore[valid-type]
    feedback: Literal[FEEDBACK_MODES] | None = None  # type: ignore[valid-type]
    uncharged_cost: float | None = Field(default=None, ge=0)
    curve: bool | None = None
    allow_small_budget: bool | None = None
    sampling: Sampling = Sampling()


class Negation(Strict):
    """`{not: ...}` in an exclusion: every value but these."""

    not_: tuple[Scalar, ...] = Field(alias="not")

    @field_validator("not_", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        return value if isinstance(value, list | tuple) else [value]


Match = Scalar | list[Scalar] | Negation


class GridSpec(Strict):
    """A whole grid (module docstring)."""

    kind: Literal["optimize", "run"] = "optimize"
    out: PlainText = "runs"
    methods: tuple[str, ...] = ()
    topologies: tuple[str, ...] = Field(min_length=1)
    team_sizes: tuple[Int | None, ...] = Field(default=(None,), min_length=1)
    communications: tuple[str, ...] = Field(default=(DEFAULT_COMMUNICATION,), min_length=1)
    models: dict[FolderName, ModelSpec] = Field(min_length=1)
    seeds: tuple[Int, ...] = Field(default=(0, 1, 2), min_length=1)
    settings: Settings = Settings()
    method_settings: dict[str, dict[str, Any]] = {}
    exclude: tuple[dict[str, Match], ...] = ()
    slurm: SlurmSpec = SlurmSpec()
    ray: RaySpec = RaySpec()
    limits: LimitsSpec = LimitsSpec()
    base: Path = Field(default=Path("."), exclude=True)

    @field_validator("methods")
    @classmethod
    def _methods(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _known("method", values, METHODS)

    @field_validator("topologies")
    @classmethod
    def _topologies(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _known("topology", values, TOPOLOGIES)

    @field_validator("communications")
    @classmethod
    def _communications(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return _known("communication", values, COMMUNICATIONS)

    @field_validator("team_sizes")
    @classmethod
    def _sizes(cls, values: tuple[int | None, ...]) -> tuple[int | None, ...]:
        if any(v is not None and v < 1 for v in values):
            raise ValueError("a team size is at least 1")
        return _unique(values)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, values: tuple[int, ...]) -> tuple[int, ...]:
        if any(v < 0 for v in values):
            raise ValueError("a seed is not negative")
        return _unique(values)

    @field_validator("method_settings")
    @classmethod
    def _setting_text(cls, values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        def walk(value: Any) -> None:
            if isinstance(value, dict):
                for key, inner in value.items():
                    plain_text(str(key))
                    walk(inner)
            elif isinstance(value, list | tuple):
                for inner in value:
                    walk(inner)
            elif isinstance(value, str):
                plain_text(value)

        walk(values)
        return values

    @model_validator(mode="after")
    def _coherent(self) -> GridSpec:
        if self.kind == "optimize" and not self.methods:
            raise ValueError("methods: an optimize grid needs at least one method")
        wrong = _kind_only(self)
        if wrong:
            raise ValueError(wrong)
        for name in self.method_settings:
            if name not in self.methods:
                raise ValueError(f"method_settings.{name}: not one of the grid's methods "
                                 f"({', '.join(self.methods)})")
        for i, rule in enumerate(self.exclude):
            _check_rule(self, i, rule)
        return self

    def axis_values(self) -> dict[str, tuple[Any, ...]]:
        """Every axis and its values, in the order jobs are planned."""
        return {"method": self.methods or ("run",), "topology": self.topologies,
                "team_size": self.team_sizes, "communication": self.communications,
                "model": tuple(self.models), "seed": self.seeds}

    @property
    def root(self) -> Path:
        """The grid folder."""
        return (self.base / self.out).resolve()


def _known(axis: str, values: tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if value not in known:
            raise ValueError(f"unknown {axis} {value!r} (known: {', '.join(known)})")
    return _unique(values)


def _unique(values: tuple[Any, ...]) -> tuple[Any, ...]:
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"repeated value(s): {', '.join(repeated)}")
    return values


def _kind_only(spec: GridSpec) -> str | None:
    """The first setting given that the grid's kind does not take (None: all fine)."""
    s = spec.settings
    only = {"optimize": {"methods": spec.methods, "method_settings": spec.method_settings,
                         "settings.budget": s.budget, "settings.opt_tests": s.opt_tests,
                         "settings.selection": s.selection, "settings.feedback": s.feedback,
                         "settings.uncharged_cost": s.uncharged_cost, "settings.curve": s.curve,
                         "settings.allow_small_budget": s.allow_small_budget},
            "run": {"settings.grader": s.grader, "settings.limit": s.limit}}
    for kind, fields in only.items():
        if kind == spec.kind:
            continue
        for name, value in fields.items():
            if value not in (None, (), {}):
                article = "an" if kind == "optimize" else "a"
                return f"{name}: only {article} {kind} grid takes it (this grid's kind is " \
                       f"{spec.kind})"
    return None


def _check_rule(spec: GridSpec, index: int, rule: dict[str, Match]) -> None:
    axes = spec.axis_values()
    if not rule:
        raise ValueError(f"exclude.{index}: an empty rule would exclude every job")
    for key, match in rule.items():
        if key not in AXES:
            raise ValueError(f"exclude.{index}.{key}: not an axis (axes: {', '.join(AXES)})")
        negated = isinstance(match, Negation)
        values = match.not_ if negated else match
        # a `not` list may name any known method or topology ("single only with identity,
        # gepa, mipro" holds whatever the axis lists); everything else must be on the axis
        known = KNOWN.get(key, axes[key]) if negated else axes[key]
        for value in values if isinstance(values, list | tuple) else [values]:
            if value not in known:
                where = f"a known {key}" if known is not axes[key] else f"on the {key} axis"
                raise ValueError(f"exclude.{index}.{key}: {value!r} is not {where} "
                                 f"({', '.join(map(str, known))})")


def matches(rule: dict[str, Match], axes: dict[str, Any]) -> bool:
    """True when a job with these axis values matches every key of `rule` (a key never
    matches an axis the job does not have: `single`'s team size and communication)."""
    for key, match in rule.items():
        value = axes[key]
        if key in TEAM_AXES and axes["topology"] == SINGLE:
            return False
        if isinstance(match, Negation):
            if value in match.not_:
                return False
        elif value not in (match if isinstance(match, list) else [match]):
            return False
    return True


def _location(error: dict[str, Any]) -> str:
    """`a.b.0: ` for a field's error; nothing for the spec's own (its message names fields)."""
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: " if where else ""


def parse_spec(data: Any, *, base: Path, source: str = "grid spec") -> GridSpec:
    """A `GridSpec` from parsed YAML/JSON `data`; `SpecError` names `source` and the fields."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping of settings, got {type(data).__name__}")
    if "base" in data:
        raise SpecError(f"{source}: base is not a setting (jobs run in the spec's folder)")
    try:
        return GridSpec.model_validate({**data, "base": base})
    except ValidationError as exc:
        lines = [f"  {_location(e)}{e['msg'].removeprefix('Value error, ')}"
                 for e in exc.errors()]
        raise SpecError(f"{source} is not a valid grid spec:\n" + "\n".join(lines)) from None


def load_spec(path: Path) -> GridSpec:
    """Read and check the grid spec at `path` (module docstring)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"cannot read the grid spec {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path} is not valid YAML: {exc}") from None
    return parse_spec(data, base=path.resolve().parent, source=str(path))

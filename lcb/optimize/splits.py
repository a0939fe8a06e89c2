"""Train / validation / test splits, and the guards that keep test rows away from optimizers.

The split rule (`make_splits`), deterministic for a given dataset:
1. Usable rows: the rows `lcb.data.datasets.load_problems` decodes (rows it skips, e.g. without
   private tests, are never in any split), in dataset order. The eval-ID rows' private tests
   are not decoded for this (`load_split_source`: `withhold` in `lcb.data.datasets`): such a
   row is usable when it passes every other check and its private tests are non-blank text.
2. Test: the eval IDs (`lcb.data.manifest.eval_ids()`, release_v1's first 50 rows) that are usable
   rows of the dataset, in manifest order. A dataset holding none of them (any other local
   file) uses the same rule as the eval IDs themselves: its first `n_test` usable rows.
3. Pool: the other usable rows, in dataset order. `random.Random(SPLIT_SEED).shuffle(pool)`
   (CPython's Mersenne Twister; `shuffle` is stable across Python 3 versions for an int seed).
   Train = the first `n_train` rows of the shuffled pool, validation = the next `n_val`; both
   are stored in that drawn order. Rows beyond them are unused.
Sizes: the standard 150 / 50 / 50. When the pool has fewer than 200 rows they shrink in the
standard 3 : 1 ratio: `n_val = max(1, round(pool / 4))`, `n_train = pool - n_val` (at least
two pool rows are needed). When the eval IDs are absent, `n_test = min(50, max(1, round(N / 5)))`
for N usable rows (a fifth, as 50 of 250). Halves round up. The split file records the rule,
the seed and the sizes, and `source`: the load's source (for the hub: `repo`, `release` and
the resolved commit `revision`) plus `rows` (rows read) and `usable` (rows split).

Guards:
- `OptimizerData` holds train and selection-set problems only (validation rows sealed); asking
  it for any other id, or building it with a test problem, raises `SplitLeak`.
  `load_optimizer_rows` loads just those ids (`Selection(only=...)`), so test rows are never
  even decoded in the optimize phase.
- `load_test_problems(splits, job_dir=...)` loads the test split only after the job's
  `selection.json` exists and is a sealed, valid selection (`lcb.optimize.artifacts`);
  otherwise it raises `SelectionNotSealed`. A test row the data no longer yields as usable
  raises `SplitError` (the test split is never silently smaller than the file says).
- `check_source(splits, source)`: splits computed from the hub are only used on the same hub
  data: when both the split's recorded source and `source` are hub sources, their `repo`,
  `release` and `revision` must match, else `SourceMismatch` names both and how to fix it.
  Both loaders above apply it to the source they just loaded, so a job learns the revision it
  runs on at no extra cost; splits without a recorded hub source are not checked.
  `check_hub_revision(splits, release=)` applies it before a new hub job does any work.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcb.data.datasets import Loaded, Selection, load_problems
from lcb.data.hub import REVISION_ENV, fetch_release
from lcb.data.manifest import MANIFEST_PATH, eval_ids
from lcb.data.problems import Problem
from lcb.io import write_json
from lcb.optimize.artifacts import STANDARD_SPLIT_SIZES, ArtifactError, read_selection
from lcb.optimize.sealing import carve_selection, seal, selection_size
from lcb.registry import SELECTIONS

SPLIT_SEED = 20230501  # release_v1's first contest month; fixed forever for reproducibility
STANDARD_SIZES = STANDARD_SPLIT_SIZES
DEFAULT_SPLITS_PATH = MANIFEST_PATH.with_name("lcb_splits.json")
RULE = ("test = eval IDs present (else the first n_test usable rows); the other usable rows in "
        "dataset order shuffled by random.Random(seed); train = first n_train, validation = next "
        "n_val; sizes 150/50/50, scaled 3:1 (and test = a fifth) for small datasets")
RNG = "random.Random(seed).shuffle (CPython Mersenne Twister)"
SPLIT_NAMES = ("train", "validation", "test")


class SplitError(ValueError):
    """A dataset too small to split, or a malformed split file (the message names it)."""


class SourceMismatch(SplitError):
    """Splits computed from other hub data (repo, release or revision) than the job loads."""


class SplitLeak(PermissionError):
    """A test-split row was requested where only train/validation rows are allowed."""


class SelectionNotSealed(PermissionError):
    """The test split was requested before the job's selection was sealed."""


@dataclass(frozen=True)
class Splits:
    """Three disjoint lists of row ids plus how they were drawn."""

    train: tuple[str, ...]
    validation: tuple[str, ...]
    test: tuple[str, ...]
    seed: int = SPLIT_SEED
    test_rule: str = "eval_ids"
    source: dict[str, Any] = field(default_factory=dict, compare=False)
    excluded: tuple[dict[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for name in SPLIT_NAMES:
            ids = tuple(getattr(self, name))
            object.__setattr__(self, name, ids)
            if len(set(ids)) != len(ids):
                raise SplitError(f"split {name!r} lists an id twice")
        for a, b in (("train", "validation"), ("train", "test"), ("validation", "test")):
            common = sorted(set(getattr(self, a)) & set(getattr(self, b)))
            if common:
                raise SplitError(f"splits {a!r} and {b!r} share id(s) {common[:5]}")

    @property
    def sizes(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in SPLIT_NAMES}

    @property
    def standard(self) -> bool:
        """True when the sizes are the protocol's 150 / 50 / 50."""
        return self.sizes == STANDARD_SIZES

    def to_json(self) -> dict[str, Any]:
        return {"version": 1, "rule": RULE, "seed": self.seed, "rng": RNG,
                "test_rule": self.test_rule, "sizes": self.sizes, "standard": self.standard,
                "source": self.source, "train": list(self.train),
                "validation": list(self.validation), "test": list(self.test),
                "excluded": list(self.excluded)}

    @classmethod
    def from_json(cls, data: dict[str, Any], *, where: str = "splits") -> Splits:
        """Parse `to_json()` output; raises `SplitError` naming `where` and the bad field."""
        for name in SPLIT_NAMES:
            ids = data.get(name)
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise SplitError(f"{where}: field {name!r} must be a list of row ids")
        try:
            return cls(train=tuple(data["train"]), validation=tuple(data["validation"]),
                       test=tuple(data["test"]), seed=int(data.get("seed", SPLIT_SEED)),
                       test_rule=str(data.get("test_rule", "eval_ids")),
                       source=dict(data.get("source") or {}),
                       excluded=tuple(data.get("excluded") or ()))
        except SplitError as exc:
            raise SplitError(f"{where}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise SplitError(f"{where}: not a split file ({exc})") from None

    def save(self, path: Path) -> Path:
        """Write the split file (atomically) and return its path."""
        write_json(Path(path), self.to_json())
        return Path(path)

    @classmethod
    def load(cls, path: Path = DEFAULT_SPLITS_PATH) -> Splits:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SplitError(f"split file not found: {path} (write it with `lcb splits`)") from None
        except json.JSONDecodeError as exc:
            raise SplitError(f"split file {path} is not JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise SplitError(f"split file {path} must hold a JSON object")
        return cls.from_json(data, where=str(path))


def split_sizes(n_pool: int) -> tuple[int, int]:
    """(n_train, n_val) for a pool of `n_pool` non-test rows (see the module docstring)."""
    if n_pool >= STANDARD_SIZES["train"] + STANDARD_SIZES["validation"]:
        return STANDARD_SIZES["train"], STANDARD_SIZES["validation"]
    if n_pool < 2:
        raise SplitError(f"only {n_pool} usable row(s) outside the test split: need at least 2 "
                         "(one train, one validation)")
    n_val = max(1, _round_half_up(n_pool, 4))
    return n_pool - n_val, n_val


def make_splits(ids: Sequence[str], *, test_ids: Sequence[str] | None = None,
                seed: int = SPLIT_SEED, source: dict | None = None,
                excluded: Iterable[dict[str, str]] = ()) -> Splits:
    """Split usable row `ids` (dataset order) by the documented rule.

    `test_ids` defaults to the eval IDs of `lcb.data.manifest`.

    Example:
        >>> s = make_splits([f"r{i}" for i in range(12)], test_ids=[])
        >>> s.sizes
        {'train': 7, 'validation': 3, 'test': 2}
    """
    ids = list(dict.fromkeys(ids))
    wanted = eval_ids() if test_ids is None else list(test_ids)
    present = set(ids)
    test = [i for i in wanted if i in present]
    rule = "eval_ids"
    if not test:
        n_test = min(STANDARD_SIZES["test"], max(1, _round_half_up(len(ids), 5)))
        test, rule = ids[:n_test], "first_rows"
    chosen = set(test)
    pool = [i for i in ids if i not in chosen]
    n_train, n_val = split_sizes(len(pool))
    random.Random(seed).shuffle(pool)
    return Splits(train=tuple(pool[:n_train]), validation=tuple(pool[n_train:n_train + n_val]),
                  test=tuple(test), seed=seed, test_rule=rule, source=dict(source or {}),
                  excluded=tuple(excluded))


def load_split_source(data: str | None = None, *, release: str = "release_v1",
                      revision: str | None = None, strict: bool = False) -> Loaded:
    """Every row of `data`, the eval-ID rows without decoding their private tests."""
    return load_problems(data, release=release, revision=revision, strict=strict,
                         withhold=eval_ids())


def splits_from_loaded(loaded: Loaded, *, test_ids: Sequence[str] | None = None) -> Splits:
    """The splits of a whole loaded dataset; skipped rows are listed as excluded.

    Withheld rows (`loaded.withheld`) are usable rows that must land in the test split.
    """
    excluded = [{"row_id": s.row_id, "reason": s.reason} for s in loaded.skipped]
    ids = [p.id for p in loaded.problems] + loaded.withheld
    source = {**loaded.source, "rows": len(ids) + len(excluded), "usable": len(ids)}
    splits = make_splits(ids, test_ids=test_ids, source=source, excluded=excluded)
    stray = [i for i in loaded.withheld if i not in splits.test]
    if stray:
        raise SplitError(f"row(s) {stray[:5]} were loaded without their private tests but are "
                         "not test rows: load the data with withhold= the test IDs")
    return splits


def check_source(splits: Splits, source: Mapping[str, Any]) -> None:
    """Refuse `source` (a load's) unless it is the hub data the splits were computed from."""
    recorded = splits.source
    if recorded.get("kind") != "hub" or source.get("kind") != "hub":
        return
    for name in ("repo", "release", "revision"):
        if name in recorded and recorded[name] != source.get(name):
            raise SourceMismatch(_mismatch(name, recorded, source))


def check_hub_revision(splits: Splits, *, release: str = "release_v1") -> None:
    """`check_source` against what the default hub source resolves to now, before a job's
    first load (the fetch finds, or downloads once, the files its optimize phase reads)."""
    if splits.source.get("kind") == "hub":
        check_source(splits, fetch_release(release).source)


def _mismatch(name: str, recorded: Mapping[str, Any], source: Mapping[str, Any]) -> str:
    was, now = recorded[name], source.get(name)
    data = f"{recorded.get('repo')} {recorded.get('release')}"
    flag = {"revision": f"${REVISION_ENV}={was}", "release": f"--release {was}",
            "repo": f"--data {was}"}[name]
    return (f"the splits were computed from hub data {data} at {name} {was}, but this job "
            f"loads {name} {now}: recompute them with `lcb splits` (or pass --splits FILE "
            f"made from {name} {now}; a job already started keeps its splits, so use a fresh "
            f"--out), or run on the data they were made from with {flag}")


class OptimizerData:
    """The only view of the data a method gets: its train problems, and its selection set's
    problems with their hidden tests sealed (`lcb.optimize.sealing`). The selection set is the
    validation split, or under `selection="train"` a set carved from train (the validation
    split is then not in the view at all). `sizes` gives the two sets' sizes."""

    def __init__(self, splits: Splits, problems: Iterable[Problem], *,
                 selection: str = "validation") -> None:
        self.splits, self.selection = splits, selection
        train, chosen = selection_rows(splits, selection)
        allowed = set(train) | set(chosen)
        by_id: dict[str, Problem] = {}
        for problem in problems:
            if problem.id in splits.test:
                raise SplitLeak(f"test row {problem.id!r} was handed to the optimizer data")
            if problem.id in allowed:
                by_id[problem.id] = problem
        missing = sorted(allowed - set(by_id))
        if missing:
            raise SplitError(f"{len(missing)} train/validation row(s) not in the data, e.g. "
                             f"{missing[:5]}: was the split file made from another dataset?")
        self.train = tuple(by_id[i] for i in train)
        self.validation = tuple(seal(by_id[i]) for i in chosen)
        self._by_id = {problem.id: problem for problem in (*self.train, *self.validation)}

    @property
    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "selection": len(self.validation)}

    def problem(self, row_id: str) -> Problem:
        """A train or validation problem; a test id raises `SplitLeak`."""
        if row_id in self.splits.test:
            raise SplitLeak(f"row {row_id!r} is in the test split: optimizers never see it")
        try:
            return self._by_id[row_id]
        except KeyError:
            raise KeyError(f"row {row_id!r} is in neither the train nor validation split") from None

    def __contains__(self, row_id: object) -> bool:
        return row_id in self._by_id


def _round_half_up(numerator: int, denominator: int) -> int:
    return (2 * numerator + denominator) // (2 * denominator)


def _load_ids(splits: Splits, ids: Sequence[str], data: str | None, release: str) -> Loaded:
    loaded = load_problems(data, release=release, selection=Selection(only=tuple(ids)))
    check_source(splits, loaded.source)
    return loaded


def selection_rows(splits: Splits, selection: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(train ids, selection-set ids) of a method under `selection` (`SELECTIONS`)."""
    if selection == "validation":
        return splits.train, splits.validation
    if selection == "train":
        size = selection_size(len(splits.train), len(splits.validation))
        if size < 1:
            raise SplitError(f"--selection train carves the selection set from train, which "
                             f"has {len(splits.train)} row(s) (and validation "
                             f"{len(splits.validation)}): it needs at least 2 train rows and "
                             "one validation row to size it; use more data or "
                             "--selection validation")
        return carve_selection(splits.train, size)
    raise ValueError(f"unknown selection {selection!r}; known: {', '.join(SELECTIONS)}")


def load_optimizer_rows(splits: Splits, *, data: str | None = None, release: str = "release_v1",
                        selection: str = "validation") -> list[Problem]:
    """The labelled rows of the optimize phase: train and validation, or train alone under
    `selection="train"` (test rows are not read). Only the protocol holds these; a method
    gets `OptimizerData` over them."""
    train, chosen = selection_rows(splits, selection)
    return _load_ids(splits, tuple(dict.fromkeys(train + chosen)), data, release).problems


def load_optimizer_data(splits: Splits, *, data: str | None = None,
                        release: str = "release_v1",
                        selection: str = "validation") -> OptimizerData:
    """A method's view (`OptimizerData`) of freshly loaded rows (test rows are not read)."""
    rows = load_optimizer_rows(splits, data=data, release=release, selection=selection)
    return OptimizerData(splits, rows, selection=selection)


def load_validation_problems(splits: Splits, *, data: str | None = None,
                             release: str = "release_v1") -> list[Problem]:
    """The labelled validation rows, for the protocol's gate (never a method's)."""
    by_id = {p.id: p for p in _load_ids(splits, splits.validation, data, release).problems}
    return [by_id[i] for i in splits.validation if i in by_id]


def load_test_problems(splits: Splits, *, job_dir: Path, data: str | None = None,
                       release: str = "release_v1") -> list[Problem]:
    """The test problems, only once `job_dir/selection.json` is sealed."""
    try:
        read_selection(Path(job_dir))
    except ArtifactError as exc:
        raise SelectionNotSealed(f"the test split stays closed until the selection is sealed: "
                                 f"{exc}") from None
    loaded = _load_ids(splits, splits.test, data, release)
    found = {problem.id for problem in loaded.problems}
    missing = [i for i in splits.test if i not in found]
    if missing:
        why = {entry.row_id: entry.reason for entry in loaded.skipped}
        shown = "; ".join(f"{i}: {why.get(i, 'not found')}" for i in missing[:3])
        raise SplitError(f"{len(missing)} test row(s) of the split file are not usable in the "
                         f"data ({shown}): was the split file made from another dataset?")
    return loaded.problems

"""The settings fingerprint of an optimizer job, and what differs between two jobs' settings.

Contract:
- `settings_of(raw, defaults=...)`: the settings of a job are its `job.json` top-level keys
  (any key: this module knows none by name), keys it lacks taken from `defaults` (`JobSpec`'s
  dump, so a job written before a field existed reads as its default), less `NOT_SETTINGS`:
  the optimizer seed, the provenance (commit, library versions, time...) and the conformance
  fields derived from the rest.
- `fingerprint_of(settings)`: the first 8 hex digits of the SHA-256 of the settings as JSON
  with sorted keys. Equal settings give equal fingerprints; 1 and 1.0 differ.
- `differing(views)`: the leaf paths (nested non-empty objects walked key by key, a path
  rendered dotted: `method_settings.minibatch`) whose values are not the same in every view;
  a path one view lacks differs. Non-empty exactly when the views' fingerprints differ.
- `describe(views, paths)`: `"budget: 30 in runs/a/0, 12 in runs/a/1; ..."` for labelled
  views, values shown as JSON (clipped), a missing one as "(absent)".
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

NOT_SETTINGS = frozenset({"seed", "provenance", "conformance", "conformant", "deviations"})
KeyPath = tuple[str, ...]


class _Absent:
    """What `value_at` gives for a path a view lacks (shown as "(absent)")."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT = _Absent()


def settings_of(raw: Mapping[str, Any], *, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprinted settings of one job.json (see the module contract)."""
    merged = {**defaults, **raw}
    return {key: value for key, value in merged.items() if key not in NOT_SETTINGS}


def fingerprint_of(settings: Mapping[str, Any]) -> str:
    """Short stable id of `settings`.

    Example:
        >>> fingerprint_of({"budget": 30}) == fingerprint_of({"budget": 30})
        True
    """
    return hashlib.sha256(_json(settings).encode("utf-8")).hexdigest()[:8]


def leaves(settings: Mapping[str, Any], prefix: KeyPath = ()) -> dict[KeyPath, Any]:
    """Every leaf value by its key path; an empty object is a leaf."""
    found: dict[KeyPath, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping) and value:
            found.update(leaves(value, (*prefix, str(key))))
        else:
            found[(*prefix, str(key))] = value
    return found


def dotted(path: KeyPath) -> str:
    return ".".join(path)


def differing(views: Sequence[Mapping[str, Any]]) -> list[KeyPath]:
    """The leaf paths whose values (as JSON) are not the same in all `views`, sorted."""
    flat = [leaves(view) for view in views]
    paths = sorted({path for view in flat for path in view})
    return [path for path in paths if len({show(view.get(path, ABSENT), width=None)
                                          for view in flat}) > 1]


def value_at(view: Mapping[str, Any], path: KeyPath) -> Any:
    """The value at `path` in `view`, or `ABSENT`."""
    return leaves(view).get(path, ABSENT)


def describe(views: Sequence[tuple[str, Mapping[str, Any]]], paths: Sequence[KeyPath]) -> str:
    """Each path with each of its values and the labels of the views holding it."""
    fields = []
    for path in paths:
        holders: dict[str, list[str]] = defaultdict(list)
        for label, view in views:
            holders[show(value_at(view, path))].append(label)
        fields.append(f"{dotted(path)}: " + ", ".join(
            f"{value} in {' and '.join(labels)}" for value, labels in holders.items()))
    return "; ".join(fields)


def show(value: Any, *, width: int | None = 60) -> str:
    """`value` as JSON, clipped to `width` characters; `ABSENT` as itself."""
    if value is ABSENT:
        return repr(ABSENT)
    text = _json(value)
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


PROVENANCE_AS_OF = ("time", "resumes")  # when a session ran, not what ran it


def provenance_differs(provenances: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """What differs between the seeds' provenance (another lcb commit, library version,
    grader version, endpoint): `{dotted path: sorted distinct values}`. Not a reason to refuse
    pooling (a rerun after a fix is normal), but a reader must see it."""
    views = [{k: v for k, v in p.items() if k not in PROVENANCE_AS_OF} for p in provenances]
    return {dotted(path): sorted({show(value_at(v, path), width=None) for v in views})
            for path in differing(views)}

"""The frozen eval IDs: the first 50 rows of release_v1, in dataset order.

Contract:
- `eval_ids()` returns the 50 IDs of `benchmarks/lcb/lcb_eval_ids.json` (a JSON list of
  strings), in order. A missing or malformed manifest raises `ManifestError`.
- `check_eval_order(seen)` compares the question IDs a hub load of release_v1 saw first with
  the manifest's prefix of the same length and emits an `EvalIdMismatch` warning naming the
  first mismatch; it returns that message, or None when the order matches. A changed dataset
  revision would silently change what `--limit 50` scores, hence the loud warning.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

MANIFEST_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "lcb" / "lcb_eval_ids.json"
EVAL_SIZE = 50


class ManifestError(ValueError):
    """The eval-ID manifest is missing or malformed."""


class EvalIdMismatch(UserWarning):
    """The loaded release_v1 rows do not start with the frozen eval IDs."""


def eval_ids(path: Path | None = None) -> list[str]:
    """The frozen eval IDs, in order (release_v1's first 50 question IDs).

    Example:
        >>> eval_ids()[:2]
        ['1873_A', '1873_B']
    """
    manifest = path or MANIFEST_PATH
    try:
        ids = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"eval-ID manifest not found: {manifest}") from None
    except json.JSONDecodeError as exc:
        raise ManifestError(f"eval-ID manifest {manifest} is not JSON: {exc.msg}") from None
    if not isinstance(ids, list) or not all(isinstance(item, str) for item in ids):
        raise ManifestError(f"eval-ID manifest {manifest} must be a JSON list of strings")
    return ids


def check_eval_order(seen: Sequence[str], *, path: Path | None = None) -> str | None:
    """Warn (and return the message) when `seen` is not a prefix of the eval-ID list."""
    try:
        expected = eval_ids(path)
    except ManifestError as exc:
        message = f"cannot check the eval IDs: {exc}"
    else:
        message = _first_mismatch(list(seen[:EVAL_SIZE]), expected[:EVAL_SIZE])
    if message is None:
        return None
    warnings.warn(message, EvalIdMismatch, stacklevel=2)
    return message


def _first_mismatch(seen: list[str], expected: list[str]) -> str | None:
    for position, (got, want) in enumerate(zip(seen, expected, strict=False)):
        if got != want:
            return (
                f"EVAL ID MISMATCH: row {position} of release_v1 is {got!r}, but the eval "
                f"manifest says {want!r}; the hub data differs from the frozen eval set, so "
                f"--limit {EVAL_SIZE} will not score the standard problems"
            )
    return None

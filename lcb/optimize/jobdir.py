"""The job directory guard: when an `--out` may be reused, and the seed bundle it pins.

Contract:
- `open_job_dir(out, spec)` creates `out` for `spec`, or reuses it when it holds the same job:
  the settings (`JobSpec.settings()`: provenance and the judged conformance aside) must be
  equal, else `ArtifactError` names each changed field. A later session's provenance is added
  to job.json's `provenance["resumes"]`; the job stays as judged when it was made. An
  interrupted optimization (a history without its final entry) is kept, so the optimize phase
  resumes it, unless `restart_optimization` moves that history aside.
- `pin_seed_bundle` writes `DIR/seed_bundle.json` once (the first run's seed bundle);
  `read_pinned_seed` reads it back (None before the first run; a malformed file raises).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from lcb.io import write_json
from lcb.optimize.artifacts import (
    Artifact,
    ArtifactError,
    JobSpec,
    read_history,
    read_model,
    write_model,
)
from lcb.runs.rundir import now_iso


def open_job_dir(out: Path, spec: JobSpec, *, restart_optimization: bool = False) -> Path:
    """Create `out` for `spec`, or reuse it when it holds the same job.

    Raises `ArtifactError` when `out` is non-empty but holds no job.json or another job's
    settings. An interrupted optimization (a history without its final entry) is kept, so the
    optimize phase resumes it, unless `restart_optimization` moves that history aside.
    """
    out = Path(out)
    job = out / Artifact.JOB
    if out.exists() and any(out.iterdir()):
        if not job.exists():
            raise ArtifactError(f"--out {out} is not empty and holds no {Artifact.JOB}: "
                                "choose a fresh --out")
        found = read_model(job, JobSpec)
        _same_settings(found, spec, out)
        _check_history(out, restart=restart_optimization)
        _add_session(job, found, spec)
        return out
    out.mkdir(parents=True, exist_ok=True)
    write_model(job, spec)
    return out


def _same_settings(found: JobSpec, spec: JobSpec, out: Path) -> None:
    old, new = found.settings(), spec.settings()
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if changed:
        detail = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed)
        raise ArtifactError(f"--out {out} holds a job with other settings ({detail}): choose "
                            "a fresh --out")


def _add_session(path: Path, found: JobSpec, spec: JobSpec) -> None:
    """Keep the job as judged when made; add this session's provenance to its `resumes`."""
    if not spec.provenance:
        return
    first = dict(found.provenance)
    first["resumes"] = [*first.get("resumes", []), spec.provenance]
    write_model(path, found.model_copy(update={"provenance": first}))


# --- the pinned seed bundle -----------------------------------------------------------------
def pin_seed_bundle(job_dir: Path, bundle: Mapping[str, str]) -> Path:
    """Write `seed_bundle.json` unless it exists (the first run's seed bundle stays pinned)."""
    path = Path(job_dir) / Artifact.SEED
    if not path.exists():
        write_json(path, dict(bundle))
    return path


def read_pinned_seed(job_dir: Path) -> dict[str, str] | None:
    """The pinned seed bundle, None when the job has none yet; a malformed file raises."""
    path = Path(job_dir) / Artifact.SEED
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not JSON: {exc.msg}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ArtifactError(f"{path} must map each role to its prompt text")
    return data


def _check_history(out: Path, *, restart: bool) -> None:
    """An interrupted optimization is resumed (its journal replayed by the optimize phase),
    unless `restart`, which moves its history aside so the phase starts over."""
    history = read_history(out)
    if not history or history[-1].kind == "final" or not restart:
        return
    path = out / Artifact.HISTORY
    path.rename(path.with_name(f"history.interrupted.{now_iso().replace(':', '')}.jsonl"))

"""`lcb optimize --from DIR/job.json`: rerun a job with the settings its `job.json` records.

Contract of `expand_from(args)`: `--from FILE` (or `--from=FILE`; the job's folder names its
`job.json`) is replaced by the flags that
rebuild the job FILE records (`lcb.optimize.artifacts.JobSpec`): method, dataset, topology,
task model, optimizer seed, team size and format, budget, data, release, `--opt-tests`,
sandbox, `--selection`, `--feedback`, `--uncharged-cost`, the task sampling (temperature,
top-p, max tokens, thinking), `--allow-small-budget` when the job ran with it, the method's
full settings as `--set` pairs, and
`--splits DIR/splits.json` when the job kept its split file. They go first, so a flag the user
gives after them wins (a single-valued flag's last value counts; a later `--set` overrides
that key). Without `--out`, the job's own folder is the output: the rerun resumes it (or
finds it done).
Endpoints, keys and request limits come from the environment and the other flags, as for any
job; the reflection model must be the one the job used (`REFLECTION_MODEL_ID`, or the task
model when unset): another raises `ValueError` naming both. A FILE that cannot be read as a
job's `job.json` raises `ValueError` naming it. Exact replay of the model's answers is
`--cache` / `--replay`, not this.
"""

from __future__ import annotations

import os
from pathlib import Path

from lcb.agents.models import resolve_model
from lcb.optimize.artifacts import ArtifactError, JobSpec, read_model
from lcb.optimize.settings import assignments

SPLITS_FILE = "splits.json"  # as lcb.optimize.job keeps it


def expand_from(args: list[str]) -> list[str]:
    """`args` with `--from FILE` expanded (module docstring); unchanged without it."""
    found = _find(args)
    if found is None:
        return args
    index, width, path = found
    rest = args[:index] + args[index + width:]
    job_file = _job_file(Path(path))
    flags = job_flags(job_file)
    if not any(a == "--out" or a.startswith("--out=") for a in rest):
        flags += ["--out", str(job_file.parent)]
    return flags + rest


def _find(args: list[str]) -> tuple[int, int, str] | None:
    if sum(a == "--from" or a.startswith("--from=") for a in args) > 1:
        raise ValueError("--from takes one job's job.json, given more than once")
    for index, arg in enumerate(args):
        if arg == "--from":
            if index + 1 >= len(args):
                raise ValueError("--from needs a job's job.json")
            return index, 2, args[index + 1]
        if arg.startswith("--from="):
            return index, 1, arg.split("=", 1)[1]
    return None


def job_flags(path: Path) -> list[str]:
    """The flags that rebuild the job `path` records (module docstring)."""
    path = _job_file(path)
    try:
        spec = read_model(path, JobSpec)
    except (ArtifactError, OSError) as exc:
        raise ValueError(f"--from {path}: not a job's job.json ({exc})") from None
    _check_reflection(spec)
    values = {"--method": spec.method, "--dataset": spec.dataset, "--topology": spec.topology,
              "--model": spec.model, "--seed": spec.seed, "--team-size": spec.team_size,
              "--communication": spec.communication, "--budget": spec.budget,
              "--data": spec.data, "--release": spec.release, "--opt-tests": spec.opt_tests,
              "--sandbox": spec.sandbox, "--selection": spec.selection,
              "--feedback": spec.feedback, "--uncharged-cost": spec.uncharged_cost,
              "--temperature": spec.temperature,
              "--top-p": spec.top_p, "--max-tokens": spec.max_tokens}
    flags = [word for flag, value in values.items() if value is not None
             for word in (flag, str(value))]
    if spec.thinking is not None:
        flags.append("--thinking" if spec.thinking else "--no-thinking")
    if spec.allow_small_budget:
        flags.append("--allow-small-budget")
    splits = path.parent / SPLITS_FILE
    if splits.exists():
        flags += ["--splits", str(splits)]
    for pair in assignments(spec.method_settings):
        flags += ["--set", pair]
    return flags


def _job_file(path: Path) -> Path:
    """`path`, or its `job.json` when it names the job's folder."""
    return path / "job.json" if path.is_dir() else path


def _check_reflection(spec: JobSpec) -> None:
    wanted = spec.reflection_model
    if wanted is None or spec.method == "identity":
        return
    given = resolve_model(os.environ.get("REFLECTION_MODEL_ID") or spec.model)
    if given != wanted:
        raise ValueError(f"the job reflected with {wanted!r}, the environment gives {given!r}: "
                         f"set REFLECTION_MODEL_ID={wanted} (and its endpoint) to rerun it")

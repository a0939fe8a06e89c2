"""What each phase of an optimizer job cost: model calls and tokens per model and per kind,
charged rollouts and wall time, so that a Δ can be read beside the compute that bought it.

Contract of `phase_cost(job_dir)`:
- Returns `{"optimize": P, "validate": P, "test": P, "total": T, "curve": P}`. A phase `P` is
  `{"charged", "wall_s", "kinds": {kind: U}, "models": {"task": U, "reflection": U}}`, where
  `U` is `{"calls", "prompt_tokens", "completion_tokens", "n_calls_without_usage"}` added up by
  `lcb.agents.usage`'s rule (a token total is None when no call it covers reported usage).
- optimize: kind `rollout` is every journaled rollout's team (`rollouts.jsonl`) less the calls
  a coalition took from the whole team's run (a line's `reused`: made once, counted once),
  plus the answered calls of attempts lost to infrastructure (`ledger.json`'s
  `failed_attempt_tokens`); kinds `reflect`, `judge`, `probe` are the uncharged calls
  (`ledger.json`). Rollouts and probes ran
  on the task model, reflect and judge calls on the reflection model. validate and test: kind
  `rollout` alone, the evaluation records of every bundle they ran (`evals/<phase>_*.jsonl`),
  all on the task model; `charged` is 0 (evaluations are never charged).
- `wall_s`: the phase's wall time summed over the sessions that ran it (`record_wall`, kept in
  `phase_times.json`); None when no session recorded it (a job written before it existed).
- `T` (total) is `{"models": {"task": U, "reflection": U}, "calls", "tokens", "wall_s"}`:
  the phases added up; `tokens` is prompt + completion (None when either is unknown), `wall_s`
  None unless every phase that ran recorded it.
- `curve`: the same for the learning curve's extra validation runs (`--curve`,
  `lcb.optimize.curves`): analysis, not the method's compute, so not in `total`.
- A phase that has not run has zero usage and `wall_s` None. Nothing here reads a prompt.
  `result.json` keeps the cost without the wall times (`wall=False`), so that the same job
  rerun writes the same file; `lcb.optimize.jobcost.read_cost` adds them back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lcb.agents.usage import TOKEN_KEYS, WITHOUT_USAGE, count, sum_usage
from lcb.io import BadJson, loads, write_json
from lcb.optimize.artifacts import Artifact, ArtifactError
from lcb.runs.records import read_records

PHASE_TIMES = "phase_times.json"
ROLLOUTS = "rollouts.jsonl"  # lcb.optimize.journal.ROLLOUT_LOG (not imported: it loads the team)
LEDGER = "ledger.json"  # as lcb.optimize.phases writes it
KINDS = ("rollout", "reflect", "judge", "probe")
_ON_TASK = ("rollout", "probe")
_CALLS = "calls"


def record_wall(job_dir: Path, phase: str, seconds: float) -> None:
    """Add one session's wall time of `phase` to the job's `phase_times.json`."""
    path = Path(job_dir) / PHASE_TIMES
    times = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    times[phase] = round(times.get(phase, 0.0) + seconds, 3)
    write_json(path, times)


def journal_lines(job_dir: Path) -> list[dict[str, Any]]:
    """The complete lines of the job's `rollouts.jsonl` (a line cut by a kill is left out, the
    file is not touched); a damaged complete line raises `ArtifactError` naming it."""
    path = Path(job_dir) / ROLLOUTS
    if not path.exists():
        return []
    lines = []
    for number, line in enumerate(path.read_bytes().split(b"\n")[:-1], 1):
        try:
            value = loads(line) if line.strip() else None
        except BadJson as exc:
            raise ArtifactError(f"{path}:{number}: {exc}") from None
        if value is not None and not isinstance(value, dict):
            raise ArtifactError(f"{path}:{number}: not a JSON object")
        if value is not None:
            lines.append(value)
    return lines


def _usage(parts: list[dict[str, Any]], *, calls: str = _CALLS) -> dict[str, Any]:
    summed = sum_usage(parts, calls=calls)
    summed[_CALLS] = summed.pop(calls)
    return summed


def _made(line: dict[str, Any]) -> dict[str, Any]:
    """A journal line's usage less what it reused: its calls, its known tokens and its calls
    without usage (`lcb.agents.shared.SharedAnswers.reused_usage`)."""
    reused = line.get("reused")
    if not reused:
        return line
    made = {**line, "n_llm_calls": count(line.get("n_llm_calls")) - count(reused["calls"]),
            WITHOUT_USAGE: count(line.get(WITHOUT_USAGE)) - count(reused.get(WITHOUT_USAGE))}
    for key in TOKEN_KEYS:
        mine = line.get(key)
        made[key] = None if mine is None else count(mine) - count(reused.get(key))
    return made


def _optimize_kinds(job_dir: Path) -> dict[str, dict[str, Any]]:
    ledger_file = job_dir / LEDGER
    ledger = json.loads(ledger_file.read_text(encoding="utf-8")) if ledger_file.exists() else {}
    rollouts = [_usage([_made(line) for line in journal_lines(job_dir)], calls="n_llm_calls")]
    failed = ledger.get("failed_attempt_tokens") or {}
    kinds = {"rollout": _usage([*rollouts, failed])}
    uncharged = ledger.get("uncharged") or {}
    for kind in KINDS[1:]:
        kinds[kind] = _usage([uncharged.get(kind) or {}])
    return kinds


def _evaluation_kinds(job_dir: Path, phase: str) -> dict[str, dict[str, Any]]:
    if phase == "curve":
        paths = (job_dir / Artifact.EVALS).glob("validate_curve_*.jsonl")
    else:
        paths = (p for p in (job_dir / Artifact.EVALS).glob(f"{phase}_*.jsonl")
                 if not p.name.startswith("validate_curve_"))
    records = [record for path in sorted(paths) for record in read_records(path)]
    return {"rollout": _usage(records, calls="n_llm_calls")}


def _by_model(kinds: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {"task": _usage([u for k, u in kinds.items() if k in _ON_TASK]),
            "reflection": _usage([u for k, u in kinds.items() if k not in _ON_TASK])}


def phase_cost(job_dir: Path, *, wall: bool = True) -> dict[str, Any]:
    """The job's cost per phase and in total (module docstring); without `wall`, no `wall_s`
    (what `result.json` keeps: the same job rerun writes the same file)."""
    job_dir = Path(job_dir)
    times_file = job_dir / PHASE_TIMES
    times = json.loads(times_file.read_text(encoding="utf-8")) if times_file.exists() else {}
    charged = sum(not line.get("free") for line in journal_lines(job_dir))
    phases: dict[str, Any] = {}
    for phase in ("optimize", "validate", "test", "curve"):
        kinds = (_optimize_kinds(job_dir) if phase == "optimize"
                 else _evaluation_kinds(job_dir, phase))
        phases[phase] = {"charged": charged if phase == "optimize" else 0,
                         "wall_s": times.get(phase), "kinds": kinds,
                         "models": _by_model(kinds)}
    analysis = phases.pop("curve")
    models = {name: _usage([p["models"][name] for p in phases.values()])
              for name in ("task", "reflection")}
    both = _usage(list(models.values()))
    known = [both[key] for key in TOKEN_KEYS]
    walls = [p["wall_s"] for p in phases.values()]
    total = {"models": models, "calls": both[_CALLS],
             "tokens": None if None in known else sum(known),
             "n_calls_without_usage": both[WITHOUT_USAGE],
             "wall_s": None if None in walls else round(sum(walls), 3)}
    if not wall:
        for part in (*phases.values(), total):
            part.pop("wall_s")
    if not wall:
        analysis.pop("wall_s")
    return {**phases, "total": total, "curve": analysis}

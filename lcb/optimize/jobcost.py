"""What one optimizer job spent: charged rollouts, proposals and uncharged calls per kind.

Contract of `read_cost(job_dir, budget=...)`:
- Returns `{"budget", "charged", "proposals", "accepted", "infra_failures", "uncharged",
  "phases", "rows", "gate", "source"}` where
  `uncharged` is `{kind: {"calls", "prompt_tokens", "completion_tokens",
  "n_calls_without_usage"}}` for every kind in `KINDS` (zeros when the job made no such call;
  tokens by `lcb.agents.usage`'s rule: None when no call of the kind reported usage, a file
  without `n_calls_without_usage` has none) and `source` names the file the numbers came
  from: "result.json", "ledger.json" or None when neither says anything.
- `result.json`'s `cost` object wins. Any key it lacks (or the whole object, in jobs written
  before it existed) comes from the fallback: `charged` and `uncharged` from `ledger.json`,
  `proposals` / `accepted` by counting `history.jsonl` lines of kind "proposal" (and those with
  `accepted: true`; 0 without a history), `budget` from the caller (job.json's budget).
  `charged` (and `uncharged`) are None when neither file records them. `infra_failures`:
  rollout attempts that failed for infrastructure (an endpoint, a timeout, grading that failed:
  an exception or an `infra` grade), from the ledger; None when no file records it.
- `phases` (`lcb.optimize.phasecost.phase_cost`: calls and tokens per phase, model and kind,
  wall time; None for a job with neither a ledger nor a declared one) and where the method's
  charged rollouts ran, `rows` (train / validation counts) and `gate`: `held_out` when no
  validation row was run during optimize, else `reused` (the method selected on the rows the
  gate scores again). `phases` comes from the job's files when they are there (with the wall
  times `result.json` leaves out), the others from `result.json`'s `cost` when it records
  them; else from the files (a job written before these existed). Reading the phases reads
  the job's journal and evaluation records: an aggregate of thousands of jobs pays for it.
- Older ledgers keyed uncharged usage by purpose ("gepa:reflect:coder"); `kind_of` maps a key
  to its kind: one of `KINDS` as is, else "judge" or "probe" when the key contains that word,
  else "reflect". Usage of keys that map to one kind is summed.
- A count that is not an integer >= 0 (a token total may be null), a file that is not JSON,
  or a history line (other than a cut-off last line) that is not a JSON object raises
  `ArtifactError` naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lcb.agents.usage import TOKEN_KEYS, WITHOUT_USAGE, sum_usage
from lcb.io import BadJson, loads
from lcb.optimize.artifacts import Artifact, ArtifactError
from lcb.optimize.phasecost import journal_lines, phase_cost

KINDS = ("reflect", "judge", "probe")
USAGE_KEYS = ("calls", *TOKEN_KEYS, WITHOUT_USAGE)
LEDGER = "ledger.json"  # as lcb.optimize.phases writes it (not imported: it pulls in the team)


def kind_of(key: str) -> str:
    """The uncharged kind a ledger key stands for.

    Example:
        >>> kind_of("judge"), kind_of("mapro:judge:coder"), kind_of("gepa:reflect:coder")
        ('judge', 'judge', 'reflect')
    """
    lowered = key.lower()
    if lowered in KINDS:
        return lowered
    for kind in ("judge", "probe"):
        if kind in lowered:
            return kind
    return "reflect"


def read_cost(job_dir: Path, *, budget: int | None) -> dict[str, Any]:
    """The spend of the job in `job_dir` (see the module contract)."""
    job_dir = Path(job_dir)
    result_file = job_dir / Artifact.RESULT
    declared = _json(result_file).get("cost") if result_file.exists() else None
    if declared is not None and not isinstance(declared, dict):
        raise ArtifactError(f"{result_file}: cost must be an object, got {declared!r}")
    fallback = {**_fallback(job_dir, budget=budget), **_spent(job_dir, declared or {})}
    if not declared:
        return fallback
    where = f"{result_file}: cost"
    cost = {key: (_count(declared[key], f"{where}.{key}", nullable=True) if key in declared
                  else fallback[key])
            for key in ("budget", "charged", "proposals", "accepted", "infra_failures")}
    uncharged = (_by_kind(declared["uncharged"], f"{where}.uncharged")
                 if "uncharged" in declared else fallback["uncharged"])
    extra = {key: fallback[key] for key in ("phases", "rows", "gate")}
    return {**cost, "uncharged": uncharged, **extra, "source": Artifact.RESULT.value}


def _spent(job_dir: Path, declared: dict[str, Any]) -> dict[str, Any]:
    """`phases`, `rows` and `gate` (module docstring): from the job's files when it has them
    (with each phase's wall time), else as `result.json` declares them."""
    found = {key: declared[key] for key in ("phases", "rows", "gate") if key in declared}
    if (job_dir / LEDGER).exists():
        found["phases"] = phase_cost(job_dir)
    found.setdefault("phases", None)  # no ledger and nothing declared: unknown, not zero
    if "rows" not in found or "gate" not in found:
        for key, value in gate_record(job_dir).items():
            found.setdefault(key, value)
    return found


def gate_record(job_dir: Path) -> dict[str, Any]:
    """Where the charged rollouts ran (`rows`) and so the gate (module docstring); both None
    without the job's split file."""
    splits_file = Path(job_dir) / "splits.json"
    if not splits_file.exists():
        return {"rows": None, "gate": None}
    validation = set(_json(splits_file).get("validation") or ())
    ids = [line.get("id") for line in journal_lines(job_dir) if not line.get("free")]
    on_validation = sum(row in validation for row in ids)
    return {"rows": {"train": len(ids) - on_validation, "validation": on_validation},
            "gate": "reused" if on_validation else "held_out"}


def _fallback(job_dir: Path, *, budget: int | None) -> dict[str, Any]:
    proposals, accepted = _proposals(job_dir / Artifact.HISTORY)
    ledger_file = job_dir / LEDGER
    if not ledger_file.exists():
        return {"budget": budget, "charged": None, "proposals": proposals,
                "accepted": accepted, "infra_failures": None, "uncharged": None, "source": None}
    ledger = _json(ledger_file)
    return {"budget": budget,
            "charged": _count(ledger.get("charged"), f"{ledger_file}: charged", nullable=True),
            "proposals": proposals, "accepted": accepted,
            "infra_failures": _count(ledger.get("infra_failures"),
                                     f"{ledger_file}: infra_failures", nullable=True),
            "uncharged": _by_kind(ledger.get("uncharged", {}), f"{ledger_file}: uncharged"),
            "source": LEDGER}


def _by_kind(usage: Any, where: str) -> dict[str, dict[str, int | None]]:
    if not isinstance(usage, dict):
        raise ArtifactError(f"{where} must be an object of usage per kind, got {usage!r}")
    parts: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for key, counts in usage.items():
        if not isinstance(counts, dict):
            raise ArtifactError(f"{where}.{key} must be an object, got {counts!r}")
        for name in USAGE_KEYS:
            _count(counts.get(name, 0), f"{where}.{key}.{name}", nullable=name in TOKEN_KEYS)
        parts[kind_of(str(key))].append(counts)
    return {kind: sum_usage(found, calls="calls") for kind, found in parts.items()}


def _proposals(history: Path) -> tuple[int, int]:
    """(proposal lines, accepted ones) of `history.jsonl`; (0, 0) when there is none."""
    if not history.exists():
        return 0, 0
    # Text after the last newline is a line cut short by a kill (or ""): it is left out.
    lines = history.read_bytes().split(b"\n")[:-1]
    proposals = accepted = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = loads(line)
        except BadJson as exc:
            raise ArtifactError(f"{history}:{number}: {exc}") from None
        if not isinstance(entry, dict):
            raise ArtifactError(f"{history}:{number}: not a JSON object")
        if entry.get("kind") == "proposal":
            proposals += 1
            accepted += entry.get("accepted") is True
    return proposals, accepted


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path} must hold a JSON object")
    return data


def _count(value: Any, where: str, *, nullable: bool = False) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArtifactError(f"{where} must be an integer >= 0, got {value!r}")
    return value

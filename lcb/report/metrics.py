"""The numbers of one condition (a run or an `lcb score` results file), as the report shows them.

Contract:
- `provenance(condition, shown=...)`: where the programs came from, as recorded: the folder
  or file (`path`, and a local dataset's file, as `shown` writes them: never absolute in a
  report), lcb commit(s) and dirty flag, grader mode, dataset (hub repo, local file or the
  sample set), release, revision, the problems' contest-date window, model, sampling,
  thinking, seeds, samples per problem, team size and communication. `contamination_note` is
  set for release_v1, the oldest window of LCB and the one most exposed to training-data
  contamination. Absent facts are None.
- `scores(condition)`: the summary of `lcb.runs.records.summarize` (results files:
  `lcb.runs.scoring.summarize_scores`, with the problems its summary names in `missing_ids`
  counted as failures when it was scored with `--missing-as-fail`, as `lcb score` counted
  them) recomputed from the records, so the report never trusts a stale summary.json; plus
  the rates the runs table shows: `extracted_rate` (programs with code / programs), `tokens`
  (prompt + completion), `tokens_per_problem` (tokens / problems: every sample of a problem),
  `tokens_per_sample` (tokens / programs), `tokens_per_solved_sample` (tokens / programs that
  passed; None when nothing passed), `tokens_unknown` (true when some model call's server
  reported no usage: `n_calls_without_usage` > 0, `lcb.agents.usage`; then `tokens` is the
  known sum, None when nothing is known, and the three ratios are None: unknown), `wall_s`
  (the run's wall time over all sessions, from summary.json; a results file: the grading time
  it records, else None) and `by_month` (pass@1 per contest month).
- `health(condition)`: outcomes kept apart: `solved`, `wrong` (graded and failed), `no_code`
  (no program, no error), `infra_errors` (the record has an error: endpoint, crash, timeout,
  grading failure); `n_infra`: of those, the programs whose grading failed (verdict `infra`,
  `lcb.runs.records.is_infra`) and `em_graded`, pass@1 with them left out; `truncated`; and
  from the transcripts `llm_calls`, `cache_hits` (answers served from the response cache),
  `tool_calls`, `tool_errors` (tool results with status error, plus tool calls whose arguments
  did not parse). Results files have no transcripts: those counts are None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from lcb.report.collect import Condition
from lcb.runs.records import by_group, is_infra, pass_at_1, summarize
from lcb.runs.scoring import summarize_scores

Shown = Callable[[Any], str | None]

CONTAMINATION_NOTE = ("release_v1 is the oldest LiveCodeBench window (contests from May 2023): "
                      "the one most exposed to contamination of a model's training data")


def _last_session(manifest: Mapping[str, Any]) -> dict[str, Any]:
    sessions = manifest.get("sessions") or [{}]
    return sessions[-1] if isinstance(sessions[-1], dict) else {}


def _source(cond: Condition) -> dict[str, Any]:
    source = cond.manifest.get("data_source") or cond.summary.get("source") or {}
    return source if isinstance(source, dict) else {}


def _name(path: Any) -> str | None:
    return None if path is None else Path(str(path)).name


def _dataset(source: Mapping[str, Any], shown: Shown) -> str | None:
    kind = source.get("kind")
    if kind == "hub":
        return str(source.get("repo"))
    if kind in ("local", "sample"):
        return f"{kind}: {shown(source.get('path'))}"
    return None


def _window(records: Iterable[Mapping[str, Any]]) -> list[str] | None:
    dates = sorted(str(r["contest_date"])[:10] for r in records if r.get("contest_date"))
    return [dates[0], dates[-1]] if dates else None


def provenance(cond: Condition, *, shown: Shown = _name) -> dict[str, Any]:
    """Where the condition's programs came from (module contract)."""
    settings = cond.manifest.get("settings") or {}
    session = _last_session(cond.manifest)
    source = _source(cond)
    commits = sorted({str((s.get("git") or {}).get("commit"))
                      for s in cond.manifest.get("sessions") or [] if s.get("git")})
    records = cond.graded
    first = records[0] if records else {}
    generation = first.get("generation") or {}
    release = source.get("release") if source.get("kind") == "hub" else None
    return {
        "kind": cond.kind, "path": shown(cond.path),
        "lcb_commit": commits or None, "dirty": (session.get("git") or {}).get("dirty"),
        "grader": settings.get("grader") or cond.summary.get("grader") or first.get("grader"),
        "sandbox": settings.get("sandbox"),
        "dataset": _dataset(source, shown), "release": release,
        "revision": source.get("revision") or settings.get("revision"),
        "window": _window(records),
        "model": cond.summary.get("model") or settings.get("model") or first.get("model"),
        "topology": cond.summary.get("topology") or first.get("topology"),
        "sampling": {k: generation.get(k) for k in ("temperature", "top_p", "max_tokens")}
                    if generation else None,
        "thinking": generation.get("thinking"),
        "seeds": sorted({int(r["seed"]) for r in records if r.get("seed") is not None}) or None,
        "samples": cond.summary.get("samples") or cond.summary.get("samples_per_problem"),
        "team_size": settings.get("team_size", first.get("team_size")),
        "communication": settings.get("communication", first.get("communication")),
        "contamination_note": CONTAMINATION_NOTE if release == "release_v1" else None,
    }


def _month_groups(records: list[dict[str, Any]]) -> dict[str, Any]:
    rows = [{**r, "month": str(r.get("contest_date") or "")[:7] or None} for r in records]
    return {month: {"n": len(group), "em": pass_at_1((g["id"], g["em"]) for g in group)}
            for month, group in sorted(by_group(rows, "month").items())}


@dataclass(frozen=True)
class _Unseen:
    """A selected problem a results file has no line for: all `_missing_row` reads of it."""

    id: str
    difficulty: str | None = None
    platform: str | None = None


def _summarize_results(cond: Condition) -> dict[str, Any]:
    """`summarize_scores` as `lcb score` ran it: with `--missing-as-fail`, the summary's
    `missing_ids` are selected problems too, so each counts as failed samples."""
    missing = [str(pid) for pid in cond.summary.get("missing_ids") or []]
    if not (cond.summary.get("missing_as_fail") and missing):
        return summarize_scores(cond.records)
    selected = {str(r["id"]): _Unseen(str(r["id"])) for r in cond.graded}
    selected.update({pid: _Unseen(pid) for pid in missing})
    return summarize_scores(cond.records, selected=cast(Mapping[str, Any], selected),
                            missing_as_fail=True)


def scores(cond: Condition) -> dict[str, Any]:
    """The summary recomputed from the records, and the runs table's rates (module contract)."""
    records = cond.graded
    if cond.kind == "run":
        summary = summarize(records)
        wall = cond.summary.get("wall_s_total", cond.summary.get("wall_s"))
    else:
        summary = _summarize_results(cond)
        wall = round(sum(float(r.get("wall_s") or 0) for r in records), 3) or None
    prompt, completion = summary["prompt_tokens"], summary["completion_tokens"]
    tokens = None if prompt is None and completion is None else (prompt or 0) + (completion or 0)
    unknown = bool(summary["n_calls_without_usage"])
    solved, n = summary["solved"], summary["n"]
    return {**summary,
            "extracted_rate": summary["n_extracted"] / n if n else 0.0,
            "tokens": tokens, "tokens_unknown": unknown,
            **_token_rates(None if unknown else tokens, problems=summary["n_problems"], n=n,
                           solved=solved),
            "wall_s": wall, "by_month": _month_groups(records)}


def _token_rates(tokens: int | None, *, problems: int, n: int, solved: int
                 ) -> dict[str, float | None]:
    """Tokens per problem, per sample and per solved sample; None when `tokens` is unknown."""
    if tokens is None:
        return dict.fromkeys(("tokens_per_problem", "tokens_per_sample",
                              "tokens_per_solved_sample"))
    return {"tokens_per_problem": tokens / problems if problems else 0,
            "tokens_per_sample": tokens / n if n else 0,
            "tokens_per_solved_sample": tokens / solved if solved else None}


def _messages(cond: Condition) -> Iterable[dict[str, Any]]:
    for record in cond.records:
        found = cond.transcript(str(record["id"]), int(record.get("sample") or 0))
        yield from (found or {}).get("messages") or []


def _transcript_counts(cond: Condition) -> dict[str, int | None]:
    if cond.kind != "run":
        return dict.fromkeys(("llm_calls", "cache_hits", "tool_calls", "tool_errors"))
    counts = dict.fromkeys(("llm_calls", "cache_hits", "tool_calls", "tool_errors"), 0)
    for message in _messages(cond):
        if message.get("type") == "assistant":
            counts["llm_calls"] += 1
            counts["cache_hits"] += bool((message.get("call") or {}).get("cached"))
            calls = message.get("tool_calls") or []
            counts["tool_calls"] += len(calls)
            counts["tool_errors"] += sum(1 for call in calls if call.get("invalid"))
        elif message.get("type") == "tool" and message.get("status") == "error":
            counts["tool_errors"] += 1
    return counts


def outcome(record: Mapping[str, Any]) -> str:
    """solved | infra_error | no_code | wrong: what became of one program."""
    if record.get("em"):
        return "solved"
    if record.get("error"):
        # A results line with an error and no program was never a program; any other error is
        # the machinery's (endpoint, crash, timeout, grading), not a wrong answer.
        return "no_code" if "line" in record and not record.get("has_code") else "infra_error"
    code = record.get("predicted_code", record.get("code"))
    has = record["has_code"] if "has_code" in record else isinstance(code, str) and code.strip()
    return "wrong" if has else "no_code"


def health(cond: Condition) -> dict[str, Any]:
    """Outcomes kept apart, truncation and the transcripts' counts (module contract)."""
    kinds = [outcome(r) for r in cond.graded]
    graded = [(r["id"], int(r["em"])) for r in cond.graded if not is_infra(r)]
    return {**{k: kinds.count(k) for k in ("solved", "wrong", "no_code", "infra_error")},
            "n_infra": len(cond.graded) - len(graded), "em_graded": pass_at_1(graded),
            "truncated": sum(1 for r in cond.graded if r.get("truncated")),
            **_transcript_counts(cond)}

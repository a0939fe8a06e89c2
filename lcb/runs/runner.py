"""The batch runner: a team solves many problems concurrently; each is graded and recorded.

Contract:
- Before any work: an output locked by another lcb process (see `lcb.runs.lock`; the lock is
  held for the whole batch), an existing non-empty output without `resume`, or a resumed output
  made by another topology or model raises `OutputError`; an unusable data source raises
  `DataError`; an endpoint that does not answer raises `EndpointError`. Nothing is written then.
- `concurrency` problems are being solved at once (asyncio); model requests are capped
  separately inside `TeamRuntime`. Each program is graded in a `GradingPool` as soon as it
  arrives while its worker moves on to the next problem, so grading never idles the endpoint.
- Every finished problem appends one record (fsync-ed) and, with an output directory, writes its
  transcript first. A per-problem failure (the team's error, a crash, the whole-problem timeout,
  a grading failure) is a record with `error` set and em 0, and the tokens and calls spent
  before it; the batch goes on.
- With `resume`, ids already recorded are skipped, a last line cut short by a kill is removed,
  and the later records of an id recorded twice move to `predictions.duplicates.jsonl` (said on
  `stream`); with `retry_errors` too, recorded problems whose record has an error run again
  (their old records move to `predictions.errors.jsonl`, see `lcb.runs.rundir.set_aside`).
- `max_consecutive_errors` problems in a row that end in an error stop the batch (`BatchAborted`):
  an endpoint that dies mid-batch does not turn the rest of the batch into error records.
- Cancellation (Ctrl-C, SIGTERM) cancels the problems in flight, keeps every finished record,
  writes the summary of what is recorded, and re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from lcb.agents.models import ModelConfig, check_endpoint
from lcb.data.datasets import Loaded, Selection, load_problems
from lcb.data.problems import Problem
from lcb.grading import Grade, GradingPool
from lcb.grading.preflight import preflight
from lcb.runs.lock import run_lock
from lcb.runs.progress import BatchProgress
from lcb.runs.records import Record, RecordLog, read_records, summarize
from lcb.runs.rundir import (
    RunPaths,
    check_output,
    now_iso,
    set_aside,
    update_manifest,
    write_json,
    write_transcript,
)
from lcb.runs.scoring import check_grading
from lcb.teams import TEAMS, TeamContext, TeamOptions, TeamResult, TeamRuntime, solve_in
from lcb.teams.multi import Team


@dataclass(frozen=True)
class RunConfig:
    """Everything a batch needs. `command` is the command line, kept in the manifest."""

    topology: str
    model: ModelConfig
    paths: RunPaths
    data: str | None = None
    release: str = "release_v1"
    revision: str | None = None
    strict: bool = False
    selection: Selection = field(default_factory=Selection)
    team: TeamOptions | None = None  # size, communication format, active agents (multi-agent)
    concurrency: int = 8
    resume: bool = False
    seed: int = 0
    grader: str = "default"
    sandbox: str = "process"
    grade_workers: int | None = None
    problem_timeout_s: float = 1800.0
    retry_errors: bool = False
    max_consecutive_errors: int = 10
    progress_interval_s: float = 30.0
    command: tuple[str, ...] = ()

    def to_record(self) -> dict[str, Any]:
        """JSON-able config for the manifest (the model's api key is redacted by the model)."""
        return {
            "topology": self.topology, "model": self.model.to_record(), "data": self.data,
            "team": self.team.to_record() if self.team else None,
            "release": self.release, "revision": self.revision, "selection": asdict(self.selection),
            "concurrency": self.concurrency, "seed": self.seed, "grader": self.grader,
            "sandbox": self.sandbox, "problem_timeout_s": self.problem_timeout_s,
            "max_consecutive_errors": self.max_consecutive_errors,
            "predictions": str(self.paths.predictions),
        }


def check_team(topology: str, team: TeamOptions | None) -> None:
    """Configuration errors of the team (unknown topology, bad size or mask), raised early."""
    if topology not in TEAMS:
        raise ValueError(f"unknown topology {topology!r}; available: {', '.join(TEAMS)}")
    if topology == "single":
        if team is not None and team.team_size not in (None, 1):
            raise ValueError(f"the single team has one agent; got --team-size {team.team_size}")
        return
    Team.resolve(topology, team)


def _default_total(problem: Problem, grader: str) -> int:
    """How many tests a grade would have counted (official grading adds the public tests)."""
    extra = len(problem.public_tests) if grader == "official" else 0
    return len(problem.hidden_tests) + extra


def build_record(problem: Problem, result: TeamResult, grade: Grade | None, *,
                 config: RunConfig, latency_s: float, error: str | None) -> Record:
    """One problem's record. Without a grade (no program, or an error) every score is 0."""
    graded = grade.to_record() if grade is not None else {}
    return Record(
        id=problem.id, topology=config.topology, model=config.model.model_id,
        predicted_code=None if result.error else result.code,
        passed=grade.passed if grade else 0,
        total=grade.total if grade else _default_total(problem, config.grader),
        pass_rate=graded.get("pass_rate", 0.0), em=grade.em if grade else 0,
        difficulty=problem.difficulty, platform=problem.platform,
        contest_date=problem.contest_date, latency_s=round(latency_s, 3),
        prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
        n_llm_calls=result.n_llm_calls, n_tool_calls=result.n_tool_calls, error=error,
        feedback=graded.get("feedback"), tests_run=graded.get("tests_run", 0),
        verdicts=tuple(graded.get("verdicts", ())), seed=config.seed,
        grader=graded.get("grader", config.grader),
        grade_wall_s=round(grade.wall_s, 3) if grade else 0.0,
        grade_cpu_s=round(grade.cpu_s, 3) if grade else 0.0,
        fields=dict(result.fields),
    )


class BatchAborted(RuntimeError):
    """Too many problems in a row failed (the endpoint probably went away)."""


class _Batch:
    """The shared state of one running batch: runtime, grading pool, log, progress.

    A worker holds one of `concurrency` slots while the team solves a problem, then hands the
    program to a grading task and takes the next problem, so grading never idles the endpoint.
    At most `2 * concurrency` problems wait for grading at once (back-pressure on the workers).
    """

    def __init__(self, config: RunConfig, runtime: TeamRuntime, pool: GradingPool,
                 log: RecordLog, progress: BatchProgress):
        self.config, self.runtime, self.pool = config, runtime, pool
        self.log, self.progress = log, progress
        self.backlog = asyncio.Semaphore(2 * config.concurrency)
        self.streak = 0

    async def solve(self, problem: Problem) -> TeamResult:
        """The team's result; a crash or the whole-problem timeout becomes an error result
        that still counts the tokens and calls the team spent before it."""
        timeout = self.config.problem_timeout_s
        ctx = TeamContext(problem=problem, team=self.config.topology, runtime=self.runtime,
                          seed=self.config.seed)
        try:
            return await asyncio.wait_for(solve_in(ctx, options=self.config.team),
                                          timeout=timeout)
        except TimeoutError:
            error = f"problem timed out after {timeout:g}s"
        except Exception as exc:  # a team that broke its never-raise contract
            error = f"team crashed: {type(exc).__name__}: {exc}"
        return ctx.result(code=None, final_text="", transcript=[], error=error)

    async def grade(self, problem: Problem, result: TeamResult) -> tuple[Grade | None, str | None]:
        """The grade of the submitted program (None without one) and the problem's error."""
        if result.error or not result.code:
            return None, result.error
        try:
            return await self.pool.grade(problem, result.code, grader=self.config.grader), None
        except Exception as exc:  # infrastructure failure of the grader, for this problem
            return None, f"grading failed: {type(exc).__name__}: {exc}"

    async def finish(self, problem: Problem, result: TeamResult, started: float) -> None:
        """Grade, then write the transcript and append the record."""
        try:
            grade, error = await self.grade(problem, result)
            record = build_record(problem, result, grade, config=self.config,
                                  latency_s=time.monotonic() - started, error=error)
            row = record.to_dict()
            # Off the event loop: gzip and fsync take milliseconds that model calls should not wait.
            await asyncio.to_thread(self.save, row, _transcript(record, result))
            self.progress.update(row)
        finally:
            self.backlog.release()
        self.check_streak(row["error"])

    def check_streak(self, error: str | None) -> None:
        """Stop the batch when `max_consecutive_errors` problems in a row end in an error."""
        self.streak = self.streak + 1 if error else 0
        limit = self.config.max_consecutive_errors
        if limit and self.streak >= limit:
            raise BatchAborted(
                f"{self.streak} problems in a row ended in an error (the last: {error}). The "
                "batch stopped rather than turn every remaining problem into an error record.")

    def save(self, row: dict[str, Any], transcript: dict[str, Any]) -> None:
        """Write the transcript (with an output directory), then append the record."""
        path = self.config.paths.transcript(row["id"])
        if path is not None:
            write_transcript(path, transcript)
        self.log.append(row)

    async def run_all(self, pending: list[Problem]) -> None:
        queue = iter(pending)
        try:
            async with asyncio.TaskGroup() as group:

                async def worker() -> None:
                    for problem in queue:
                        await self.backlog.acquire()
                        started = time.monotonic()
                        result = await self.solve(problem)
                        group.create_task(self.finish(problem, result, started))

                for _ in range(min(self.config.concurrency, len(pending))):
                    group.create_task(worker())
        except* Exception as caught:  # one failure stops the batch: report it, not a group
            raise caught.exceptions[0] from None


def _transcript(record: Record, result: TeamResult) -> dict[str, Any]:
    return {"id": record.id, "topology": record.topology, "model": record.model,
            "seed": record.seed, "error": record.error, "predicted_code": result.code,
            "final_text": result.final_text, "usage_by_role": result.usage_by_role,
            "messages": result.transcript}


def _write_summary(config: RunConfig, loaded: Loaded, wall_s: float, *,
                   n_pending: int) -> dict[str, Any]:
    records = read_records(config.paths.predictions)
    summary = summarize(records)
    previous = 0.0
    if config.resume and config.paths.summary and config.paths.summary.exists():
        with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
            previous = float(json.loads(config.paths.summary.read_text())["wall_s_total"])
    recorded = {record["id"] for record in records}
    summary.update({
        "topology": config.topology, "model": config.model.model_id,
        "n_selected": len(loaded.problems), "n_skipped_rows": len(loaded.skipped),
        "n_pending_at_start": n_pending,
        "complete": all(problem.id in recorded for problem in loaded.problems),
        "wall_s": round(wall_s, 3), "wall_s_total": round(previous + wall_s, 3),
        "finished_at": now_iso(),
    })
    if config.paths.summary is not None:
        write_json(config.paths.summary, summary)
    return summary


@contextlib.contextmanager
def _cancel_on_sigterm():
    """Treat SIGTERM (a scheduler's preemption) like Ctrl-C: cancel the batch cleanly."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _preflight(pool: GradingPool | None, config: RunConfig) -> dict | None:
    """Prove the grader and tier work here before any model call (see lcb.grading.preflight)."""
    if pool is None:
        return None
    call = functools.partial(preflight, pool, grader=config.grader)
    return await asyncio.get_running_loop().run_in_executor(None, call)


async def run_batch(config: RunConfig, *, stream: TextIO | None = None,
                    plain: bool | None = None) -> dict[str, Any]:
    """Run the batch `config` describes and return its summary (see module docstring)."""
    check_team(config.topology, config.team)
    check_grading(grader=config.grader, sandbox=config.sandbox)
    if config.retry_errors and not config.resume:
        raise ValueError("--retry-errors reruns the failed problems of an earlier run: "
                         "pass it with --resume")
    with run_lock(config.paths):
        return await _run_locked(config, stream=stream or sys.stderr, plain=plain)


async def _run_locked(config: RunConfig, *, stream: TextIO, plain: bool | None
                      ) -> dict[str, Any]:
    recorded = check_output(config.paths, resume=config.resume, report=stream,
                            expect={"topology": config.topology, "model": config.model.model_id})
    loaded = load_problems(config.data, release=config.release, selection=config.selection,
                           revision=config.revision, strict=config.strict)
    selected = {problem.id for problem in loaded.problems}
    retry = {r["id"] for r in recorded if r.get("error") and r["id"] in selected
             } if config.retry_errors else set()
    earlier = {r["id"]: r for r in recorded if r["id"] not in retry}
    pending = [problem for problem in loaded.problems if problem.id not in earlier]
    pool = GradingPool(config.grade_workers, sandbox=config.sandbox) if pending else None
    try:
        return await _run_pending(config, loaded, pending, earlier, retry, pool,
                                  stream=stream, plain=plain)
    finally:
        if pool is not None:
            pool.close()


async def _run_pending(config: RunConfig, loaded: Loaded, pending: list[Problem],
                       earlier: dict[str, dict], retry: set[str], pool: GradingPool | None, *,
                       stream: TextIO, plain: bool | None) -> dict[str, Any]:
    containment = await _preflight(pool, config)
    if pending:
        await check_endpoint(config.model)
    if retry:
        set_aside(config.paths, retry)
    if config.paths.manifest is not None:
        update_manifest(config.paths.manifest, config=config.to_record(), source=loaded.source,
                        command=list(config.command), containment=containment)
    # What exists now (modules, problems) lives as long as the batch: frozen, full collections
    # skip it. Unfrozen, each one walks ~200k objects (~80 ms here) while every agent waits on
    # the event loop. Collected first, so that no garbage is kept for good.
    gc.collect()
    gc.freeze()
    started = time.monotonic()
    progress = BatchProgress(total=len(loaded.problems), stream=stream,
                             plain=plain, interval_s=config.progress_interval_s,
                             label=config.topology)
    for problem in loaded.problems:
        if problem.id in earlier:
            progress.count(earlier[problem.id])
    try:
        with _cancel_on_sigterm(), RecordLog(config.paths.predictions) as log, progress:
            if pending:
                runtime = TeamRuntime(config.model, sandbox=config.sandbox)
                try:
                    await _Batch(config, runtime, pool, log, progress).run_all(pending)
                finally:
                    await runtime.aclose()
    finally:
        summary = _write_summary(config, loaded, time.monotonic() - started,
                                 n_pending=len(pending))
    return summary

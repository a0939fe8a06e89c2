"""The batch runner: a team solves many problems concurrently; each is graded and recorded.

Contract:
- Before any work: an output locked by another lcb process (see `lcb.runs.lock`; the lock is
  held for the whole batch), an existing non-empty output without `resume`, or a resumed output
  whose results-changing settings differ from this run's (`lcb.runs.identity`) raises
  `OutputError`; an unusable data source or a selection without a problem (`lcb.runs.start`)
  raises `DataError`; an endpoint that does not answer raises `EndpointError`. Nothing is
  written then.
- With `cache` the team's calls go through the response cache (`lcb.agents.cache`, purpose
  "batch"); with `replay` too, nothing reaches an endpoint (no endpoint check either) and a
  call that is not stored fails its sample: a record with the error "not in the cache ...",
  as the original run's failed calls (never stored) were errors there. A cache directory that
  cannot serve raises `CacheError` (a `ValueError`) before anything is written.
- `concurrency` problems are being solved at once (asyncio); model requests are capped
  separately inside `TeamRuntime`. Each program is graded in a `GradingPool` as soon as it
  arrives while its worker moves on to the next problem, so grading never idles the endpoint.
- With `samples` n, the team solves each problem n times (samples 0..n-1, one after another
  per problem, each with its own run seed: `lcb.runs.outcomes.sample_seed`); n = 1 is one record
  per problem, with the request seeds and records a batch has always had.
- Every finished sample appends one record (fsync-ed) and, with an output directory, writes its
  transcript first. A per-sample failure (the team's error, a crash, the whole-problem timeout,
  a grading failure) is a record with `error` set and em 0, and the tokens and calls spent
  before it; the batch goes on. A program whose grading failed twice (`lcb.grading.pool`) has
  its `infra` grade in the record (verdicts `["infra"]`) and an error saying what failed.
- With `resume`, (id, sample) pairs already recorded are skipped (so a resume with more samples
  runs only the new ones), a last line cut short by a kill is removed, and the later records of
  a pair recorded twice move to `predictions.duplicates.jsonl` (said on `stream`); with
  `retry_errors` too, recorded samples whose record has an error (`infra` ones included) run
  again (their old records move to `predictions.errors.jsonl`, see `lcb.runs.rundir.set_aside`).
- `max_consecutive_errors` samples in a row that end in an error stop the batch (`BatchAborted`):
  an endpoint that dies mid-batch does not turn the rest of the batch into error records.
- Cancellation (Ctrl-C; SIGTERM where the caller turns it into one, as `lcb run` does with
  `lcb.cli.signals.run_until_term`) cancels the problems in flight, keeps every finished record,
  writes the summary of what is recorded, and re-raises.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
import time
from typing import Any, TextIO

from lcb.agents.cache import check_cache, open_cache
from lcb.agents.models import check_endpoint
from lcb.data.datasets import Loaded, load_problems
from lcb.data.problems import Problem
from lcb.grading import Grade, GradingPool
from lcb.grading.preflight import preflight
from lcb.runs.config import RunConfig
from lcb.runs.identity import check_resume, run_settings, session_facts
from lcb.runs.lock import run_lock
from lcb.runs.outcomes import (
    build_record,
    sample_seed,
    transcript,
    transcript_path,
    write_summary,
)
from lcb.runs.progress import BatchProgress
from lcb.runs.records import RecordLog, is_infra, record_key
from lcb.runs.rundir import check_output, set_aside, update_manifest, write_transcript
from lcb.runs.scoring import check_grading
from lcb.runs.start import prepare_batch
from lcb.teams import TEAMS, TeamContext, TeamOptions, TeamResult, TeamRuntime, solve_in
from lcb.teams.multi import Team

__all__ = ["BatchAborted", "RunConfig", "build_record", "check_team", "run_batch"]
Work = tuple[Problem, int]  # a problem and a sample index


def check_team(topology: str, team: TeamOptions | None) -> None:
    """Configuration errors of the team (unknown topology, bad size or mask), raised early."""
    if topology not in TEAMS:
        raise ValueError(f"unknown topology {topology!r}; available: {', '.join(TEAMS)}")
    if topology == "single":
        if team is not None and team.team_size not in (None, 1):
            raise ValueError(f"the single team has one agent; got --team-size {team.team_size}")
        return
    Team.resolve(topology, team)


class BatchAborted(RuntimeError):
    """Too many samples in a row failed (the endpoint probably went away)."""


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

    async def solve(self, problem: Problem, sample: int) -> TeamResult:
        """The team's result on one sample; a crash or the whole-problem timeout becomes an
        error result that still counts the tokens and calls the team spent before it."""
        timeout = self.config.problem_timeout_s
        ctx = TeamContext(problem=problem, team=self.config.topology, runtime=self.runtime,
                          seed=sample_seed(self.config.seed, sample), sample=sample)
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
            grade = await self.pool.grade(problem, result.code, grader=self.config.grader)
        except Exception as exc:  # infrastructure failure of the grader, for this problem
            return None, f"grading failed: {type(exc).__name__}: {exc}"
        if grade.infra:  # failed twice for the machinery: the record says so, --retry-errors
            error = grade.feedback.error if grade.feedback else "no verdict"
            return grade, f"grading failed (infra): {error}"
        return grade, None

    async def finish(self, work: Work, result: TeamResult, started: float) -> None:
        """Grade, then write the transcript and append the record."""
        problem, sample = work
        try:
            grade, error = await self.grade(problem, result)
            record = build_record(problem, result, grade, config=self.config,
                                  latency_s=time.monotonic() - started, error=error,
                                  sample=sample)
            row = record.to_dict()
            # Off the event loop: gzip and fsync take milliseconds that model calls should not wait.
            await asyncio.to_thread(self.save, row, transcript(record, result))
            self.progress.update(row)
        finally:
            self.backlog.release()
        self.check_streak(row["error"])

    def check_streak(self, error: str | None) -> None:
        """Stop the batch when `max_consecutive_errors` samples in a row end in an error."""
        self.streak = self.streak + 1 if error else 0
        limit = self.config.max_consecutive_errors
        if limit and self.streak >= limit:
            raise BatchAborted(
                f"{self.streak} problems in a row ended in an error (the last: {error}). The "
                "batch stopped rather than turn every remaining problem into an error record.")

    def save(self, row: dict[str, Any], transcript: dict[str, Any]) -> None:
        """Write the transcript (with an output directory), then append the record."""
        path = transcript_path(self.config.paths, row["id"], row["sample"])
        if path is not None:
            write_transcript(path, transcript)
        self.log.append(row)

    async def run_all(self, pending: list[Work]) -> None:
        queue = iter(pending)
        try:
            async with asyncio.TaskGroup() as group:

                async def worker() -> None:
                    for work in queue:
                        await self.backlog.acquire()
                        started = time.monotonic()
                        result = await self.solve(*work)
                        group.create_task(self.finish(work, result, started))

                for _ in range(min(self.config.concurrency, len(pending))):
                    group.create_task(worker())
        except* Exception as caught:  # one failure stops the batch: report it, not a group
            raise caught.exceptions[0] from None


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
    check_cache(config.cache, replay=config.replay)
    if config.retry_errors and not config.resume:
        raise ValueError("--retry-errors reruns the failed problems of an earlier run: "
                         "pass it with --resume")
    with run_lock(config.paths):
        return await _run_locked(config, stream=stream or sys.stderr, plain=plain)


async def _run_locked(config: RunConfig, *, stream: TextIO, plain: bool | None
                      ) -> dict[str, Any]:
    check_resume(config.paths, resume=config.resume, settings=run_settings(config))
    loaded = load_problems(config.data, release=config.release, selection=config.selection,
                           revision=config.revision, strict=config.strict)
    prepare_batch(config, loaded, stream=stream)
    recorded = check_output(config.paths, resume=config.resume, report=stream,
                            expect={"topology": config.topology, "model": config.model.model_id})
    pending, earlier, retry = _plan(config, loaded, recorded)
    pool = GradingPool(config.grade_workers, sandbox=config.sandbox) if pending else None
    try:
        return await _run_pending(config, loaded, pending, earlier, retry, pool,
                                  stream=stream, plain=plain)
    finally:
        if pool is not None:
            pool.close()


def _plan(config: RunConfig, loaded: Loaded, recorded: list[dict]
          ) -> tuple[list[Work], dict[tuple[str, int], dict], set[tuple[str, int]]]:
    """The samples to run (problem after problem), the records that stand, and the recorded
    samples to run again (`retry_errors`: those whose record has an error)."""
    wanted = {(problem.id, sample) for problem in loaded.problems
              for sample in range(config.samples)}
    retry = {record_key(r) for r in recorded if (r.get("error") or is_infra(r))
             and record_key(r) in wanted} if config.retry_errors else set()
    earlier = {record_key(r): r for r in recorded if record_key(r) not in retry}
    pending = [(problem, sample) for problem in loaded.problems
               for sample in range(config.samples) if (problem.id, sample) not in earlier]
    return pending, earlier, retry


async def _run_pending(config: RunConfig, loaded: Loaded, pending: list[Work],
                       earlier: dict[tuple[str, int], dict], retry: set[tuple[str, int]],
                       pool: GradingPool | None, *,
                       stream: TextIO, plain: bool | None) -> dict[str, Any]:
    containment = await _preflight(pool, config)
    if pending and not config.replay:
        await check_endpoint(config.model)
    if retry:
        set_aside(config.paths, retry)
    if config.paths.manifest is not None:
        update_manifest(config.paths.manifest, config=config.to_record(), source=loaded.source,
                        command=list(config.command), containment=containment,
                        settings=run_settings(config, loaded.source),
                        session=session_facts(loaded))
    # What exists now (modules, problems) lives as long as the batch: frozen, full collections
    # skip it. Unfrozen, each one walks ~200k objects (~80 ms here) while every agent waits on
    # the event loop. Collected first, so that no garbage is kept for good.
    gc.collect()
    gc.freeze()
    started = time.monotonic()
    progress = BatchProgress(total=len(loaded.problems) * config.samples, stream=stream,
                             plain=plain, interval_s=config.progress_interval_s,
                             label=config.topology)
    for problem in loaded.problems:
        for sample in range(config.samples):
            if (problem.id, sample) in earlier:
                progress.count(earlier[problem.id, sample])
    try:
        with RecordLog(config.paths.predictions) as log, progress:
            if pending:
                runtime = TeamRuntime(config.model, sandbox=config.sandbox,
                                      cache=open_cache(config.cache, replay=config.replay))
                try:
                    await _Batch(config, runtime, pool, log, progress).run_all(pending)
                finally:
                    await runtime.aclose()
    finally:
        summary = write_summary(config, loaded, time.monotonic() - started,
                                n_pending=len(pending))
    return summary

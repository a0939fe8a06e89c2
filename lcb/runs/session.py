"""A batch at work: the endpoint checked, the team solving, each program graded and recorded.

Contract: `run_pending(config, loaded, pending, earlier, retry, pool, stream=..., plain=...)`
does what `lcb.runs.runner` promises once a batch is planned: it proves the grader here
(`lcb.grading.preflight`), checks the endpoint (not in replay), sets aside the records
`retry` reruns, updates the manifest, solves every pending (problem, sample) with
`config.concurrency` at once, grades each program as it arrives, appends its record, and
writes the summary however it ends. `lcb.runs.runner` imports this module only once there
is work, so every error a batch can raise before (data, output, settings) comes without
loading the model stack.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from typing import Any, TextIO

from lcb.agents.cache import open_cache
from lcb.agents.check import check_endpoint
from lcb.data.datasets import Loaded
from lcb.data.problems import Problem
from lcb.grading import Grade, GradingPool
from lcb.grading.preflight import preflight
from lcb.runs.config import RunConfig
from lcb.runs.identity import run_settings, session_facts
from lcb.runs.outcomes import build_record, sample_seed, transcript, write_summary
from lcb.runs.progress import BatchProgress
from lcb.runs.records import RecordLog
from lcb.runs.rundir import set_aside, update_manifest, write_transcript
from lcb.runs.streak import ErrorStreak
from lcb.teams.common import TeamContext, TeamResult, TeamRuntime
from lcb.teams.solving import solve_in

Work = tuple[Problem, int]  # a problem and a sample index


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
        self.streak = ErrorStreak(config.max_consecutive_errors)

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
        self.streak.add(row["error"])

    def save(self, row: dict[str, Any], transcript: dict[str, Any]) -> None:
        """Write the transcript (with an output directory), then append the record."""
        path = self.config.paths.transcript(row["id"], row["sample"])
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


async def run_pending(config: RunConfig, loaded: Loaded, pending: list[Work],
                       earlier: dict[tuple[str, int], dict], retry: set[tuple[str, int]],
                       pool: GradingPool | None, *,
                       stream: TextIO, plain: bool | None) -> dict[str, Any]:
    """Run the planned samples (`lcb.runs.runner` planned them) and return the summary."""
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

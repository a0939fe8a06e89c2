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

import sys
from typing import Any, TextIO

from lcb.agents.cachedir import check_cache
from lcb.data.datasets import Loaded, load_problems
from lcb.data.problems import Problem
from lcb.grading import GradingPool
from lcb.registry import TOPOLOGIES
from lcb.runs.config import RunConfig
from lcb.runs.identity import check_resume, run_settings
from lcb.runs.lock import run_lock
from lcb.runs.outcomes import build_record
from lcb.runs.records import is_infra, record_key
from lcb.runs.rundir import check_output
from lcb.runs.scoring import check_grading
from lcb.runs.start import prepare_batch
from lcb.runs.streak import BatchAborted
from lcb.teams.options import TeamOptions
from lcb.teams.setup import Team

__all__ = ["BatchAborted", "RunConfig", "build_record", "check_team", "run_batch"]
Work = tuple[Problem, int]  # a problem and a sample index


def check_team(topology: str, team: TeamOptions | None) -> None:
    """Configuration errors of the team (unknown topology, bad size or mask), raised early."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; available: {', '.join(TOPOLOGIES)}")
    if topology == "single":
        if team is not None and team.team_size not in (None, 1):
            raise ValueError(f"the single team has one agent; got --team-size {team.team_size}")
        return
    Team.resolve(topology, team)


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
    # The model stack (LangChain, LangGraph, the HTTP client) loads only here, once the batch
    # has passed every check above: those errors come at once.
    from lcb.runs.session import run_pending

    try:
        return await run_pending(config, loaded, pending, earlier, retry, pool,
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

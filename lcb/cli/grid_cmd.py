"""`lcb grid plan|run|status|report GRID.yaml`: an experiment grid from one spec file.

- `plan` lists the jobs (output folders; `--commands`: each job's command; `--json`: one
  object per job) and their count.
- `run` runs the jobs not done yet with `--executor local` (a pool of `--jobs` processes),
  `slurm` (one submitit array; `--no-wait` returns once it is submitted) or `ray`
  (`--address`, else the spec's, else a local instance). A done job is skipped, and so is one
  another grid runs now (its lock is taken); an interrupted one resumes. One line per
  finished job goes to stderr. `--retries N` (with `--retry-wait`) retries a job that failed
  on infrastructure, `--job-time-limit` stops a job that runs too long, `--token-budget` and
  `--time-budget` stop the whole grid (`lcb.grid.limits`; the spec's `limits` by default).
- `status` shows done / running / failed / pending in total and per axis, and the failed
  jobs' last log lines (`--lines`); `--json` for scripts. `--html DIR` also writes a static
  page, `DIR/index.html` (`lcb.grid.status_html`: the same per axis, each cell's calls and
  tokens so far, the failed jobs' reasons and logs), which `lcb report` of the grid folder
  links to.
- `report` aggregates the grid into `--out` (default: the grid folder) and runs `lcb report`
  over the grid folder when this lcb has it.
Every subcommand takes `--shard i/N` (the plan split deterministically; the shards cover it
exactly once). The spec is described in docs/grid.md (`lcb.grid.spec`).
Exit codes: 0 done (for `run`: every job done or skipped); 1 a job failed (`run`); 2 a bad spec,
shard or executor setting; 3 a grid budget (`--token-budget`, `--time-budget`) ran out before
every job ended; 130 / 143 the grid was interrupted by Ctrl-C / SIGTERM (rerun the same
command to resume).
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from lcb.cli.application import LcbGroup, LcbTyper, app
from lcb.cli.options import fail
from lcb.registry import GRID_EXECUTORS

grid_app = LcbTyper(name="grid", cls=LcbGroup, no_args_is_help=True,
                    help="Plan, run, follow and report an experiment grid (a grid.yaml spec: "
                         "see docs/grid.md).")
app.add_typer(grid_app, name="grid")


EXIT_BUDGET = 3
Executor = StrEnum("Executor", {name: name for name in GRID_EXECUTORS})


SpecArg = Annotated[Path, typer.Argument(metavar="GRID.yaml", dir_okay=False,
                                         help="The grid spec.")]
ShardOpt = Annotated[str | None, typer.Option(
    "--shard", metavar="i/N", help="Only shard i of N of the plan (0 <= i < N).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON object per line instead.")]


def _load(path: Path, shard_text: str | None) -> tuple[Any, list[Any]]:
    from lcb.grid.plan import parse_shard, plan, shard
    from lcb.grid.spec import SpecError, load_spec

    try:
        spec = load_spec(path)
        jobs = plan(spec)
        if shard_text is not None:
            jobs = shard(jobs, *parse_shard(shard_text))
    except (SpecError, ValueError) as exc:
        fail(str(exc))
    return spec, jobs


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@grid_app.command("plan")
def plan_cmd(spec_path: SpecArg, shard: ShardOpt = None, as_json: JsonOpt = False,
             commands: Annotated[bool, typer.Option(
                 "--commands", help="Show each job's command (run in the spec's folder).")
             ] = False) -> None:
    """List the grid's jobs with their output folders, and how many there are."""
    spec, jobs = _load(spec_path, shard)
    if as_json:
        for job in jobs:
            print(json.dumps(job.to_json()))
        return
    for job in jobs:
        print(job.shell() if commands else str(job.out))
    where = f" (shard {shard})" if shard else ""
    _say(f"{len(jobs)} job(s){where}; kind {spec.kind}; grid folder {spec.root}; jobs run in "
         f"{spec.base}")


@grid_app.command("run")
def run_cmd(
    spec_path: SpecArg,
    executor: Annotated[Executor, typer.Option("--executor", "-e", help="Where jobs run.")
                        ] = Executor.local,
    jobs_at_once: Annotated[int, typer.Option(
        "--jobs", "-j", min=1, metavar="N", help="local: jobs running at once.")] = 2,
    shard: ShardOpt = None,
    wait: Annotated[bool, typer.Option(
        "--wait/--no-wait", help="slurm: wait for the array's tasks (--no-wait: submit and "
                                 "return; follow with `lcb grid status`).")] = True,
    address: Annotated[str | None, typer.Option(
        "--address", metavar="ADDRESS", help="ray: the cluster (ray://host:10001, auto, "
                                             "host:6379); default the spec's, else local.")
                       ] = None,
    retries: Annotated[int | None, typer.Option(
        "--retries", min=0, metavar="N", help="Retry a job that failed on infrastructure up to "
                                              "N times (default: the spec's limits, else 0).")
                       ] = None,
    retry_wait: Annotated[str | None, typer.Option(
        "--retry-wait", metavar="DURATION", help="Wait before the first retry, doubled for each "
                                                 "next one (default 30s).")] = None,
    job_time_limit: Annotated[str | None, typer.Option(
        "--job-time-limit", metavar="DURATION", help="Stop a job running longer than this "
                                                     "(e.g. 90m); a rerun resumes it.")] = None,
    token_budget: Annotated[int | None, typer.Option(
        "--token-budget", min=1, metavar="TOKENS", help="Stop the grid once its jobs have "
                                                        "spent this many tokens.")] = None,
    time_budget: Annotated[str | None, typer.Option(
        "--time-budget", metavar="DURATION", help="Stop the grid this long after this run "
                                                  "starts (e.g. 12h).")] = None,
) -> None:
    """Run the jobs not done yet; interrupted ones resume where they stopped."""
    from lcb.grid.executors import EXECUTORS, ExecutorUnavailable, GridInterrupted, RunOptions
    from lcb.grid.state import statuses

    spec, jobs = _load(spec_path, shard)
    policy = _policy(spec, retries, retry_wait, job_time_limit, token_budget, time_budget)
    if policy.token_budget is not None:
        from lcb.grid.limits import count_earlier_tokens

        count_earlier_tokens(jobs)
    seen = statuses(jobs)
    todo = [job for job in jobs if seen[job.key] not in ("done", "running")]
    counts = {s: list(seen.values()).count(s) for s in ("done", "running")}
    _say(f"{len(jobs)} job(s): {counts['done']} done, {counts['running']} running elsewhere, "
         f"{len(todo)} to run ({executor} executor)")
    options = RunOptions(workers=jobs_at_once, wait=wait, address=address,
                         on_outcome=_report_outcome, policy=policy)
    try:
        outcomes = EXECUTORS[str(executor)](todo, spec, options)
    except ExecutorUnavailable as exc:
        fail(str(exc))
    except GridInterrupted as exc:
        _say(f"{exc}: rerun the same command to resume the grid")
        raise typer.Exit(128 + exc.signal) from None
    if todo and not outcomes and not wait:
        _say(f"follow the jobs with: lcb grid status {spec_path}")
        return
    failed = [o for o in outcomes if o.status == "failed"]
    stopped = sum(o.status == "interrupted" for o in outcomes)
    retried = sum(o.retries for o in outcomes)
    _say(f"{len(outcomes) - len(failed) - stopped} finished or skipped, {len(failed)} failed"
         + (f", {stopped} interrupted (rerun to resume them)" if stopped else "")
         + (f"; {retried} retr{'y' if retried == 1 else 'ies'}" if retried else ""))
    spent = next((o.limit for o in outcomes if o.limit), None)
    if failed:
        raise typer.Exit(1)
    if spent:
        _say(f"stopped: {spent}; rerun with a larger budget to go on")
        raise typer.Exit(EXIT_BUDGET)


def _policy(spec: Any, retries: int | None, retry_wait: str | None, job_time_limit: str | None,
            token_budget: int | None, time_budget: str | None) -> Any:
    """The jobs' retries and limits: the flags, else the spec's `limits`."""
    import time

    from lcb.grid.limits import JobPolicy
    from lcb.grid.spec_fields import parse_duration

    limits = spec.limits
    try:
        wait = limits.retry_wait if retry_wait is None else parse_duration(retry_wait)
        limit = limits.job_time_limit if job_time_limit is None else \
            parse_duration(job_time_limit)
        budget_s = limits.time_budget if time_budget is None else parse_duration(time_budget)
    except ValueError as exc:
        fail(str(exc))
    return JobPolicy(retries=limits.retries if retries is None else retries,
                     retry_wait_s=wait, time_limit_s=limit,
                     token_budget=token_budget or limits.token_budget,
                     deadline=None if budget_s is None else time.time() + budget_s)




def _report_outcome(outcome: Any) -> None:
    why = f": {outcome.reason}" if outcome.reason and outcome.status != "done" else ""
    _say(f"{outcome.status:<7} {outcome.key} ({outcome.seconds:.0f} s){why}")


@grid_app.command("status")
def status_cmd(spec_path: SpecArg, shard: ShardOpt = None, as_json: JsonOpt = False,
               lines: Annotated[int, typer.Option(
                   "--lines", min=0, metavar="N", help="Log lines shown per failed job.")
               ] = 5,
               html: Annotated[Path | None, typer.Option(
                   "--html", file_okay=False, metavar="DIR",
                   help="Also write a static status page, DIR/index.html (per axis, per cell "
                        "with its cost so far, failed jobs' reasons and last max(N, 40) log "
                        "lines); lcb report of the grid folder links to it.")
               ] = None) -> None:
    """Done / running / failed / pending, in total and per axis; failed jobs' last log lines."""
    from lcb.grid.status import grid_status, render

    spec, jobs = _load(spec_path, shard)
    report = grid_status(spec, jobs, lines=lines)
    print(json.dumps(report) if as_json else render(report))
    if html is not None:
        from lcb.grid.status_html import write_status_page

        try:
            page = write_status_page(spec, jobs, html, lines=max(lines, 40))
        except OSError as exc:
            fail(f"--html {html}: cannot write the status page ({exc})")
        _say(f"status page: {page}")


@grid_app.command("report")
def report_cmd(
    spec_path: SpecArg,
    out: Annotated[Path | None, typer.Option(
        "--out", file_okay=False, help="Where summary.json (and report/) go; default the grid "
                                       "folder.")] = None,
    split_mixed: Annotated[bool, typer.Option(
        "--split-mixed", help="A cell whose seeds differ in settings: one row per setting "
                              "instead of an error.")] = False,
) -> None:
    """Aggregate the finished jobs (summary.json, a table), then `lcb report` over the grid."""
    from lcb.grid.report import report, run_lcb_report
    from lcb.optimize.aggregate import AggregateError
    from lcb.optimize.artifacts import ArtifactError

    spec, _ = _load(spec_path, None)
    target = out or spec.root
    try:
        _, text = report(spec, target, split_mixed=split_mixed)
    except (AggregateError, ArtifactError, ValueError) as exc:
        fail(str(exc))
    print(text)
    _say(f"summary: {target / 'summary.json'}")
    code = run_lcb_report(spec.root, target)
    if code is None:
        _say("lcb report is not available in this lcb: the aggregate is all")
    elif code:
        raise typer.Exit(code)

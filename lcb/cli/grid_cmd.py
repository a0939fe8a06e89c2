"""`lcb grid plan|run|status|report GRID.yaml`: an experiment grid from one spec file.

- `plan` lists the jobs (output folders; `--commands`: each job's command; `--json`: one
  object per job) and their count.
- `run` runs the jobs not done yet with `--executor local` (a pool of `--jobs` processes),
  `slurm` (one submitit array; `--no-wait` returns once it is submitted) or `ray`
  (`--address`, else the spec's, else a local instance). A done job is skipped, and so is one
  another grid runs now (its lock is taken); an interrupted one resumes. One line per
  finished job goes to stderr.
- `status` shows done / running / failed / pending in total and per axis, and the failed
  jobs' last log lines (`--lines`); `--json` for scripts.
- `report` aggregates the grid into `--out` (default: the grid folder) and runs `lcb report`
  over the grid folder when this lcb has it.
Every subcommand takes `--shard i/N` (the plan split deterministically; the shards cover it
exactly once). The spec is described in docs/grid.md (`lcb.grid.spec`).
Exit codes: 0 done (for `run`: every job done or skipped); 1 a job failed (`run`); 2 a bad spec,
shard or executor setting; 130 / 143 the grid was interrupted by Ctrl-C / SIGTERM (rerun the
same command to resume).
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
) -> None:
    """Run the jobs not done yet; interrupted ones resume where they stopped."""
    from lcb.grid.executors import EXECUTORS, ExecutorUnavailable, GridInterrupted, RunOptions
    from lcb.grid.state import statuses

    spec, jobs = _load(spec_path, shard)
    seen = statuses(jobs)
    todo = [job for job in jobs if seen[job.key] not in ("done", "running")]
    counts = {s: list(seen.values()).count(s) for s in ("done", "running")}
    _say(f"{len(jobs)} job(s): {counts['done']} done, {counts['running']} running elsewhere, "
         f"{len(todo)} to run ({executor} executor)")
    options = RunOptions(workers=jobs_at_once, wait=wait, address=address,
                         on_outcome=_report_outcome)
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
    _say(f"{len(outcomes) - len(failed) - stopped} finished or skipped, {len(failed)} failed"
         + (f", {stopped} interrupted (rerun to resume them)" if stopped else ""))
    if failed:
        raise typer.Exit(1)


def _report_outcome(outcome: Any) -> None:
    why = f": {outcome.reason}" if outcome.reason and outcome.status != "done" else ""
    _say(f"{outcome.status:<7} {outcome.key} ({outcome.seconds:.0f} s){why}")


@grid_app.command("status")
def status_cmd(spec_path: SpecArg, shard: ShardOpt = None, as_json: JsonOpt = False,
               lines: Annotated[int, typer.Option(
                   "--lines", min=0, metavar="N", help="Log lines shown per failed job.")
               ] = 5) -> None:
    """Done / running / failed / pending, in total and per axis; failed jobs' last log lines."""
    from lcb.grid.status import grid_status, render

    spec, jobs = _load(spec_path, shard)
    report = grid_status(spec, jobs, lines=lines)
    print(json.dumps(report) if as_json else render(report))


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

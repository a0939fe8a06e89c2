"""`lcb optimize` and the seed's `python -m optimizers.protocol.run`: one optimizer job.

Both take the same flags (`--method --dataset --topology --model --seed --out --team-size
--communication --budget --phase --data --release --concurrency --splits --set --opt-tests
--sandbox --restart-optimization`) and run `lcb.optimize.job.run_job`. `--set key=value`
(repeatable) overrides one of the method's settings (`lcb.optimize.settings`: dotted keys for
nested fields, values parsed as JSON). Logs go to stderr; stdout carries exactly one line of
JSON: the job summary, `{"status": "error", "error": ...}`, or on an interrupt
`{"status": "interrupted", "signal": ..., "out": ..., "resume": ...}`.
Exit codes: 0 done; 1 the model endpoint does not answer, or refuses the job's requests
(HTTP 400 on its first calls or on 10 rows in a row: misconfigured, nothing charged); 2 bad
input (unknown method, method setting or topology, unusable data or splits, a changed seed
prompt, an `--out` holding another job, a phase whose earlier phase is missing); 3 an
evaluation left items failed for infrastructure reasons (rerun to retry them); 4 the method
or a team crashed (traceback on stderr); 130 interrupted by Ctrl-C (SIGINT), 143 by SIGTERM:
both stop the job cleanly (no traceback), and rerunning the same command resumes it. Heavy
imports happen inside the command.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from lcb.cli.application import app

_JOB, _PROTOCOL = "Job", "Protocol"


def _opt(*names: str, panel: str = _JOB, **kw: Any) -> Any:
    return typer.Option(*names, rich_help_panel=panel, **kw)


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _fail(message: str, code: int) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    _emit({"status": "error", "error": message})
    return typer.Exit(code)


class Terminated(Exception):
    """The job was stopped by SIGTERM (the command exits 143)."""


async def _run_until_term(job: Any) -> Any:
    """Await `job`; SIGTERM cancels it as Ctrl-C does (cleanup runs), then raises `Terminated`."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    hit: list[int] = []

    def on_term() -> None:
        hit.append(signal.SIGTERM)
        task.cancel()

    loop.add_signal_handler(signal.SIGTERM, on_term)
    try:
        return await job
    except asyncio.CancelledError:
        if hit:
            raise Terminated from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _interrupted(sig: signal.Signals, out: Path) -> typer.Exit:
    resume = f"rerun the same command to resume the job in {out}"
    print(f"interrupted by {sig.name}: {resume}", file=sys.stderr)
    _emit({"status": "interrupted", "signal": sig.name, "out": str(out), "resume": resume})
    return typer.Exit(128 + sig.value)


def optimize(
    *,
    method: Annotated[str, _opt("--method", help="Optimizer key (identity, gepa, mipro, ...).")],
    topology: Annotated[str, _opt("--topology", "-t", help="The team whose prompts to optimize.")],
    out: Annotated[Path, _opt("--out", file_okay=False, help="The job directory.")],
    dataset: Annotated[str, _opt("--dataset", help="The task (only 'lcb').")] = "lcb",
    model: Annotated[str | None, _opt("--model", help="Task model alias or id (default: "
                                       "$MODEL_ID, else qwen).")] = None,
    seed: Annotated[int, _opt("--seed", min=0, help="Optimizer seed (0, 1, 2).")] = 0,
    team_size: Annotated[int | None, _opt("--team-size", min=1, help="Team size (default: "
                                          "the team's).")] = None,
    communication: Annotated[str, _opt("--communication", help="Inter-agent message format.")
                             ] = "freeform",
    budget: Annotated[int, _opt("--budget", min=0, panel=_PROTOCOL,
                                help="Charged full-team rollouts (standard: 600).")] = 600,
    phase: Annotated[str, _opt("--phase", panel=_PROTOCOL, help="optimize, validate, test, or "
                               "all (run whatever is missing).")] = "all",
    data: Annotated[str | None, _opt("--data", metavar="PATH|HF_NAME|sample",
                                     help="Problem source (default: the hub dataset).")] = None,
    release: Annotated[str, _opt("--release", help="Hub release.")] = "release_v1",
    concurrency: Annotated[int, _opt("--concurrency", min=1, help="Team runs in flight.")] = 4,
    splits: Annotated[Path | None, _opt("--splits", dir_okay=False, panel=_PROTOCOL,
                                        help="Split file (default: benchmarks/lcb/"
                                             "lcb_splits.json for the hub source, else computed "
                                             "from --data and kept in the job).")] = None,
    set_: Annotated[list[str] | None, _opt("--set", metavar="KEY=VALUE", panel=_PROTOCOL,
                                           help="Override one method setting (repeatable; "
                                                "dotted keys for nested ones, values as "
                                                "JSON). Non-standard.")] = None,
    opt_tests: Annotated[int | None, _opt("--opt-tests", min=1, panel=_PROTOCOL,
                                          help="Grade optimization rollouts on the first k "
                                               "private tests (default: all; validation and "
                                               "test always use all). Non-standard.")] = None,
    sandbox: Annotated[str, _opt("--sandbox", help="Grader sandbox tier: process or bwrap.")
                       ] = "process",
    restart_optimization: Annotated[bool, _opt("--restart-optimization", panel=_PROTOCOL,
                                               help="Discard an interrupted optimization's "
                                                    "history and start it again.")] = False,
) -> None:
    """Run one optimizer job: optimize -> validate -> test, with artifacts under --out."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    from lcb.agents.models import EndpointError, ModelConfig
    from lcb.optimize.evaluation import EvaluationIncomplete
    from lcb.optimize.job import JobConfig, run_job
    from lcb.optimize.outcomes import Misconfigured
    from lcb.optimize.phases import JobError
    from lcb.optimize.settings import parse_assignments

    try:
        config = JobConfig(method=method, topology=topology, model=ModelConfig.from_env(model),
                           out=out, seed=seed, dataset=dataset, team_size=team_size,
                           communication=communication, budget=budget, phase=phase,
                           data=data, release=release, splits=splits, concurrency=concurrency,
                           method_settings=parse_assignments(set_ or []), opt_tests=opt_tests,
                           sandbox=sandbox, restart_optimization=restart_optimization)
        summary = asyncio.run(_run_until_term(run_job(config)))
    except (EndpointError, Misconfigured) as exc:
        raise _fail(str(exc), 1) from None
    except EvaluationIncomplete as exc:
        raise _fail(str(exc), 3) from None
    except (ValueError, PermissionError, JobError) as exc:
        raise _fail(str(exc), 2) from None
    except KeyboardInterrupt:
        raise _interrupted(signal.SIGINT, out) from None
    except Terminated:
        raise _interrupted(signal.SIGTERM, out) from None
    except Exception as exc:  # a method or team crash: keep the one-line contract on stdout
        logging.getLogger("lcb.optimize").exception("the job failed")
        raise _fail(f"the job failed: {type(exc).__name__}: {exc} (once the cause is fixed, "
                    "rerunning the same command resumes the job; if the resumed run cannot "
                    "retrace it, --restart-optimization starts the optimization over)",
                    4) from None
    _emit(summary)


app.command("optimize")(optimize)
_entry_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
_entry_app.command()(optimize)


def protocol_main(argv: list[str] | None = None) -> None:
    """The body of `python -m optimizers.protocol.run` (never returns)."""
    command = typer.main.get_command(_entry_app)
    command.main(args=argv, prog_name="python -m optimizers.protocol.run")

"""`lcb optimize` and the seed's `python -m optimizers.protocol.run`: one optimizer job.

Both take the same flags (`--method --dataset --topology --model --seed --out --team-size
--communication --budget --phase --data --release --concurrency --splits
--restart-optimization`) and run `lcb.optimize.job.run_job`. Logs go to stderr; stdout carries
exactly one line of JSON: the job summary, or `{"status": "error", "error": ...}`.
Exit codes: 0 done; 1 the model endpoint does not answer; 2 bad input (unknown method or
topology, unusable data or splits, an `--out` holding another or an interrupted job, a phase
whose earlier phase is missing); 3 an evaluation left items failed for infrastructure reasons
(rerun to retry them); 4 the method or a team crashed (traceback on stderr); 130 interrupted.
Heavy imports happen inside the command.
"""

from __future__ import annotations

import asyncio
import json
import logging
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
    from lcb.optimize.phases import JobError

    try:
        config = JobConfig(method=method, topology=topology, model=ModelConfig.from_env(model),
                           out=out, seed=seed, dataset=dataset, team_size=team_size,
                           communication=communication, budget=budget, phase=phase,
                           data=data, release=release, splits=splits, concurrency=concurrency,
                           restart_optimization=restart_optimization)
        summary = asyncio.run(run_job(config))
    except EndpointError as exc:
        raise _fail(str(exc), 1) from None
    except EvaluationIncomplete as exc:
        raise _fail(str(exc), 3) from None
    except (ValueError, PermissionError, JobError) as exc:
        raise _fail(str(exc), 2) from None
    except KeyboardInterrupt:
        raise _fail(f"interrupted: rerun the same command to resume the evaluations in {out} "
                    "(an interrupted optimization needs --restart-optimization or a fresh "
                    "--out)", 130) from None
    except Exception as exc:  # a method or team crash: keep the one-line contract on stdout
        logging.getLogger("lcb.optimize").exception("the job failed")
        raise _fail(f"the job failed: {type(exc).__name__}: {exc} (an interrupted "
                    "optimization needs --restart-optimization or a fresh --out)", 4) from None
    _emit(summary)


app.command("optimize")(optimize)
_entry_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
_entry_app.command()(optimize)


def protocol_main(argv: list[str] | None = None) -> None:
    """The body of `python -m optimizers.protocol.run` (never returns)."""
    command = typer.main.get_command(_entry_app)
    command.main(args=argv, prog_name="python -m optimizers.protocol.run")

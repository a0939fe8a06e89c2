"""`lcb optimize` and the seed's `python -m optimizers.protocol.run`: one optimizer job.

Both take the same flags (`--method --dataset --topology --model --seed --out --team-size
--communication --budget --phase --data --release --concurrency --max-requests --splits --set
--opt-tests --sandbox --selection --feedback --uncharged-cost --curve --allow-small-budget
--restart-optimization --cache --replay --from`, and the generation flags `--temperature
--top-p --max-tokens --thinking/--no-thinking --request-timeout --queue-timeout` of
`lcb.cli.options`:
temperature and top-p sample the optimize phase's team runs, validation and test stay greedy;
`--cache DIR` / `--replay`: the response cache of `lcb.agents.cache`; `--max-requests N`: the
model requests in flight at most over the whole job, team runs and reflect / judge / probe calls
to the same endpoint together, recorded in `job.json`'s provenance) and run
`lcb.optimize.job.run_job`. `--set key=value` (repeatable) overrides one of the method's
settings (`lcb.optimize.settings`: dotted keys for nested fields, values parsed as JSON). Logs
go to stderr; stdout carries exactly one line of JSON: the job summary,
`{"status": "error", "error": ...}` (a flag that does not parse too), or on an interrupt
`{"status": "interrupted", "signal": ..., "out": ..., "resume": ...}`.
The fixed choices (method, topology, phase, sandbox, communication) are listed in the help but
checked by the job, whose messages name the known values. `--from DIR/job.json` reruns a job
with the settings it records (`lcb.cli.rerun`); flags given beside it win.
Exit codes: 0 done; 1 the model endpoint does not answer, or refuses the job's requests
(HTTP 400 on its first calls or on 10 rows in a row: misconfigured, nothing charged); 2 bad
input (unknown method, method setting or topology, unusable data or splits, a changed seed
prompt, an `--out` holding another job, a phase whose earlier phase is missing, a budget
that buys the method nothing without `--allow-small-budget`); 3 an
evaluation left items failed for infrastructure reasons (rerun to retry them); 4 the method
or a team crashed (traceback on stderr); 130 interrupted by Ctrl-C (SIGINT), 143 by SIGTERM:
both stop the job cleanly (no traceback), and rerunning the same command resumes it. Heavy
imports happen inside the command.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.exceptions import UsageError  # typer vendors its own click

from lcb.cli.application import LcbCommand, app, entry_app
from lcb.cli.options import (
    GenerationOptions,
    MaxRequestsOpt,
    choices_metavar,
    with_generation_options,
)
from lcb.cli.rerun import expand_from
from lcb.cli.signals import Terminated, run_until_term
from lcb.io import json_text
from lcb.registry import (
    COMMUNICATIONS,
    DEFAULT_COMMUNICATION,
    FEEDBACK_MODES,
    METHODS,
    PHASES,
    SANDBOXES,
    SELECTIONS,
    TOPOLOGIES,
)

_JOB, _PROTOCOL = "Job", "Protocol"


def _opt(*names: str, panel: str = _JOB, **kw: Any) -> Any:
    return typer.Option(*names, rich_help_panel=panel, **kw)


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json_text(line) + "\n")  # any string: a message may quote a model's text
    sys.stdout.flush()


def _fail(message: str, code: int) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    _emit({"status": "error", "error": message})
    return typer.Exit(code)


class JobCommand(LcbCommand):
    """The job's command: flags that do not parse still end stdout with the JSON error line."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            args = expand_from(args) if "--help" not in args and "-h" not in args else args
        except ValueError as exc:
            raise _fail(str(exc), 2) from None
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:
            _emit({"status": "error", "error": exc.format_message()})
            raise


def _interrupted(sig: signal.Signals, out: Path) -> typer.Exit:
    resume = f"rerun the same command to resume the job in {out}"
    print(f"interrupted by {sig.name}: {resume}", file=sys.stderr)
    _emit({"status": "interrupted", "signal": sig.name, "out": str(out), "resume": resume})
    return typer.Exit(128 + sig.value)


@with_generation_options
def optimize(
    *,
    method: Annotated[str, _opt("--method", metavar="METHOD",
                                help=f"Optimizer method: {', '.join(METHODS)} "
                                     "(docs/optimizers/README.md compares them).")],
    topology: Annotated[str, _opt("--topology", "-t", metavar=choices_metavar(TOPOLOGIES),
                                  help="The team whose prompts to optimize.")],
    out: Annotated[Path, _opt("--out", file_okay=False, help="The job directory.")],
    dataset: Annotated[str, _opt("--dataset", metavar=choices_metavar(("lcb",)),
                                 help="The task.")] = "lcb",
    model: Annotated[str | None, _opt("--model", metavar="MODEL", help="Task model alias or id "
                                      "(default: $MODEL_ID, else qwen).")] = None,
    seed: Annotated[int, _opt("--seed", min=0, metavar="SEED",
                              help="Optimizer seed (0, 1, 2).")] = 0,
    team_size: Annotated[int | None, _opt("--team-size", min=1, metavar="N", help="Team size "
                                          "(default: the team's).")] = None,
    communication: Annotated[str, _opt("--communication", metavar=choices_metavar(COMMUNICATIONS),
                                       help="Inter-agent message format.")] = DEFAULT_COMMUNICATION,
    budget: Annotated[int, _opt("--budget", min=0, metavar="N", panel=_PROTOCOL,
                                help="Charged full-team rollouts (standard: 600).")] = 600,
    phase: Annotated[str, _opt("--phase", panel=_PROTOCOL, metavar=choices_metavar(PHASES),
                               help="The phase to run; all: whatever is missing, in order.")
                     ] = "all",
    data: Annotated[str | None, _opt("--data", metavar="PATH|HF_NAME|sample",
                                     help="Problem source (default: the hub dataset).")] = None,
    release: Annotated[str, _opt("--release", metavar="RELEASE", help="Hub release.")
                       ] = "release_v1",
    concurrency: Annotated[int, _opt("--concurrency", min=1, metavar="N",
                                     help="Team runs in flight.")] = 4,
    max_requests: MaxRequestsOpt = 16,
    splits: Annotated[Path | None, _opt("--splits", dir_okay=False, metavar="FILE",
                                        panel=_PROTOCOL,
                                        help="Split file (default: benchmarks/lcb/"
                                             "lcb_splits.json for the hub source, else computed "
                                             "from --data and kept in the job).")] = None,
    set_: Annotated[list[str] | None, _opt("--set", metavar="KEY=VALUE", panel=_PROTOCOL,
                                           help="Override one method setting (repeatable; "
                                                "dotted keys for nested ones, values as "
                                                "JSON). Non-standard.")] = None,
    opt_tests: Annotated[int | None, _opt("--opt-tests", min=1, metavar="K", panel=_PROTOCOL,
                                          help="Grade optimization rollouts on the first k "
                                               "private tests (default: all; validation and "
                                               "test always use all). Non-standard.")] = None,
    sandbox: Annotated[str, _opt("--sandbox", metavar=choices_metavar(SANDBOXES),
                                 help="Grader sandbox tier.")] = "process",
    selection: Annotated[str, _opt("--selection", metavar=choices_metavar(SELECTIONS),
                                   panel=_PROTOCOL,
                                   help="Where a method selects: the validation split, or a "
                                        "set carved from train (the gate then a held-out "
                                        "test for every method). Non-standard: train.")
                         ] = "validation",
    feedback: Annotated[str, _opt("--feedback", metavar=choices_metavar(FEEDBACK_MODES),
                                  panel=_PROTOCOL,
                                  help="What reflection sees of a failed train rollout: the "
                                       "failing test whole, or its verdict and error only. "
                                       "Non-standard: verdict.")] = "full",
    uncharged_cost: Annotated[float, _opt("--uncharged-cost", min=0.0, metavar="R",
                                          panel=_PROTOCOL,
                                          help="Budget units each reflect / judge / probe call "
                                               "takes (a compute-matched budget). "
                                               "Non-standard: > 0.")] = 0.0,
    allow_small_budget: Annotated[bool, _opt("--allow-small-budget", panel=_PROTOCOL,
                                             help="Run a method even when --budget cannot "
                                                  "buy it one scored proposal (it then keeps "
                                                  "the seed); without it such a job stops "
                                                  "before any work, naming the budget that "
                                                  "would.")] = False,
    curve: Annotated[bool, _opt("--curve", panel=_PROTOCOL,
                                help="Once the gate is sealed, score the incumbent at 10, 25, "
                                     "50 and 100 % of the budget on the validation split "
                                     "(uncharged analysis; add it to a finished job's command "
                                     "to draw its curve).")] = False,
    restart_optimization: Annotated[bool, _opt("--restart-optimization", panel=_PROTOCOL,
                                               help="Discard an interrupted optimization's "
                                                    "history and start it again.")] = False,
    cache: Annotated[Path | None, _opt("--cache", metavar="DIR", file_okay=False,
                                       help="Response cache: stored requests are answered "
                                            "without the endpoint, new answers stored.")
                     ] = None,
    replay: Annotated[bool, _opt("--replay", help="With --cache: every model call from the "
                                                  "cache alone (no endpoint).")] = False,
    from_: Annotated[Path | None, _opt("--from", dir_okay=False, metavar="DIR/job.json",
                                       help="Rerun the job this file records: its method, "
                                            "data, settings, sampling and seeds (flags given "
                                            "too win; without --out: its own folder, resumed)."
                                       )] = None,
    generation: GenerationOptions,
) -> None:
    """Run one optimizer job: optimize -> validate -> test, with artifacts under --out.

    --temperature and --top-p sample the optimize phase; validation and test are greedy."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    from lcb.agents.endpoints import EndpointError
    from lcb.agents.models import ModelConfig
    from lcb.optimize.errors import EvaluationIncomplete, JobError
    from lcb.optimize.job import JobConfig, run_job
    from lcb.optimize.outcomes import Misconfigured
    from lcb.optimize.settings import parse_assignments

    try:
        task = ModelConfig.from_env(model, max_concurrent_requests=max_requests,
                                    **generation.overrides())
        config = JobConfig(method=method, topology=topology, model=task,
                           out=out, seed=seed, dataset=dataset, team_size=team_size,
                           communication=communication, budget=budget, phase=phase,
                           data=data, release=release, splits=splits, concurrency=concurrency,
                           method_settings=parse_assignments(set_ or []), opt_tests=opt_tests,
                           sandbox=sandbox, restart_optimization=restart_optimization,
                           cache=cache, replay=replay, selection=selection, feedback=feedback,
                           uncharged_cost=uncharged_cost, curve=curve,
                           allow_small_budget=allow_small_budget)
        summary = asyncio.run(run_until_term(run_job(config)))
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


app.command("optimize", cls=JobCommand)(optimize)
_entry_app = entry_app()
_entry_app.command(cls=JobCommand)(optimize)


def protocol_main(argv: list[str] | None = None) -> None:
    """The body of `python -m optimizers.protocol.run` (never returns)."""
    command = typer.main.get_command(_entry_app)
    command.main(args=argv, prog_name="python -m optimizers.protocol.run")

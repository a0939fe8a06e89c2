"""`lcb run` and `lcb demo`: a team solves problems; the seed's topology entry points.

- `lcb run --topology T …` runs a batch (see `lcb.runs.runner`); `--batch` is accepted and implied.
- `lcb demo` runs the two built-in problems (see `lcb.runs.demo`).
- `topology_main(T)` backs `python -m topologies…langgraph_lcb`: no arguments -> the demo;
  `--batch …` -> the batch; other flags without `--batch` are refused.
- The generation flags (`--temperature --top-p --max-tokens --thinking/--no-thinking
  --request-timeout`, `lcb.cli.options`) apply to a batch and to the demo; `--samples N` solves
  each problem of a batch N times (`RunConfig.samples`). `--cache DIR` answers stored requests
  from the response cache and stores new answers; `--replay` (with `--cache`) runs from it
  alone, without an endpoint (`lcb.agents.cache`).
Exit codes: 0 done; 1 the endpoint check failed; 2 bad input (an empty selection included), a
topology not built yet, or an output that cannot be written (a full disk, a read-only or blocked
path: one line naming it); 130 interrupted by Ctrl-C, 143 by SIGTERM (both stop cleanly, and
the message gives the exact command that resumes).
Heavy imports (LangChain, the grader) happen inside the commands, so `lcb --help` stays fast.
"""

import asyncio
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from lcb.cli.application import app, entry_app
from lcb.cli.options import (
    GRADER_HELP,
    SANDBOX_HELP,
    Communication,
    DataOptions,
    GenerationOptions,
    Grader,
    MaxRequestsOpt,
    Sandbox,
    Topology,
    fail,
    with_data_options,
    with_generation_options,
)
from lcb.registry import DEFAULT_TEAM_SIZE, INTERACTING_TOPOLOGIES, TEAM_SIZES, TOPOLOGIES

# The seed's entry point of each team (the specification's module paths).
ENTRY_MODULES = {
    t: f"topologies.{t}.langgraph.lcb.langgraph_lcb" if t in INTERACTING_TOPOLOGIES
    else f"topologies.{t}.lcb.langgraph_lcb"
    for t in TOPOLOGIES
}
_RUN, _MODEL, _TEAM = "Run", "Model endpoint", "Team"


def _opt(*names: str, panel: str = _RUN, **kw: Any) -> Any:
    return typer.Option(*names, rich_help_panel=panel, **kw)


TopologyOpt = Annotated[Topology, _opt("--topology", "-t", help="The team to run.")]
ModelOpt = Annotated[str | None, _opt(
    "--model", panel=_MODEL, metavar="MODEL",
    help="Model alias (qwen, llama) or id; default $MODEL_ID.")]
VllmExtrasOpt = Annotated[bool, _opt(
    "--vllm-extras/--no-vllm-extras", panel=_MODEL,
    help="Send vLLM's extra sampling fields (switch off for hosted APIs that reject them).")]
SeedOpt = Annotated[int, _opt("--seed", metavar="SEED",
                              help="Sampling seed (recorded in every record).")]
TeamSizeOpt = Annotated[int | None, _opt(
    "--team-size", min=1, panel=_TEAM,
    help=f"Agents in a multi-agent team: {', '.join(map(str, TEAM_SIZES[:-1]))} or "
         f"{TEAM_SIZES[-1]} for sequential and centralized, any number of replicas/peers for "
         f"independent and decentralized (default {DEFAULT_TEAM_SIZE}; "
         "$INDEPENDENT_N_AGENTS / $DECENTRALIZED_N_AGENTS).")]
CommunicationOpt = Annotated[Communication, _opt(
    "--communication", panel=_TEAM,
    help="Message format the agents are asked to use (records carry the measured "
         "compliance).")]
ActiveOpt = Annotated[list[str] | None, _opt(
    "--active", panel=_TEAM, metavar="AGENT",
    help="Run only these agents of the team (a masked run; repeat or comma-separate ids, "
         "e.g. coder_0,coder_1).")]
# Options the demo (an entry point without --batch) would ignore: typed without --batch, refused.
BATCH_ONLY = ("out", "out_dir", "concurrency", "resume", "retry_errors", "max_errors",
              "problem_timeout", "grader", "sandbox", "data", "release", "revision", "limit",
              "offset", "only", "difficulty", "platform", "start_date", "end_date", "strict",
              "team_size", "communication", "active", "samples", "cache", "replay")


@dataclass(frozen=True)
class _Entry:
    """Passed as the click context object when a seed module path is the entry point."""

    topology: str
    prog: str


def _model_config(model: str | None, *, seed: int, max_requests: int, vllm_extras: bool,
                  generation: GenerationOptions):
    from lcb.agents.models import ModelConfig

    try:
        return ModelConfig.from_env(model, seed=seed, max_concurrent_requests=max_requests,
                                    vllm_extras=vllm_extras, **generation.overrides())
    except ValueError as exc:
        fail(str(exc))


def given(ctx: typer.Context, name: str) -> bool:
    """True when option `name` was typed on the command line (not a default or env value)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"  # typer vendors its own click


def _flag_words(param: Any, value: Any) -> list[str]:
    flag = param.opts[0]
    if getattr(param, "is_flag", False):
        return [flag] if value else list(param.secondary_opts[:1])
    values = value if isinstance(value, list | tuple) else [value]
    return [word for item in values for word in (flag, str(item))]


def command_line(ctx: typer.Context, prog: str, *, skip: tuple[str, ...] = (),
                 extra: tuple[str, ...] = ()) -> str:
    """The command as typed (the options given on the command line, but `skip`), then `extra`."""
    words = shlex.split(prog)
    for param in ctx.command.params:
        if param.name in skip or not param.opts:
            continue
        if given(ctx, param.name):
            words += _flag_words(param, ctx.params[param.name])
    return shlex.join([*words, *extra])


def _run_batch(ctx: typer.Context, prog: str, config: Any) -> None:
    from lcb.agents.endpoints import EndpointError
    from lcb.cli.signals import EXIT_CODE, Terminated, run_until_term
    from lcb.data.datasets import DataError
    from lcb.grading import SandboxUnavailable
    from lcb.grading.official import OfficialGraderMissing
    from lcb.runs.records import RecordsError
    from lcb.runs.rundir import OutputError, output_failure
    from lcb.runs.runner import BatchAborted, run_batch
    from lcb.runs.tables import print_summary

    err = Console(stderr=True, soft_wrap=True)
    paths = config.paths
    where = ("--out", str(paths.predictions)) if paths.out_dir is None else \
        ("--out-dir", str(paths.out_dir))
    resume = command_line(ctx, prog, skip=("out", "out_dir", "resume", "retry_errors"),
                          extra=(*where, "--resume"))
    try:
        summary = asyncio.run(run_until_term(run_batch(config)))
    except (KeyboardInterrupt, asyncio.CancelledError, Terminated) as exc:
        why = " by SIGTERM" if isinstance(exc, Terminated) else ""
        err.print(f"\nInterrupted{why}. Every finished problem is saved in "
                  f"{config.paths.predictions}.\nResume with:\n  {resume}",
                  markup=False, highlight=False)
        raise typer.Exit(EXIT_CODE if why else 130) from None
    except EndpointError as exc:
        err.print(str(exc), markup=False, highlight=False)
        raise typer.Exit(1) from None
    except BatchAborted as exc:
        err.print(f"\nStopped: {exc}\nEvery finished problem is saved in {paths.predictions}. "
                  f"Once the cause is fixed, resume and rerun the failed problems with:\n"
                  f"  {resume} --retry-errors", markup=False, highlight=False)
        raise typer.Exit(1) from None
    except (OutputError, DataError, RecordsError, SandboxUnavailable, OfficialGraderMissing,
            ValueError) as exc:
        fail(str(exc))
    except OSError as exc:  # the output cannot be written: a full disk, a read-only path, ...
        fail(output_failure(exc, paths))
    out = Console(soft_wrap=True)
    if not summary["n_pending_at_start"]:
        out.print(f"Nothing to run: all {summary['n_selected']} selected problems are already "
                  f"recorded in {paths.predictions}.")
    print_summary(summary, console=out)
    if summary.get("n_skipped_rows"):
        kept = " and in the manifest" if paths.manifest else ""
        err.print(f"{summary['n_skipped_rows']} selected row(s) were left out: unknown --only "
                  f"IDs, malformed rows or rows without usable tests (listed with their reasons "
                  f"before the batch started{kept}).")
    out.print(f"records: {paths.predictions}" +
              (f"  summary: {paths.summary}" if paths.summary else ""))


def _team_options(team_size: int | None, communication: str, active: list[str] | None) -> Any:
    from lcb.teams.options import TeamOptions

    mask = None if active is None else frozenset(
        agent.strip() for item in active for agent in item.split(",") if agent.strip())
    try:
        return TeamOptions(team_size=team_size, communication=communication, active=mask)
    except ValueError as exc:
        fail(str(exc))


def _paths(out: Path | None, out_dir: Path | None, topology: str) -> Any:
    from lcb.runs.rundir import OutputError, RunPaths

    try:
        return RunPaths.choose(out=out, out_dir=out_dir,
                               default_dir=Path("results") / f"{topology}_lcb")
    except OutputError as exc:
        fail(str(exc))


@app.command("run")
@with_data_options
@with_generation_options
def run(
    ctx: typer.Context,
    *,
    topology: TopologyOpt = Topology.single,
    batch: Annotated[bool, _opt("--batch", help="Run a batch (implied by `lcb run`).")] = False,
    out: Annotated[Path | None, _opt(
        "--out", metavar="FILE.jsonl", help="Write records to this JSONL file only.")] = None,
    out_dir: Annotated[Path | None, _opt(
        "--out-dir", metavar="DIR", help="Write predictions.jsonl, summary.json, manifest.json "
                                         "and transcripts/ here (default results/<topology>_lcb).")
    ] = None,
    concurrency: Annotated[int, _opt("--concurrency", min=1, help="Problems in flight.")] = 8,
    resume: Annotated[bool, _opt(
        "--resume", help="Continue an earlier run in the same output: skip recorded ids.")] = False,
    retry_errors: Annotated[bool, _opt(
        "--retry-errors", help="With --resume: run again the problems whose record has an "
                               "error (old records move to predictions.errors.jsonl).")] = False,
    max_errors: Annotated[int, _opt(
        "--max-consecutive-errors", min=0, help="Stop the batch after N problems in a row end "
                                                "in an error (0: never).")] = 10,
    problem_timeout: Annotated[float, _opt(
        "--problem-timeout", min=1, metavar="SECONDS",
        help="Seconds one problem may take before it is recorded as an error.")] = 1800.0,
    grader: Annotated[Grader, _opt("--grader", case_sensitive=False, help=GRADER_HELP)
                      ] = Grader.default,
    sandbox: Annotated[Sandbox, _opt("--sandbox", case_sensitive=False, help=SANDBOX_HELP)
                       ] = Sandbox.process,
    model: ModelOpt = None,
    seed: SeedOpt = 0,
    samples: Annotated[int, _opt(
        "--samples", min=1, metavar="N",
        help="Solve each problem N times, with distinct request seeds (records carry the "
             "sample index; the summary adds pass@k).")] = 1,
    max_requests: MaxRequestsOpt = 16,
    vllm_extras: VllmExtrasOpt = True,
    cache: Annotated[Path | None, _opt(
        "--cache", metavar="DIR", file_okay=False, panel=_MODEL,
        help="Response cache: answer a request stored here without the endpoint, store each "
             "new answer (SQLite files, shared by runs and processes).")] = None,
    replay: Annotated[bool, _opt(
        "--replay", panel=_MODEL,
        help="With --cache: run from the cache alone (no endpoint); a request not stored "
             "fails its problem with \"not in the cache\".")] = False,
    team_size: TeamSizeOpt = None,
    communication: CommunicationOpt = Communication.freeform,
    active: ActiveOpt = None,
    data_options: DataOptions,
    generation: GenerationOptions,
) -> None:
    """Run a team on a batch of problems: records, summary, manifest and transcripts."""
    entry = ctx.obj if isinstance(ctx.obj, _Entry) else None
    chosen = str(topology)
    if entry is not None:
        if given(ctx, "topology") and chosen != entry.topology:
            fail(f"this entry point runs the {entry.topology} topology; for {chosen} use "
                 f"`python -m {ENTRY_MODULES[chosen]}` or `lcb run --topology {chosen}`")
        chosen = entry.topology
        if not batch:
            typed = [p.opts[0] for p in ctx.command.params
                     if p.name in BATCH_ONLY and given(ctx, p.name)]
            if typed:
                fail(f"{', '.join(typed)} select or write a batch: add --batch (with no "
                     "arguments this module runs the two built-in demo problems)")
            _demo(chosen, model, seed=seed, max_requests=max_requests, vllm_extras=vllm_extras,
                  generation=generation)
            return
    if replay and cache is None:
        fail("--replay runs from the cache alone: name it with --cache DIR")
    from lcb.runs.runner import RunConfig

    prog = entry.prog if entry else "lcb run"
    config = RunConfig(
        topology=chosen, paths=_paths(out, out_dir, chosen),
        model=_model_config(model, seed=seed, max_requests=max_requests, vllm_extras=vllm_extras,
                            generation=generation),
        data=data_options.data, release=data_options.release, revision=data_options.revision,
        selection=data_options.selection, strict=data_options.strict,
        team=_team_options(team_size, str(communication), active), concurrency=concurrency,
        resume=resume, retry_errors=retry_errors,
        max_consecutive_errors=max_errors, problem_timeout_s=problem_timeout, seed=seed,
        samples=samples, cache=cache, replay=replay,
        grader=str(grader), sandbox=str(sandbox),
        command=tuple(shlex.split(command_line(ctx, prog))),
    )
    _run_batch(ctx, prog, config)


def _demo(topology: str, model: str | None, *, seed: int, max_requests: int,
          vllm_extras: bool, generation: GenerationOptions) -> None:
    from lcb.runs.demo import run_demo

    config = _model_config(model, seed=seed, max_requests=max_requests, vllm_extras=vllm_extras,
                           generation=generation)
    try:
        code = asyncio.run(run_demo(config, topology=topology))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise typer.Exit(code)


@app.command("demo")
@with_generation_options
def demo(
    *,
    topology: TopologyOpt = Topology.single,
    model: ModelOpt = None,
    seed: SeedOpt = 0,
    max_requests: MaxRequestsOpt = 16,
    vllm_extras: VllmExtrasOpt = True,
    generation: GenerationOptions,
) -> None:
    """Solve the two built-in problems (stdin and functional) and print every test's result.

    With no endpoint answering, grade the sample set's reference solutions instead (labelled)."""
    _demo(str(topology), model, seed=seed, max_requests=max_requests, vllm_extras=vllm_extras,
          generation=generation)


_entry_app = entry_app()
_entry_app.command()(run)


def topology_main(topology: str) -> None:
    """The body of `python -m topologies…langgraph_lcb` for `topology` (never returns)."""
    prog = f"python -m {ENTRY_MODULES[topology]}"
    command = typer.main.get_command(_entry_app)
    command.help = (f"Run the {topology} team: with no arguments, on the two built-in demo "
                    f"problems; with --batch, on a batch of problems (records, summary, manifest "
                    f"and transcripts).")
    for param in command.params:
        if param.name == "topology":  # the module path already names the topology
            param.hidden = True
    command.main(prog_name=prog, obj=_Entry(topology=topology, prog=prog))

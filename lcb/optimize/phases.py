"""The three phases of an optimizer job, each a function of the job and a team runner.

`lcb.optimize.job` and `lcb.optimize.jobrun` decide which phases run and with which runtime
(sampled for optimize, greedy for the evaluations); the phase functions here state their own
contracts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcb.agents.models import ModelConfig
from lcb.agents.usage import count, sum_usage
from lcb.data.problems import Problem
from lcb.grading import GradingPool
from lcb.io import write_json
from lcb.optimize.artifacts import (
    Artifact,
    HistoryEntry,
    JobResult,
    JobSpec,
    ScoreSummary,
    SelectionDecision,
    TestReport,
    paired_outcomes,
    read_history,
    read_model,
    read_selection,
    seal_selection,
    write_model,
)
from lcb.optimize.budget import BudgetLedger
from lcb.optimize.bundle import BundleError, bundle_hash, check_bundle
from lcb.optimize.calls import CALLS_LOG, CallJournal, ModelCalls
from lcb.optimize.context import JobContext
from lcb.optimize.errors import JobError
from lcb.optimize.evaluation import Evaluation, evaluate, score
from lcb.optimize.jobcost import read_cost
from lcb.optimize.journal import ABANDONED_LOG, COALITIONS, ROLLOUT_LOG, TRANSCRIPTS
from lcb.optimize.method import Optimizer
from lcb.optimize.outcomes import Misconfigured
from lcb.optimize.phasecost import phase_cost
from lcb.optimize.recorder import CHECKPOINT_FILE
from lcb.optimize.splits import (
    OptimizerData,
    Splits,
    load_optimizer_rows,
    load_test_problems,
    load_validation_problems,
)
from lcb.optimize.teamrun import TeamCell, TeamRunner
from lcb.runs.rundir import now_iso
from lcb.teams.common import TeamRuntime

log = logging.getLogger("lcb.optimize")
LEDGER_FILE = "ledger.json"


@dataclass(frozen=True)
class PhaseJob:
    """The fixed facts of one job that every phase reads."""

    out: Path
    cell: TeamCell
    seed_bundle: Mapping[str, str]
    splits: Splits
    optimizer_seed: int
    data: str | None
    release: str
    selection: str = "validation"  # where the method's selection set comes from (SELECTIONS)
    feedback: str = "full"  # what a method learns of a failed train rollout (FEEDBACK_MODES)
    uncharged_cost: float = 0.0  # budget units per uncharged call (`BudgetLedger`)
    # the optimize phase's labelled rows when the job loaded them already (the budget check)
    rows: tuple[Problem, ...] | None = field(default=None, compare=False, repr=False)

    def evaluation(self, phase: str, label: str, bundle: Mapping[str, str]) -> Evaluation:
        return Evaluation(self.out, phase, label, dict(bundle), self.optimizer_seed)


def runner(job: PhaseJob, runtime: TeamRuntime, pool: GradingPool, *, concurrency: int,
           run_timeout_s: float, opt_tests: int | None = None) -> TeamRunner:
    """`opt_tests` (optimize phase only): grade on the first k private tests (None: all)."""
    return TeamRunner(job.cell, runtime, pool, concurrency=concurrency,
                      run_timeout_s=run_timeout_s, opt_tests=opt_tests)


JOURNAL_FILES = (ROLLOUT_LOG, ABANDONED_LOG, TRANSCRIPTS, COALITIONS, CALLS_LOG,
                 CHECKPOINT_FILE, LEDGER_FILE)


def _fresh_start(out: Path) -> None:
    """Without a history the optimization starts over: the journal of a discarded one (moved
    aside by `open_job_dir` when restarting) goes to `discarded-<time>/`, never reused."""
    if (out / Artifact.HISTORY).exists():
        return  # an interrupted optimization: resumed by replaying its journal
    left = [out / name for name in JOURNAL_FILES if (out / name).exists()]
    if left:
        aside = out / f"discarded-{now_iso().replace(':', '')}"
        aside.mkdir()
        for path in left:
            path.rename(aside / path.name)


async def run_optimize(job: PhaseJob, team: TeamRunner, optimizer: Optimizer, *, budget: int,
                       reflection: ModelConfig) -> dict[str, str]:
    """Run the method within `budget` charged rollouts; return (and record) its incumbent.

    Only train and validation rows are loaded. The history gets the seed bundle first and the
    validated incumbent last (kind "final"); a method's result that drops or adds a role, or is
    otherwise invalid, raises `JobError` and leaves the optimization interrupted. An
    interrupted optimization is resumed: its journal is replayed (`lcb.optimize.evaluator`).
    """
    _fresh_start(job.out)
    rows = list(job.rows) if job.rows is not None else load_optimizer_rows(
        job.splits, data=job.data, release=job.release, selection=job.selection)
    data = OptimizerData(job.splits, rows, selection=job.selection)
    ledger = BudgetLedger(budget, uncharged_rate=job.uncharged_cost)
    calls = ModelCalls(reflection=reflection, task=team.runtime.config, ledger=ledger,
                       optimizer_seed=job.optimizer_seed, journal=CallJournal(job.out),
                       cache=team.runtime.cache,
                       slots={team.runtime.config.base_urls: team.runtime.gateway.slots})
    ctx = JobContext(cell=job.cell, seed_bundle=job.seed_bundle, data=data, labelled=rows,
                     ledger=ledger, optimizer_seed=job.optimizer_seed, runner=team,
                     calls=calls, job_dir=job.out, feedback=job.feedback)
    if ctx.journaled:
        log.info("optimize: resuming; %d journaled rollout(s) are replayed without model calls",
                 ctx.journaled)
    ctx.record_candidate(job.seed_bundle, scores={}, note="seed bundle", iteration=0)
    try:
        incumbent = await optimizer.optimize(ctx)
    except Misconfigured as exc:  # refunded: a rerun with a fixed endpoint runs them afresh
        ctx.forget_refunded(exc)
        write_json(job.out / LEDGER_FILE, ctx.ledger_state())
        raise
    finally:
        await calls.aclose()
        ctx.close()
    problems = check_bundle(incumbent, seed=job.seed_bundle)
    if problems:
        raise JobError(f"method {optimizer.key!r} returned an invalid bundle: "
                       f"{BundleError(problems)}")
    incumbent = {role: incumbent[role] for role in job.seed_bundle}
    if ledger.charged > budget:  # the ledger makes this impossible; a bug must not pass quietly
        raise JobError(f"budget overshoot: {ledger.charged} rollouts charged of {budget}")
    write_json(job.out / LEDGER_FILE, ctx.ledger_state())
    ctx.history.append(HistoryEntry(kind="final", iteration=ctx.last_iteration,
                                    bundle=incumbent, charged=ledger.charged,
                                    uncharged=ledger.state()["uncharged"],
                                    note=f"incumbent of {optimizer.key}"))
    log.info("optimize: %d of %d rollouts charged (%d replays and %d coalition runs free); "
             "incumbent %s", ledger.charged, budget, ctx.replays, ledger.free,
             bundle_hash(incumbent))
    return incumbent


async def run_validate(job: PhaseJob, team: TeamRunner) -> SelectionDecision:
    """Seed vs incumbent on the whole validation split (greedy, paired seeds); seal the choice."""
    history = read_history(job.out)
    if not history or history[-1].kind != "final":
        raise JobError(f"{job.out} has no finished optimization: run the optimize phase first")
    incumbent = history[-1].bundle
    problems = load_validation_problems(job.splits, data=job.data, release=job.release)
    seed_records = await evaluate(team, problems, job.evaluation("validate", "seed",
                                                                 job.seed_bundle))
    same = bundle_hash(incumbent) == bundle_hash(job.seed_bundle)
    inc_records = seed_records if same else await evaluate(
        team, problems, job.evaluation("validate", "incumbent", incumbent))
    (seed_passed, n), (inc_passed, _) = score(seed_records), score(inc_records)
    decision = SelectionDecision.decide(seed=job.seed_bundle, incumbent=incumbent,
                                        seed_score=seed_passed / max(n, 1),
                                        incumbent_score=inc_passed / max(n, 1), n_items=n)
    seal_selection(job.out, decision)
    log.info("validate: seed %d/%d, incumbent %d/%d: deploy %s", seed_passed, n, inc_passed, n,
             decision.deployed)
    return decision


async def run_test(job: PhaseJob, team: TeamRunner) -> JobResult:
    """Seed and deployed bundles on the test split (greedy, paired seeds); write the results."""
    selection = read_selection(job.out)
    problems: list[Problem] = load_test_problems(job.splits, job_dir=job.out, data=job.data,
                                                 release=job.release)
    seed_records = await evaluate(team, problems, job.evaluation("test", "seed", job.seed_bundle))
    deployed_records = seed_records if selection.deployed == "seed" else await evaluate(
        team, problems, job.evaluation("test", "deployed", selection.deployed_bundle))
    ids = [problem.id for problem in problems]
    items = paired_outcomes(seed_records, deployed_records, ids)
    report = TestReport(seed=_scores(job.seed_bundle, seed_records),
                        deployed=_scores(selection.deployed_bundle, deployed_records),
                        deployed_label=selection.deployed,
                        usage={"seed": _usage(seed_records), "deployed": _usage(deployed_records)})
    write_model(job.out / Artifact.TEST, report)
    result = JobResult.from_items(items, deployed_label=selection.deployed,
                                  cost=_cost(job.out))
    write_model(job.out / Artifact.RESULT, result)
    log.info("test: baseline %.3f, deployed %.3f, delta %+.1f points", result.baseline,
             result.deployed, result.delta_points)
    return result


def _cost(out: Path) -> dict[str, Any]:
    """What the optimization spent (`lcb.optimize.jobcost`), for `result.json`."""
    ledger = json.loads((out / LEDGER_FILE).read_text(encoding="utf-8"))
    cost = read_cost(out, budget=int(ledger["total"]))
    cost.pop("source", None)
    spent = BudgetLedger.from_state(ledger)
    return {**cost, "replays": int(ledger.get("replays", 0)), "free": int(ledger.get("free", 0)),
            "infra_failures": int(ledger.get("infra_failures", 0)),
            "uncharged_rate": spent.uncharged_rate, "units": spent.units,
            "phases": phase_cost(out, wall=False)}  # wall times: phase_times.json


def _scores(bundle: Mapping[str, str], records: Mapping[str, Mapping[str, Any]]) -> ScoreSummary:
    passed, n = score(records)
    return ScoreSummary(bundle_hash=bundle_hash(bundle), n=n, passed=passed)


def _usage(records: Mapping[str, Mapping[str, Any]]) -> dict[str, int | None]:
    """Tokens and calls over an evaluation's records (`lcb.agents.usage`'s rule)."""
    return {**sum_usage(records.values()),
            "n_tool_calls": sum(count(r.get("n_tool_calls")) for r in records.values())}


def summary(out: Path, spec: JobSpec, *, ran: list[str]) -> dict[str, Any]:
    """The job's one-line JSON summary, from the artifacts on disk."""
    history = read_history(out)
    finished = bool(history) and history[-1].kind == "final"
    line: dict[str, Any] = {
        "out": str(out), "method": spec.method, "dataset": spec.dataset,
        "topology": spec.topology, "team_size": spec.team_size,
        "communication": spec.communication, "model": spec.model, "seed": spec.seed,
        "budget": spec.budget, "charged": history[-1].charged if history else 0,
        "conformant": spec.conformant, "deviations": spec.deviations, "phases_run": ran,
        "optimized": finished, "selection": None, "result": None}
    if (out / Artifact.SELECTION).exists():
        sel = read_selection(out)
        line["selection"] = {"deployed": sel.deployed, "seed_score": sel.seed_score,
                             "incumbent_score": sel.incumbent_score, "n": sel.n_items}
    if (out / Artifact.RESULT).exists():
        res = read_model(out / Artifact.RESULT, JobResult)
        line["result"] = {"baseline": res.baseline, "deployed": res.deployed,
                          "delta_points": res.delta_points, "n": len(res.items)}
    line["status"] = "complete" if line["result"] else "partial"
    return line

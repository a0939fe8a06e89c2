"""One graded team run on one problem: the unit every phase of an optimizer job is made of.

Contract:
- `TeamCell` (defined in `lcb.optimize.cell`, which loads no model stack) names the team of a
  job (topology, team size, communication format) and knows its prompt slots and agent ids.
- `TeamRunner.attempt(bundle, problem, seed=..., active=...)` runs the team once with `bundle`
  and run seed `seed`, then grades the submitted program on the hidden tests, fail-fast (only
  the first `opt_tests` of them when the runner has `opt_tests`; the feedback then says "k of N"),
  through a `GradeCache` (an identical program on the same tests is graded once per runner).
  It returns a `Rollout`, or raises:
  * `InfraFailure` when infrastructure (not the answer) failed: the team's error (model
    endpoint failing after the client's retries, a team crash), a run with no model call that
    no mask explains, the whole-run timeout, or grading that failed (an exception in the
    grader, or a grade with the verdict `infra`). It carries the
    tokens the attempt spent (`usage`). When only grading failed, the team run is kept
    (`kept=True`) and the next attempt with the same (bundle, problem, seed, mask) grades it
    again instead of running the team again;
  * `Refused` (`lcb.optimize.outcomes`) when the server refused the team's request as malformed
    or too long (HTTP 400): it carries the usable rollout (score 0, feedback naming the cause,
    e.g. "prompt exceeded the model's context: N tokens").
  A missing, wrong or malformed program is a `Rollout` with score 0 and the reason in
  `feedback`; so is a masked team that ran no agent (an empty coalition, centralized without its
  manager): an abstaining team, no model call, nothing graded.
- At most `concurrency` attempts run at once (team and grading together).
- `TeamRunner.uncharged(...)` is the evaluation path: the same attempt on every hidden test
  (never `opt_tests`), retried with the same seed `INFRA_RETRIES` more times; after that it
  returns `Failed` instead of raising. A refused request comes back as its (usable) rollout.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from lcb.agents.shared import SharedAnswers
from lcb.agents.usage import sum_usage
from lcb.data.problems import Problem, Test
from lcb.grading import Grade, GradingPool
from lcb.optimize.budget import INFRA_RETRIES, InfraFailure, Refused, infra_reason
from lcb.optimize.bundle import bundle_hash
from lcb.optimize.cell import DEFAULT_RUN_TIMEOUT_S, TeamCell
from lcb.optimize.gradecache import GradeCache, GradeSettings
from lcb.optimize.method import Rollout
from lcb.optimize.outcomes import refusal_feedback
from lcb.teams.common import TeamContext, TeamResult, TeamRuntime
from lcb.teams.options import TeamOptions
from lcb.teams.solving import TEAMS, solve_in

TOPOLOGIES = tuple(TEAMS)


@dataclass(frozen=True)
class Failed:
    """An uncharged run that failed for infrastructure reasons on every try."""

    problem_id: str
    seed: int
    error: str
    tries: int


def usage_of(result: TeamResult) -> dict[str, int | None]:
    """The tokens and answered calls of one team run (what `InfraFailure.usage` carries), with
    the calls whose server reported no usage (`lcb.agents.usage`)."""
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "n_llm_calls": result.n_llm_calls,
            "n_calls_without_usage": result.n_calls_without_usage}


def refusal_of(outcome: Rollout | Failed) -> str | None:
    """The server's words when it refused the run's request (a usable, failed rollout), else
    None. For a journaled rollout replayed through the ledger:
    `ledger.commit_replayed(rollout.problem_id, refusal=refusal_of(rollout))`."""
    if isinstance(outcome, Failed) or outcome.team.error_kind != "bad_request":
        return None
    return outcome.team.server_message or outcome.team.error or ""


def abstained(result: TeamResult, active: frozenset[str] | None) -> bool:
    """A masked team whose mask left no agent to run: no call, no error, no agent ran."""
    return (active is not None and result.error is None and result.n_llm_calls == 0
            and not result.fields.get("agents_ran"))


def abstention_feedback(active: frozenset[str]) -> str:
    members = ", ".join(sorted(active))
    return (f"the coalition {{{members}}} made no call (abstaining team): no agent of the mask "
            "could answer, so nothing was submitted or graded")


CUT_NOTE = "the final answer was cut at the max_tokens limit (finish_reason=length)"


def feedback_text(result: TeamResult, grade: Grade | None, *,
                  tests_of: tuple[int, int] | None = None, labels: bool = True) -> str:
    """What a reflective method reads about one graded run ("" when it passed). `tests_of` =
    (k, N) notes that only the first k of the N hidden tests were graded; a failed run whose
    submitted answer was cut at max_tokens (`fields["truncated"]`) says so (`CUT_NOTE`).
    Without `labels` the failing test's input, expected and actual output are left out
    (`lcb.optimize.sealing.verdict_only`)."""
    cut = [CUT_NOTE] if result.fields.get("truncated") else []
    if grade is None:
        return "\n".join(["no program: the team's final answer held no complete ```python code "
                          "block, so nothing was graded", *cut])
    if grade.em:
        return ""
    note = cut + ([f"(optimization grades the first {tests_of[0]} of {tests_of[1]} hidden "
                   "tests)"] if tests_of else [])
    fb = grade.feedback
    if fb is None:
        return "\n".join([f"failed: {grade.passed} of {grade.total} hidden tests passed", *note])
    lines = [f"hidden test {fb.test_index + 1} of {grade.total} failed: {fb.verdict.value} "
             f"({grade.passed} passed before it)", *note]
    if labels:
        lines += [f"input:\n{fb.input}", f"expected output:\n{fb.expected}"]
    if labels and fb.actual:
        lines.append(f"program output:\n{fb.actual}")
    if fb.error:
        lines.append(f"error:\n{fb.error}")
    return "\n".join(lines)


def check_mask(cell: TeamCell, active: frozenset[str] | None) -> None:
    """A mask naming an agent the cell lacks is a configuration error: raise at once."""
    unknown = sorted(set(active or ()) - set(cell.agents))
    if unknown:
        raise ValueError(f"unknown agent id(s) {unknown} in the mask; the {cell.topology} team's "
                         f"agents: {', '.join(cell.agents)}")


async def run_team(cell: TeamCell, problem: Problem, runtime: TeamRuntime, *,
                   bundle: Mapping[str, str], seed: int, active: frozenset[str] | None = None,
                   timeout_s: float | None = None,
                   shared: SharedAnswers | None = None) -> TeamResult:
    """One run of `cell`'s team; per-problem failures come back in `TeamResult.error`. Past
    `timeout_s` it raises `InfraFailure` carrying the tokens spent so far. `shared` answers
    the calls another run of the team on this row made (`lcb.agents.shared`)."""
    check_mask(cell, active)
    if cell.is_single:  # its only option is the mask (it abstains without its solver)
        options = None if active is None else TeamOptions(active=active)
    else:
        options = cell.options(active)
    ctx = TeamContext(problem=problem, team=cell.topology, runtime=runtime, seed=seed,
                      shared=shared)
    try:
        return await asyncio.wait_for(solve_in(ctx, bundle=bundle, options=options),
                                      timeout=timeout_s)
    except TimeoutError:
        spent = ctx.result(code=None, final_text="", transcript=[])
        raise InfraFailure(f"team run timed out after {timeout_s:g}s",
                           usage=usage_of(spent)) from None


def verdict_only(rollout: Rollout, *, tests_of: tuple[int, int] | None,
                 sealed: bool = False) -> Rollout:
    """`rollout` as a method sees it when labels are not its to read (`lcb.optimize.sealing`):
    the grade's feedback keeps the failing test's index, verdict and the program's error text,
    never the test's input, expected output or the program's output; `feedback` is rebuilt
    from what is left. On a `sealed` row (a selection-set row) the error keeps only the
    exception's name: a program can print the input it read to stderr, and a traceback's last
    line may quote it. A rollout with no failing test's feedback comes back as it is."""
    grade = rollout.grade
    if grade is None or grade.feedback is None:
        return rollout
    error = exception_name(grade.feedback.error) if sealed else grade.feedback.error
    bare = replace(grade, feedback=replace(grade.feedback, input="", expected="", actual="",
                                           error=error))
    return replace(rollout, grade=bare,
                   feedback=feedback_text(rollout.team, bare, tests_of=tests_of, labels=False))


_EXCEPTION = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))(?::|$)")


def exception_name(error: str) -> str:
    """The exception class of the last line of an error text that starts with one
    (`ValueError` of "ValueError: bad input"), else "": the message itself may quote data."""
    for line in reversed(error.splitlines()):
        found = _EXCEPTION.match(line.strip())
        if found:
            return found.group(1)
    return ""


class TeamRunner:
    """Runs and grades teams of one cell on one runtime (see the module docstring)."""

    def __init__(self, cell: TeamCell, runtime: TeamRuntime, pool: GradingPool, *,
                 concurrency: int = 4, run_timeout_s: float = DEFAULT_RUN_TIMEOUT_S,
                 opt_tests: int | None = None, grading: GradeSettings | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if opt_tests is not None and (isinstance(opt_tests, bool) or opt_tests < 1):
            raise ValueError(f"opt_tests must be a positive number of tests, got {opt_tests!r}")
        self.cell, self.runtime, self.pool = cell, runtime, pool
        self.run_timeout_s, self.opt_tests, self.concurrency = run_timeout_s, opt_tests, concurrency
        self.grades = GradeCache(pool, grading)
        self._slots = asyncio.Semaphore(concurrency)
        self._kept: dict[tuple, TeamResult] = {}  # team runs whose grading failed

    async def attempt(self, bundle: Mapping[str, str], problem: Problem, *, seed: int,
                      iteration: int = 0, active: frozenset[str] | None = None,
                      shared: SharedAnswers | None = None, keep: bool = True) -> Rollout:
        """One graded run (the first `opt_tests` hidden tests); raises `InfraFailure` or
        `Refused` as the module docstring says. `shared`: see `run_team`. Without `keep`, a
        run whose grading failed is not kept for the next attempt (it runs again)."""
        return await self._attempt(bundle, problem, seed=seed, iteration=iteration,
                                   active=active, limit=self.opt_tests, shared=shared,
                                   keep=keep)

    async def _attempt(self, bundle: Mapping[str, str], problem: Problem, *, seed: int,
                       iteration: int, active: frozenset[str] | None,
                       limit: int | None, shared: SharedAnswers | None = None,
                       keep: bool = True) -> Rollout:
        key = (bundle_hash(bundle), problem.id, seed, active)
        async with self._slots:
            result = self._kept.pop(key, None)  # graded again, not run again
            if result is None:
                if shared is not None:
                    shared.begin_try()  # the answers of a lost try are not this run's
                result = await run_team(self.cell, problem, self.runtime, bundle=bundle,
                                        seed=seed, active=active, timeout_s=self.run_timeout_s,
                                        shared=shared)
            done = dict(problem_id=problem.id, team=result, seed=seed, iteration=iteration,
                        bundle_hash=key[0], active=active)
            if abstained(result, active):
                return Rollout(score=0.0, feedback=abstention_feedback(active or frozenset()),
                               **done)
            if result.error_kind == "bad_request":
                rollout = Rollout(score=0.0, feedback="", **done)
                message = refusal_of(rollout) or ""
                raise Refused(message, result=replace(rollout, feedback=refusal_feedback(message)),
                              row=problem.id)
            reason = infra_reason(error=result.error, n_llm_calls=result.n_llm_calls)
            if reason:
                raise InfraFailure(reason, usage=usage_of(result))
            tests, tests_of = self._tests(problem, limit)
            grade = await self._grade(problem, result, tests=tests, key=key if keep else None)
        return Rollout(score=float(grade.em) if grade else 0.0,
                       feedback=feedback_text(result, grade, tests_of=tests_of), grade=grade,
                       **done)

    def tests_of(self, problem: Problem) -> tuple[int, int] | None:
        """(k, N) when optimize rollouts grade only the first k of the N hidden tests."""
        return self._tests(problem, self.opt_tests)[1]

    @staticmethod
    def _tests(problem: Problem, limit: int | None
               ) -> tuple[tuple[Test, ...] | None, tuple[int, int] | None]:
        """(tests to grade, None: all; the (k, N) note when only k of N are graded)."""
        total = len(problem.hidden_tests)
        if limit is None or limit >= total:
            return None, None
        return problem.hidden_tests[:limit], (limit, total)

    async def _grade(self, problem: Problem, result: TeamResult, *,
                     tests: tuple[Test, ...] | None, key: tuple | None) -> Grade | None:
        """The grade; a failed grading keeps `result` under `key` (None: not kept)."""
        if not result.code:
            return None
        try:
            grade = await self.grades.grade(problem, result.code, tests=tests)
        except Exception as exc:  # noqa: BLE001 - the grader's failure is infrastructure
            if key is not None:
                self._kept[key] = result
            raise InfraFailure(f"grading failed: {type(exc).__name__}: {exc}",
                               usage=usage_of(result), kept=True) from exc
        if grade.infra:  # grading failed twice in the pool: not the answer's fault either
            if key is not None:
                self._kept[key] = result
            error = grade.feedback.error if grade.feedback else "no verdict"
            raise InfraFailure(f"grading failed (infra): {error}", usage=usage_of(result),
                               kept=True)
        return grade

    async def uncharged(self, bundle: Mapping[str, str], problem: Problem, *, seed: int,
                        spent: dict[str, int] | None = None) -> Rollout | Failed:
        """An evaluation run on every hidden test: retried with the same seed on
        `InfraFailure`, never raising it; a refused request is its usable rollout. The tokens
        of failed tries are added to `spent` (keys of `usage_of`) when given."""
        spent = {} if spent is None else spent
        failure: InfraFailure | None = None
        for _ in range(1 + INFRA_RETRIES):
            try:
                return await self._attempt(bundle, problem, seed=seed, iteration=0,
                                           active=None, limit=None)
            except Refused as exc:
                return exc.result
            except InfraFailure as exc:
                failure = exc
                if not exc.kept:  # a kept run's tokens count only if it is given up
                    _add_usage(spent, exc.usage)
        assert failure is not None
        if failure.kept:
            _add_usage(spent, failure.usage)
        return Failed(problem.id, seed, str(failure), 1 + INFRA_RETRIES)


def _add_usage(into: dict[str, int | None], usage: Mapping[str, int | None]) -> None:
    into.update(sum_usage([into, usage]))

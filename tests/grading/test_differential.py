"""Differential suite: every probe graded by the default and the official grader.

Both graders see the same tests (public then private), so a first-failing index names the same
test in both. For each probe the default grader must give the probe's expected outcome, and the
official grader the same one, except for documented divergence classes (docs/grading.md), where
it must give the documented official outcome. All grading runs inside a pids cgroup guard, and no
process may survive it. Time-limit probes cost 6 s each; only those tagged "ci" run unless
LCB_SLOW_PROBES=1,
and those are marked `slow`: the fixture grades only the probes the session runs.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.cgroup_guard import pids_guard
from tests.probes.problems import PROBLEMS
from tests.probes.programs import ALL_PROBES, Probe

pytestmark = pytest.mark.slow  # grades the whole probe corpus twice: the full suite runs it

RUN_SLOW = os.environ.get("LCB_SLOW_PROBES") == "1"
SELECTED = [p for p in ALL_PROBES if not p.slow or RUN_SLOW or "ci" in p.tags]
GRADERS = ("default", "official")
PARAMS = [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.slow else [])
          for p in SELECTED]


def _first_failure(grade) -> int | None:
    """None when every test passed, else the index of the first test that did not pass."""
    if grade.em == 1:
        return None
    failed = [o.index for o in grade.outcomes if o.verdict.value != "passed"]
    return failed[0] if failed else len(grade.outcomes)


def _grade_everything(probes: list[Probe]) -> dict[tuple[str, str], tuple]:
    """Runs in a guarded child: grade every probe with both graders on one pool."""
    from lcb.grading import GradingPool
    from lcb.grading.official import official_tests

    async def one(pool, probe: Probe, grader: str):
        problem = PROBLEMS[probe.problem_id]
        grade = await pool.grade(problem, probe.code, grader=grader,
                                 tests=official_tests(problem))
        verdicts = tuple(o.verdict.value for o in grade.outcomes)
        return (probe.name, grader), (_first_failure(grade), grade.em, verdicts, grade.total,
                                      grade.to_record())

    async def main():
        async with GradingPool() as pool:
            pairs = await asyncio.gather(*(one(pool, p, g) for p in probes for g in GRADERS))
        return dict(pairs)

    return asyncio.run(main())


def _probes_in_session(session: pytest.Session) -> list[Probe]:
    """The probes the selected tests of this module read: each parametrized test's own probe,
    and every divergent probe for the divergence check."""
    wanted: set[str] = set()
    for item in session.items:
        if item.module.__name__ != __name__ or "results" not in item.fixturenames:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "probe" in callspec.params:
            wanted.add(callspec.params["probe"].name)
        else:
            wanted |= {p.name for p in SELECTED if p.official is not None}
    return [p for p in SELECTED if p.name in wanted]


@pytest.fixture(scope="module")
def results(request: pytest.FixtureRequest) -> dict[tuple[str, str], tuple]:
    probes = _probes_in_session(request.session)
    with pids_guard(max_pids=400) as guard:
        graded = guard.call(_grade_everything, probes, timeout_s=600)
        assert guard.survivors(settle_s=5.0) == [], "a graded program's process survived"
    return graded


def test_suite_is_large_enough():
    stdin = [p for p in ALL_PROBES if PROBLEMS[p.problem_id].mode.value == "stdin"]
    assert len(ALL_PROBES) >= 60 and len(stdin) >= 30 and len(ALL_PROBES) - len(stdin) >= 20
    assert sum(p.slow for p in SELECTED) <= 2 or RUN_SLOW
    assert len({p.name for p in ALL_PROBES}) == len(ALL_PROBES)


@pytest.mark.parametrize("probe", PARAMS)
def test_default_grader_gives_expected_outcome(results, probe: Probe):
    first_fail, em, verdicts, total = results[(probe.name, "default")][:4]
    assert first_fail == probe.fail_at, f"default verdicts {verdicts}"
    assert em == int(probe.fail_at is None)


@pytest.mark.parametrize("probe", PARAMS)
def test_official_grader_agrees_or_diverges_as_documented(results, probe: Probe):
    first_fail, em, verdicts, total = results[(probe.name, "official")][:4]
    expected = probe.fail_at if probe.official is None else probe.official.official_fail_at
    assert first_fail == expected, f"official verdicts {verdicts}"
    assert em == int(expected is None)
    problem = PROBLEMS[probe.problem_id]
    assert total == len(problem.public_tests) + len(problem.private_tests)


def test_divergent_probes_really_differ(results):
    divergent = [p for p in SELECTED if p.official is not None]
    assert len({p.official.kind for p in divergent}) >= 7
    for probe in divergent:
        default = results[(probe.name, "default")][0]
        official = results[(probe.name, "official")][0]
        assert default != official, probe.name


@pytest.mark.parametrize("probe", PARAMS)
def test_the_agreement_classifier_names_the_documented_class(results, probe: Probe):
    # The corpus of lcb.grading.agreement: each divergent probe's real grades must be put in
    # its documented class, each agreeing probe's must agree (both graders saw the same tests).
    from lcb.grading.agreement import compare

    mode = PROBLEMS[probe.problem_id].mode.value
    compared = compare(probe.code, mode=mode, default=results[(probe.name, "default")][4],
                       official=results[(probe.name, "official")][4])
    if probe.official is None:
        assert (compared.agree, compared.divergence) == (True, None)
    else:
        assert (compared.agree, compared.divergence) == (False, probe.official.kind)

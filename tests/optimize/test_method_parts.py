"""The method interface is four parts (`lcb.optimize.method`): `OptimizeContext` adds nothing
of its own, no member belongs to two parts, and the job's context and the tests' fake offer
every member of every part."""

from __future__ import annotations

from lcb.optimize.context import JobContext
from lcb.optimize.method import (
    Evaluator,
    LanguageModels,
    OptimizeContext,
    Recorder,
    TeamSpec,
    Uncharged,
)
from tests.helpers_methods import fake_context

PARTS = (TeamSpec, Evaluator, LanguageModels, Recorder)


def members(protocol: type) -> set[str]:
    """The public names a protocol class declares itself (annotations, methods, properties)."""
    own = vars(protocol)
    declared = set(own.get("__annotations__", {}))
    declared |= {name for name, value in own.items()
                 if callable(value) or isinstance(value, property)}
    return {name for name in declared if not name.startswith("_")}


def test_the_context_is_exactly_its_four_parts() -> None:
    assert members(OptimizeContext) == set()
    assert members(Uncharged) == set()
    assert OptimizeContext.__mro__[1:5] == PARTS
    names = [name for part in PARTS for name in members(part)]
    assert len(names) == len(set(names))  # no member in two parts
    assert set(names) == {
        "topology", "team_size", "communication", "seed_bundle", "roles", "agents",
        "optimizer_seed", "graph", "validate", "whole_team_answers",
        "data", "ledger", "rollout", "rollouts",
        "reflect", "judge", "probe", "embed",
        "record_candidate", "record_proposal", "checkpoint", "restore"}


def test_the_job_context_and_the_fake_offer_every_member() -> None:
    fake = fake_context(budget=1)
    for part in PARTS:
        for name in members(part):
            assert hasattr(fake, name), (part.__name__, name)
            if name not in {"data", "ledger", "seed_bundle", "optimizer_seed"}:
                assert hasattr(JobContext, name), (part.__name__, name)  # set in __init__
    assert isinstance(fake, OptimizeContext)

"""gepa against a fake context: the stop rule, every proposal in the history, checkpoints and a
resumed run that retraces the interrupted one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from lcb.optimize.bundle import bundle_hash
from lcb.optimize.methods.gepa_method import iteration_cost, make
from lcb.optimize.methods.gepa_records import ResumeDivergence
from tests.helpers_methods import (
    KEYWORD,
    SEED,
    FakeContext,
    FakeData,
    fake_context,
    keyword_proposal,
    make_problem,
)

pytestmark = pytest.mark.timeout(120)
SEED_HASH = bundle_hash(SEED)
WITH_KEYWORD = {role: f"{text}\n{KEYWORD}" for role, text in SEED.items()}


def run(ctx: FakeContext, **settings: object) -> dict[str, str]:
    return asyncio.run(make(**settings).optimize(ctx))


@dataclass
class ThreeKinds(FakeContext):
    """Rows of three kinds: the seed solves kind 0 (until the analyzer gets the keyword), the
    analyzer's keyword solves kind 1, the coder's kind 2. Two one-role children of the seed
    each win some rows, so gepa has something to merge."""

    def solves(self, bundle: dict[str, str], problem: object) -> bool:
        kind = int(problem.id[1:]) % 3  # type: ignore[attr-defined]
        if kind == 0:
            return KEYWORD not in bundle["analyzer"]
        return KEYWORD in bundle["analyzer" if kind == 1 else "coder"]


def three_kinds(*, budget: int = 80, optimizer_seed: int = 3, **kw: object) -> ThreeKinds:
    """Run it with `minibatch=2`: then gepa (seed 3) merges the two children."""
    data = FakeData(train=tuple(make_problem(i) for i in range(6)),
                    validation=tuple(make_problem(i, prefix="v") for i in range(6)))
    return ThreeKinds(seed_bundle=dict(SEED), data=data, budget=budget,
                      optimizer_seed=optimizer_seed, **kw)  # type: ignore[arg-type]


def test_the_worst_case_of_an_iteration() -> None:
    assert iteration_cost(3, n_train=6, n_val=4) == 10
    assert iteration_cost(3, n_train=2, n_val=4) == 8  # gepa's minibatch is at most the train set
    assert iteration_cost(3, n_train=6, n_val=0) == 12  # no validation set: gepa uses train


@pytest.mark.parametrize(("budget", "charged", "found"), [(19, 10, False), (20, 20, True)])
def test_an_iteration_starts_only_if_its_accepted_child_can_be_validated(
        budget: int, charged: int, found: bool) -> None:
    """Seed validation 4, iteration 1 (analyzer, rejected) 6: at budget 19, 9 are left, less
    than the 10 an iteration may need (two minibatches of 3, the child's validation of 4). The
    old rule (two minibatches) started iteration 2, whose coder child was accepted and then
    could not be validated: 6 rollouts spent on an improvement that was dropped."""
    ctx = fake_context(budget=budget)
    result = run(ctx)
    assert ctx.ledger.charged == charged
    assert (KEYWORD in result["coder"]) is found
    assert sorted({c["iteration"] for c in ctx.calls}) == ([0, 1, 2] if found else [0, 1])
    assert [p["rejected_by"] for p in ctx.proposals] == ["minibatch", None][:1 + found]


def test_every_proposal_is_recorded_with_gepa_s_verdict() -> None:
    ctx = fake_context(budget=20)
    result = run(ctx)
    assert result == {**SEED, "coder": WITH_KEYWORD["coder"]}
    assert ctx.proposals == [
        {"bundle": {**SEED, "analyzer": WITH_KEYWORD["analyzer"]}, "parent": SEED_HASH,
         "roles": ["analyzer"], "accepted": False, "scores": {"parent": 0.0, "child": 0.0},
         "scored_on": "minibatch", "rejected_by": "minibatch",
         "reason": "New subsample score 0.0 not better than old score 0.0", "iteration": 1,
         "charged": 10},
        {"bundle": result, "parent": SEED_HASH, "roles": ["coder"], "accepted": True,
         "scores": {"parent": 0.0, "child": 1.0}, "scored_on": "minibatch", "rejected_by": None,
         "reason": "gepa candidate 1", "iteration": 2, "charged": 20},  # after its validation
    ]


def test_a_child_the_budget_cannot_validate_is_rejected_by_the_gate() -> None:
    """Something else holds budget while the coder is reflected on: the child's minibatch (3)
    still fits, its validation (4) does not."""
    ctx = fake_context(budget=60)
    held = []

    def hold_budget(prompt: str, purpose: str) -> str:
        if purpose.endswith(":coder"):
            held.append(ctx.ledger.reserve(ctx.ledger.available - 3, exact=True))
        return keyword_proposal(prompt, purpose)

    ctx.script = hold_budget
    assert run(ctx) == SEED
    last = ctx.proposals[-1]
    assert (last["roles"], last["accepted"], last["rejected_by"], last["scored_on"]) == (
        ["coder"], False, "budget", "minibatch")
    assert last["scores"] == {"parent": 0.0, "child": 1.0}
    assert last["reason"] == ("accepted on the minibatch, but the budget cannot pay for its "
                              "validation")
    assert [p["rejected_by"] for p in ctx.proposals] == ["minibatch", "budget"]


def test_a_merge_is_recorded_and_its_subsample_rows_are_not_paid_twice() -> None:
    ctx = three_kinds()
    run(ctx, minibatch=2)
    merges = [p for p in ctx.proposals if p["scored_on"] == "val_subsample"]
    assert len(merges) == 1
    merge = merges[0]
    first, second = ctx.candidates[1]["bundle"], ctx.candidates[2]["bundle"]
    assert merge["reason"] == "merge of gepa candidates 1 and 2; gepa candidate 3"
    assert merge["bundle"] == {"analyzer": first["analyzer"], "coder": second["coder"]}
    assert (merge["parent"], merge["roles"], merge["accepted"]) == (
        bundle_hash(first), ["coder"], True)
    assert set(merge["scores"]) == {"parent", "other_parent", "child"}
    assert merge["scores"]["child"] >= max(merge["scores"]["parent"],
                                           merge["scores"]["other_parent"])
    # the merged candidate's full validation replays the rows its subsample ran
    merged = [c for c in ctx.calls
              if c["bundle"] == merge["bundle"] and c["iteration"] == merge["iteration"]]
    assert sorted(c["problem"] for c in merged) == [f"v{i}" for i in range(6)]
    assert ctx.replays > 0 and ctx.ledger.charged == len(ctx.calls)


def test_a_checkpoint_after_every_iteration() -> None:
    ctx = fake_context(budget=20)
    result = run(ctx)
    assert [c["state"] for c in ctx.checkpoints] == [
        {"method": "gepa", "iteration": 1, "candidates": [SEED_HASH], "best": SEED_HASH,
         "best_score": 0.0, "charged": 10, "proposals": 1},
        {"method": "gepa", "iteration": 2, "candidates": [SEED_HASH, bundle_hash(result)],
         "best": bundle_hash(result), "best_score": 1.0, "charged": 20, "proposals": 2},
    ]


def _answers_of(first: FakeContext) -> Callable[[str, str], str]:
    """A reflection script that gives `first`'s answers in order, checking that each prompt
    is the one `first` was asked (gepa and our prompts are deterministic)."""
    asked = iter(first.reflections)

    def answer(prompt: str, purpose: str) -> str:
        call = next(asked)
        assert (purpose, prompt) == (call["purpose"], call["prompt"])
        return call["reply"]

    return answer


def _without_charged(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in {"charged", "thread"}} for r in records]


def test_a_resumed_run_retraces_the_path_and_charges_nothing() -> None:
    first = three_kinds()
    result = run(first, minibatch=2)
    assert len(first.checkpoints) > 3 and first.replays > 0
    again = three_kinds(script=_answers_of(first), restored=first.checkpoints[-1]["state"])
    again._journal = dict(first._journal)
    assert run(again, minibatch=2) == result
    assert (again.calls, again.ledger.charged) == ([], 0)
    assert again.replays == first.ledger.charged + first.replays  # every rollout served again
    assert len(again.reflections) == len(first.reflections)
    assert _without_charged(again.proposals) == _without_charged(first.proposals)
    assert _without_charged(again.candidates) == _without_charged(first.candidates)
    # the retraced iterations are not checkpointed again; the last one is, once verified
    assert [c["state"] for c in again.checkpoints] == [first.checkpoints[-1]["state"]]


def test_a_run_killed_mid_iteration_continues_where_it_stopped() -> None:
    first = three_kinds()
    result = run(first, minibatch=2)
    saved = first.checkpoints[2]
    done = saved["ledger"]["charged"] + 2  # two rollouts of the next iteration had finished
    journal = dict(list(first._journal.items())[:done])
    again = three_kinds(restored=saved["state"])
    again._journal = dict(journal)
    assert run(again, minibatch=2) == result
    assert again.ledger.charged == first.ledger.charged - done  # nothing charged twice
    key = [(c["problem"], c["iteration"], bundle_hash(c["bundle"])) for c in first.calls]
    rerun = [(c["problem"], c["iteration"], bundle_hash(c["bundle"])) for c in again.calls]
    journaled = {(pid, it, digest) for digest, pid, it, _ in journal}
    assert sorted(rerun) == sorted(k for k in key if k not in journaled)
    assert _without_charged(again.proposals) == _without_charged(first.proposals)
    assert [c["state"] for c in again.checkpoints] == [
        c["state"] for c in first.checkpoints[2:]]


def test_a_resumed_run_that_takes_another_path_stops_with_a_clear_error() -> None:
    first = fake_context(budget=20)
    run(first)
    saved = {**first.checkpoints[0]["state"], "candidates": ["0123456789abcdef"]}
    again = fake_context(budget=20, restored=saved)
    with pytest.raises(ResumeDivergence, match=r"iteration 1 \(candidates: saved"):
        run(again)
    assert len(again.calls) == 10  # it stopped at the end of the diverging iteration


def test_a_resumed_run_that_ends_before_the_checkpoint_is_an_error() -> None:
    first = fake_context(budget=20)
    run(first)
    saved = {**first.checkpoints[-1]["state"], "iteration": 7}
    with pytest.raises(ResumeDivergence, match="before the checkpointed iteration 7"):
        run(fake_context(budget=20, restored=saved))


def test_an_iteration_cut_by_an_error_is_not_checkpointed_so_the_rerun_resumes():
    """A reflection failure mid-iteration: no false budget record, no checkpoint of the cut
    iteration; the rerun after the fix retraces the whole path without a new charge."""
    from lcb.optimize.method import ReflectionError
    from tests.helpers_methods import keyword_proposal

    calls = {"n": 0}

    def flaky(prompt, purpose):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ReflectionError("reflection endpoint timed out after retries")
        return keyword_proposal(prompt, purpose)

    first = fake_context(budget=40, script=flaky)
    with pytest.raises(ReflectionError):
        asyncio.run(make().optimize(first))
    assert all(p["rejected_by"] != "budget" for p in first.proposals)
    cut = first.checkpoints[-1]["state"]
    again = fake_context(budget=40, restored=cut)
    again._journal = dict(first._journal)
    asyncio.run(make().optimize(again))
    assert again.calls  # the iterations past the cut ran afresh ...
    journaled = {(bundle_hash(c["bundle"]), c["problem"], c["iteration"]) for c in first.calls}
    rerun = {(bundle_hash(c["bundle"]), c["problem"], c["iteration"]) for c in again.calls}
    assert not journaled & rerun  # ... and nothing journaled before the cut ran twice


def test_a_row_lost_to_infrastructure_stays_lost_on_a_resume():
    first = fake_context(budget=40, infra_fail=frozenset({"v0"}))
    asyncio.run(make().optimize(first))
    assert first.ledger.abandoned > 0
    again = fake_context(budget=40, restored=first.checkpoints[-1]["state"])  # healthy now
    again._journal = dict(first._journal)
    assert asyncio.run(make().optimize(again)) == asyncio.run(make().optimize(
        fake_context(budget=40, infra_fail=frozenset({"v0"}))))
    assert again.calls == []

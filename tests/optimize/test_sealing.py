"""What a method may learn of its rows (issue #25): validation labels sealed, `--feedback
verdict`, and `--selection train` (the gate a held-out test for every method), through real
jobs against the scripted server."""

import asyncio
import json

import pytest

from lcb.optimize import methods
from lcb.optimize.artifacts import JobResult, JobSpec, read_model
from lcb.optimize.job import run_job
from lcb.optimize.sealing import LabelsHidden, carve_selection, selection_size
from lcb.optimize.splits import load_optimizer_data
from tests.helpers_agents import fenced
from tests.helpers_optimize import (
    Probe,
    TeamModel,
    job_config,
    job_context,
    sample_problems,
    sample_splits,
)
from tests.scripted_server import scripted_fixture  # noqa: F401

SPLITS = sample_splits()


def test_a_method_cannot_read_the_hidden_tests_of_its_selection_set():
    data = load_optimizer_data(SPLITS, data="sample")
    sealed = data.validation[0]
    for read in (list, len, bool, lambda tests: tests[0]):
        with pytest.raises(LabelsHidden, match="not the method's to read"):
            read(sealed.private_tests)
    with pytest.raises(LabelsHidden):
        list(data.problem(sealed.id).hidden_tests)
    assert all(p.private_tests for p in data.train)  # train rows keep theirs
    assert hash(sealed) == hash(data.validation[0]) and "HiddenTests" in repr(sealed)


class Reader(Probe):
    """A method that tries to read a validation row's expected outputs."""

    async def optimize(self, ctx):
        return {"tests": [t.output for t in ctx.data.validation[0].private_tests]}


@pytest.mark.slow
def test_a_job_whose_method_reads_validation_labels_fails_with_the_rule(scripted, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setitem(methods.OPTIMIZERS, "probe", Reader)
    server = scripted(TeamModel(sample_problems()))
    with pytest.raises(LabelsHidden):
        asyncio.run(run_job(job_config(server.base_url, tmp_path / "job", method="probe")))


def _failing_feedback(server_url, tmp_path, feedback):
    """One wrong rollout on a train row and one on a validation row: what the method sees."""
    wrong = {SPLITS.train[0], SPLITS.validation[0]}

    async def main(server):
        async with job_context(server.base_url, tmp_path / feedback, budget=4) as ctx:
            ctx._evaluator.feedback = feedback
            rows = [ctx.data.problem(i) for i in sorted(wrong)]
            return {r.problem_id: r for r in await ctx.rollouts(ctx.seed_bundle, rows,
                                                                iteration=1)}

    return wrong, main


@pytest.mark.parametrize("feedback", ["full", "verdict"])
def test_rollouts_on_validation_rows_never_carry_an_expected_output(scripted, tmp_path,
                                                                     feedback):
    wrong = {SPLITS.train[0], SPLITS.validation[0]}
    server = scripted(TeamModel(sample_problems(), wrong=frozenset(wrong)))
    _, main = _failing_feedback(server.base_url, tmp_path, feedback)
    seen = asyncio.run(main(server))
    train, validation = seen[SPLITS.train[0]], seen[SPLITS.validation[0]]
    for rollout in (train, validation):
        assert rollout.score == 0.0 and "failed: wrong_answer" in rollout.feedback
    labelled = [train] if feedback == "full" else []
    for rollout in (train, validation):
        shown = rollout in labelled
        assert ("expected output:" in rollout.feedback) is shown
        assert ("input:" in rollout.feedback) is shown
        assert bool(rollout.grade.feedback.expected) is shown
    journal = [json.loads(line) for line in
               (tmp_path / feedback / "rollouts.jsonl").read_text().splitlines()]
    assert all("expected output:" in line["feedback"] for line in journal)  # the audit keeps all


def test_the_carved_selection_set_is_fixed_and_as_large_as_validation():
    train, chosen = carve_selection(SPLITS.train, selection_size(8, 3))
    assert len(chosen) == 3 and set(train) | set(chosen) == set(SPLITS.train)
    assert not set(train) & set(chosen)
    assert (train, chosen) == carve_selection(SPLITS.train, 3)  # the same for every job
    assert selection_size(150, 50) == 50 and selection_size(8, 3) == 3


def _job(scripted, tmp_path, monkeypatch, **config):
    probe = Probe(passes=1)
    monkeypatch.setitem(methods.OPTIMIZERS, "probe", lambda: probe)
    model = TeamModel(sample_problems())
    server = scripted(model)
    asyncio.run(run_job(job_config(server.base_url, tmp_path / "job", method="probe",
                                   budget=20, **config)))
    result = read_model(tmp_path / "job" / "result.json", JobResult)
    spec = read_model(tmp_path / "job" / "job.json", JobSpec)
    sampled = [model.problem_of(r) for r in server.chat_requests() if r.get("temperature")]
    return probe, {p.id for p in sampled if p is not None}, result, spec


@pytest.mark.slow
def test_selection_train_runs_no_validation_row_before_the_gate(scripted, tmp_path,
                                                                 monkeypatch):
    probe, optimized, result, spec = _job(scripted, tmp_path, monkeypatch, selection="train")
    assert optimized and not optimized & set(SPLITS.validation)  # the sampled optimize phase
    assert set(probe.seen_ids) <= set(SPLITS.train)  # train and the carved set, both from train
    train, chosen = carve_selection(SPLITS.train, 3)
    assert spec.selection_split == {"seed": spec.selection_split["seed"], "train": list(train),
                                    "selection": list(chosen)}
    assert "selection='train' (expected: validation)" in spec.deviations
    assert result.cost["gate"] == "held_out"
    assert result.cost["rows"] == {"train": 8, "validation": 0}


@pytest.mark.slow
def test_a_method_that_ran_validation_rows_is_recorded_as_reusing_the_gate(scripted, tmp_path,
                                                                            monkeypatch):
    _, optimized, result, spec = _job(scripted, tmp_path, monkeypatch)
    assert optimized == set(SPLITS.train) | set(SPLITS.validation)
    assert spec.selection == "validation" and spec.selection_split is None
    assert result.cost["gate"] == "reused"
    assert result.cost["rows"] == {"train": 8, "validation": 3}


LEAKY = ("import sys\ndata = sys.stdin.read()\nsys.stderr.write('LEAK<' + data + '>')\n"
         "raise ValueError('bad input: ' + data)")


class LeakyModel(TeamModel):
    """Answers the wrong rows with a program that writes its input to stderr and raises with it."""

    def __call__(self, request):
        problem = self.problem_of(request)
        if problem is not None and problem.id in self.wrong:
            return fenced(LEAKY)
        return super().__call__(request)


def test_a_programs_error_text_carries_no_input_of_a_sealed_row(scripted, tmp_path):
    wrong = frozenset({SPLITS.train[0], SPLITS.validation[0]})
    server = scripted(LeakyModel(sample_problems(), wrong=wrong))

    async def main():
        async with job_context(server.base_url, tmp_path / "job", budget=4) as ctx:
            assert not hasattr(ctx, "journal") and not hasattr(ctx, "evaluator")
            rows = [ctx.data.problem(i) for i in sorted(wrong)]
            return {r.problem_id: r for r in await ctx.rollouts(ctx.seed_bundle, rows,
                                                                iteration=1)}

    seen = asyncio.run(main())
    sealed, train = seen[SPLITS.validation[0]], seen[SPLITS.train[0]]
    assert "LEAK<" not in sealed.feedback and "bad input" not in sealed.feedback
    assert sealed.grade.feedback.error == "ValueError" and "ValueError" in sealed.feedback
    assert "LEAK<" in train.feedback  # a train row's failure is shown whole (--feedback full)


def test_selection_train_needs_two_train_rows_to_carve_from():
    from lcb.optimize.splits import SplitError, Splits, selection_rows

    tiny = Splits(train=("t0",), validation=("v0",), test=("x0",))
    with pytest.raises(SplitError, match="at least 2 train rows"):
        selection_rows(tiny, "train")
    assert selection_rows(tiny, "validation") == (("t0",), ("v0",))

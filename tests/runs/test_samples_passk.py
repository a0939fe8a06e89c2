"""Several samples per problem: seeds, records, resume, pass@k by hand, the bootstrap interval."""

import asyncio
import io
import json
from fractions import Fraction
from math import comb
from random import Random

import pytest

from lcb.runs.config import RunConfig
from lcb.runs.outcomes import sample_seed
from lcb.runs.records import read_records, record_key, summarize
from lcb.runs.rundir import read_transcript
from lcb.runs.runner import run_batch
from lcb.stats import bootstrap_ci, estimate_pass_at_k, pass_at_k, problem_rates
from tests.helpers_runner import (
    RIGHT,
    WRONG,
    marker,
    problem_ids,
    read_lines,
    run_config,
    script,
    write_problems,
)
from tests.scripted_server import failures, scripted_fixture  # noqa: F401


def run(config) -> dict:
    return asyncio.run(run_batch(config, stream=io.StringIO(), plain=True))


def seeds_of(server, qid: str) -> list[int]:
    """The request seeds the server saw for problem `qid`, in arrival order."""
    return [body["seed"] for body in server.chat_requests()
            if marker(qid) in json.dumps(body["messages"])]


# --- the estimator, by hand ------------------------------------------------------------------

@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (10, 3, 5, 1 - Fraction(21, 252)),  # 1 - C(7,5)/C(10,5) = 11/12
    (4, 2, 2, 1 - Fraction(1, 6)),  # 1 - C(2,2)/C(4,2)
    (6, 1, 5, 1 - Fraction(1, 6)),  # 1 - C(5,5)/C(6,5)
    (10, 8, 5, 1),  # fewer than k failures: every draw of 5 holds a pass
    (10, 0, 10, 0),
    (7, 3, 1, Fraction(3, 7)),
    (200, 1, 10, Fraction(10, 200)),  # C(199,10)/C(200,10) = 190/200: huge binomials, exact
])
def test_estimator_matches_the_hand_computation(n, c, k, expected):
    assert estimate_pass_at_k(n, c, k) == float(expected)


def test_estimator_stays_exact_where_floats_would_overflow():
    n, c, k = 2000, 3, 10  # C(2000, 10) ~ 2.8e26: fine as integers
    exact = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert estimate_pass_at_k(n, c, k) == float(exact)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 1, 5), (4, 1, 0)])
def test_estimator_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass@"):
        estimate_pass_at_k(n, c, k)


def test_pass_at_k_reports_only_the_ks_every_problem_has_enough_programs_for():
    six = [("a", 1)] + [("a", 0)] * 5 + [("b", 0)] * 6
    assert pass_at_k(six) == {"1": (1 / 6 + 0) / 2, "5": (5 / 6 + 0) / 2}
    ten = [("a", 1)] * 3 + [("a", 0)] * 7 + [("b", 0)] * 9 + [("b", 1)]
    assert pass_at_k(ten) == {"1": (0.3 + 0.1) / 2, "5": (11 / 12 + 0.5) / 2, "10": 1.0}
    assert pass_at_k(ten + [("c", 1)]) == {"1": (0.3 + 0.1 + 1) / 3}  # c has one program
    assert pass_at_k([]) == {"1": 0.0}


def test_bootstrap_is_the_stated_percentile_interval_with_a_fixed_seed():
    rates = [0.25, 1.0, 0.0, 0.5, 0.75]
    rng = Random(0)  # the documented draw: index int(random() * m), 1000 resamples
    means = sorted(sum(rates[int(rng.random() * 5)] for _ in range(5)) / 5 for _ in range(1000))
    assert bootstrap_ci(rates) == {"level": 0.95, "low": means[25], "high": means[974],
                                   "resamples": 1000, "seed": 0}
    assert bootstrap_ci(rates) == bootstrap_ci(list(rates))  # the same on every call
    assert bootstrap_ci([0.5, 0.5, 0.5])["low"] == bootstrap_ci([0.5] * 3)["high"] == 0.5
    assert bootstrap_ci([])["low"] is None and bootstrap_ci([])["high"] is None


def test_sample_seeds_keep_sample_0_and_differ_after():
    assert sample_seed(0, 0) == 0 and sample_seed(123, 0) == 123
    seeds = [sample_seed(5, s) for s in range(1, 50)]
    assert len(set(seeds)) == 49 and 5 not in seeds
    assert all(0 <= s < 2**31 for s in seeds)
    assert sample_seed(5, 3) == sample_seed(5, 3) != sample_seed(6, 3)
    with pytest.raises(ValueError):
        sample_seed(0, -1)


def test_samples_must_be_a_positive_whole_number(tmp_path):
    data = write_problems(tmp_path / "rows.jsonl", problem_ids(1))
    for bad in (0, -2, True, 1.5):
        with pytest.raises(ValueError, match="samples"):
            run_config("http://127.0.0.1:9/v1", data, tmp_path / "out", samples=bad)
    assert RunConfig.__dataclass_fields__["samples"].default == 1


# --- batches with several samples -------------------------------------------------------------

def test_four_samples_give_the_hand_computed_pass_at_k(scripted, tmp_path):
    ids = problem_ids(4)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    # Solved on 1, 4, 0 and 2 of the 4 samples (the order in which samples ask does not matter).
    plan = {ids[0]: [RIGHT, WRONG, WRONG, WRONG], ids[1]: [RIGHT] * 4,
            ids[2]: [WRONG] * 4, ids[3]: [WRONG, RIGHT, RIGHT, WRONG]}
    server = scripted(script(plan))
    summary = run(run_config(server.base_url, data, tmp_path / "out", samples=4))

    records = read_records(tmp_path / "out" / "predictions.jsonl")
    assert sorted(record_key(r) for r in records) == [(q, s) for q in ids for s in range(4)]
    assert all(r["n_llm_calls"] == 1 and r["seed"] == 0 for r in records)
    solved = {q: sum(r["em"] for r in records if r["id"] == q) for q in ids}
    assert solved == {ids[0]: 1, ids[1]: 4, ids[2]: 0, ids[3]: 2}
    for qid in ids:  # four requests per problem, each with a seed of its own
        assert len(set(seeds_of(server, qid))) == 4

    pass1 = (1 / 4 + 4 / 4 + 0 / 4 + 2 / 4) / 4  # per problem, then over problems: 0.4375
    assert summary["em"] == pass1 == 0.4375
    assert summary["pass_at_k"] == {"1": 0.4375}  # 5 and 10 exceed 4 samples
    assert (summary["n"], summary["n_problems"], summary["samples_per_problem"]) == (16, 4, 4)
    assert (summary["solved"], summary["samples"], summary["complete"]) == (7, 4, True)
    assert summary["ci"] == bootstrap_ci([0.25, 1.0, 0.0, 0.5])
    assert summary["ci"]["low"] <= pass1 <= summary["ci"]["high"]
    assert summary["n_pending_at_start"] == 16 and summary["n_missing"] == 0

    out = tmp_path / "out" / "transcripts"
    assert read_transcript(out / f"{ids[0]}.json.gz")["sample"] == 0
    assert read_transcript(out / "sample_3" / f"{ids[0]}.json.gz")["sample"] == 3


def test_ten_samples_give_the_hand_computed_pass_at_5_and_10(scripted, tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    plan = {ids[0]: [RIGHT] * 3 + [WRONG] * 7, ids[1]: [WRONG] * 10}
    server = scripted(script(plan))
    summary = run(run_config(server.base_url, data, tmp_path / "out", samples=10))
    # ids[0]: n=10, c=3: pass@5 = 1 - C(7,5)/C(10,5) = 11/12, pass@10 = 1. ids[1]: all 0.
    assert summary["pass_at_k"] == {"1": (0.3 + 0) / 2, "5": (11 / 12 + 0) / 2, "10": 0.5}
    assert summary["em"] == 0.15 and summary["n"] == 20


def test_one_sample_keeps_todays_seeds_records_and_numbers(scripted, tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    one = scripted(script({ids[0]: [RIGHT], ids[1]: [WRONG]}))
    summary = run(run_config(one.base_url, data, tmp_path / "one"))
    records = read_lines(tmp_path / "one" / "predictions.jsonl")
    assert [r["sample"] for r in records] == [0, 0]
    assert (summary["n"], summary["n_problems"], summary["em"]) == (2, 2, 0.5)
    assert summary["pass_at_k"] == {"1": 0.5} and summary["samples_per_problem"] == 1

    four = scripted(script({ids[0]: [RIGHT], ids[1]: [WRONG]}))
    run(run_config(four.base_url, data, tmp_path / "four", samples=4))
    for qid in ids:  # sample 0 of a 4-sample batch sends the seed a 1-sample batch sends
        [seed] = seeds_of(one, qid)
        assert seed in seeds_of(four, qid)
    four_records = read_records(tmp_path / "four" / "predictions.jsonl")
    first = {r["id"]: r for r in four_records if r["sample"] == 0}
    assert all(first[r["id"]]["em"] == r["em"] for r in records)


def test_resume_with_more_samples_runs_only_the_new_ones(scripted, tmp_path):
    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    out = tmp_path / "out"
    first = scripted(script({ids[0]: [RIGHT, WRONG], ids[1]: [WRONG]}))
    two = run(run_config(first.base_url, data, out, samples=2))
    assert (two["n"], two["em"]) == (4, 0.25)
    kept = (out / "predictions.jsonl").read_text()

    second = scripted(script({ids[0]: [RIGHT], ids[1]: [RIGHT, WRONG]}))
    four = run(run_config(second.base_url, data, out, samples=4, resume=True))
    assert (out / "predictions.jsonl").read_text().startswith(kept)  # old records untouched
    records = read_records(out / "predictions.jsonl")
    assert sorted(record_key(r) for r in records) == [(q, s) for q in ids for s in range(4)]
    for qid in ids:  # two new samples per problem, with seeds the first session never sent
        assert len(seeds_of(second, qid)) == 2
        assert not set(seeds_of(second, qid)) & set(seeds_of(first, qid))
    # ids[0]: 1 of 2, then 2 of 2 -> 3/4; ids[1]: 0 of 2, then 1 of 2 -> 1/4.
    assert four["em"] == (3 / 4 + 1 / 4) / 2
    assert (four["n_pending_at_start"], four["complete"]) == (4, True)

    again = scripted(script({}))
    done = run(run_config(again.base_url, data, out, samples=4, resume=True))
    assert done["n_pending_at_start"] == 0 and again.chat_requests() == []


def test_retry_errors_reruns_only_the_failed_sample(scripted, tmp_path):
    [qid] = problem_ids(1)
    data = write_problems(tmp_path / "rows.jsonl", [qid])
    out = tmp_path / "out"
    # One problem at a time, samples in order: sample 0 is answered, sample 1 meets a dead server.
    down = scripted(script({qid: [RIGHT, *failures(50)]}))
    run(run_config(down.base_url, data, out, samples=2, concurrency=1))
    before = {r["sample"]: r for r in read_records(out / "predictions.jsonl")}
    assert before[0]["error"] is None and before[1]["error"]

    back = scripted(script({qid: [WRONG]}))
    summary = run(run_config(back.base_url, data, out, samples=2, resume=True,
                             retry_errors=True))
    assert len(seeds_of(back, qid)) == 1 and seeds_of(back, qid)[0] in seeds_of(down, qid)
    after = {r["sample"]: r for r in read_records(out / "predictions.jsonl")}
    assert after[0] == before[0] and after[1]["error"] is None and after[1]["em"] == 0
    aside = read_records(out / "predictions.errors.jsonl")
    assert [(r["id"], r["sample"]) for r in aside] == [(qid, 1)]
    assert summary["em"] == 0.5


def test_resume_moves_a_repeated_sample_aside_but_keeps_other_samples(scripted, tmp_path):
    ids = problem_ids(1)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    out = tmp_path / "preds.jsonl"
    rows = [{"id": ids[0], "em": 1, "sample": 0}, {"id": ids[0], "em": 0, "sample": 1},
            {"id": ids[0], "em": 0, "sample": 1, "note": "repeat"}]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server = scripted(script({}))
    summary = run(run_config(server.base_url, data, out=out, samples=2, resume=True))
    assert read_records(out) == rows[:2] and server.chat_requests() == []
    assert read_records(out.with_name("preds.duplicates.jsonl")) == rows[2:]
    assert summary["em"] == 0.5


def test_summary_refuses_a_repeated_sample_but_not_a_repeated_id():
    from lcb.runs.records import RecordsError

    assert summarize([{"id": "a", "em": 1}, {"id": "a", "em": 0, "sample": 1}])["em"] == 0.5
    with pytest.raises(RecordsError, match="'a' sample 1 appears more than once"):
        summarize([{"id": "a", "em": 1, "sample": 1}, {"id": "a", "em": 0, "sample": 1}])


def test_problem_rates_are_per_problem_shares_in_first_seen_order():
    assert problem_rates([("b", 1), ("a", 0), ("b", 0), ("a", 0)]) == [0.5, 0.0]


def test_lcb_run_samples_flag_reaches_the_batch_and_its_table(scripted, tmp_path):
    from typer.testing import CliRunner

    from lcb.cli import app
    from tests.helpers_runner import MODEL

    ids = problem_ids(2)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({ids[0]: [RIGHT, WRONG, WRONG], ids[1]: [WRONG]}))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", "--data", str(data), "--out-dir", str(out),
                                      "--samples", "3"],
                                env={"VLLM_BASE_URL": server.base_url, "MODEL_ID": MODEL})
    assert result.exit_code == 0, result.output
    records = read_records(out / "predictions.jsonl")
    assert sorted(record_key(r) for r in records) == [(q, s) for q in ids for s in range(3)]
    assert "problems" in result.output and "pass@1 0.167" in result.output  # (1/3 + 0) / 2
    assert json.loads((out / "manifest.json").read_text())["config"]["samples"] == 3


def test_missing_as_fail_counts_a_missing_problem_as_failing_every_sample():
    from lcb.data.datasets import load_problems
    from lcb.runs.scoring import summarize_scores

    problems = {p.id: p for p in load_problems("sample").problems[:3]}
    ids = list(problems)
    lines = [{"id": pid, "sample": s, "em": int(s == 0), "has_code": True,
              "difficulty": problems[pid].difficulty, "platform": problems[pid].platform}
             for pid in ids[:2] for s in range(6)]
    summary = summarize_scores(lines, selected=problems, missing_as_fail=True)
    # pass@k of each problem: 1/6 and 5/6 for the two predicted, 0 for the missing one
    assert summary["pass_at_k"] == pytest.approx({"1": (1 / 6 + 1 / 6) / 3,
                                                  "5": (5 / 6 + 5 / 6) / 3})
    assert summary["n_missing"] == 1 and summary["n_problems"] == 3

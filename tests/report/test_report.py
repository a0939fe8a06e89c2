"""`lcb report` on real fixture runs, `lcb score` results and a small optimizer grid: the numbers
of report.json checked against counts made by hand from the fixture's tables
(`tests.helpers_report`), and the pages checked for what they show and what they must not.
Small hand-made runs, results and jobs check one property each: hostile labels, unreadable
files (named, nothing written), a report replacing an earlier one, grids over several
datasets and models, `--missing-as-fail` results and `lcb compare`'s labels."""

import json
import math
import re
from pathlib import Path

import pytest

from lcb.report.aggregates import _pareto, build, grader_disagreements
from lcb.report.collect import Condition, collect, unique_labels
from lcb.report.flips import first_outcomes
from lcb.report.metrics import health, outcome, provenance, scores
from lcb.report.pages import report_size, write_report
from tests.helpers_report import (
    BROKEN,
    EDITED,
    GRID,
    IDS,
    OUTCOMES,
    REFLECT,
    TEAMS,
    TOOL_TROUBLE,
    bootstrap_interval,
    break_input,
    built_report,
    invoke,
    official_available,
    write_big_grid,
    write_job,
    write_results,
    write_run,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return built_report(tmp_path_factory)


def condition(report, label):
    return next(c for c in report["conditions"] if c["label"] == label)


def solved(team):
    return [1 if o == 1 else 0 for o in OUTCOMES[team]]


@pytest.mark.parametrize("team", TEAMS)
def test_pass_at_1_rates_and_outcomes_match_the_fixture_table(built, team):
    _, _, report = built
    row = condition(report, team)
    outcomes = OUTCOMES[team]
    scores, health = row["scores"], row["health"]
    assert scores["em"] == pytest.approx(outcomes.count(1) / 6)
    assert scores["extracted_rate"] == pytest.approx(
        sum(o in (0, 1) for o in outcomes) / 6)
    assert scores["truncation_rate"] == 0.0
    assert (health["solved"], health["wrong"], health["no_code"], health["infra_error"]) == (
        outcomes.count(1), outcomes.count(0), outcomes.count("N"), outcomes.count("E"))
    assert row["provenance"]["topology"] == team
    assert row["provenance"]["team_size"] == (1 if team == "single" else 4)


def test_tokens_wall_time_and_ci_come_from_the_run_files(built):
    root, _, report = built
    for team in TEAMS:
        folder = root / "runs" / team
        lines = [json.loads(x) for x in (folder / "predictions.jsonl").read_text().splitlines()]
        tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in lines)
        written = json.loads((folder / "summary.json").read_text())
        scores = condition(report, team)["scores"]
        assert scores["tokens"] == tokens
        assert scores["tokens_per_problem"] == scores["tokens_per_sample"] == pytest.approx(
            tokens / 6)  # one sample per problem
        assert scores["tokens_per_solved_sample"] == pytest.approx(
            tokens / OUTCOMES[team].count(1))
        assert scores["wall_s"] == written["wall_s_total"]
        # the fixture's outcome table, in the order the run wrote its records
        by_id = dict(zip(IDS, solved(team), strict=True))
        rates = [float(by_id[r["id"]]) for r in lines]
        assert (scores["ci"]["low"], scores["ci"]["high"]) == bootstrap_interval(rates)
        assert scores["ci"]["low"] <= scores["em"] <= scores["ci"]["high"]
    # and by hand, single (3 of 6): a resample mean is Bin(6, 1/2) / 6, which puts 1.6 % on 0
    # and 10.9 % on at most 1/6 (mirror: 5/6), so its 2.5 % ends are 1/6 and 5/6
    single = condition(report, "single")["scores"]["ci"]
    assert (single["low"], single["high"]) == pytest.approx((1 / 6, 5 / 6))


def test_transcript_counts_tool_calls_and_llm_calls(built):
    _, _, report = built
    single = condition(report, "single")["health"]
    # the single agent calls python_exec once on each problem it solves, then answers
    assert single["tool_calls"] == 3
    assert single["llm_calls"] == 3 * 2 + 3
    assert single["cache_hits"] == 0 and single["tool_errors"] == 0
    assert condition(report, "single_default")["health"]["llm_calls"] is None


def test_provenance_of_runs_and_results(built):
    root, _, report = built
    prov = condition(report, "sequential")["provenance"]
    assert prov["grader"] == "default" and prov["model"] == "scripted-model"
    assert prov["dataset"] == f"local: {root.name}/rows.jsonl"  # relative to the inputs' folder
    assert prov["path"] == f"{root.name}/runs/sequential"
    assert prov["window"] == ["2023-08-21", "2023-08-21"]
    assert prov["seeds"] == [0] and prov["communication"] == "freeform"
    assert prov["sampling"] == {"temperature": 0.2, "top_p": 0.9, "max_tokens": 4096}
    assert prov["release"] is None and prov["contamination_note"] is None  # local data
    assert condition(report, "single_default")["provenance"]["kind"] == "score"
    # the optimizer jobs ran on the hub's release_v1: the index says what that window means
    assert "most exposed to contamination" in report["notes"]["contamination"]


@pytest.mark.parametrize("team", TEAMS[1:])
def test_flips_against_single_match_hand_counts(built, team):
    _, _, report = built
    assert report["baseline"] == "single"
    pair = next(p for p in report["flips"]["pairs"] if p["other"] == team)
    base, other = solved("single"), solved(team)
    improved = sum(1 for a, b in zip(base, other, strict=True) if b > a)
    regressed = sum(1 for a, b in zip(base, other, strict=True) if a > b)
    assert pair["counts"]["improved"] == improved
    assert pair["counts"]["regressed"] == regressed
    assert pair["counts"]["both_right"] == sum(a and b for a, b in zip(base, other, strict=True))
    assert pair["delta"] == pytest.approx(100 * (sum(other) - sum(base)) / 6)
    # exact McNemar by hand: 2 * P(X <= min(b, c)), X ~ Bin(b + c, 1/2)
    n = improved + regressed
    hand = min(1.0, 2 * sum(math.comb(n, i) for i in range(min(improved, regressed) + 1))
               / 2 ** n) if n else 1.0
    assert pair["p_mcnemar"] == pytest.approx(hand)
    assert [report["flips"]["matrix"][pid][team] for pid in IDS] == other


def test_single_vs_decentralized_by_hand(built):
    _, _, report = built
    pair = next(p for p in report["flips"]["pairs"] if p["other"] == "decentralized")
    # single 1 1 0 N 0 1, decentralized 0 1 1 1 1 E: improved q002 q003 q004, regressed q000 q005
    assert pair["counts"] == {"improved": 3, "regressed": 2, "both_right": 1, "both_wrong": 0}
    assert pair["p_mcnemar"] == 1.0  # 2 * (1 + 5 + 10) / 32 = 1
    assert pair["delta"] == pytest.approx(100 / 6)


def test_teams_sit_beside_single_and_independent_at_equal_compute(built):
    _, _, report = built
    teams = {t["team"]: t for t in report["teams"]}
    assert set(teams) == {"sequential", "centralized", "decentralized"}
    assert teams["sequential"] == {"team": "sequential", "topology": "sequential", "agents": 4,
                                   "single": "single", "independent": "independent"}


def test_both_graders_agree_on_the_fixture_programs(built):
    _, _, report = built
    if not official_available():
        pytest.skip("the official grader (nvidia-livecodebench) is not installed")
    found = {(d["a"], d["b"]): d for d in report["grader_disagreements"]}
    pair = found[("single", "single_official")]
    assert pair["graders"] == ["default", "official"]
    assert (pair["n_compared"], pair["n_disagree"]) == (6, 0)


# --- the optimizer grid --------------------------------------------------------------------
def group(report, method, topology, conformant=True):
    return next(g for g in report["grid"]["groups"] if g["method"] == method
                and g["topology"] == topology and g["conformant"] == conformant)


def test_grid_deltas_and_mcnemar_by_hand(built):
    _, _, report = built
    g = group(report, "gepa", "single")
    # seed 0: 0 -> 11 of 12 solved (b 0, c 11); seed 1: 0 -> 12 of 12 (b 0, c 12)
    assert [s["delta"] for s in g["seeds"]] == pytest.approx([100 * 11 / 12, 100.0])
    assert g["delta_mean"] == pytest.approx((100 * 11 / 12 + 100) / 2)
    assert g["delta_std"] == pytest.approx((100 - 100 * 11 / 12) / math.sqrt(2))
    assert [s["p_mcnemar"] for s in g["seeds"]] == pytest.approx([2 / 2**11, 2 / 2**12])
    # Holm over all 8 seeds of (lcb, qwen): the two small p-values times 8 and 7
    assert [s["p_holm"] for s in g["seeds"]] == pytest.approx([7 * 2 / 2**11, 8 * 2 / 2**12])
    assert g["holm_significant"] and g["n_significant"] == 2
    # seed 0's bootstrap mean of 12 draws from eleven 1s and one 0: P(X <= 8) = 0.014 < 2.5 %
    # < P(X <= 9) = 0.072 for X ~ Bin(12, 11/12), so its low end is 9/12; seed 1 is always 100
    assert g["ci"] == pytest.approx([(75 + 100) / 2, 100.0])
    assert g["cost"]["charged_mean"] == 20
    assert g["cost"]["tokens_mean"]["reflect"] == REFLECT["prompt_tokens"] + REFLECT[
        "completion_tokens"]


def test_the_non_conformant_job_is_its_own_hatched_row(built):
    _, _, report = built
    odd = group(report, "gepa", "sequential", conformant=False)
    assert odd["n_seeds"] == 1 and odd["row"] == "gepa*"
    assert odd["delta_mean"] == pytest.approx(-100 / 6)
    kept = group(report, "gepa", "sequential")
    assert [s["seed"] for s in kept["seeds"]] == [0]
    assert not kept["holm_significant"]
    (layout,) = report["grid"]["heatmap"]  # one dataset × model: one panel
    assert (layout["dataset"], layout["model"]) == ("lcb", "qwen")
    assert layout["rows"] == ["gepa", "gepa*", "identity"]
    assert layout["columns"] == ["sequential", "single"]
    assert layout["cells"]["gepa*|sequential"]["slug"] == odd["slug"]
    identity = group(report, "identity", "single")
    assert identity["delta_mean"] == 0 and identity["seeds"][0]["p_mcnemar"] == 1.0
    assert len(report["grid"]["groups"]) == 5 and len(GRID) == 8


def test_cell_details_curve_lineage_and_prompt_diff(built):
    _, _, report = built
    detail = group(report, "gepa", "single")["details"][0]
    assert detail["why"].startswith("deployed: the incumbent scored strictly higher")
    assert detail["wall_s"] == 100.0
    assert [(p["charged"], p["score"]) for p in detail["curve"]] == [(4, 0.5), (20, 0.75)]
    assert [(p["charged"], p["score"]) for p in detail["rejected"]] == [(10, 0.25)]
    assert [e["kind"] for e in detail["lineage"]] == ["candidate", "proposal", "proposal",
                                                      "candidate"]
    parts = detail["prompt_diff"]["coder"]
    assert "".join(t for op, t in parts if op != "insert") == "Write the whole program."
    assert "".join(t for op, t in parts if op != "delete") == EDITED
    identity = group(report, "identity", "single")["details"][0]
    assert identity["why"] == "not deployed: the optimizer returned the seed bundle"


# --- pages and tables ----------------------------------------------------------------------
def test_index_links_every_cell_and_problem_page_and_holds_no_transcript(built):
    _, out, report = built
    index = (out / "index.html").read_text()
    for g in report["grid"]["groups"]:
        assert f'href="cells/{g["slug"]}.html"' in index
        assert (out / "cells" / f"{g['slug']}.html").is_file()
    for pid in IDS:
        assert f'href="problems/{pid}.html"' in index
    assert "pwned" not in index and "print(1 + 2)" not in index
    assert not re.search(r"(src|href)=\"(https?:)?//", index)
    assert index.count("<script") == 1  # ours, allowed by its hash in the CSP
    # ★: gepa on single, both seeds significant after Holm; identity's Δ 0 has none
    star = group(report, "gepa", "single")["slug"]
    assert re.search(rf'href="cells/{star}.html">\+95.8 ★\s*</a>', index)
    assert f'href="cells/{group(report, "identity", "single")["slug"]}.html">+0.0</a>' in index
    assert "+95.8 ★" in index.split('<table class="heatmap">')[0]  # the plot's cell text


def test_no_machine_path_in_the_report_folder(built):
    root, out, report = built
    for page in out.rglob("*"):
        if page.is_file():
            assert str(root.parent) not in page.read_text(), page
    assert [s["path"] for s in group(report, "gepa", "single")["seeds"]] == [
        f"{root.name}/grid/gepa/lcb/single/qwen/{seed}" for seed in (0, 1)]


def test_model_text_is_escaped_on_problem_and_cell_pages(built):
    _, out, report = built
    page = (out / "problems" / "q003.html").read_text()
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in page
    assert "<script>alert" not in page and page.count("<script") == 1
    cell = (out / "cells" / f"{group(report, 'gepa', 'single')['slug']}.html").read_text()
    assert "&lt;b&gt;bold&lt;/b&gt;" in cell and "<b>bold" not in cell


def test_problem_page_shows_feedback_tool_calls_and_a_diff(built):
    _, out, _ = built
    wrong = (out / "problems" / "q002.html").read_text()
    # single's program prints a - b: the first hidden test "0 1" expects 1 and gets -1
    assert re.search(r"expected</th><td class=\"l\"><pre>1\s*</pre>", wrong)
    assert re.search(r"got</th><td class=\"l\"><pre>-1\s*</pre>", wrong)
    assert "Program diff: single → independent" in wrong
    solved_page = (out / "problems" / "q000.html").read_text()
    assert "tool call <code>python_exec</code>" in solved_page
    assert "print(1 + 2)" in solved_page
    assert "Read two integers A and B" in solved_page  # the statement, folded


def test_tables_in_markdown_and_latex(built):
    _, out, _ = built
    runs_md = (out / "tables" / "runs.md").read_text()
    assert "| single | 6 | 50.0 |" in runs_md and "| decentralized | 6 | 66.7 |" in runs_md
    runs_tex = (out / "tables" / "runs.tex").read_text()
    assert r"\toprule" in runs_tex and r"single\_default" in runs_tex
    grid_md = (out / "tables" / "grid.md").read_text()
    assert ("| gepa | lcb | single | — | — | qwen | 2 | 0.0 | 95.8 | +95.8 ± 5.9 | "
            "[+87.5, +100.0] | unknown | unknown | 2/2 | — | 2/2 | yes |") in grid_md
    assert "| no |" in grid_md
    assert "| decentralized | 6 | 3 | 2 | 1 | 0 | +16.7 | 1 |" in (
        out / "tables" / "flips.md").read_text()
    grid_tex = (out / "tables" / "grid.tex").read_text()
    assert r"$\Delta$ pass@1 in points, deployed $-$ seed" in grid_tex
    assert r"+95.8 $\pm$ 5.9" in grid_tex
    for tex in (out / "tables").glob("*.tex"):  # pdflatex sets ASCII without extra packages
        assert tex.read_text().isascii(), tex.name


def test_baseline_option_and_compare_command(built, tmp_path):
    root, _, _ = built
    out = tmp_path / "rep"
    invoke("report", str(root / "runs"), "--out", str(out), "--baseline",
           str(root / "runs" / "sequential"))
    report = json.loads((out / "report.json").read_text())
    assert report["baseline"] == "sequential" and not report["grid"]["groups"]
    shown = invoke("compare", str(root / "runs" / "single"),
                   str(root / "runs" / "decentralized")).output
    assert "6 paired problem(s)" in shown and "Δ +16.7 points" in shown
    assert "McNemar p = 1" in shown
    for pid, change in (("q000", "regressed"), ("q002", "improved"), ("q005", "regressed")):
        assert re.search(rf"{pid}\s.*{change}", shown)


def test_paths_without_anything_to_report_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    for args in (["report", str(tmp_path / "empty"), "--out", str(tmp_path / "o")],
                 ["report", str(tmp_path / "missing"), "--out", str(tmp_path / "o")],
                 ["compare", str(tmp_path / "empty"), str(tmp_path / "empty")]):
        assert "error:" in invoke(*args, code=2).output


def test_grader_disagreement_pairs_a_relative_predictions_path(tmp_path, monkeypatch):
    write_run(tmp_path / "run", {"p0": [1], "p1": [0], "p2": [1]})
    # `lcb score` ran in tmp_path/scores and wrote the path as given; the report runs elsewhere
    write_results(tmp_path / "scores" / "official.jsonl", {"p0": 1, "p1": 1, "p2": 0},
                  grader="official", predictions="../run/predictions.jsonl")
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    found = grader_disagreements(collect([tmp_path]).conditions)
    assert found == [{"a": "run", "b": "official", "graders": ["default", "official"],
                      "n_compared": 3, "n_disagree": 2, "ids": ["p1", "p2"]}]


def test_outcome_keeps_infrastructure_errors_apart():
    assert outcome({"id": "a", "em": 1}) == "solved"
    assert outcome({"id": "a", "em": 0, "error": "HTTP 503", "predicted_code": None}) == \
        "infra_error"
    assert outcome({"id": "a", "em": 0, "predicted_code": "print(1)"}) == "wrong"
    assert outcome({"id": "a", "em": 0, "predicted_code": None}) == "no_code"
    assert outcome({"id": "a", "em": 0, "line": 3, "has_code": False,
                    "error": "line 3: no program"}) == "no_code"
    assert outcome({"id": "a", "em": 0, "line": 3, "has_code": True,
                    "error": "line 3: grading failed"}) == "infra_error"


def test_health_counts_infra_apart_with_pass_at_1_without_it(tmp_path):
    run = write_run(tmp_path / "run", {"p0": [1], "p1": [0], "p2": [0]})
    records = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    records[2].update(verdicts=["infra"], error="grading failed (infra): the host went away")
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (cond,) = collect([tmp_path]).conditions
    got = health(cond)
    assert (got["infra_error"], got["n_infra"]) == (1, 1)
    assert got["em_graded"] == 0.5 and scores(cond)["em"] == pytest.approx(1 / 3)
    assert (scores(cond)["n_infra"], scores(cond)["em_graded"]) == (1, 0.5)


@pytest.mark.slow
def test_a_results_file_graded_by_both_graders_shows_its_agreement(tmp_path):
    from lcb.data.samples import reference_solution

    right = reference_solution("lcbs_abc901_a")
    lines = [{"id": "lcbs_abc901_a", "code": right},
             {"id": "lcbs_abc901_a", "code": right + "\nimport sys\nsys.exit(3)\n"}]
    pred = tmp_path / "pred.jsonl"
    pred.write_text("".join(json.dumps(line) + "\n" for line in lines))
    invoke("score", "--data", "sample", "--predictions", str(pred), "--out",
           str(tmp_path / "scores" / "both.jsonl"), "--grader", "both", "--jobs", "1")
    invoke("report", str(tmp_path / "scores"), "--out", str(tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    agreement = condition(report, "both")["scores"]["agreement"]
    assert (agreement["n"], agreement["n_agree"], agreement["by_class"]["exit_code"]) == (2, 1, 1)
    page = (tmp_path / "out" / "index.html").read_text()
    assert 'id="agreement"' in page and "exit_code 1" in page


@pytest.mark.slow
def test_report_folder_size_for_a_50_by_9_by_4_by_3_grid(tmp_path):
    """108 jobs of 50 test items (9 methods × 4 topologies × 3 seeds): the folder stays small
    (the bootstrap is cut to 200 resamples here; the size does not depend on it)."""
    write_big_grid(tmp_path / "grid")
    report = write_report(collect([tmp_path / "grid"]), tmp_path / "out", resamples=200)
    assert len(report["grid"]["groups"]) == 36
    size = report_size(tmp_path / "out")
    assert size < 6_000_000, size
    assert len(list((tmp_path / "out" / "cells").glob("*.html"))) == 36


def test_labels_are_unique_and_short():
    labels = unique_labels([Path("/x/a/run"), Path("/y/a/run"), Path("/z/other.jsonl")])
    assert sorted(labels.values()) == ["other", "x/a/run", "y/a/run"]


def test_pass_at_k_flips_of_sample_0_tokens_and_transcript_health(tmp_path):
    # two problems, five samples each (a: sample 3 passes, b: none), 15 tokens a program
    write_run(tmp_path / "sampled", {"a": [0, 0, 0, 1, 0], "b": [0] * 5},
              messages={"a": TOOL_TROUBLE})
    (cond,) = collect([tmp_path]).conditions
    got = scores(cond)
    assert got["em"] == pytest.approx((1 / 5 + 0) / 2)
    assert got["pass_at_k"]["5"] == pytest.approx((1 + 0) / 2)  # a: 1 - C(4,5)/C(5,5) = 1
    assert got["tokens"] == 10 * 15 and got["wall_s"] == 2.5
    # 150 tokens: 75 per problem (five samples each), 15 per sample, 150 per solved sample
    assert (got["tokens_per_problem"], got["tokens_per_sample"],
            got["tokens_per_solved_sample"]) == (75, 15, 150)
    assert got["by_month"] == {"2024-02": {"n": 10, "em": pytest.approx(0.1)}}
    assert first_outcomes(cond) == {"a": 0, "b": 0}  # sample 0 of each
    counts = health(cond)
    assert (counts["llm_calls"], counts["cache_hits"], counts["tool_calls"],
            counts["tool_errors"]) == (2, 1, 1, 2)


def test_a_hub_release_v1_run_carries_the_contamination_note(tmp_path):
    source = {"kind": "hub", "repo": "livecodebench/code_generation_lite",
              "release": "release_v1", "revision": "abc123"}
    cond = Condition(label="r", kind="run", path=tmp_path, records=[{"id": "a", "em": 1}],
                     summary={}, manifest={"data_source": source,
                                           "sessions": [{"git": {"commit": "c0ffee",
                                                                 "dirty": False}}]})
    prov = provenance(cond)
    assert (prov["dataset"], prov["release"], prov["revision"]) == (
        "livecodebench/code_generation_lite", "release_v1", "abc123")
    assert prov["lcb_commit"] == ["c0ffee"] and prov["dirty"] is False
    assert "oldest LiveCodeBench window" in prov["contamination_note"]


def test_missing_as_fail_counts_as_lcb_score_counted(built, tmp_path):
    root, _, _ = built
    lines = (root / "runs" / "single" / "predictions.jsonl").read_text().splitlines()
    four = tmp_path / "four.jsonl"  # predictions for 4 of the 6 problems
    four.write_text("".join(x + "\n" for x in lines if json.loads(x)["id"] in IDS[:4]))
    results = tmp_path / "scored.jsonl"
    invoke("score", "--data", str(root / "rows.jsonl"), "--predictions", str(four), "--out",
           str(results), "--limit", "6", "--missing-as-fail", "--jobs", "1")
    written = json.loads((tmp_path / "scored.summary.json").read_text())
    got = scores(collect([results]).conditions[0])
    # single solves q000 and q001 of q000-q003; q004 and q005 count as failures: 2 of 6
    assert got["em"] == written["em"] == pytest.approx(2 / 6)
    assert (got["n_problems"], got["n_missing"], got["missing_ids"]) == (6, 2, list(IDS[4:]))


def test_pareto_front_by_hand(tmp_path):
    rows = [{"label": name, "scores": {"tokens_per_sample": cost, "em": em}}
            for name, cost, em in (("cheap", 50, 0.2), ("a", 100, 0.5), ("tie", 100, 0.5),
                                   ("dominated", 200, 0.5), ("best", 300, 0.9),
                                   ("worse", 300, 0.8))]
    _pareto(rows)
    assert [r["label"] for r in rows if r["pareto"]] == ["cheap", "a", "tie", "best"]
    # five samples of 15 tokens (75 a problem) beat one of 20 per sample, not per problem
    write_run(tmp_path / "sampled", {"a": [0, 0, 0, 1, 0], "b": [0] * 5})
    write_run(tmp_path / "once", {"a": [0], "b": [0]}, tokens=20)
    report = build(collect([tmp_path]))
    assert {c["label"]: c["pareto"] for c in report["conditions"]} == {"once": False,
                                                                       "sampled": True}


HOSTILE_LABELS = ("$\\oops$", "<svg onload=alert(1)>", "[red]", "a|b")


def test_hostile_labels_are_text_everywhere(tmp_path):
    for i, name in enumerate(HOSTILE_LABELS):
        write_run(tmp_path / "runs" / name, {"p0": [i % 2], "p1": [1]})
    invoke("report", str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    index = (tmp_path / "out" / "index.html").read_text()
    assert "<svg onload" not in index and "&lt;svg onload=alert(1)&gt;" in index
    assert index.count("$\\oops$") >= 3  # runs table, provenance, and the plots' text
    tex = (tmp_path / "out" / "tables" / "runs.tex").read_text()
    assert r"\$\textbackslash{}oops\$" in tex and r"\textless{}svg onload" in tex
    assert tex.isascii()
    assert r"| a\|b | 2 |" in (tmp_path / "out" / "tables" / "runs.md").read_text()
    shown = invoke("compare", str(tmp_path / "runs" / "[red]"),
                   str(tmp_path / "runs" / "a|b")).output
    assert "[red] → a|b: 2 paired problem(s)" in shown


def test_compare_labels_both_sides_sorts_flips_and_names_sample_0(tmp_path):
    write_run(tmp_path / "x" / "single", {"b": [0], "a": [0], "c": [1]})
    write_run(tmp_path / "y" / "single", {"b": [1], "a": [1], "c": [1]})
    shown = invoke("compare", str(tmp_path / "x" / "single"),
                   str(tmp_path / "y" / "single")).output
    assert "x/single → y/single" in shown and "pass@1 0.333 → 1.000" in shown
    assert re.search(r"a\s.*improved.*\n.*b\s.*improved", shown)  # by id, not file order
    write_run(tmp_path / "s1", {"a": [0, 1]})
    write_run(tmp_path / "s2", {"a": [1, 1]})
    shown = invoke("compare", str(tmp_path / "s1"), str(tmp_path / "s2")).output
    assert "sample-0 pass rate 0.000 → 1.000" in shown and "pass@1" not in shown


@pytest.mark.parametrize("what", BROKEN)
def test_an_unreadable_file_is_named_and_nothing_is_written(tmp_path, what):
    broken = break_input(tmp_path, what)
    result = invoke("report", str(tmp_path / "in"), "--out", str(tmp_path / "out"), code=2)
    assert f"error: {broken}" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no out, no temporary folder


def test_a_new_report_replaces_stale_pages_but_never_a_foreign_folder(tmp_path):
    out = tmp_path / "out"
    write_run(tmp_path / "first" / "run", {"p0": [1], "p1": [0]})
    write_run(tmp_path / "second" / "run", {"p2": [1]})
    invoke("report", str(tmp_path / "first"), "--out", str(out))
    assert (out / "problems" / "p0.html").is_file()
    invoke("report", str(tmp_path / "second"), "--out", str(out))
    assert sorted(p.name for p in (out / "problems").iterdir()) == ["p2.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first", "out", "second"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = invoke("report", str(tmp_path / "first"), "--out", str(mine), code=2)
    assert "holds no report.json" in result.output
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_grid_cells_apart_by_dataset_model_and_team_size(tmp_path):
    grid = tmp_path / "grid"
    for dataset, model, team_size in (("lcb", "qwen", None), ("lcb2", "qwen", None),
                                      ("lcb", "llama", None), ("lcb", "qwen", 3)):
        write_job(grid, "gepa", "sequential", 0, dataset=dataset, model=model,
                  team_size=team_size)
    (write_job(grid, "identity", "single", 0) / "result.json").unlink()
    report = write_report(collect([grid]), tmp_path / "out", resamples=50)
    assert report["grid"]["incomplete"] == [{"path": "grid/identity/lcb/single/qwen/0",
                                             "reason": "no result.json yet"}]
    slugs = [g["slug"] for g in report["grid"]["groups"]]
    assert len(set(slugs)) == 4
    assert sorted(p.stem for p in (tmp_path / "out" / "cells").iterdir()) == sorted(slugs)
    panels = report["grid"]["heatmap"]  # one per Holm family
    assert [(p["dataset"], p["model"], p["columns"]) for p in panels] == [
        ("lcb", "llama", ["sequential"]), ("lcb", "qwen", ["sequential", "sequential ×3"]),
        ("lcb2", "qwen", ["sequential"])]
    index = (tmp_path / "out" / "index.html").read_text()
    assert index.count('<table class="heatmap">') == 3 and index.count("lcb2 · qwen") == 2
    grid_md = (tmp_path / "out" / "tables" / "grid.md").read_text()
    assert "| gepa | lcb2 | sequential | — | — | qwen | 1 |" in grid_md
    assert "| gepa | lcb | sequential | 3 | — | qwen | 1 |" in grid_md


def _without_usage(run: Path, ids: tuple[str, ...]) -> None:
    """Rewrite `run`'s records of `ids` as a server that reported no usage leaves them."""
    path = run / "predictions.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        unknown = record["id"] in ids
        record.update(n_llm_calls=1, n_calls_without_usage=int(unknown),
                      **({"prompt_tokens": None, "completion_tokens": None} if unknown else {}))
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_tokens_no_server_reported_are_unknown_in_every_cost_view(tmp_path):
    """`lcb.agents.usage`: unknown tokens are never 0, and no ratio or Pareto place is made
    of a partial sum."""
    blind_call = [{"source": "coder", "role": "coder", "type": "assistant", "content": "x",
                   "usage": {}, "call": {"latency_s": 0.5}}]
    _without_usage(write_run(tmp_path / "runs" / "blind", {"a": [1], "b": [0]},
                             messages={"a": blind_call}), ("a", "b"))
    _without_usage(write_run(tmp_path / "runs" / "partial", {"a": [1], "b": [1]}), ("a",))
    write_run(tmp_path / "runs" / "known", {"a": [1], "b": [1]}, tokens=20)
    out = tmp_path / "out"
    report = write_report(collect([tmp_path / "runs"]), out)
    blind, partial, known = (condition(report, name)["scores"]
                             for name in ("blind", "partial", "known"))
    assert (blind["tokens"], blind["n_calls_without_usage"], blind["tokens_unknown"]) == (
        None, 2, True)
    assert (partial["tokens"], partial["n_calls_without_usage"]) == (15, 1)  # b's, known
    for scores_ in (blind, partial):
        assert (scores_["tokens_per_problem"], scores_["tokens_per_sample"],
                scores_["tokens_per_solved_sample"]) == (None, None, None)
    assert (known["tokens"], known["tokens_per_sample"], known["tokens_unknown"]) == (
        40, 20, False)
    assert [condition(report, name)["pareto"] for name in ("blind", "partial", "known")] == [
        None, None, True]
    index = (out / "index.html").read_text()
    assert ">unknown</td><td>unknown</td>" in index  # blind: tokens, tokens / problem
    assert ">15 + unknown</td><td>unknown</td>" in index
    runs_md = (out / "tables" / "runs.md").read_text()
    assert "| blind | 2 |" in runs_md and "| unknown |" in runs_md
    page = (out / "problems" / "a.html").read_text()
    assert "<td>1</td>\n<td>unknown</td><td>unknown</td>" in page  # blind's agent: 1 call

"""Records, the JSONL log, summaries (pass@1) and the run directory's files."""

import json
import re
from pathlib import Path

import pytest

from lcb.runs.records import Record, RecordLog, RecordsError, pass_at_1, read_records, summarize
from lcb.runs.rundir import (
    OutputError,
    RunPaths,
    read_transcript,
    transcript_name,
    update_manifest,
    write_transcript,
)


def rec(rid: str, em: int, *, code: str | None = "print(1)", difficulty: str = "easy",
        platform: str = "atcoder", **extra) -> dict:
    return {"id": rid, "em": em, "predicted_code": code, "difficulty": difficulty,
            "platform": platform, **extra}


HAND_MADE = [
    rec("a", 1, prompt_tokens=100, completion_tokens=10, n_llm_calls=1, latency_s=1.5),
    rec("b", 0, difficulty="medium", prompt_tokens=200, completion_tokens=20, n_llm_calls=2,
        n_tool_calls=3, latency_s=2.0),
    rec("c", 1, difficulty="hard", platform="leetcode", prompt_tokens=50, completion_tokens=5),
    rec("d", 0, code=None, platform="leetcode", error="endpoint down"),
    rec("e", 0, code="   ", difficulty="medium", platform="codeforces"),
]


def test_summary_arithmetic_on_hand_made_records():
    summary = summarize(HAND_MADE)
    assert summary["n"] == 5
    assert summary["solved"] == 2
    assert summary["em"] == pytest.approx(2 / 5)
    assert summary["n_extracted"] == 3  # None and whitespace-only code are not extracted
    assert summary["extracted_solved"] == 2
    assert summary["extracted_em"] == pytest.approx(2 / 3)
    assert summary["n_errors"] == 1
    assert summary["prompt_tokens"] == 350
    assert summary["completion_tokens"] == 35
    assert summary["n_llm_calls"] == 3
    assert summary["n_tool_calls"] == 3
    assert summary["latency_s"] == pytest.approx(3.5)


def test_summary_groups_by_difficulty_in_tier_order_and_by_platform():
    summary = summarize(HAND_MADE)
    assert list(summary["by_difficulty"]) == ["easy", "medium", "hard"]

    def group(n, solved, em):  # one program per problem: n problems, none truncated
        return {"n": n, "n_problems": n, "solved": solved, "em": em, "n_truncated": 0}

    assert summary["by_difficulty"]["easy"] == group(2, 1, 0.5)
    assert summary["by_difficulty"]["medium"] == group(2, 0, 0.0)
    assert summary["by_difficulty"]["hard"] == group(1, 1, 1.0)
    assert summary["by_platform"] == {
        "atcoder": group(2, 1, 0.5), "codeforces": group(1, 0, 0.0), "leetcode": group(2, 1, 0.5),
    }


def test_summary_of_nothing_is_zero_not_a_division_error():
    summary = summarize([])
    assert (summary["n"], summary["em"], summary["extracted_em"]) == (0, 0.0, 0.0)
    assert summary["by_difficulty"] == {}


@pytest.mark.parametrize(("records", "message"), [
    ([rec("a", 1), rec("a", 0)], "'a' appears more than once"),
    ([rec("a", 2)], "'em' must be 0 or 1"),
    ([{"em": 1}], "lacks the key 'id'"),
])
def test_summary_refuses_bad_records(records, message):
    with pytest.raises(RecordsError, match=message):
        summarize(records)


def make_record(**changes) -> Record:
    values = dict(
        id="1873_A", topology="single", model="m", predicted_code="print(1)", passed=3,
        total=4, pass_rate=0.75, em=0, difficulty="easy", platform="codeforces",
        contest_date="2023-08-21T00:00:00", latency_s=1.25, prompt_tokens=10,
        completion_tokens=5, n_llm_calls=1, n_tool_calls=0, error=None, feedback=None,
        tests_run=4, verdicts=("passed",) * 3 + ("wrong_answer",), seed=0, grader="default",
    )
    return Record(**{**values, **changes})


def test_record_json_uses_pass_key_and_flattens_team_fields():
    row = make_record(fields={"vote": {"winner": 0}}).to_dict()
    assert row["pass"] == 3 and "passed" not in row
    assert row["vote"] == {"winner": 0} and "fields" not in row
    assert row["verdicts"][-1] == "wrong_answer"
    json.dumps(row)  # JSON-able


def test_team_fields_cannot_overwrite_core_keys():
    with pytest.raises(RecordsError, match="em"):
        make_record(fields={"em": 1}).to_dict()


def test_log_appends_and_reads_back(tmp_path):
    path = tmp_path / "sub" / "predictions.jsonl"
    with RecordLog(path) as log:
        log.append(rec("a", 1))
        log.append(rec("b", 0))
    with RecordLog(path) as log:  # a second session appends, never truncates
        log.append(rec("c", 1))
    assert [r["id"] for r in read_records(path)] == ["a", "b", "c"]
    assert read_records(tmp_path / "missing.jsonl") == []


def test_log_refuses_a_record_without_em(tmp_path):
    with RecordLog(tmp_path / "p.jsonl") as log, pytest.raises(RecordsError, match="'em'"):
        log.append({"id": "x"})


def test_truncated_last_line_is_dropped_and_repaired(tmp_path):
    path = tmp_path / "p.jsonl"
    good = json.dumps(rec("a", 1)) + "\n"
    path.write_text(good + '{"id": "b", "em": ')
    assert [r["id"] for r in read_records(path)] == ["a"]
    assert path.read_text().endswith('"em": ')  # reading alone changes nothing
    assert [r["id"] for r in read_records(path, repair=True)] == ["a"]
    assert path.read_text() == good
    with RecordLog(path) as log:
        log.append(rec("b", 0))
    assert [r["id"] for r in read_records(path)] == ["a", "b"]


def test_complete_last_line_without_newline_is_kept_and_terminated(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(rec("a", 1)) + "\n" + json.dumps(rec("b", 0)))
    assert [r["id"] for r in read_records(path, repair=True)] == ["a", "b"]
    assert path.read_text().endswith("}\n")


def test_damage_before_the_last_line_names_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("not json\n" + json.dumps(rec("a", 1)) + "\n")
    with pytest.raises(RecordsError, match=r"p\.jsonl:1: not a JSON record"):
        read_records(path)


def test_paths_out_file_out_dir_and_default(tmp_path):
    with pytest.raises(OutputError, match="not both"):
        RunPaths.choose(out=tmp_path / "a.jsonl", out_dir=tmp_path, default_dir=tmp_path)
    only_file = RunPaths.choose(out=tmp_path / "a.jsonl", out_dir=None, default_dir=tmp_path)
    assert only_file.summary is None and only_file.transcript("x") is None
    default = RunPaths.choose(out=None, out_dir=None, default_dir=tmp_path / "d")
    assert default.predictions == tmp_path / "d" / "predictions.jsonl"
    assert default.transcript("abc301_a").name == "abc301_a.json.gz"


SAFE_IDS = ["abc301_a", "2847", "1873_A", "a_b", "x" * 100, "v1.2-rc", "-"]
UNSAFE_IDS = ["x" * 300, "a/b", "a b", "a\\b", "ünïcode", "题目", "..", ".hidden", "x" * 101,
              "abc/../x y", "a_b-0123456789ab", "\ud800"]


@pytest.mark.parametrize("qid", SAFE_IDS)
def test_safe_ids_keep_their_transcript_names(qid):
    assert transcript_name(qid) == f"{qid}.json.gz"


def test_other_ids_get_short_distinct_names_without_separators():
    names = [transcript_name(qid) for qid in SAFE_IDS + UNSAFE_IDS]
    assert len(set(names)) == len(names)
    for name in names:
        assert len(name.encode("utf-8")) <= 150 and not name.startswith(".")
        assert re.fullmatch(r"[A-Za-z0-9._-]+\.json\.gz", name), name
    assert transcript_name("a/b").startswith("a_b-") and transcript_name("a/b") != "a_b.json.gz"


def test_transcript_round_trip_is_gzip(tmp_path):
    path = tmp_path / "t" / "x.json.gz"
    payload = {"id": "x", "messages": [{"source": "solver", "content": "héllo"}]}
    write_transcript(path, payload)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    assert read_transcript(path) == payload


def test_manifest_keeps_first_session_and_adds_resumed_ones(tmp_path):
    path = tmp_path / "manifest.json"
    update_manifest(path, config={"topology": "single"}, source={"kind": "sample"},
                    command=["lcb", "run"])
    second = update_manifest(path, config={"topology": "other"}, source={"kind": "x"},
                             command=["lcb", "run", "--resume"])
    assert second["config"] == {"topology": "single"}
    assert second["data_source"] == {"kind": "sample"}
    assert [s["command"][-1] for s in second["sessions"]] == ["run", "--resume"]
    assert {"lcb", "python", "langgraph", "httpx", "aiohttp"} <= set(second["sessions"][0]
                                                                     ["versions"])
    assert json.loads(path.read_text()) == second


def test_pass_at_1_averages_each_problems_share_over_problems():
    assert pass_at_1([]) == 0.0
    assert pass_at_1([("a", 1), ("b", 0), ("c", 1), ("d", 1)]) == 0.75  # one program each
    assert pass_at_1([("a", 1), ("a", 0), ("a", 0), ("b", 1)]) == pytest.approx((1 / 3 + 1) / 2)


def test_summaries_of_runs_scores_and_jobs_all_use_pass_at_1():
    from lcb.optimize.artifacts import ItemOutcome, JobResult
    from lcb.runs.scoring import summarize_scores

    rows = [{"id": "a", "em": 1, "difficulty": "hard", "platform": "x"},
            {"id": "b", "em": 0, "difficulty": "easy", "platform": "x"},
            {"id": "c", "em": 1, "difficulty": "easy", "platform": "y"}]
    run, scored = summarize(rows), summarize_scores(rows)
    assert run["em"] == scored["em"] == pass_at_1((r["id"], r["em"]) for r in rows)
    assert run["pass_at_k"] == scored["pass_at_k"] == {"1": run["em"]}
    assert list(run["by_difficulty"]) == list(scored["by_difficulty"]) == ["easy", "hard"]
    assert run["by_difficulty"]["easy"]["em"] == scored["by_difficulty"]["easy"]["em"] == 0.5
    items = [ItemOutcome(id=r["id"], baseline=r["em"], deployed=1) for r in rows]
    assert JobResult.from_items(items, deployed_label="incumbent").baseline == run["em"]


def test_summary_of_samples_and_truncation_by_hand():
    rows = [rec("a", 1, truncated=True), rec("a", 0, sample=1), rec("a", 0, sample=2),
            rec("b", 1, difficulty="hard"), rec("b", 1, sample=1, difficulty="hard",
                                                  truncated=True, code=None)]
    summary = summarize(rows)
    assert (summary["n"], summary["n_problems"], summary["samples_per_problem"]) == (5, 2, 2)
    assert summary["em"] == (1 / 3 + 1) / 2 and summary["pass_at_k"] == {"1": summary["em"]}
    assert summary["extracted_em"] == (1 / 3 + 1) / 2 and summary["n_extracted"] == 4
    assert (summary["n_truncated"], summary["truncation_rate"]) == (2, 2 / 5)
    assert summary["by_difficulty"]["hard"] == {"n": 2, "n_problems": 1, "solved": 2,
                                                "em": 1.0, "n_truncated": 1}
    assert summary["ci"]["resamples"] == 1000 and summary["ci"]["level"] == 0.95
    assert summary["ci"]["low"] <= summary["em"] <= summary["ci"]["high"]
    empty = summarize([])
    assert (empty["truncation_rate"], empty["samples_per_problem"], empty["ci"]["low"]) == (
        0.0, 0, None)


def test_record_carries_sample_and_why_the_answer_ended():
    row = make_record().to_dict()
    assert (row["sample"], row["finish_reason"], row["truncated"], row["n_truncated_calls"]) == (
        0, None, False, 0)
    row = make_record(sample=3, finish_reason="length", truncated=True).to_dict()
    assert (row["sample"], row["finish_reason"], row["truncated"]) == (3, "length", True)


def test_build_record_takes_the_ending_from_the_team_fields():
    from lcb.data.problems import decode_row
    from lcb.runs.outcomes import build_record
    from lcb.runs.runner import RunConfig
    from lcb.teams.common import TeamResult
    from tests.helpers_data import stdin_row

    problem = decode_row(stdin_row("p1"))
    config = RunConfig(topology="single", model=_model(),
                       paths=RunPaths(predictions=Path("x.jsonl")))
    fields = {"finish_reason": "length", "truncated": True, "n_truncated_calls": 2, "vote": 1}
    result = TeamResult(code=None, final_text="", transcript=[], prompt_tokens=3,
                        completion_tokens=4, n_llm_calls=2, n_tool_calls=0, usage_by_role={},
                        fields=fields)
    row = build_record(problem, result, None, config=config, latency_s=1.0, error=None,
                       sample=2).to_dict()
    assert (row["finish_reason"], row["truncated"], row["n_truncated_calls"]) == ("length", True, 2)
    assert (row["sample"], row["vote"], row["seed"]) == (2, 1, 0)
    bare = build_record(problem, TeamResult.failed("down"), None, config=config, latency_s=0.0,
                        error="down").to_dict()
    assert (bare["finish_reason"], bare["truncated"], bare["n_truncated_calls"]) == (None, False, 0)
    assert bare["sample"] == 0


def _model():
    from lcb.agents.models import ModelConfig

    return ModelConfig(base_url="http://127.0.0.1:9/v1", model_id="m")

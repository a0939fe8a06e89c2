"""Conformance as a checked list: each named requirement met or not, with the value seen; the
prompt manifest; provenance (keys never written); what the same-settings check compares."""

import json

import pytest

from lcb.agents.models import ModelConfig
from lcb.agents.prompts import bundle_hashes, seed_bundle
from lcb.optimize import jobrun, provenance
from lcb.optimize.artifacts import JobSpec
from lcb.optimize.conformance import (
    NO_SPLIT_FILE,
    Reference,
    check,
    load_prompt_manifest,
    prompt_manifest,
    splits_digest,
)
from lcb.optimize.job import JobConfig
from lcb.optimize.jobrun import job_spec
from lcb.optimize.methods import resolve_settings
from lcb.optimize.splits import Splits, make_splits
from lcb.optimize.teamrun import TeamCell

NAMES = ["budget", "task_sampling", "reflection_model", "data_source", "release", "revision",
         "test_split_rule", "split_sizes", "split_contents", "grader", "sandbox", "team",
         "method_settings", "seed_prompts", "opt_tests", "selection", "feedback",
         "uncharged_cost"]
TASK, BIG = "Qwen/Qwen3.5-9B", "big-org/Reflector-70B"
CELL = TeamCell("sequential")
SEED = seed_bundle("sequential", CELL.roles)
STANDARD_SPLITS = make_splits([f"r{i}" for i in range(300)], test_ids=[f"r{i}" for i in
                                                                      range(250, 300)])


def spec(**overrides):
    values = dict(method="gepa", topology="sequential", model=TASK, seed=0, team_size=CELL.size,
                  communication="freeform", reflection_model=BIG, revision="0123abcd",
                  test_rule="eval_ids", method_settings=resolve_settings("gepa"),
                  seed_prompts=bundle_hashes(SEED))
    values.update(overrides)
    return JobSpec(**values)


def reference(**overrides):
    values = dict(team_size=CELL.size, method_settings=resolve_settings("gepa"),
                  splits=STANDARD_SPLITS, prompt_hashes=load_prompt_manifest()["sequential"])
    values.update(overrides)
    return Reference(**values)


def judged(job=None, *, job_splits=STANDARD_SPLITS, **ref):
    job = job or spec()
    return job.model_copy(update={"conformance": check(job, splits=job_splits,
                                                       reference=reference(**ref))})


def unmet(job):
    return {req.name: req for req in job.conformance if not req.met}


def test_a_standard_job_with_a_separate_larger_reflection_model_is_conformant():
    job = judged()
    assert [req.name for req in job.conformance] == NAMES
    assert job.conformant and job.deviations == []
    assert STANDARD_SPLITS.test_rule == "eval_ids" and STANDARD_SPLITS.standard


@pytest.mark.parametrize("reflection", [TASK, None, ""])
def test_the_reflection_model_must_be_set_and_not_the_task_model(reflection):
    job = judged(spec(reflection_model=reflection))
    assert set(unmet(job)) == {"reflection_model"} and not job.conformant
    assert unmet(job)["reflection_model"].seen == reflection
    assert job.deviations == [f"reflection_model={reflection!r} (expected: a reflection model "
                              f"other than the task model {TASK!r})"]


def test_a_local_set_split_by_first_rows_is_not_conformant():
    ids = [f"local{i}" for i in range(250)]
    first_rows = make_splits(ids, test_ids=[])
    assert first_rows.test == tuple(ids[:50]) and first_rows.standard  # 150/50/50 all the same
    job = judged(spec(data="my_rows.jsonl", revision=None, test_rule=first_rows.test_rule),
                 job_splits=first_rows)
    assert set(unmet(job)) == {"data_source", "revision", "test_split_rule", "split_contents"}
    assert unmet(job)["test_split_rule"].seen == "first_rows"
    assert unmet(job)["data_source"].seen == "my_rows.jsonl"
    assert unmet(job)["split_contents"].seen == splits_digest(first_rows)


def test_split_contents_need_the_standard_split_file():
    job = judged(splits=None)  # the reference has no standard split file
    req = unmet(job)["split_contents"]
    assert (req.seen, set(unmet(job))) == (NO_SPLIT_FILE, {"split_contents"})
    shuffled = Splits(train=STANDARD_SPLITS.validation + STANDARD_SPLITS.train[50:],
                      validation=STANDARD_SPLITS.train[:50], test=STANDARD_SPLITS.test)
    assert set(unmet(judged(job_splits=shuffled))) == {"split_contents"}


@pytest.mark.parametrize(("field", "value", "name"), [
    ("budget", 599, "budget"), ("temperature", 0.7, "task_sampling"),
    ("top_p", 1.0, "task_sampling"), ("data", "livecodebench/other", "data_source"),
    ("release", "release_v2", "release"), ("split_sizes", {"train": 8, "validation": 3,
                                                           "test": 3}, "split_sizes"),
    ("grader", "fast", "grader"), ("sandbox", "none", "sandbox"),
    ("team_size", CELL.size + 1, "team"), ("communication", "json", "team"),
    ("opt_tests", 3, "opt_tests"), ("selection", "train", "selection"),
    ("feedback", "verdict", "feedback"), ("uncharged_cost", 0.5, "uncharged_cost"),
])
def test_each_deviation_is_named(field, value, name):
    job = judged(spec(**{field: value}))
    assert set(unmet(job)) == {name} and not job.conformant


@pytest.mark.parametrize(("field", "value"), [
    ("data", "livecodebench/code_generation_lite"), ("grader", "official"), ("sandbox", "bwrap"),
])
def test_equivalent_choices_are_conformant(field, value):
    assert judged(spec(**{field: value})).conformant


def test_a_single_agent_team_has_no_size_or_format():
    single = seed_bundle("single", ("solver",))
    job = judged(spec(topology="single", team_size=None, communication=None,
                      seed_prompts=bundle_hashes(single)), team_size=None,
                 prompt_hashes=load_prompt_manifest()["single"])
    assert job.conformant


def test_a_method_setting_override_is_named_with_its_default():
    settings = resolve_settings("gepa", {"reflection.records_per_reflection": 5})
    req = unmet(judged(spec(method_settings=settings)))["method_settings"]
    assert (req.seen, req.expected) == ({"reflection.records_per_reflection": 5},
                                        {"reflection.records_per_reflection": 3})


def test_an_edited_seed_prompt_is_not_conformant():
    edited = {**SEED, "coder": SEED["coder"] + "\nAlways write tests first."}
    req = unmet(judged(spec(seed_prompts=bundle_hashes(edited))))["seed_prompts"]
    manifest = load_prompt_manifest()["sequential"]
    assert req.seen == {"coder": bundle_hashes(edited)["coder"]}
    assert req.expected == {"coder": manifest["coder"]}


def test_the_committed_prompt_manifest_matches_the_prompt_files():
    manifest = load_prompt_manifest()
    assert manifest == prompt_manifest()
    assert set(manifest) == {"single", "independent", "sequential", "centralized",
                             "decentralized"}


def test_the_manifest_follows_edits(tmp_path):
    folder = tmp_path / "single" / "lcb"
    folder.mkdir(parents=True)
    (folder / "solver.txt").write_text("  Solve it.\n")
    assert prompt_manifest(tmp_path) == {"single": {"solver": bundle_hashes(
        {"solver": "Solve it."})["solver"]}}


def test_a_spec_never_judged_is_not_conformant_and_judgement_round_trips():
    assert not spec().conformant
    job = judged(spec(budget=30))
    again = JobSpec.model_validate_json(job.model_dump_json())
    assert again == job and again.deviations == ["budget=30 (expected: 600)"]
    assert set(job.settings()) == set(JobSpec.model_fields) - {"provenance", "conformance",
                                                               "allow_small_budget"}


def test_job_spec_records_settings_provenance_and_redacts_keys(tmp_path, monkeypatch):
    splits = Splits(train=STANDARD_SPLITS.train, validation=STANDARD_SPLITS.validation,
                    test=STANDARD_SPLITS.test, source={"kind": "hub", "revision": "feedbeef"})
    standard_file = splits.save(tmp_path / "lcb_splits.json")
    monkeypatch.setattr(jobrun, "DEFAULT_SPLITS_PATH", standard_file)  # the reference
    task = ModelConfig(base_url="https://user:pw@host.example:8443/v1?token=t0k", model_id=TASK,
                       api_key="sk-task-secret")
    reflection = ModelConfig(base_url="https://api.example/v1", model_id=BIG,
                             api_key="sk-reflection-secret", temperature=0.7, top_p=0.95)
    config = JobConfig(method="gepa", topology="sequential", model=task, out=tmp_path / "job")
    job = job_spec(config, CELL, splits, reflection, seed=dict(SEED),
                   method_settings=resolve_settings("gepa"))
    assert job.conformant, job.deviations
    assert (job.revision, job.test_rule, job.splits_digest) == ("feedbeef", "eval_ids",
                                                               splits_digest(splits))
    assert (job.grader, job.sandbox, job.opt_tests) == ("default", "process", None)
    assert job.reflection_sampling == {"temperature": 0.7, "top_p": 0.95, "max_tokens": 4096}
    assert job.seed_prompts == bundle_hashes(SEED)
    prov = job.provenance
    assert prov["endpoints"] == {
        "task": {"base_url": "https://host.example:8443/v1", "model_id": TASK},
        "reflection": {"base_url": "https://api.example/v1", "model_id": BIG}}
    assert set(prov["versions"]) == {"gepa", "dspy", "optuna", "langgraph", "httpx", "aiohttp",
                                     "lcb", "python"}
    assert prov["sampling"]["judge"]["temperature"] == 0.0
    assert prov["grader"]["mode"] == "default" and len(prov["grader"]["version"]) == 16
    text = job.model_dump_json()
    assert "secret" not in text and "pw@" not in text and "t0k" not in text


def test_git_absent_is_recorded_as_null(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH
    assert provenance.git_state() == {"commit": None, "dirty": None}
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}


def test_a_checkout_records_its_commit_and_dirty_flag():
    state = provenance.git_state()
    assert state["commit"] is None or (len(state["commit"]) == 40
                                       and isinstance(state["dirty"], bool))


def test_redaction_keeps_ipv6_hosts():
    assert provenance.redact_url("http://u:p@[::1]:8000/v1?k=1") == "http://[::1]:8000/v1"
    assert json.dumps(provenance.endpoint(ModelConfig(base_url="http://h/v1", model_id="m",
                                                      api_key="k3y"))).count("k3y") == 0

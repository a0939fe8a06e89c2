"""The grid spec and plan, without running a job: validation messages, exclusions, the output
layout, the commands, and `--shard` covering the plan exactly once."""

import json
import re
import shlex

import pytest
from typer.testing import CliRunner

from lcb.cli import app
from lcb.grid.checks import job_limits
from lcb.grid.plan import parse_shard, plan, shard
from lcb.grid.spec import SpecError, load_spec, parse_spec
from tests.helpers_grid import small_grid, write_spec

URL = "http://127.0.0.1:9/v1"


def spec_of(tmp_path, **overrides):
    return parse_spec(small_grid(URL, **overrides), base=tmp_path)


def error_of(tmp_path, data):
    with pytest.raises(SpecError) as caught:
        parse_spec(data, base=tmp_path, source="g.yaml")
    return str(caught.value)


def test_the_small_grid_plans_eight_jobs_in_the_seed_layout(tmp_path):
    jobs = plan(spec_of(tmp_path))
    assert [job.key for job in jobs] == [
        f"{m}/lcb/{t}/scripted/{s}" for m in ("identity", "gepa")
        for t in ("single", "sequential") for s in (0, 1)]
    job = jobs[2]  # identity, sequential, seed 0
    assert job.out == tmp_path / "runs" / "identity/lcb/sequential/scripted/0"
    assert job.cwd == tmp_path and job.done_file == "result.json"
    assert job.argv == ("lcb", "optimize", "--method", "identity", "--dataset", "lcb",
                        "--topology", "sequential", "--model", "scripted-model", "--seed", "0",
                        "--out", "runs/identity/lcb/sequential/scripted/0", "--team-size", "2",
                        "--communication", "freeform", "--data", "sample", "--concurrency",
                        "3", "--budget", "4", "--allow-small-budget")
    assert job.env == {"VLLM_BASE_URL": URL, "MODEL_ID": "scripted-model"}
    assert "--team-size" not in jobs[0].argv  # single has no team: those axes collapse


def test_more_than_one_team_size_or_format_extends_the_topology_folder(tmp_path):
    spec = spec_of(tmp_path, methods=["gepa"], seeds=[0], team_sizes=[2, 4],
                   communications=["freeform", "structured_soft"])
    keys = [job.key for job in plan(spec)]
    assert keys == ["gepa/lcb/single/scripted/0",
                    "gepa/lcb/sequential-r2-freeform/scripted/0",
                    "gepa/lcb/sequential-r2-structured_soft/scripted/0",
                    "gepa/lcb/sequential-r4-freeform/scripted/0",
                    "gepa/lcb/sequential-r4-structured_soft/scripted/0"]
    assert keys == [job.key for job in plan(spec)]  # deterministic


def test_a_run_grid_plans_resumable_batches_with_its_settings(tmp_path):
    data = small_grid(URL, kind="run", methods=[], settings={
        "data": "sample", "limit": 3, "grader": "official", "max_requests": 2,
        "sampling": {"temperature": 0.5, "thinking": False, "queue_timeout": 30}})
    data["models"]["scripted"].update(api_key_env="SCRIPTED_KEY")
    job = plan(parse_spec(data, base=tmp_path))[2]
    assert job.key == "run/lcb/sequential/scripted/0" and job.done_file == "summary.json"
    words = shlex.split(job.shell())
    assert words[:3] == [f"VLLM_BASE_URL={URL}", "MODEL_ID=scripted-model",
                         "OPENAI_API_KEY=$SCRIPTED_KEY"]
    assert words[3:] == ["lcb", "run", "--topology", "sequential", "--model", "scripted-model",
                         "--seed", "0", "--out-dir", "runs/run/lcb/sequential/scripted/0",
                         "--resume", "--team-size", "2", "--communication", "freeform",
                         "--data", "sample", "--grader", "official", "--limit", "3",
                         "--max-requests", "2", "--temperature", "0.5", "--queue-timeout",
                         "30.0", "--no-thinking"]
    assert job_limits(job) == {"queue_timeout_s": 30.0}  # what the job's endpoint check keeps


def test_method_settings_become_set_flags_with_dotted_keys(tmp_path):
    spec = spec_of(tmp_path, method_settings={"gepa": {"minibatch": 2,
                                                       "reflection": {"records": 5}}})
    gepa = next(job for job in plan(spec) if job.axes["method"] == "gepa")
    assert gepa.argv[-4:] == ("--set", "minibatch=2", "--set", "reflection.records=5")
    identity = plan(spec)[0]
    assert "--set" not in identity.argv


def test_the_protocol_variants_become_the_jobs_flags(tmp_path):
    spec = spec_of(tmp_path, settings={"data": "sample", "selection": "train",
                                       "feedback": "verdict", "uncharged_cost": 0.5,
                                       "curve": True})
    argv = plan(spec)[0].argv
    assert argv[argv.index("--selection"):argv.index("--selection") + 6] == (
        "--selection", "train", "--feedback", "verdict", "--uncharged-cost", "0.5")
    assert "--curve" in argv


def test_exclusions_match_partially_with_lists_and_negations(tmp_path):
    spec = spec_of(tmp_path, methods=["identity", "gepa", "tavo"],
                   exclude=[{"topology": "single",  # mipro: a known method, off the axis
                             "method": {"not": ["identity", "gepa", "mipro"]}},
                            {"method": ["gepa"], "seed": 1}])
    keys = {job.key for job in plan(spec)}
    assert "tavo/lcb/single/scripted/0" not in keys  # single only with identity/gepa
    assert "tavo/lcb/sequential/scripted/0" in keys
    assert "gepa/lcb/single/scripted/1" not in keys and "gepa/lcb/single/scripted/0" in keys
    assert len(keys) == 12 - 2 - 2


def test_a_rule_on_team_axes_never_matches_single_jobs(tmp_path):
    spec = spec_of(tmp_path, methods=["identity", "tavo"], seeds=[0], team_sizes=[2, 4],
                   exclude=[{"method": "tavo", "team_size": {"not": 4}}])
    keys = {job.key for job in plan(spec)}
    assert "tavo/lcb/single/scripted/0" in keys  # single has no team size: not "not 4"
    assert "tavo/lcb/sequential-r2/scripted/0" not in keys
    assert "tavo/lcb/sequential-r4/scripted/0" in keys
    assert len(keys) == 6 - 1


def test_plan_output_and_logs_show_endpoints_without_credentials(tmp_path):
    secret = "http://user:s3cret@h.example:8000/v1?key=tok"
    spec = spec_of(tmp_path, models={"m": {"id": "x", "endpoints": [secret, URL]}})
    job = plan(spec)[0]
    assert job.env["VLLM_BASE_URL"] == f"{secret},{URL}"  # the job itself gets them
    shown = job.shell() + json.dumps(job.to_json())
    assert "s3cret" not in shown and "tok" not in shown
    assert f"VLLM_BASE_URL=http://h.example:8000/v1,{URL}" in job.shell()


@pytest.mark.parametrize(("change", "message"), [
    ({"exclude": [{"method": {"not": "tavoo"}}]},
     "exclude.0.method: 'tavoo' is not a known method"),
    ({"exclude": [{"seed": {"not": [0, 7]}}]}, "exclude.0.seed: 7 is not on the seed axis"),
    ({"seeds": [True]}, "seeds.0: Input should be a valid integer"),
    ({"team_sizes": [False]}, "team_sizes.0"),
    ({"communications": []}, "communications: Tuple should have at least 1 item"),
    ({"team_sizes": []}, "team_sizes: Tuple should have at least 1 item"),
    ({"methods": ["identity", "nope"]}, "methods: unknown method 'nope' (known: identity,"),
    ({"topologies": ["star"]}, "topologies: unknown topology 'star'"),
    ({"seeds": [0, 0]}, "seeds: repeated value(s): 0"),
    ({"team_sizes": [0]}, "team_sizes: a team size is at least 1"),
    ({"budgte": 3}, "budgte: Extra inputs are not permitted"),
    ({"models": {"m": {"id": "x", "endpoints": ["localhost:8000"]}}},
     "models.m.endpoints: an endpoint must start with http:// or https://"),
    ({"models": {}}, "models: Dictionary should have at least 1 item"),
    ({"settings": {"grader": "official"}}, "settings.grader: only a run grid takes it"),
    ({"kind": "run", "methods": [], "settings": {"curve": True}},
     "settings.curve: only an optimize grid takes it"),
    ({"settings": {"selection": "test"}}, "settings.selection: Input should be 'validation'"),
    ({"kind": "run"}, "methods: only an optimize grid takes it"),
    ({"method_settings": {"tavo": {}}}, "method_settings.tavo: not one of the grid's methods"),
    ({"exclude": [{"topo": "single"}]}, "exclude.0.topo: not an axis"),
    ({"exclude": [{"method": "tavo"}]}, "exclude.0.method: 'tavo' is not on the method axis"),
])
def test_a_bad_spec_names_the_field(tmp_path, change, message):
    assert message in error_of(tmp_path, small_grid(URL, **change))


def test_a_spec_file_that_is_not_yaml_or_not_a_mapping_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods: [identity\n")
    with pytest.raises(SpecError, match="bad.yaml is not valid YAML"):
        load_spec(bad)
    bad.write_text("- identity\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        load_spec(bad)
    with pytest.raises(SpecError, match="cannot read the grid spec"):
        load_spec(tmp_path / "missing.yaml")


def test_the_shards_cover_the_plan_exactly_once(tmp_path):
    jobs = plan(spec_of(tmp_path, methods=["identity", "gepa", "mipro"], seeds=[0, 1, 2]))
    shards = [shard(jobs, i, 3) for i in range(3)]
    keys = [job.key for part in shards for job in part]
    assert sorted(keys) == sorted(job.key for job in jobs) and len(keys) == len(set(keys))
    assert all(part for part in shards)
    assert parse_shard("2/3") == (2, 3)
    for bad in ("3/3", "1", "a/b", "0/0"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)


def test_a_job_keeps_its_shard_when_the_grid_grows(tmp_path):
    def where(spec):
        return {job.key: i for i in range(4) for job in shard(plan(spec), i, 4)}

    before = where(spec_of(tmp_path, seeds=[0, 1]))
    after = where(spec_of(tmp_path, seeds=[0, 1, 2], methods=["identity", "gepa", "mipro"]))
    assert len(after) == 18 and {key: after[key] for key in before} == before


def test_lcb_grid_plan_lists_jobs_shards_and_refuses_a_bad_spec(tmp_path):
    path = write_spec(tmp_path, small_grid(URL))
    runner = CliRunner()
    whole = runner.invoke(app, ["grid", "plan", str(path)])
    assert whole.exit_code == 0, whole.output
    assert whole.stdout.splitlines()[0] == str(tmp_path / "runs/identity/lcb/single/scripted/0")
    assert "8 job(s)" in whole.stderr
    parts = [runner.invoke(app, ["grid", "plan", str(path), "--shard", f"{i}/3", "--json"])
             for i in range(3)]
    keys = [json.loads(line)["key"] for part in parts for line in part.stdout.splitlines()]
    assert sorted(keys) == sorted(job.key for job in plan(load_spec(path)))
    bad = write_spec(tmp_path, small_grid(URL, seeds=[-1]), name="bad.yaml")
    refused = runner.invoke(app, ["grid", "plan", str(bad)])
    assert refused.exit_code == 2 and "seeds: a seed is not negative" in refused.output


@pytest.mark.parametrize("words", [["grid"], ["grid", "plan"], ["grid", "run"],
                                   ["grid", "status"], ["grid", "report"]])
def test_grid_help_takes_h_and_shows_real_metavars(words):
    shown = CliRunner().invoke(app, [*words, "-h"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "Usage: lcb " in shown.output
    assert not re.search(r"<(bool|str|int|float|path|text)>", shown.output), shown.output


SCRIPTED = {"id": "scripted-model", "endpoints": [URL]}


@pytest.mark.parametrize(("change", "field"), [
    ({"slurm": {"partition": "gpu\n#SBATCH --wrap=id"}}, "slurm.partition"),
    ({"slurm": {"partition": "gpu;id"}}, "slurm.partition"),
    ({"slurm": {"log_folder": "../../elsewhere"}}, "slurm.log_folder"),
    ({"slurm": {"log_folder": "/tmp/logs"}}, "slurm.log_folder"),
    ({"models": {"../up": SCRIPTED}}, "models"),
    ({"models": {".hidden": SCRIPTED}}, "models"),
    ({"models": {"m": {**SCRIPTED, "id": "qwen\n--out /"}}}, "models.m.id"),
    ({"models": {"m": {**SCRIPTED, "id": "two words"}}}, "models.m.id"),
    ({"models": {"m": {**SCRIPTED, "api_key_env": "KEY; id"}}}, "models.m.api_key_env"),
    ({"out": "runs\r"}, "out"),
    ({"settings": {"data": "sample\x1b[2J", "budget": 4}}, "settings.data"),
    ({"settings": {"release": "../release_v1", "budget": 4}}, "settings.release"),
    ({"ray": {"address": "auto\x00"}}, "ray.address"),
    ({"method_settings": {"gepa": {"note\nx": 1}}}, "method_settings"),
])
def test_hostile_text_is_refused_naming_the_field(tmp_path, change, field):
    said = error_of(tmp_path, small_grid(URL, **change))
    assert f"{field}" in said and ("control character" in said or "is not" in said
                                   or "inside the grid folder" in said), said


def test_ordinary_names_and_folders_still_pass(tmp_path):
    spec = spec_of(tmp_path, slurm={"partition": "gpu,cpu-long", "log_folder": "logs/slurm"},
                   models={"qwen-3.5_9b": {**SCRIPTED, "api_key_env": "QWEN_KEY"}})
    assert spec.slurm.partition == "gpu,cpu-long" and "qwen-3.5_9b" in spec.models

"""What a grid may spend (`lcb.grid.limits`): retries of infrastructure failures with a doubling
wait, a time limit per job, and a token and a wall-time budget for the whole grid.

The jobs are small Python programs standing in for `lcb optimize` (an exit code chosen per
attempt, a sleep, tokens written the way a run batch records them), run by the real
`run_job` and local executor; the endpoint check is passed over except where it is the point.
"""

import dataclasses
import json
import sys
import time

import pytest

from lcb.grid import jobrun, launch, limits
from lcb.grid.executors import RunOptions, run_local
from lcb.grid.jobrun import run_job
from lcb.grid.limits import JobPolicy, grid_tokens, infrastructure, retry_wait
from lcb.grid.plan import plan
from lcb.grid.spec import SpecError, parse_spec
from lcb.grid.state import log_path, read_state
from tests.helpers_grid import dead_url, small_grid

URL = "http://127.0.0.1:9/v1"


def jobs_of(tmp_path, seeds=(0,), kind="optimize"):
    fields = {"topologies": ["single"], "seeds": list(seeds)}
    if kind == "run":
        fields |= {"kind": "run", "methods": [], "settings": {"limit": 1}}
    else:
        fields["methods"] = ["identity"]
    return plan(parse_spec(small_grid(URL, **fields), base=tmp_path))


def with_code(job, code: str):
    return dataclasses.replace(job, argv=(sys.executable, "-c", code))


def exits_then_done(job, codes: list[int]):
    """A job whose attempts exit with `codes` in turn, then write a whole done file."""
    counter = job.root / f"{job.slug}.attempts"
    done = job.out / job.done_file
    code = (f"import pathlib, sys; c = pathlib.Path({str(counter)!r}); "
            "n = int(c.read_text()) if c.exists() else 0; c.write_text(str(n + 1)); "
            f"codes = {codes!r}\n"
            "if n < len(codes): sys.exit(codes[n])\n"
            f"p = pathlib.Path({str(done)!r}); p.parent.mkdir(parents=True, exist_ok=True); "
            "p.write_text('{}')")
    return with_code(job, code)


@pytest.fixture
def passing_check(monkeypatch):
    monkeypatch.setattr(jobrun, "usable_endpoints", lambda job, key, **_: ([URL], {}))


def test_an_infrastructure_failure_is_retried_after_a_doubling_wait(tmp_path, passing_check):
    (job,) = jobs_of(tmp_path)
    job = exits_then_done(job, [1, 3])  # endpoint gone, then items lost to infrastructure
    outcome = run_job(job, policy=JobPolicy(retries=2, retry_wait_s=0.2))
    assert outcome.status == "done" and outcome.retries == 2
    assert read_state(job)["attempts"] == 3
    log = log_path(job).read_text()
    assert "retry 1 of 2 in 0 s (failed on infrastructure: exit 1" in log
    assert "retry 2 of 2" in log and "exit 3" in log
    assert [retry_wait(JobPolicy(retry_wait_s=30), n) for n in (1, 2, 3, 8)] == \
        [30, 60, 120, limits.MAX_RETRY_WAIT_S]


@pytest.mark.parametrize("codes", [[2], [4], [0]])
def test_bad_input_a_crash_or_no_result_is_never_retried(tmp_path, passing_check, codes):
    (job,) = jobs_of(tmp_path)
    job = exits_then_done(job, codes)
    if codes == [0]:  # exits 0 without its done file, every time
        job = with_code(job, "pass")
    outcome = run_job(job, policy=JobPolicy(retries=3, retry_wait_s=0.01))
    assert outcome.status == "failed" and outcome.retries == 0
    assert read_state(job)["attempts"] == 1 and "retry" not in log_path(job).read_text()


def test_retries_end_when_spent_and_the_job_stays_failed(tmp_path, passing_check):
    (job,) = jobs_of(tmp_path)
    job = exits_then_done(job, [1, 1, 1])
    outcome = run_job(job, policy=JobPolicy(retries=1, retry_wait_s=0.01))
    assert outcome.status == "failed" and outcome.retries == 1 and outcome.rc == 1
    assert read_state(job)["attempts"] == 2
    assert [infrastructure(rc) for rc in (1, 3, 130, 143, -9, 0, 2, 4, None)] == \
        [True] * 5 + [False] * 4


def test_a_job_not_started_for_its_endpoints_is_retried_with_a_new_check(tmp_path):
    (job,) = jobs_of(tmp_path)
    job = dataclasses.replace(job, env={**job.env, "VLLM_BASE_URL": dead_url()})
    outcome = run_job(job, policy=JobPolicy(retries=1, retry_wait_s=0.01))
    assert outcome.status == "failed" and outcome.retries == 1
    assert "no endpoint passed its check" in outcome.reason
    log = log_path(job).read_text()
    assert log.count("failed its check") == 2  # checked again, not the kept verdict
    assert not job.out.exists()


def test_a_stopped_grid_cuts_the_retry_wait_short(tmp_path, passing_check):
    import threading

    (job,) = jobs_of(tmp_path)
    job = exits_then_done(job, [1, 1])
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    outcome = run_job(job, stop, JobPolicy(retries=1, retry_wait_s=60))
    assert time.monotonic() - started < 10
    assert outcome.status == "skipped" and "stopped before a retry" in outcome.reason


def test_a_job_past_its_time_limit_is_stopped_and_failed_not_retried(tmp_path, passing_check,
                                                                    monkeypatch):
    monkeypatch.setattr(launch, "TICK_S", 0.1)
    (job,) = jobs_of(tmp_path)
    job = with_code(job, "import time; time.sleep(60)")
    started = time.monotonic()
    outcome = run_job(job, policy=JobPolicy(retries=2, retry_wait_s=0.01, time_limit_s=0.5))
    assert time.monotonic() - started < 15
    assert outcome.status == "failed" and outcome.retries == 0
    assert "time limit of 0 s reached" in outcome.reason and "resumes it" in outcome.reason
    assert read_state(job)["state"] == "failed"


def spends_tokens(job, tokens: int, seconds: float):
    """A run job that records `tokens` (one record with usage), then runs `seconds` more."""
    record = {"id": "p", "em": 0, "prompt_tokens": tokens, "completion_tokens": 0,
              "n_llm_calls": 1}
    target = job.out / "predictions.jsonl"
    code = (f"import pathlib, time; p = pathlib.Path({str(target)!r}); "
            "p.parent.mkdir(parents=True, exist_ok=True); "
            f"p.write_text({json.dumps(record)!r} + chr(10)); time.sleep({seconds})")
    return with_code(job, code)


def test_the_token_budget_stops_the_grid_and_keeps_what_ran(tmp_path, passing_check,
                                                            monkeypatch):
    monkeypatch.setattr(launch, "TICK_S", 0.1)
    monkeypatch.setattr(limits, "BUDGET_CHECK_S", 0.1)
    monkeypatch.setattr(jobrun, "BUDGET_CHECK_S", 0.1)
    first, second, third = jobs_of(tmp_path, seeds=(0, 1, 2), kind="run")
    jobs = [spends_tokens(first, 700, 60), spends_tokens(second, 700, 60),
            spends_tokens(third, 700, 0)]
    policy = JobPolicy(token_budget=1000)
    outcomes = {o.key: o for o in run_local(jobs, None, RunOptions(workers=2, policy=policy))}
    assert [outcomes[j.key].status for j in jobs] == ["interrupted", "interrupted", "skipped"]
    assert all("token budget is spent (1,400 of 1,000)" in outcomes[j.key].limit for j in jobs)
    assert grid_tokens(first.root) == 1400  # the third never started
    assert read_state(first)["tokens"] == 700 and read_state(first)["state"] == "interrupted"
    assert not (jobs[2].out / "predictions.jsonl").exists()


def test_the_time_budget_stops_running_jobs_and_starts_no_more(tmp_path, passing_check,
                                                               monkeypatch):
    monkeypatch.setattr(launch, "TICK_S", 0.1)
    first, second = jobs_of(tmp_path, seeds=(0, 1))
    jobs = [with_code(first, "import time; time.sleep(60)"), with_code(second, "pass")]
    policy = JobPolicy(deadline=time.time() + 1.0)
    started = time.monotonic()
    outcomes = {o.key: o for o in run_local(jobs, None, RunOptions(workers=1, policy=policy))}
    assert time.monotonic() - started < 15
    assert outcomes[first.key].status == "interrupted"
    assert outcomes[second.key].status == "skipped"
    assert {o.limit for o in outcomes.values()} == {"the grid's time budget ran out"}


def test_limits_in_the_spec_are_checked_and_named(tmp_path):
    spec = parse_spec(small_grid(URL, limits={"retries": 2, "retry_wait": "1m",
                                              "job_time_limit": "90m", "token_budget": 10 ** 9,
                                              "time_budget": "12h"}), base=tmp_path)
    assert (spec.limits.retry_wait, spec.limits.job_time_limit, spec.limits.time_budget) == \
        (60, 5400, 43200)
    for bad, named in [({"retries": -1}, "limits.retries"),
                       ({"retry_wait": "soon"}, "limits.retry_wait: 'soon' is not a duration"),
                       ({"job_time_limit": True}, "limits.job_time_limit"),
                       ({"token_budget": 0}, "limits.token_budget"),
                       ({"time_budget": "-2h"}, "not a positive duration")]:
        with pytest.raises(SpecError, match=named):
            parse_spec(small_grid(URL, limits=bad), base=tmp_path)


def test_grid_run_exits_3_when_a_budget_is_spent_and_counts_earlier_runs(tmp_path):
    from typer.testing import CliRunner

    from lcb.cli import app
    from tests.helpers_grid import write_spec

    data = small_grid(URL, kind="run", methods=[], topologies=["single"], seeds=[0, 1],
                      settings={"limit": 1})
    path = write_spec(tmp_path, data)
    earlier = plan(parse_spec(data, base=tmp_path))[0]
    earlier.out.mkdir(parents=True)  # a batch an earlier run left unfinished, 700 tokens in
    (earlier.out / "predictions.jsonl").write_text(json.dumps(
        {"id": "p", "em": 0, "prompt_tokens": 700, "completion_tokens": 0, "n_llm_calls": 1})
        + "\n")
    runner = CliRunner()
    ran = runner.invoke(app, ["grid", "run", str(path), "--token-budget", "500"])
    assert ran.exit_code == 3, ran.output
    assert "stopped: the grid's token budget is spent (700 of 500)" in ran.stderr
    assert ran.stderr.count("skipped run/lcb/single/scripted/") == 2
    bad = runner.invoke(app, ["grid", "run", str(path), "--retry-wait", "soon"])
    assert bad.exit_code == 2 and "'soon' is not a duration" in bad.stderr

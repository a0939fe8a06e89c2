"""Fixtures of the report tests, built with the real code: `lcb run` batches of every team against
scripted servers, `lcb score` results of one run's programs (both graders when the official
one is installed), and an optimizer grid written with the real artifact models.

Each team answers every request about a problem with the same reply, so its outcome per
problem is the table `OUTCOMES` (1 right, 0 wrong, "N" no program, "E" a refused request,
which is an error record). The single team first calls `python_exec`, and its q003 answer
holds a script tag: model output the pages must render inert.

The grid: identity and gepa on single and sequential, seeds 0 and 1, per-item outcomes in
`GRID`; gepa/sequential seed 1 has budget 30, so it is the one non-conformant job.
`build_all` makes everything once per test session (the runs take most of the time).
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from lcb.optimize.artifacts import (
    Artifact,
    HistoryEntry,
    ItemOutcome,
    JobResult,
    JobSpec,
    SelectionDecision,
    append_history,
    write_model,
)
from lcb.optimize.conformance import Requirement
from tests.helpers_runner import MODEL, RIGHT, WRONG, problem_ids, script, write_problems
from tests.scripted_server import Reply, ToolCall, scripted_server

TEAMS = ("single", "independent", "sequential", "centralized", "decentralized")
IDS = problem_ids(6)
HOSTILE = "I will not write code. <script>alert('pwned')</script>"
OUTCOMES = {
    "single":        [1, 1, 0, "N", 0, 1],
    "independent":   [1, 1, 1, "N", 0, 1],
    "sequential":    [1, 0, 1, 1, 0, 1],
    "centralized":   [1, 1, 0, "N", 0, 0],
    "decentralized": [0, 1, 1, 1, 1, "E"],
}
TOOL_CALL = Reply.calls(ToolCall("python_exec", {"code": "print(1 + 2)", "stdin": ""}))
SEED_BUNDLE = {"coder": "Write the whole program."}
EDITED = "Write the whole program. Check every limit twice. <b>bold</b>"
# (method, topology, seed) -> (baseline items, deployed items)
GRID = {
    ("identity", "single", 0): ([1] * 6 + [0] * 6, [1] * 6 + [0] * 6),
    ("identity", "single", 1): ([1] * 4 + [0] * 8, [1] * 4 + [0] * 8),
    ("identity", "sequential", 0): ([1] * 6, [1] * 6),
    ("identity", "sequential", 1): ([0] * 6, [0] * 6),
    ("gepa", "single", 0): ([0] * 12, [0] + [1] * 11),
    ("gepa", "single", 1): ([0] * 12, [1] * 12),
    ("gepa", "sequential", 0): ([1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]),
    ("gepa", "sequential", 1): ([1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 0, 0]),
}
NON_CONFORMANT = ("gepa", "sequential", 1)
REFLECT = {"calls": 3, "prompt_tokens": 1000, "completion_tokens": 200}


def _reply(team: str, outcome: Any) -> list[Reply | str]:
    body = {1: RIGHT, 0: WRONG, "N": HOSTILE, "E": Reply.error(400)}[outcome]
    return [TOOL_CALL, body] if team == "single" and outcome == 1 else [body]


def team_script(team: str):
    return script({qid: _reply(team, o) for qid, o in zip(IDS, OUTCOMES[team], strict=True)})


def invoke(*args: str, base_url: str = "http://127.0.0.1:9/v1", code: int = 0):
    """Run `lcb ARGS` in-process; its exit status must be `code`."""
    from lcb.cli import load_commands

    env = {"VLLM_BASE_URL": base_url, "MODEL_ID": MODEL}
    result = CliRunner().invoke(load_commands(), list(args), env=env)
    assert result.exit_code == code, result.output
    return result


def build_runs(root: Path) -> Path:
    """`root/runs/<team>` for every team, over `root/rows.jsonl`."""
    data = write_problems(root / "rows.jsonl", IDS)
    for team in TEAMS:
        with scripted_server(team_script(team)) as server:
            invoke("run", "--topology", team, "--data", str(data), "--out-dir",
                   str(root / "runs" / team), base_url=server.base_url)
    return data


def official_available() -> bool:
    try:
        from lcb.grading.official import require_official

        require_official()
    except Exception:  # noqa: BLE001 - any failure means: not installed here
        return False
    return True


def build_scores(root: Path, data: Path) -> list[Path]:
    """The single run's programs graded by `lcb score` (default, and official if installed)."""
    graders = ["default", *(["official"] if official_available() else [])]
    out = []
    for grader in graders:
        results = root / "scores" / f"single_{grader}.jsonl"
        invoke("score", "--data", str(data), "--predictions",
               str(root / "runs" / "single" / "predictions.jsonl"), "--out", str(results),
               "--grader", grader, "--jobs", "1")
        out.append(results)
    return out


def write_job(root: Path, method: str, topology: str, seed: int, *, budget: int = 600,
              model: str = "qwen", dataset: str = "lcb", team_size: int | None = None) -> Path:
    """One complete job directory of the grid (see the module docstring)."""
    baseline, deployed = GRID[(method, topology, seed)]
    folder = root / method / dataset / f"{topology}{team_size or ''}" / model / str(seed)
    folder.mkdir(parents=True)
    checked = [Requirement(name="budget", met=budget == 600, seen=budget, expected=600)]
    write_model(folder / Artifact.JOB, JobSpec(method=method, topology=topology, model=model,
                                               seed=seed, budget=budget, dataset=dataset,
                                               team_size=team_size, reflection_model="big",
                                               conformance=checked))
    (folder / Artifact.SEED).write_text(json.dumps(SEED_BUNDLE), encoding="utf-8")
    edited = {"coder": EDITED}
    incumbent = SEED_BUNDLE if method == "identity" else edited
    for entry in _history(method, incumbent):
        append_history(folder, entry)
    write_model(folder / Artifact.SELECTION, SelectionDecision.decide(
        seed=SEED_BUNDLE, incumbent=incumbent, seed_score=0.5,
        incumbent_score=0.75 if method == "gepa" else 0.5, n_items=4))
    items = [ItemOutcome(id=f"t{i:02d}", baseline=b, deployed=d)
             for i, (b, d) in enumerate(zip(baseline, deployed, strict=True))]
    label = "incumbent" if method == "gepa" else "seed"
    cost = {"budget": budget, "charged": 20 if method == "gepa" else 0, "proposals": 2,
            "accepted": 1, "uncharged": {"reflect": REFLECT}}
    write_model(folder / Artifact.RESULT,
                JobResult.from_items(items, deployed_label=label, cost=cost))
    return folder


def _history(method: str, incumbent: dict[str, str]) -> list[HistoryEntry]:
    times = ("2026-01-01T00:00:00+00:00", "2026-01-01T00:01:40+00:00")
    seed = HistoryEntry(iteration=0, bundle=SEED_BUNDLE, scores={"val": 0.5}, charged=4,
                        time=times[0])
    entries = [seed]
    if method == "gepa":
        entries += [
            HistoryEntry(kind="proposal", iteration=1, bundle={"coder": "Be brief."},
                         parent=seed.bundle_hash, scores={"minibatch": 0.25}, charged=10,
                         roles=["coder"], accepted=False, rejected_by="minibatch",
                         reason="not better on the minibatch", time=times[0]),
            HistoryEntry(kind="proposal", iteration=2, bundle=incumbent,
                         parent=seed.bundle_hash, scores={"minibatch": 1.0}, charged=16,
                         roles=["coder"], accepted=True, time=times[0]),
            HistoryEntry(iteration=2, bundle=incumbent, parent=seed.bundle_hash,
                         scores={"val": 0.75}, charged=20, time=times[0]),
        ]
    entries.append(HistoryEntry(kind="final", iteration=2, bundle=incumbent, charged=20,
                                time=times[1]))
    return entries


def build_grid(root: Path) -> Path:
    for method, topology, seed in GRID:
        budget = 30 if (method, topology, seed) == NON_CONFORMANT else 600
        write_job(root / "grid", method, topology, seed, budget=budget)
    return root / "grid"


_BUILT: dict[str, Path] = {}


def build_all(tmp_path_factory) -> Path:
    """Runs, scores and grid under one folder, made once per session."""
    if "root" not in _BUILT:
        root = tmp_path_factory.mktemp("report_fixture")
        data = build_runs(root)
        build_scores(root, data)
        build_grid(root)
        _BUILT["root"] = root
    return _BUILT["root"]


BIG_METHODS = ("identity", "gepa", "mipro", "mamut_gepa", "tavo", "maspo", "hivemind", "mapro",
               "maspob")
BIG_TOPOLOGIES = ("independent", "sequential", "centralized", "decentralized")
BIG_ROLES = ("analyzer", "coder", "tester", "debugger")


def write_big_grid(root: Path, *, items: int = 50, seeds: int = 3, iterations: int = 30) -> Path:
    """The 50 × 9 × 4 × 3 grid (items × methods × topologies × seeds) the size claim is about:
    complete job dirs with a history of `iterations` candidates and proposals each, four role
    prompts of about 1,500 characters, and deterministic pseudo-random outcomes."""
    rng = random.Random(7)
    text = " ".join(f"word{i}" for i in range(250))
    for method in BIG_METHODS:
        for topology in BIG_TOPOLOGIES:
            for seed in range(seeds):
                folder = root / method / "lcb" / topology / "qwen" / str(seed)
                folder.mkdir(parents=True)
                checked = [Requirement(name="budget", met=True, seen=600, expected=600)]
                write_model(folder / Artifact.JOB, JobSpec(
                    method=method, topology=topology, model="qwen", seed=seed,
                    reflection_model="big", conformance=checked))
                seed_bundle = {role: f"{role}: {text}" for role in BIG_ROLES}
                (folder / Artifact.SEED).write_text(json.dumps(seed_bundle))
                bundle = dict(seed_bundle)
                parent = HistoryEntry(iteration=0, bundle=bundle, scores={"val": 0.4},
                                      charged=0)
                append_history(folder, parent)
                for it in range(1, iterations + 1):
                    role = BIG_ROLES[it % 4]
                    child = {**bundle, role: bundle[role] + f" edit{it}"}
                    accepted = rng.random() < 0.3
                    append_history(folder, HistoryEntry(
                        kind="proposal", iteration=it, bundle=child, parent=parent.bundle_hash,
                        scores={"minibatch": rng.random()}, charged=20 * it, roles=[role],
                        accepted=accepted, rejected_by=None if accepted else "minibatch"))
                    if accepted:
                        bundle = child
                        parent = HistoryEntry(iteration=it, bundle=bundle, charged=20 * it,
                                              scores={"val": 0.4 + it / 100})
                        append_history(folder, parent)
                append_history(folder, HistoryEntry(kind="final", iteration=iterations,
                                                    bundle=bundle, charged=600))
                write_model(folder / Artifact.SELECTION, SelectionDecision.decide(
                    seed=seed_bundle, incumbent=bundle, seed_score=0.4, incumbent_score=0.5,
                    n_items=50))
                outcomes = [ItemOutcome(id=f"t{i:02d}", baseline=int(rng.random() < 0.4),
                                        deployed=int(rng.random() < 0.45))
                            for i in range(items)]
                write_model(folder / Artifact.RESULT, JobResult.from_items(
                    outcomes, deployed_label="incumbent",
                    cost={"budget": 600, "charged": 600, "proposals": iterations,
                          "accepted": 9, "uncharged": {"reflect": REFLECT}}))
    return root


def built_report(tmp_path_factory) -> tuple[Path, Path, dict[str, Any]]:
    """(fixture root, report folder, report.json) of `lcb report ROOT`, made once per session."""
    root = build_all(tmp_path_factory)
    out = root / "report"
    if not out.exists():
        invoke("report", str(root), "--out", str(out), "--title", "fixture report")
    return root, out, json.loads((out / "report.json").read_text())


def write_run(folder: Path, ems: dict[str, list[int]], *, tokens: int = 15,
              messages: dict[str, Any] | None = None) -> Path:
    """A hand-made single-agent run dir: per problem id the em of each sample, `tokens` per
    program (10 prompt + the rest completion), and a transcript per id in `messages` (a list
    of messages, or bytes written as the file as they are)."""
    folder.mkdir(parents=True)
    records = [{"id": pid, "sample": s, "em": em, "topology": "single",
                "predicted_code": "print(1)", "difficulty": "easy", "platform": "atcoder",
                "contest_date": "2024-02-03T00:00:00", "prompt_tokens": 10,
                "completion_tokens": tokens - 10, "seed": 0, "grader": "default"}
               for pid, samples in ems.items() for s, em in enumerate(samples)]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps({"topology": "single", "wall_s": 2.5}))
    (folder / "transcripts").mkdir()
    for pid, found in (messages or {}).items():
        where = folder / "transcripts" / f"{pid}.json.gz"
        if isinstance(found, bytes):
            where.write_bytes(found)
        else:
            with gzip.open(where, "wt") as handle:
                json.dump({"id": pid, "messages": found}, handle)
    return folder


# One transcript with a cache hit, a tool call whose arguments did not parse and a tool error.
TOOL_TROUBLE = [
    {"source": "coder", "role": "coder", "type": "assistant", "content": "",
     "call": {"cached": True}, "tool_calls": [{"id": "1", "name": "python_exec",
                                               "args": {}, "invalid": True}]},
    {"source": "coder", "role": "coder", "type": "tool", "content": "boom",
     "name": "python_exec", "status": "error"},
    {"source": "coder", "role": "coder", "type": "assistant", "content": "done",
     "call": {"cached": False}, "tool_calls": []}]


def write_results(results: Path, ems: dict[str, int], **summary: Any) -> Path:
    """A hand-made `lcb score` results file (one graded line per id) and its summary."""
    results.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"line": i + 1, "id": pid, "em": em, "has_code": True, "difficulty": "easy",
              "platform": "atcoder", "grader": summary.get("grader", "default")}
             for i, (pid, em) in enumerate(ems.items())]
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    results.with_name(f"{results.stem}.summary.json").write_text(json.dumps(summary))
    return results


def bootstrap_interval(rates: list[float], resamples: int = 1000) -> tuple[float, float]:
    """The percentile bootstrap of `lcb.stats`'s contract, written out: `resamples` means
    of len(rates) draws (index int(random() * m) of Random(0)), sorted, the ends at index
    round(2.5 % of resamples) from either side."""
    rng, m = random.Random(0), len(rates)
    means = sorted(sum(rates[int(rng.random() * m)] for _ in range(m)) / m
                   for _ in range(resamples))
    cut = round(0.025 * resamples)
    return means[cut], means[resamples - 1 - cut]


BROKEN = ("truncated transcript", "transcript not JSON", "seed bundle", "selection")


def break_input(tmp_path: Path, what: str) -> Path:
    """`tmp_path/in`: a run or job with one unreadable file (`BROKEN`); returns that file."""
    whole = gzip.compress(json.dumps({"id": "p0", "messages": TOOL_TROUBLE}).encode())
    if what in BROKEN[:2]:
        bad = whole[:-12] if what == "truncated transcript" else gzip.compress(b"{not json")
        write_run(tmp_path / "in" / "run", {"p0": [1]}, messages={"p0": bad})
        return tmp_path / "in" / "run" / "transcripts" / "p0.json.gz"
    job = write_job(tmp_path / "in", "gepa", "single", 0)
    broken = job / ("seed_bundle.json" if what == "seed bundle" else "selection.json")
    broken.write_text('{"coder": ')
    return broken

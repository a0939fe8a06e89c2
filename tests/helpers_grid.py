"""Helpers for the grid tests: a small grid spec on the sample set, the scripted team model it
runs against, an environment without a reflection endpoint, and an aggregate stripped of paths.

The small grid is 2 methods (identity, gepa) x 2 topologies (single, sequential with 2
agents) x 2 seeds = 8 optimizer jobs with a budget of 4 rollouts. The scripted model is the
planted scenario's (`tests.helpers_planted`): a pure function of each request, so two runs of
the grid, whatever their order or interruptions, get the same answers and the same results.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from lcb.grid.plan import GridJob, plan
from lcb.grid.spec import GridSpec, load_spec
from lcb.optimize.aggregate import aggregate
from tests.helpers_agents import MODEL
from tests.helpers_methods import FIX, REFLECTION_ENV
from tests.helpers_optimize import TeamModel, sample_problems
from tests.helpers_planted import RESPONDERS, WRONG, PlantedModel


def grid_model() -> PlantedModel:
    """The scripted server's script for a grid run."""
    return PlantedModel(TeamModel(sample_problems(), wrong=WRONG, fixed_by=FIX), list(RESPONDERS))


def small_grid(base_url: str, **overrides: Any) -> dict[str, Any]:
    """The small grid's spec as data (module docstring); `overrides` replace top-level keys."""
    spec: dict[str, Any] = {
        "out": "runs",
        "methods": ["identity", "gepa"],
        "topologies": ["single", "sequential"],
        "team_sizes": [2],
        "models": {"scripted": {"id": MODEL, "endpoints": [base_url]}},
        "seeds": [0, 1],
        "settings": {"data": "sample", "budget": 4, "concurrency": 3,
                     "allow_small_budget": True},  # gepa's 4 buy no proposal: fast jobs
    }
    spec.update(overrides)
    return spec


def write_spec(folder: Path, data: dict[str, Any], name: str = "grid.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def grid_env() -> dict[str, str]:
    """This process's environment without a reflection endpoint (jobs reflect on the task
    model) and without a task endpoint (the spec names it)."""
    drop = {*REFLECTION_ENV, "VLLM_BASE_URL", "MODEL_ID", "OPENAI_API_KEY"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def use_grid_env(monkeypatch: Any) -> None:
    for name in (*REFLECTION_ENV, "VLLM_BASE_URL", "MODEL_ID", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def results(spec: GridSpec) -> dict[str, Any]:
    """Each job's `result.json`, by job key."""
    return {job.key: json.loads((job.out / "result.json").read_text()) for job in plan(spec)}


def _strip(value: Any, root: str) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, root) for k, v in value.items()
                if k not in ("path", "paths", "wall_s")}  # wall times differ run to run
    if isinstance(value, list):
        return [_strip(v, root) for v in value]
    if isinstance(value, str):
        return value.replace(root, "<root>")
    return value


def aggregate_view(spec_path: Path) -> dict[str, Any]:
    """The grid's aggregate with every job path and wall time taken out (two grid folders
    compare equal)."""
    spec = load_spec(spec_path)
    return _strip(aggregate(spec.root), str(spec.root))


def sleeper_job(root: Path, base_url: str, seconds: float = 60.0) -> GridJob:
    """A job whose command sleeps (and then writes its done file): to stop it mid-way."""
    out = root / "sleeper"
    code = (f"import time, pathlib; time.sleep({seconds}); "
            f"pathlib.Path({str(out / 'result.json')!r}).write_text('{{}}')")
    return GridJob(key="sleeper/lcb/single/m/0", axes={"model": "m"},
                   argv=(sys.executable, "-c", code), cwd=root, out=out,
                   done_file="result.json", root=root,
                   env={"VLLM_BASE_URL": base_url, "MODEL_ID": MODEL})


def dead_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def journal(job: GridJob) -> dict[str, str]:
    """The job's appended files (history, evaluation records): their whole lines, by path."""
    files = {p: p.read_text(errors="replace") for p in sorted(job.out.rglob("*.jsonl"))}
    return {str(p): text[:text.rfind("\n") + 1] for p, text in files.items() if "\n" in text}


def result_view(spec: GridSpec) -> dict[str, Any]:
    """Each finished job's `result.json` by key, with paths and wall times taken out (two grid
    folders compare equal)."""
    return {key: _strip(result, str(spec.root)) for key, result in results(spec).items()}


def charged_keys(job: GridJob) -> list[str]:
    """The rollout keys of the job's journal, in order (a key charged twice shows twice)."""
    path = job.out / "rollouts.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line)["key"] for line in lines if line.strip()]


def assert_same_as_reference(spec_path: Path, reference: Path) -> None:
    """Every finished job of the grid at `spec_path` has the result the same job has in the
    reference grid, and no rollout key is charged twice in its journal."""
    ran, whole = result_view(load_spec(spec_path)), result_view(load_spec(reference))
    assert ran and ran == {key: whole[key] for key in ran}
    for job in plan(load_spec(spec_path)):
        keys = charged_keys(job)
        assert len(keys) == len(set(keys)), job.key  # nothing charged twice


@contextlib.contextmanager
def acting_on(grid: subprocess.Popen, server: Any) -> Iterator[subprocess.Popen]:
    """A running `lcb grid run` a test acts on (kills a node, requeues a task): at the end the
    scripted server answers at full speed again and a grid still running is killed."""
    try:
        yield grid
    finally:
        server.latency_s = 0.0
        if grid.poll() is None:
            grid.kill()

"""Problems with per-problem markers, scripted replies that solve them, and run configs.

Every problem's statement carries a marker `[[<id>]]`, so a `keyed` script can answer each
problem differently; requests without a marker (the endpoint check) get "OK".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lcb.agents.models import ModelConfig
from lcb.cli.run_cmd import ENTRY_MODULES
from lcb.runs.rundir import RunPaths
from lcb.runs.runner import RunConfig
from tests.helpers_data import stdin_row, write_jsonl
from tests.scripted_server import Reply, keyed

REPO = Path(__file__).resolve().parents[1]
MODEL = "scripted-model"
RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
TIERS = ("easy", "medium", "hard")
PLATFORMS = ("atcoder", "codeforces", "leetcode")


def marker(qid: str) -> str:
    return f"[[{qid}]]"


def problem_ids(n: int, prefix: str = "q") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def write_problems(path: Path, ids: list[str]) -> Path:
    """A JSONL of stdin "A+B" rows, one per id, with the id's marker in the statement."""
    rows = []
    for index, qid in enumerate(ids):
        row = stdin_row(qid, difficulty=TIERS[index % 3], platform=PLATFORMS[index % 3])
        row["question_content"] += f" {marker(qid)}"
        rows.append(row)
    return write_jsonl(path, rows)


def script(answers: dict[str, list[Reply | str]]) -> keyed:
    """A keyed script: problem id -> its replies; anything else (the endpoint check) -> "OK"."""
    return keyed({marker(qid): replies for qid, replies in answers.items()}, default=["OK"])


def model_config(base_url: str, **overrides) -> ModelConfig:
    values = dict(base_url=base_url, model_id=MODEL, timeout_s=5.0, max_retries=1,
                  retry_backoff_s=0.01, retry_backoff_max_s=0.02)
    return ModelConfig(**{**values, **overrides})


def run_config(base_url: str, data: Path, out_dir: Path | None = None, *,
               out: Path | None = None, **overrides) -> RunConfig:
    paths = RunPaths.choose(out=out, out_dir=out_dir, default_dir=data.parent / "run")
    values = dict(topology="single", model=model_config(base_url), paths=paths, data=str(data),
                  concurrency=4, grade_workers=1, progress_interval_s=0.0)
    return RunConfig(**{**values, **overrides})


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def entry_argv(*args: str, topology: str = "single") -> list[str]:
    """A subprocess command line for the seed entry point of `topology`."""
    return [sys.executable, "-m", ENTRY_MODULES[topology], *args]


def subprocess_env(base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MODEL_ID", "OPENAI_API_KEY")}
    path = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(VLLM_BASE_URL=base_url, MODEL_ID=MODEL, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    return env


def wait_for_records(path: Path, count: int, proc: subprocess.Popen,
                     timeout_s: float = 120.0) -> None:
    """Wait until `path` holds `count` lines; fail early if `proc` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= count:
            return
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    raise AssertionError(f"{count} records did not appear in {timeout_s}s")


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group `proc` leads (started with `start_new_session=True`)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def solvable_batch(scripted, tmp_path: Path, n: int, *, latency_s: float = 0.0):
    """`n` problems that the scripted server (started with `scripted`) answers right.

    Returns (ids, data file, server, output directory)."""
    ids = problem_ids(n)
    data = write_problems(tmp_path / "rows.jsonl", ids)
    server = scripted(script({qid: [RIGHT] for qid in ids}), latency_s=latency_s)
    return ids, data, server, tmp_path / "out"


def start_batch(base_url: str, data: Path, out: Path, *, concurrency: int = 2) -> subprocess.Popen:
    """The seed entry point running a batch in its own process group (stderr piped)."""
    argv = entry_argv("--batch", "--data", str(data), "--out-dir", str(out),
                      "--concurrency", str(concurrency))
    return subprocess.Popen(argv, cwd=REPO, env=subprocess_env(base_url), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


_HOLDER = """
import sys, time
from pathlib import Path
from lcb.runs.lock import run_lock
from lcb.runs.rundir import RunPaths
out = Path(sys.argv[1])
paths = RunPaths.choose(out=None, out_dir=out, default_dir=out)
run_lock(paths).acquire()
print("locked", flush=True)
time.sleep(300)
"""


def hold_lock(out_dir: Path) -> subprocess.Popen:
    """Another process holding the batch lock of `out_dir` (as a concurrent `lcb run` would),
    in its own process group; returns once it holds the lock."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out_dir)], cwd=REPO,
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc

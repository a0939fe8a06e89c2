"""The endpoint check before a job starts, shared by the jobs that start together.

Contract of `usable_endpoints(job, key, recheck_failed_since=None) -> (live, dropped)`:
- Every endpoint of the job (its `VLLM_BASE_URL` list, else this process's, else lcb's
  default) gets lcb's own check (`lcb.agents.check.check_endpoint`: list the models, then a
  1-token completion), all at once; `live` keeps the ones that pass in list order, `dropped`
  maps each other one to its reason. As there, busy is not down: a server that took the
  request but has not answered yet is waited for, up to the job's queue timeout, with one
  notice on this process's stderr. The check keeps the job's own time limits (`job_limits`):
  its `--queue-timeout` and `--request-timeout` flags (the grid's `settings.sampling`), else
  `LCB_QUEUE_TIMEOUT` and `LCB_REQUEST_TIMEOUT`, else `ModelConfig`'s defaults (1800 s, 600 s).
- A verdict is kept for `CHECK_TTL_S` seconds in `<grid>/.grid/checks/`, one file per
  (endpoint, model, key), written under a lock: the jobs of one array or pool that start together
  on one machine wait for one check instead of each making it (and each importing the model
  client). A verdict older than that is checked again, and so is a failed one older than
  `recheck_failed_since` (a retry's start: the endpoint may be back).
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path

from lcb.grid.plan import GridJob
from lcb.io import write_text

CHECK_TTL_S = 60.0
_LIMIT_FLAGS = {"--queue-timeout": "queue_timeout_s", "--request-timeout": "timeout_s"}
DEFAULT_BASE_URL = "http://localhost:8000/v1"  # lcb.agents.models.DEFAULT_BASE_URL


def _urls(job: GridJob) -> list[str]:
    from lcb.agents.endpoints import split_base_urls

    text = job.env.get("VLLM_BASE_URL") or os.environ.get("VLLM_BASE_URL") or DEFAULT_BASE_URL
    return list(split_base_urls(text))


def job_limits(job: GridJob) -> dict[str, float]:
    """The time limits the job's own flags set (`ModelConfig` field -> seconds)."""
    argv = list(job.argv)
    return {field: float(argv[argv.index(flag) + 1]) for flag, field in _LIMIT_FLAGS.items()
            if flag in argv[:-1]}


def check_now(urls: list[str], model_id: str, key: str,
              limits: dict[str, float] | None = None) -> dict[str, str]:
    """lcb's check of each URL at once: the ones that failed, with their reason. `limits`
    (`job_limits`) win over the environment's `LCB_QUEUE_TIMEOUT` / `LCB_REQUEST_TIMEOUT`."""
    from lcb.agents.check import check_endpoint
    from lcb.agents.endpoints import check_each
    from lcb.agents.models import ModelConfig

    base = ModelConfig.from_env(model_id, base_url=urls[0], api_key=key, **(limits or {}))

    def check(url: str):
        return check_endpoint(dataclasses.replace(base, base_url=url, base_urls=(url,)))

    failed = asyncio.run(check_each(urls, check))
    return {url: getattr(err, "problem", "") or str(err) for url, err in failed.items()}


def _fresh(path: Path, failed_since: float | None) -> dict | None:
    try:
        verdict = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(verdict, dict) or time.time() - verdict.get("at", 0) > CHECK_TTL_S:
        return None
    if failed_since is not None and verdict.get("problem") and verdict["at"] < failed_since:
        return None
    return verdict


def _verdict(folder: Path, url: str, model_id: str, key: str, limits: dict[str, float],
             failed_since: float | None) -> str | None:
    """None when `url` passes (from a fresh verdict or a new check), else the reason."""
    name = hashlib.sha256(f"{url}\n{model_id}\n{key}".encode()).hexdigest()[:16]
    path = folder / f"{name}.json"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        verdict = _fresh(path, failed_since)
        if verdict is None:
            problem = check_now([url], model_id, key, limits).get(url)
            verdict = {"at": time.time(), "problem": problem}
            write_text(path, json.dumps(verdict))
    return verdict.get("problem")


def usable_endpoints(job: GridJob, key: str, *, recheck_failed_since: float | None = None
                     ) -> tuple[list[str], dict[str, str]]:
    """(endpoints that pass, the others with their reason): module docstring."""
    from concurrent.futures import ThreadPoolExecutor

    urls = _urls(job)
    folder = job.root / ".grid" / "checks"
    model_id, limits = job.env["MODEL_ID"], job_limits(job)
    with ThreadPoolExecutor(max_workers=len(urls)) as pool:
        problems = list(pool.map(lambda url: _verdict(folder, url, model_id, key, limits,
                                                      recheck_failed_since), urls))
    dropped = {url: why for url, why in zip(urls, problems, strict=True) if why is not None}
    return [url for url in urls if url not in dropped], dropped

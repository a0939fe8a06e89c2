"""Provenance: what code, libraries and endpoints ran a job session (job.json's `provenance`).

Contract of `collect(...)` (a JSON object):
- `lcb`: `{"commit", "dirty"}` of the lcb checkout (`git`); both null when git or the
  repository is absent. Untracked files that git does not ignore count as dirty.
- `versions`: the installed versions of `LIBRARIES` (null for one that is not installed) and
  `python`.
- `grader`: `{"mode", "version"}`; the version is a digest of the grader's source files
  (`lcb/grading/*.py` and `lcb/sandbox/*.py`, where its programs run), so any change to the
  grading code shows. `sandbox`: the tier.
- `endpoints`: `{"task" | "reflection": {"base_url", "model_id"}}`. API keys are never written;
  a base URL loses any user:password part and its query string (`redact_url`).
- `sampling`: the task, reflection and judge sampling (`temperature`, `top_p`, `max_tokens`).
- `requests`: how this session talked to the task endpoint: `max_in_flight` (`--max-requests`,
  shared by the team runs and the calls to that endpoint), `request_timeout_s` (the idle limit)
  and `queue_timeout_s`. They decide when requests are sent and how long they may wait, not
  what they ask, so they are not settings: a resume may use others.
- `time`: when the session started.
Provenance is not a setting: a rerun after a commit resumes the job (`lcb.optimize.artifacts`
leaves it out of the same-settings check and records each later session under `resumes`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lcb.agents.endpoints import redact_url  # re-exported: job.json's endpoints use it
from lcb.agents.models import ModelConfig
from lcb.runs.checkout import REPO_ROOT, git_state  # re-exported
from lcb.runs.rundir import now_iso

LIBRARIES = ("gepa", "dspy", "optuna", "langgraph", "httpx", "aiohttp", "lcb")
GRADER_DIRS = (REPO_ROOT / "lcb" / "grading", REPO_ROOT / "lcb" / "sandbox")
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens")


def collect(*, task: ModelConfig, reflection: ModelConfig, grader: str, sandbox: str,
            judge_sampling: Mapping[str, Any]) -> dict[str, Any]:
    """This session's provenance (see the module docstring)."""
    return {
        "lcb": git_state(),
        "versions": {**library_versions(), "python": platform.python_version()},
        "grader": {"mode": grader, "version": grader_version()},
        "sandbox": sandbox,
        "endpoints": {"task": endpoint(task), "reflection": endpoint(reflection)},
        "sampling": {"task": sampling(task), "reflection": sampling(reflection),
                     "judge": dict(judge_sampling)},
        "requests": requests(task),
        "time": now_iso(),
    }


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    """The installed distribution version of each name (None when not installed)."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def grader_version(folders: tuple[Path, ...] = GRADER_DIRS) -> str:
    """sha256 (first 16 hex digits) over the grader's source files, names and contents."""
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted(folder.glob("*.py")):
            name = f"{folder.name}/{path.name}"
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def endpoint(config: ModelConfig) -> dict[str, str]:
    """Where a model was served: base URL (redacted) and model id, never the key."""
    return {"base_url": redact_url(config.base_url), "model_id": config.model_id}


def requests(config: ModelConfig) -> dict[str, Any]:
    """The request limits of a session (module docstring)."""
    return {"max_in_flight": config.max_concurrent_requests,
            "request_timeout_s": config.timeout_s, "queue_timeout_s": config.queue_timeout_s}


def sampling(config: ModelConfig) -> dict[str, Any]:
    return {key: getattr(config, key) for key in SAMPLING_KEYS}

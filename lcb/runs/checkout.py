"""The lcb checkout a run or job came from: its git commit and whether it had local changes.

`git_state(root)` is `{"commit": sha | None, "dirty": bool | None}`: both null when git or the
repository is absent (an installed wheel), dirty when `git status --porcelain` lists anything
(untracked files that git does not ignore included). Recorded in run manifests and job.json.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
_GIT_TIMEOUT_S = 10.0


def git_state(root: Path = REPO_ROOT) -> dict[str, Any]:
    """`{"commit": sha | None, "dirty": bool | None}` of the checkout at `root`."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = _git(root, "status", "--porcelain")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=_GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    return done.stdout.strip() if done.returncode == 0 else None

"""Whether a response-cache directory can serve, checked before a batch or job does any work.

Contract: `check_cache(directory, replay=...)` raises `CacheError` (a `ValueError` naming the
directory and why) for a directory that cannot be used: with `replay`, one that does not exist
or holds no `*.sqlite`, or no directory at all; otherwise one that cannot be made or written.
None without `replay` passes. It imports nothing but the standard library, so a command
reports a bad `--cache` before it loads the model stack (`lcb.agents.cache` holds the cache).
"""

from __future__ import annotations

import os
from pathlib import Path


class CacheError(ValueError):
    """A cache directory that cannot be used (the message names it and why)."""


def check_cache(directory: str | os.PathLike[str] | None, *, replay: bool) -> None:
    """Raise `CacheError` when `directory` cannot serve (module docstring); None passes."""
    if directory is None:
        if replay:
            raise CacheError("--replay runs from the cache alone: name it with --cache DIR")
        return
    path = Path(directory)
    if replay:
        if not path.is_dir():
            raise CacheError(f"--replay: the cache directory {path} does not exist")
        if not any(path.glob("*.sqlite")):
            raise CacheError(f"--replay: {path} holds no cache file (*.sqlite): run once with "
                             f"--cache {path} (and an endpoint) first")
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CacheError(f"--cache {path}: the directory cannot be made ({err})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise CacheError(f"--cache {path}: the directory is not writable")

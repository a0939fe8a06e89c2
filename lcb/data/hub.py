"""The LiveCodeBench dataset on the Hugging Face hub, fetched file by file with huggingface_hub.

`livecodebench/code_generation_lite` stores each release's new problems in its own JSONL file
(`test.jsonl` for v1, `test2.jsonl` … `test6.jsonl`); a release tag names a range of them:

- `release_vN`: versions 1..N (cumulative), `release_latest`: every version,
- `vN`: version N only (`v1` is the same as `release_v1`), `vA_vB`: versions A..B.

Contract:
- `release_files(tag)` maps a tag to file names, or raises `DataError` naming the valid tags.
- `fetch_release(tag, repo_id=..., revision=...)` downloads (or finds in the HF cache) only
  those files via `hf_hub_download` and returns their local paths plus a JSON-able description.
  The first file resolves the revision to a commit hash; every other file is fetched at that
  hash, so one load never mixes commits, and the hash is recorded in the description.
- It works offline (`HF_HUB_OFFLINE=1`, or no network) when the files are cached. When they are
  not, it raises `DataError` saying how to get the data.
- Every `DataError` raised here ends with `OFFLINE_HINT`: `--data sample` (the bundled sample
  set) is the way to try lcb with no download. The `datasets` package is not used: its
  current versions cannot run this dataset's loading script.
- Unless offline mode is on, one TCP connect to the hub endpoint (`HF_ENDPOINT`, or the proxy
  that serves it) comes first, bounded by `CONNECT_TIMEOUT_S` (name lookup included). When it
  fails, the files are taken from the cache only: huggingface_hub would otherwise retry an
  unreachable hub for about 24 s (five retries with backoff) before the same outcome.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from lcb.data.local import DataError

HUB_DATASET = "livecodebench/code_generation_lite"
DEFAULT_RELEASE = "release_v1"
LATEST_VERSION = 6
REVISION_ENV = "LCB_HF_REVISION"
DEFAULT_REVISION = "main"
CONNECT_TIMEOUT_S = 3.0
OFFLINE_HINT = "to try lcb with no download, use --data sample (the bundled sample set)"

_RELEASE = re.compile(r"release_v(\d+)")
_SINGLE = re.compile(r"v(\d+)")
_RANGE = re.compile(r"v(\d+)_v(\d+)")


@dataclass(frozen=True)
class HubFiles:
    """Local paths of a release's files and the source description recorded with a load."""

    paths: tuple[Path, ...]
    source: dict


def version_file(version: int) -> str:
    return "test.jsonl" if version == 1 else f"test{version}.jsonl"


def release_versions(tag: str) -> range:
    """The dataset versions a release tag covers, e.g. `release_v3` -> 1..3, `v2_v4` -> 2..4."""
    text = tag.strip()
    if text == "release_latest":
        return range(1, LATEST_VERSION + 1)
    if match := _RELEASE.fullmatch(text):
        first, last = 1, int(match[1])
    elif match := _SINGLE.fullmatch(text):
        first = last = int(match[1])
    elif match := _RANGE.fullmatch(text):
        first, last = int(match[1]), int(match[2])
    else:
        raise hub_error(_bad_tag(tag, "unknown form"))
    if not 1 <= first <= last <= LATEST_VERSION:
        raise hub_error(_bad_tag(tag, f"versions must satisfy 1 <= A <= B <= {LATEST_VERSION}"))
    return range(first, last + 1)


def hub_error(message: str) -> DataError:
    """A `DataError` about the hub: `message`, then `OFFLINE_HINT`."""
    return DataError(f"{message}; {OFFLINE_HINT}")


def _bad_tag(tag: str, why: str) -> str:
    return (
        f"--release {tag!r}: {why}; use release_v1..release_v{LATEST_VERSION}, release_latest, "
        f"vN (one version) or vA_vB (a range)"
    )


def release_files(tag: str) -> list[str]:
    """The JSONL files of `tag`, in dataset order."""
    return [version_file(version) for version in release_versions(tag)]


def default_revision() -> str:
    """The revision to fetch when none is given: `$LCB_HF_REVISION`, else `main`."""
    return os.environ.get(REVISION_ENV) or DEFAULT_REVISION


def fetch_release(
    tag: str, *, repo_id: str = HUB_DATASET, revision: str | None = None
) -> HubFiles:
    """Fetch the files of release `tag` from `repo_id`; see the module contract."""
    names = release_files(tag)
    wanted = revision or default_revision()
    unreachable = _unreachable()
    paths = [_download(repo_id, names[0], wanted, unreachable)]
    commit = _commit_of(paths[0]) or wanted
    paths += [_download(repo_id, name, commit, unreachable) for name in names[1:]]
    source = {
        "kind": "hub",
        "repo": repo_id,
        "release": tag,
        "revision": commit,
        "requested_revision": wanted,
        "files": names,
    }
    return HubFiles(paths=tuple(paths), source=source)


def _commit_of(path: Path) -> str | None:
    """The commit hash in a cache path `…/snapshots/<hash>/<file>`, if it is one."""
    if path.parent.parent.name == "snapshots":
        return path.parent.name
    return None


def _unreachable() -> str | None:
    """Why the hub cannot be reached (None when it can, or when offline mode is on)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return None
    return connect_problem(constants.ENDPOINT)


def connect_problem(url: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """None when a TCP connection to `url`'s host (or to the proxy for it) opens within
    `timeout_s`, else why not. No request is sent."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = via.hostname or "", via.port or 80
    found: list[object] = []
    # getaddrinfo takes no timeout and a broken resolver can hang: look up in a daemon thread.
    lookup = threading.Thread(target=_lookup, args=(host, port, found), daemon=True)
    lookup.start()
    lookup.join(timeout_s)
    if not found:
        return f"no answer from a name lookup of {host} within {timeout_s:g} s"
    if isinstance(found[0], OSError):
        return f"cannot resolve {host}: {found[0].strerror or found[0]}"
    family, kind, proto, _, address = found[0][0]  # type: ignore[index]
    try:
        with socket.socket(family, kind, proto) as sock:
            sock.settimeout(timeout_s)
            sock.connect(address)
    except OSError as exc:
        return f"cannot connect to {host}:{port}: {exc.strerror or exc}"
    return None


def _lookup(host: str, port: int, found: list[object]) -> None:
    try:
        found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
    except OSError as exc:
        found.append(exc)


def _download(repo_id: str, filename: str, revision: str, unreachable: str | None) -> Path:
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{filename} of hub dataset {repo_id} (revision {revision})"
    try:
        local = hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision,
                                local_files_only=unreachable is not None)
    except LocalEntryNotFoundError:
        raise hub_error(_not_cached(where, repo_id, filename, constants.HF_HUB_CACHE,
                                    unreachable)) from None
    except RepositoryNotFoundError:
        raise hub_error(f"--data {repo_id}: no such dataset on the hub (or it is gated)") from None
    except RevisionNotFoundError:
        raise hub_error(f"cannot fetch {where}: unknown revision {revision!r}") from None
    except EntryNotFoundError:
        raise hub_error(f"cannot fetch {where}: the dataset has no such file") from None
    except (HfHubHTTPError, OSError) as exc:
        raise hub_error(f"cannot fetch {where}: {exc}") from None
    return Path(local)


def _not_cached(where: str, repo_id: str, filename: str, cache: str, why: str | None) -> str:
    state = f"the hub is unreachable ({why})" if why else \
        "the hub is unreachable or offline mode is on"
    return (
        f"cannot fetch {where}: {state}, and the file is not in the Hugging Face cache "
        f"({cache}). Either pass --data PATH (a local JSONL/Parquet "
        f"copy of the rows, or a directory of them), or download it once while online: "
        f"hf download {repo_id} {filename} --repo-type dataset"
    )

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
  not, it raises `DataError` saying how to get the data. The `datasets` package is not used: its
  current versions cannot run this dataset's loading script.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from lcb.data.local import DataError

HUB_DATASET = "livecodebench/code_generation_lite"
DEFAULT_RELEASE = "release_v1"
LATEST_VERSION = 6
REVISION_ENV = "LCB_HF_REVISION"
DEFAULT_REVISION = "main"

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
        raise DataError(_bad_tag(tag, "unknown form"))
    if not 1 <= first <= last <= LATEST_VERSION:
        raise DataError(_bad_tag(tag, f"versions must satisfy 1 <= A <= B <= {LATEST_VERSION}"))
    return range(first, last + 1)


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
    paths = [_download(repo_id, names[0], wanted)]
    commit = _commit_of(paths[0]) or wanted
    paths += [_download(repo_id, name, commit) for name in names[1:]]
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


def _download(repo_id: str, filename: str, revision: str) -> Path:
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
        local = hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision)
    except LocalEntryNotFoundError:
        raise DataError(_not_cached(where, repo_id, filename, constants.HF_HUB_CACHE)) from None
    except RepositoryNotFoundError:
        raise DataError(f"--data {repo_id}: no such dataset on the hub (or it is gated)") from None
    except RevisionNotFoundError:
        raise DataError(f"cannot fetch {where}: unknown revision {revision!r}") from None
    except EntryNotFoundError:
        raise DataError(f"cannot fetch {where}: the dataset has no such file") from None
    except (HfHubHTTPError, OSError) as exc:
        raise DataError(f"cannot fetch {where}: {exc}") from None
    return Path(local)


def _not_cached(where: str, repo_id: str, filename: str, cache: str) -> str:
    return (
        f"cannot fetch {where}: the hub is unreachable or offline mode is on, and the file is "
        f"not in the Hugging Face cache ({cache}). Either pass --data PATH (a local JSONL/Parquet "
        f"copy of the rows, or a directory of them), or download it once while online: "
        f"hf download {repo_id} {filename} --repo-type dataset"
    )

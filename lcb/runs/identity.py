"""What makes a batch's results what they are: its settings, its data and the code that ran.

Contract:
- `run_settings(config, source=None)` is a flat JSON object of every setting that changes what a
  record holds: `topology`, `model` (the id), the sampling the model config carries
  (`SAMPLING_KEYS`, those it has), `seed`, `grader`, `sandbox`, the team as it will run
  (`team_size` resolved from the defaults and `$…_N_AGENTS`, `communication`, `active`,
  `rounds`; all null but the size for the single team), the data (`data`: the hub repo,
  "sample", or the resolved local path; `release` for the hub), and `prompts.<role>`: the
  sha256 of each of the topology's role prompt files (as `lcb.agents.prompts.prompt_hash`
  computes it). With the loaded `source` it also holds `data_checksum` (`data_checksum`): the
  commit a hub revision resolved to, so a resume may pin the recorded commit with `--revision`,
  while a branch that moved is refused. `samples` and the selection are not in it: a resume may
  add problems or samples (the runner runs only the new ones), since a record's result does not
  depend on them.
- `add_checksums(source)` adds `sha256` ({file: hex digest}) to a local or sample source
  description; `data_checksum(source)` is that digest for one file, a digest of the
  `sha256sum`-style list for several, or the hub commit for hub data.
- `check_resume(paths, resume=, settings=)` only reads. Without `resume`, a non-empty output
  raises `OutputError` (see `lcb.runs.rundir.refuse_overwrite`). With it, the first setting
  whose value differs from the manifest's `settings`, or from what an earlier record carries
  (`RECORD_KEYS`: the check an output without a manifest gets), raises `OutputError` naming
  the setting, both values and how to resume.
- `session_facts(loaded)`: the manifest facts of one session: `git` (commit and dirty flag of
  the lcb checkout, null without git; `lcb.runs.checkout.git_state`) and `skipped_rows`
  (every selected row left out, with its kind and reason).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lcb.agents.prompts import bundle_hashes, role_path, seed_bundle
from lcb.data.datasets import Loaded, source_kind
from lcb.data.hub import HUB_DATASET
from lcb.registry import SINGLE
from lcb.runs.checkout import git_state
from lcb.runs.records import read_records
from lcb.runs.rundir import OutputError, RunPaths, refuse_overwrite
from lcb.teams.layouts import Topology
from lcb.teams.options import TeamOptions
from lcb.teams.setup import Team

if TYPE_CHECKING:
    from lcb.runs.config import RunConfig

SAMPLING_KEYS = ("temperature", "top_p", "max_tokens", "thinking", "vllm_extras")
RECORD_KEYS = ("topology", "model", "seed", "grader", "team_size", "communication")
GENERATION_KEYS = ("temperature", "top_p", "max_tokens", "thinking")  # in a record's `generation`
_CHUNK = 1 << 20
# How to get a setting back, for the refusal; the default is the `--flag` of the same name.
_HINTS = {
    "model": "--model (or $MODEL_ID)",
    "thinking": "--thinking/--no-thinking",
    "vllm_extras": "--vllm-extras/--no-vllm-extras",
    "team_size": "--team-size (or $INDEPENDENT_N_AGENTS / $DECENTRALIZED_N_AGENTS)",
    "rounds": "$DECENTRALIZED_N_ROUNDS",
    "data_checksum": "data (its files changed since the run began; for hub data, pass the "
                     "recorded commit as --revision)",
}


def run_settings(config: RunConfig, source: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The results-changing settings of `config` (see the module contract)."""
    model = config.model.to_record()
    settings: dict[str, Any] = {"topology": config.topology, "model": config.model.model_id}
    settings |= {key: model[key] for key in SAMPLING_KEYS if key in model}
    settings |= {"seed": config.seed, "grader": config.grader, "sandbox": config.sandbox}
    settings |= _team(config.topology, config.team)
    settings |= _data(config)
    for role, digest in bundle_hashes(seed_bundle(config.topology)).items():
        settings[f"prompts.{role}"] = digest
    if source is not None:
        settings["data_checksum"] = data_checksum(source)
    return json.loads(json.dumps(settings))  # as the manifest holds them: lists, not tuples


def _team(topology: str, team: TeamOptions | None) -> dict[str, Any]:
    if topology == SINGLE:
        return {"team_size": 1, "communication": None, "active": None, "rounds": None}
    options = team or TeamOptions()
    return {
        "team_size": Team.resolve(topology, options).layout.size,
        "communication": options.communication.value,
        "active": None if options.active is None else sorted(options.active),
        "rounds": options.rounds_for() if topology == Topology.DECENTRALIZED else None,
    }


def _data(config: RunConfig) -> dict[str, Any]:
    kind = source_kind(config.data)
    if kind == "hub":
        return {"data": config.data or HUB_DATASET, "release": config.release}
    data = "sample" if kind == "sample" else str(Path(str(config.data)).expanduser().resolve())
    return {"data": data, "release": None}


def add_checksums(source: dict[str, Any]) -> dict[str, Any]:
    """Add `sha256` ({file: digest}) to a local or sample source description; returns it."""
    if source.get("kind") != "hub" and "sha256" not in source:
        source["sha256"] = {name: file_sha256(Path(name)) for name in source.get("files", ())}
    return source


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def data_checksum(source: Mapping[str, Any]) -> str | None:
    """The hub commit, one file's sha256, or the sha256 of `<digest>  <name>` lines (sorted)."""
    if source.get("kind") == "hub":
        return source.get("revision")
    sums = source.get("sha256") or {}
    if len(sums) == 1:
        return next(iter(sums.values()))
    listing = "".join(f"{digest}  {Path(name).name}\n" for name, digest in sorted(sums.items()))
    return hashlib.sha256(listing.encode("utf-8")).hexdigest() if sums else None


def check_resume(paths: RunPaths, *, resume: bool, settings: Mapping[str, Any]) -> None:
    """Refuse an output this run may not continue (see the module contract). Reads only."""
    if not resume:
        refuse_overwrite(paths)
        return
    recorded = _manifest_settings(paths)
    for key, value in settings.items():
        if key in recorded and recorded[key] != value:
            raise OutputError(_refusal(paths, key, recorded[key], value))
    for record in read_records(paths.predictions):
        for key in RECORD_KEYS:
            if key in settings and record.get(key) not in (None, settings[key]):
                raise OutputError(_refusal(paths, key, record[key], settings[key]))
        generation = record.get("generation") or {}  # an output without a manifest too
        for key in GENERATION_KEYS:
            if key in settings and key in generation and generation[key] != settings[key]:
                raise OutputError(_refusal(paths, key, generation[key], settings[key]))


def _manifest_settings(paths: RunPaths) -> dict[str, Any]:
    if paths.manifest is None or not paths.manifest.exists():
        return {}
    try:
        manifest = json.loads(paths.manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OutputError(f"cannot resume: {paths.manifest} is unreadable ({exc}); "
                          "choose another --out-dir") from None
    settings = manifest.get("settings") if isinstance(manifest, dict) else None
    return settings if isinstance(settings, dict) else {}


def _refusal(paths: RunPaths, key: str, before: Any, now: Any) -> str:
    where, flag = (paths.out_dir, "--out-dir") if paths.out_dir else (paths.predictions, "--out")
    if key.startswith("prompts."):
        hint = f"prompt file {_prompt_file(paths, key)} (restore the text the run began with)"
    else:
        hint = _HINTS.get(key, f"--{key.replace('_', '-')}")
    return (f"cannot resume {where}: it was run with {key} = {before!r}, this run has {now!r}. "
            f"Resume with the same {hint}, or choose another {flag}.")


def _prompt_file(paths: RunPaths, key: str) -> str:
    topology = _manifest_settings(paths).get("topology")
    role = key.removeprefix("prompts.")
    return str(role_path(topology, role)) if isinstance(topology, str) else role


def session_facts(loaded: Loaded) -> dict[str, Any]:
    """This session's manifest facts: the checkout's git state and the rows left out."""
    return {"git": git_state(),
            "skipped_rows": [{"id": entry.row_id, "kind": entry.kind, "reason": entry.reason}
                             for entry in loaded.skipped]}

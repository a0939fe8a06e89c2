"""Conformance: is a job the standard protocol? A checked list of named requirements.

`check(spec, splits=..., reference=...)` returns one `Requirement` per rule below, each with
`met`, the value `seen` in the job and the value `expected`; `job.json` records the list as
`conformance`, `conformant` is true when every requirement is met, and `deviations` lists the
unmet ones as text. A job is judged once, when its directory is made.

| name              | met when                                                              |
|-------------------|-----------------------------------------------------------------------|
| budget            | 600 charged rollouts                                                   |
| task_sampling     | temperature 0.2 and top-p 0.9 for the optimize phase's team runs       |
| reflection_model  | a reflection model is set and is not the task model                    |
| data_source       | the hub dataset `livecodebench/code_generation_lite` (`--data` unset)  |
| release           | `release_v1`                                                           |
| revision          | the hub revision (commit) of the rows is recorded                      |
| test_split_rule   | the test split is the eval IDs (`test_rule == "eval_ids"`)             |
| split_sizes       | 150 / 50 / 50                                                          |
| split_contents    | the ids equal the standard split file's (`benchmarks/lcb/lcb_splits.json`); |
|                   | without that file: not met, seen "no standard split file"              |
| grader            | "default" or "official"                                                |
| sandbox           | the default process containment or a stronger tier (`SANDBOX_STRENGTH`) |
| team              | the topology's default team size and `freeform` messages               |
| method_settings   | the method's reference defaults (no `--set` override)                  |
| seed_prompts      | every role's seed text hashes as in `configs/prompts/hashes.json`       |
| opt_tests         | optimization rollouts graded on all private tests (`--opt-tests` unset) |
| selection         | the method selects on the validation split (`--selection validation`)  |
| feedback          | reflection sees the failing train test whole (`--feedback full`)        |
| uncharged_cost    | uncharged calls take no budget (`--uncharged-cost 0`)                   |

`opt_tests` is a requirement because grading optimize rollouts on fewer tests changes the
reward every method optimizes: such a job answers another question than the standard one.
`selection`, `feedback` and `uncharged_cost` too: `--selection train` (the gate a held-out test
for every method), `--feedback verdict` and `--uncharged-cost R` (a compute-matched budget) are
variants a study may run beside the standard, named as deviations so that aggregate never
pools them with it.

Prompt manifest (`configs/prompts/hashes.json`): `{"prompts": {topology: {role: sha256}}}` of
each role file's text as `lcb.agents.prompts.load_role_prompt` reads it. After a deliberate
change to a shipped prompt, rewrite it with `write_prompt_manifest()`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from lcb.agents.prompts import (  # the hashes are re-exported
    PROMPTS_ROOT,
    available_roles,
    load_role_prompt,
    prompt_hash,
)
from lcb.data.hub import HUB_DATASET
from lcb.io import write_json
from lcb.registry import FEEDBACK_MODES, SELECTIONS

if TYPE_CHECKING:
    from lcb.optimize.artifacts import JobSpec
    from lcb.optimize.splits import Splits

STANDARD_SPLIT_SIZES = {"train": 150, "validation": 50, "test": 50}
STANDARD_BUDGET = 600
STANDARD_SAMPLING = {"temperature": 0.2, "top_p": 0.9}
STANDARD_RELEASE = "release_v1"
STANDARD_GRADERS = ("default", "official")
STANDARD_COMMUNICATION = "freeform"
SANDBOX_STRENGTH = {"process": 1, "bwrap": 2}  # the default tier is "process"
DEFAULT_SANDBOX = "process"
NO_SPLIT_FILE = "no standard split file"
PROMPT_MANIFEST = PROMPTS_ROOT / "hashes.json"


class Requirement(BaseModel):
    """One named rule of the standard protocol, as judged for one job."""

    model_config = ConfigDict(frozen=True)

    name: str
    met: bool
    seen: Any = None
    expected: Any = None

    def deviation(self) -> str:
        """`name=seen (expected: x)`, the seen value as Python writes it."""
        expected = self.expected if isinstance(self.expected, str) else repr(self.expected)
        return f"{self.name}={self.seen!r} (expected: {expected})"


@dataclass(frozen=True)
class Reference:
    """What a job is compared with besides the constants above.

    `team_size`: the topology's default size (None for the single agent); `method_settings`:
    the method's defaults as `lcb.optimize.settings.resolve` gives them; `splits`: the
    standard split file's splits (None when there is no such file); `prompt_hashes`: the
    manifest's `{role: sha256}` for the job's topology.
    """

    team_size: int | None
    method_settings: Mapping[str, Any] = field(default_factory=dict)
    splits: Splits | None = None
    prompt_hashes: Mapping[str, str] = field(default_factory=dict)


def check(spec: JobSpec, *, splits: Splits, reference: Reference) -> list[Requirement]:
    """Every requirement of the module docstring, in its order."""
    reflection = spec.reflection_model
    return [
        _req("budget", spec.budget, STANDARD_BUDGET),
        _req("task_sampling", {"temperature": spec.temperature, "top_p": spec.top_p},
             STANDARD_SAMPLING),
        Requirement(name="reflection_model", seen=reflection,
                    met=bool(reflection) and reflection != spec.model,
                    expected=f"a reflection model other than the task model {spec.model!r}"),
        Requirement(name="data_source", seen=spec.data or HUB_DATASET, expected=HUB_DATASET,
                    met=spec.data in (None, HUB_DATASET)),
        _req("release", spec.release, STANDARD_RELEASE),
        Requirement(name="revision", seen=spec.revision, met=bool(spec.revision),
                    expected="the recorded hub revision of the rows"),
        _req("test_split_rule", spec.test_rule, "eval_ids"),
        _req("split_sizes", dict(spec.split_sizes), STANDARD_SPLIT_SIZES),
        _split_contents(splits, reference.splits),
        Requirement(name="grader", seen=spec.grader, expected=list(STANDARD_GRADERS),
                    met=spec.grader in STANDARD_GRADERS),
        Requirement(name="sandbox", seen=spec.sandbox, met=_strong_enough(spec.sandbox),
                    expected=f"{DEFAULT_SANDBOX} or a stronger tier"),
        _req("team", {"team_size": spec.team_size, "communication": spec.communication},
             {"team_size": reference.team_size,
              "communication": None if reference.team_size is None else STANDARD_COMMUNICATION}),
        _method_settings(spec.method_settings, reference.method_settings),
        _seed_prompts(spec.seed_prompts, reference.prompt_hashes),
        Requirement(name="opt_tests", seen=spec.opt_tests, met=spec.opt_tests is None,
                    expected=None),
        _req("selection", spec.selection, SELECTIONS[0]),
        _req("feedback", spec.feedback, FEEDBACK_MODES[0]),
        _req("uncharged_cost", spec.uncharged_cost, 0.0),
    ]


def _req(name: str, seen: Any, expected: Any) -> Requirement:
    return Requirement(name=name, seen=seen, expected=expected, met=seen == expected)


def _strong_enough(sandbox: str) -> bool:
    return SANDBOX_STRENGTH.get(sandbox, 0) >= SANDBOX_STRENGTH[DEFAULT_SANDBOX]


def _split_contents(splits: Splits, standard: Splits | None) -> Requirement:
    if standard is None:
        return Requirement(name="split_contents", seen=NO_SPLIT_FILE, met=False,
                           expected="the ids of benchmarks/lcb/lcb_splits.json")
    seen, expected = splits_digest(splits), splits_digest(standard)
    return Requirement(name="split_contents", seen=seen, expected=expected, met=seen == expected)


def _method_settings(seen: Mapping[str, Any], defaults: Mapping[str, Any]) -> Requirement:
    own, ref = _flat(seen), _flat(defaults)
    keys = sorted(k for k in own.keys() | ref.keys() if own.get(k) != ref.get(k))
    return Requirement(name="method_settings", met=not keys,
                       seen={k: own.get(k) for k in keys}, expected={k: ref.get(k) for k in keys})


def _seed_prompts(seen: Mapping[str, str], manifest: Mapping[str, str]) -> Requirement:
    roles = sorted(role for role in seen if manifest.get(role) != seen[role])
    return Requirement(name="seed_prompts", met=bool(seen) and not roles,
                       seen={role: seen[role] for role in roles},
                       expected={role: manifest.get(role) for role in roles})


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# --- digests and the prompt manifest ------------------------------------------------------
def splits_digest(splits: Splits) -> str:
    """sha256 of the three id lists (order kept): equal digests, equal split contents."""
    ids = {"train": list(splits.train), "validation": list(splits.validation),
           "test": list(splits.test)}
    return hashlib.sha256(json.dumps(ids, separators=(",", ":")).encode()).hexdigest()


def prompt_manifest(root: Path | None = None) -> dict[str, dict[str, str]]:
    """`{topology: {role: sha256}}` of every role file under `root` (default: the shipped)."""
    base = Path(root or PROMPTS_ROOT)
    topologies = sorted(p.name for p in base.iterdir() if p.is_dir())
    return {topology: {role: prompt_hash(load_role_prompt(topology, role, root=base))
                       for role in available_roles(topology, root=base)}
            for topology in topologies if available_roles(topology, root=base)}


def load_prompt_manifest(path: Path = PROMPT_MANIFEST) -> dict[str, dict[str, str]]:
    """The committed manifest's `prompts` (empty when the file is missing)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {str(top): dict(roles) for top, roles in data.get("prompts", {}).items()}


def write_prompt_manifest(path: Path = PROMPT_MANIFEST, *, root: Path | None = None) -> Path:
    """Rewrite the manifest from the role files (after a deliberate prompt change)."""
    write_json(Path(path), {"version": 1, "hash": "sha256 of the role file's text as "
                            "load_role_prompt reads it (surrounding whitespace stripped), UTF-8",
                            "prompts": prompt_manifest(root)})
    return Path(path)

"""Expand a grid spec into jobs: each one the command a user could type, with its output folder.

Contract:
- `plan(spec)` returns the jobs in a fixed order (the axes' product in `GridSpec.axis_values`
  order, each axis in the spec's order), less the jobs an `exclude` rule matches. The same spec
  always gives the same plan.
- A job's folder is the seed's layout `<out>/<method>/lcb/<topology>/<model>/<seed>` (`run`
  for the method of an `lcb run` grid). When `team_sizes` or `communications` has more than one
  value, the topology folder carries them: `sequential-r4`, `sequential-semi_structured`,
  `sequential-r4-semi_structured` (size first). `single` has no team size or communication:
  those axes collapse to one `single` job per (method, model, seed).
- `GridJob.argv` is the `lcb optimize …` or `lcb run …` command, run in `GridJob.cwd` (the
  spec's folder) with `GridJob.env` (`VLLM_BASE_URL` as the model's comma-separated endpoints,
  `MODEL_ID`) and the API key copied at run time from the variable `GridJob.key_env` names
  (never stored).
  `lcb run` jobs always pass `--resume`, so the same command starts and continues a batch.
- `shard(jobs, index, count)` keeps the jobs whose key hashes to `index` (sha256 of the key,
  modulo `count`): the shards `0/N` … `N-1/N` hold each job exactly once, whatever the
  launcher, and a job stays in its shard when the spec gains or loses other jobs (a seed, a
  model), so a shard never runs what another shard already holds. Shards are only roughly
  even. `parse_shard("1/3")` -> (1, 3).
- `GridJob.shell()` and `GridJob.to_json()` (what `plan` shows and the logs keep) show each
  endpoint without credentials (`lcb.agents.endpoints.redact_url`); `GridJob.env` keeps them.
"""

from __future__ import annotations

import hashlib
import itertools
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcb.agents.endpoints import redact_url, split_base_urls
from lcb.grid.spec import GridSpec, Sampling, matches
from lcb.optimize.settings import assignments

DONE_FILES = {"optimize": "result.json", "run": "summary.json"}
_SAMPLING_FLAGS = {"temperature": "--temperature", "top_p": "--top-p",
                   "max_tokens": "--max-tokens", "request_timeout": "--request-timeout",
                   "queue_timeout": "--queue-timeout"}


@dataclass(frozen=True)
class GridJob:
    """One job of a grid (module docstring). `key` is its folder relative to the grid's."""

    key: str
    axes: Mapping[str, Any]
    argv: tuple[str, ...]
    cwd: Path
    out: Path
    done_file: str
    root: Path
    env: Mapping[str, str] = field(default_factory=dict)
    key_env: str | None = None

    @property
    def slug(self) -> str:
        """The key as one file name (logs, state)."""
        return self.key.replace("/", "__")

    def shown_env(self) -> dict[str, str]:
        """`env` with its endpoints' credentials taken out (what may be printed or logged)."""
        env = dict(self.env)
        if "VLLM_BASE_URL" in env:
            urls = split_base_urls(env["VLLM_BASE_URL"])
            env["VLLM_BASE_URL"] = ",".join(redact_url(url) for url in urls)
        return env

    def shell(self) -> str:
        """The command as a user would type it in `cwd` (endpoints without credentials)."""
        env = [f"{name}={shlex.quote(value)}" for name, value in self.shown_env().items()]
        if self.key_env:
            env.append(f"OPENAI_API_KEY=\"${self.key_env}\"")
        return " ".join([*env, shlex.join(self.argv)])

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "axes": dict(self.axes), "argv": list(self.argv),
                "cwd": str(self.cwd), "out": str(self.out), "env": self.shown_env(),
                "api_key_env": self.key_env, "done_file": self.done_file}


def _combinations(spec: GridSpec) -> Iterator[dict[str, Any]]:
    axes = spec.axis_values()
    seen: set[tuple[Any, ...]] = set()
    for values in itertools.product(*axes.values()):
        combo = dict(zip(axes, values, strict=True))
        if combo["topology"] == "single":
            combo.update(team_size=None, communication=None)
        marker = tuple(combo.values())
        if marker not in seen:
            seen.add(marker)
            yield combo


def _excluded(spec: GridSpec, combo: dict[str, Any]) -> bool:
    return any(matches(rule, combo) for rule in spec.exclude)


def plan(spec: GridSpec) -> list[GridJob]:
    """Every job of `spec`, in plan order (module docstring)."""
    return [_job(spec, combo) for combo in _combinations(spec) if not _excluded(spec, combo)]


def _topology_folder(spec: GridSpec, combo: Mapping[str, Any]) -> str:
    parts = [combo["topology"]]
    if combo["topology"] != "single":
        if len(spec.team_sizes) > 1:
            size = combo["team_size"]
            parts.append("rdefault" if size is None else f"r{size}")
        if len(spec.communications) > 1:
            parts.append(combo["communication"])
    return "-".join(parts)


def _job(spec: GridSpec, combo: dict[str, Any]) -> GridJob:
    key = "/".join([combo["method"], "lcb", _topology_folder(spec, combo), combo["model"],
                    str(combo["seed"])])
    model = spec.models[combo["model"]]
    out = Path(spec.out) / key
    argv = (_optimize_argv if spec.kind == "optimize" else _run_argv)(spec, combo, out)
    env = {"MODEL_ID": model.id}
    if model.endpoints:
        env = {"VLLM_BASE_URL": ",".join(model.endpoints), **env}
    return GridJob(key=key, axes=combo, argv=tuple(argv), cwd=spec.base, out=spec.base / out,
               done_file=DONE_FILES[spec.kind], root=spec.root, env=env,
               key_env=model.api_key_env)


def _team_flags(combo: Mapping[str, Any]) -> list[str]:
    flags = []
    if combo["team_size"] is not None:
        flags += ["--team-size", str(combo["team_size"])]
    if combo["communication"] is not None:
        flags += ["--communication", combo["communication"]]
    return flags


def _shared_flags(spec: GridSpec) -> list[str]:
    s = spec.settings
    given = {"--data": s.data, "--release": s.release, "--sandbox": s.sandbox,
             "--concurrency": s.concurrency, "--budget": s.budget, "--opt-tests": s.opt_tests,
             "--grader": s.grader, "--limit": s.limit, "--max-requests": s.max_requests,
             "--selection": s.selection, "--feedback": s.feedback,
             "--uncharged-cost": s.uncharged_cost}
    flags = [w for flag, value in given.items() if value is not None for w in (flag, str(value))]
    flags += [flag for flag, on in (("--curve", s.curve),
                                    ("--allow-small-budget", s.allow_small_budget)) if on]
    return flags + _sampling_flags(s.sampling)


def _sampling_flags(sampling: Sampling) -> list[str]:
    flags = [w for name, flag in _SAMPLING_FLAGS.items()
             if (value := getattr(sampling, name)) is not None for w in (flag, str(value))]
    if sampling.thinking is not None:
        flags.append("--thinking" if sampling.thinking else "--no-thinking")
    return flags


def _optimize_argv(spec: GridSpec, combo: Mapping[str, Any], out: Path) -> list[str]:
    model = spec.models[combo["model"]]
    sets = assignments(spec.method_settings.get(combo["method"], {}))
    return ["lcb", "optimize", "--method", combo["method"], "--dataset", "lcb", "--topology",
            combo["topology"], "--model", model.id, "--seed", str(combo["seed"]),
            "--out", str(out), *_team_flags(combo), *_shared_flags(spec),
            *[w for pair in sets for w in ("--set", pair)]]


def _run_argv(spec: GridSpec, combo: Mapping[str, Any], out: Path) -> list[str]:
    model = spec.models[combo["model"]]
    return ["lcb", "run", "--topology", combo["topology"], "--model", model.id,
            "--seed", str(combo["seed"]), "--out-dir", str(out), "--resume",
            *_team_flags(combo), *_shared_flags(spec)]


def parse_shard(text: str) -> tuple[int, int]:
    """`"i/N"` -> (i, N) with 0 <= i < N; `ValueError` naming the rule otherwise."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes i/N (e.g. 0/3), got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard i/N needs 0 <= i < N, got {text!r}")
    return index, count


def shard(jobs: Sequence[GridJob], index: int, count: int) -> list[GridJob]:
    """The jobs of shard `index` of `count` (module docstring)."""
    return [job for job in jobs if shard_of(job.key, count) == index]


def shard_of(key: str, count: int) -> int:
    """The shard of `count` that the job `key` belongs to (stable across specs and runs)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count

"""What a batch checks and says once its problems are loaded, before its first model call.

Contract of `prepare_batch(config, loaded, stream=)` (it writes nothing to the output):
- The selected rows left out are listed on `stream` with their reasons: `--only` IDs that no
  row has first, named as such, then malformed, repeated and untestable rows; at most `SHOWN`
  of each (the manifest keeps them all, see `lcb.runs.identity.session_facts`).
- A selection with no problem raises `DataError` saying why: `--limit 0`, no `--only` ID found,
  every selected row left out, filters or `--offset` that leave no row, or an empty source.
- The data's checksums are added to `loaded.source` (`lcb.runs.identity.add_checksums`) and a
  resumed run whose data changed is refused (`check_resume` on `data_checksum`).
- The start banner (`lcb.runs.progress.start_banner`) is printed; the endpoint URL loses any
  credentials and query string (`lcb.agents.endpoints.redact_url`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from lcb.agents.endpoints import redact_url
from lcb.data.datasets import DataError, Loaded, Selection, Skipped
from lcb.runs.identity import add_checksums, check_resume, data_checksum, run_settings
from lcb.runs.progress import start_banner

if TYPE_CHECKING:
    from lcb.runs.config import RunConfig

SHOWN = 20


def prepare_batch(config: RunConfig, loaded: Loaded, *, stream: TextIO) -> None:
    """Report the rows left out, refuse an empty selection or changed data, print the banner."""
    report_left_out(loaded, stream=stream)
    if not loaded.problems:
        raise DataError(f"nothing to run: {why_empty(loaded, config.selection)}")
    add_checksums(loaded.source)
    check_resume(config.paths, resume=config.resume,
                 settings={"data_checksum": data_checksum(loaded.source)})
    print(banner(config, loaded), file=stream, flush=True)


def report_left_out(loaded: Loaded, *, stream: TextIO) -> None:
    missing = loaded.not_found
    if missing:
        print(f"--only: {len(missing)} ID(s) not in the source (or excluded by another "
              f"filter): {_some(missing)}", file=stream)
    rows = [entry for entry in loaded.skipped if entry.kind != "not_found"]
    if rows:
        print(f"{len(rows)} selected row(s) left out (malformed, repeated or without usable "
              "tests):", file=stream)
        for entry in rows[:SHOWN]:
            print(f"  {_entry(entry)}", file=stream)
        if len(rows) > SHOWN:
            print(f"  … and {len(rows) - SHOWN} more", file=stream)
    stream.flush()


def _entry(entry: Skipped) -> str:
    return entry.reason if entry.reason.startswith(entry.row_id) else \
        f"{entry.row_id}: {entry.reason}"


def _some(ids: Sequence[str]) -> str:
    more = f" … and {len(ids) - SHOWN} more" if len(ids) > SHOWN else ""
    return ", ".join(ids[:SHOWN]) + more


def why_empty(loaded: Loaded, selection: Selection) -> str:
    """Why `selection` picked no problem (`loaded.problems` is empty)."""
    if selection.limit == 0:
        return "--limit 0 selects no problem"
    if selection.only and len(loaded.not_found) == len(selection.only):
        return f"none of the --only IDs is in the source ({_some(loaded.not_found)})"
    if loaded.skipped:
        return "every selected row was left out (listed above)"
    if selection.has_filters:
        return "no row of the source passes the filters"
    if selection.offset:
        return f"--offset {selection.offset} skips every row of the source"
    return "the data source holds no rows"


def banner(config: RunConfig, loaded: Loaded) -> str:
    """The start banner of `config`'s batch over `loaded`."""
    settings = run_settings(config)
    team = config.topology
    if settings["topology"] != "single":
        team += f" ({settings['team_size']} agents, {settings['communication']} messages)"
    out = config.paths.out_dir or config.paths.predictions
    return start_banner(team=team, model=config.model.model_id,
                        endpoint=redact_url(config.model.base_url), data=describe(loaded.source),
                        problems=len(loaded.problems), samples=config.samples,
                        out=str(out))


def describe(source: dict[str, Any]) -> str:
    """A data source in one line: the hub repo, release and commit, or the files read."""
    if source.get("kind") == "hub":
        return (f"hub {source.get('repo')} {source.get('release')} "
                f"(commit {str(source.get('revision'))[:12]})")
    files = source.get("files") or []
    label = "the bundled sample set" if source.get("kind") == "sample" else source.get("path")
    return f"{label} ({len(files)} file{'s' if len(files) != 1 else ''})"

"""`lcb compare RUN_A RUN_B`: the flips from A to B and Δ, in the terminal.

Contract: `load_one(path)` is the single condition (run directory or `lcb score` results) at
`path`, else `ReportError`; `load_pair(a, b)` loads both, labelled together (`unique_labels`,
so `x/single` and `y/single` read as such, not as `single → single`). `flip_tables(pair)`
renders `lcb.report.flips.pair`'s object as rich tables: the counts that feed McNemar with the
pass rate of both (called pass@1 with one program per problem, else "sample 0"), Δ and the
p-value, then one row per problem that flipped (improved or regressed), sorted by id. Labels
and ids are folder names and data: they are shown as text, never read as rich markup.
`compare` prints both and returns the pair.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lcb.report.collect import Condition, ReportError, collect, unique_labels
from lcb.report.flips import pair


def load_one(path: Path) -> Condition:
    """The one run or results file at `path`."""
    found = collect([path]).conditions
    if len(found) != 1:
        raise ReportError(f"{path} holds {len(found)} runs or results files; name one")
    return found[0]


def load_pair(path_a: Path, path_b: Path) -> tuple[Condition, Condition]:
    """Both conditions, labelled apart from each other (module contract)."""
    a, b = load_one(path_a), load_one(path_b)
    labels = unique_labels([a.path, b.path])
    label_a, label_b = labels[a.path], labels[b.path]
    if label_a == label_b:  # one path named twice
        label_a, label_b = f"{label_a} (A)", f"{label_b} (B)"
    return replace(a, label=label_a), replace(b, label=label_b)


def flip_tables(flips: dict[str, Any]) -> tuple[Table, Table]:
    """The counts table and the flipped problems' table of a pair."""
    a, b = escape(flips["baseline"]), escape(flips["other"])
    counts = Table(title=f"{a} → {b}: {flips['n_paired']} paired problem(s)")
    for column in ("", f"{b} ✓", f"{b} ✗"):
        counts.add_column(column, justify="right")
    c = flips["counts"]
    counts.add_row(f"{a} ✓", str(c["both_right"]), f"{c['regressed']} (b, regressed)")
    counts.add_row(f"{a} ✗", f"{c['improved']} (c, improved)", str(c["both_wrong"]))
    rate = "sample-0 pass rate" if flips.get("first_sample_only") else "pass@1"
    counts.caption = (f"{rate} {flips['baseline_pass']:.3f} → {flips['other_pass']:.3f}  "
                      f"Δ {flips['delta']:+.1f} points  exact McNemar p = "
                      f"{flips['p_mcnemar']:.3g}")
    changed = Table(title="flipped problems")
    for column in ("problem", a, b, "change"):
        changed.add_column(column)
    for row in sorted(flips["rows"], key=lambda row: row["id"]):
        if row["change"] in ("improved", "regressed"):
            changed.add_row(escape(row["id"]), "✓" if row["baseline"] else "✗",
                            "✓" if row["other"] else "✗", row["change"])
    return counts, changed


def compare(path_a: Path, path_b: Path, *, console: Console | None = None) -> dict[str, Any]:
    """Print the flips from A to B (module contract) and return them."""
    console = console or Console()
    flips = pair(*load_pair(path_a, path_b))
    counts, changed = flip_tables(flips)
    console.print(counts)
    console.print(changed if changed.row_count else "no problem flipped")
    for side, ids in (("only in " + flips["baseline"], flips["only_baseline"]),
                      ("only in " + flips["other"], flips["only_other"])):
        if ids:
            console.print(f"{len(ids)} problem(s) {side}, not paired: {', '.join(ids[:10])}",
                          markup=False, highlight=False)
    return flips

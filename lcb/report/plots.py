"""The report's plots: matplotlib (Agg) figures returned as inline SVG text.

Contract: every function takes numbers from `report.json`'s objects and returns one `<svg>`
element as a string (no XML prolog, no external reference: fonts are left to the browser, so
the text stays text), or "" when there is nothing to draw. Output is deterministic for equal
input (fixed hash salt, no date). Text is never parsed as mathtext: a label holding `$` is
drawn as it is (labels come from folder names). The heatmap's cells link to their cell pages
(`cells/<slug>.html`, relative to the index).
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from typing import Any

import matplotlib
from matplotlib import ticker
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

# Set per plot (rc_context), never globally: no pyplot, no backend switch, no shared state.
STYLE = {"svg.fonttype": "none", "svg.hashsalt": "lcb-report", "font.size": 9,
         "text.parse_math": False,
         "figure.constrained_layout.use": True, "axes.spines.top": False,
         "axes.spines.right": False}
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")


def styled(plot: Callable[..., str]) -> Callable[..., str]:
    """Run a plot function inside the report's matplotlib style."""
    @functools.wraps(plot)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        with matplotlib.rc_context(STYLE):
            return plot(*args, **kwargs)
    return wrapper


def _axes(width: float, height: float) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def _svg(fig: Figure) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    # matplotlib opens links in a new tab; a heatmap cell opens its page like any other link
    return text[text.index("<svg"):].replace(' target="_blank"', "")


@styled
def pass_by_condition(rows: list[dict[str, Any]]) -> str:
    """pass@1 of each condition with its bootstrap interval."""
    if not rows:
        return ""
    fig, ax = _axes(max(3.0, 0.8 * len(rows) + 1), 2.6)
    ems = [r["scores"]["em"] for r in rows]
    low = [r["scores"]["ci"]["low"] for r in rows]
    high = [r["scores"]["ci"]["high"] for r in rows]
    errors = [[e - (lo if lo is not None else e) for e, lo in zip(ems, low, strict=True)],
              [(hi if hi is not None else e) - e for e, hi in zip(ems, high, strict=True)]]
    ax.bar(range(len(rows)), ems, yerr=errors, capsize=3, color=COLORS[0])
    ax.set_xticks(range(len(rows)), [r["label"] for r in rows], rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("pass@1 (95% CI)")
    ax.set_title("pass@1 by condition", fontsize=9)
    return _svg(fig)


@styled
def grouped(rows: list[dict[str, Any]], key: str, *, ylabel: str = "pass@1",
            title: str = "") -> str:
    """pass@1 per group (`by_difficulty`, `by_platform`, `by_month`), one bar per condition."""
    names = list(dict.fromkeys(n for r in rows for n in r["scores"][key]))
    if not names:
        return ""
    # wide, the legend below: side by side at 1400 px, three narrow panels with their
    # legends beside them left the bars a few pixels wide
    fig, ax = _axes(max(6.5, 0.35 * len(names) * max(len(rows), 1) + 1.5), 3.2)
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        values = [row["scores"][key].get(n, {}).get("em", 0.0) for n in names]
        ax.bar([x + i * width for x in range(len(names))], values, width,
               label=row["label"], color=COLORS[i % len(COLORS)])
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(names))], names, rotation=30,
                  ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.3),
              ncol=min(len(rows), 4))
    return _svg(fig)


@styled
def teams(team_rows: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    """Each multi-agent team beside `single` and `independent` at equal compute."""
    if not team_rows:
        return ""
    em = {r["label"]: r["scores"]["em"] for r in rows}
    fig, ax = _axes(max(3.5, 1.6 * len(team_rows) + 1), 2.6)
    for i, team in enumerate(team_rows):
        trio = [("single", team["single"]), (f"independent ×{team['agents']}",
                                             team["independent"]), (team["topology"],
                                                                    team["team"])]
        for j, (name, label) in enumerate(trio):
            if label is not None:
                ax.bar(i + (j - 1) * 0.27, em[label], 0.25, color=COLORS[j],
                       label=("team" if j == 2 else name) if i == 0 else None)
    ax.set_xticks(range(len(team_rows)), [t["team"] for t in team_rows])
    ax.set_ylim(0, 1)
    ax.set_ylabel("pass@1")
    ax.set_title("each team beside single and independent at equal compute", fontsize=9)
    ax.legend(fontsize=7, frameon=False, bbox_to_anchor=(1, 1), loc="upper left")
    return _svg(fig)


@styled
def pareto(rows: list[dict[str, Any]]) -> str:
    """pass@1 (the per-problem mean) against tokens per sample, the Pareto front joined; a
    condition whose tokens are unknown has no point."""
    rows = [row for row in rows if row["scores"]["tokens_per_sample"] is not None]
    if not rows:
        return ""
    fig, ax = _axes(4.2, 2.8)
    for i, row in enumerate(rows):
        x, y = row["scores"]["tokens_per_sample"], row["scores"]["em"]
        ax.scatter([x], [y], color=COLORS[i % len(COLORS)], zorder=3)
        ax.annotate(row["label"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    front = sorted((r["scores"]["tokens_per_sample"], r["scores"]["em"])
                   for r in rows if r["pareto"])
    ax.plot([p[0] for p in front], [p[1] for p in front], "--", color="#888", zorder=2)
    ax.set_xlabel("tokens per sample (program)")
    ax.set_ylabel("pass@1 (mean over problems)")
    ax.set_ylim(0, 1.05)
    return _svg(fig)


def _cell_text(group: dict[str, Any]) -> str:
    mean = group["delta_mean"]
    text = f"{mean:+.1f}" + (" ★" if group["holm_significant"] else "")
    if group["ci"]:
        text += f"\n[{group['ci'][0]:+.1f}, {group['ci'][1]:+.1f}]"
    return text


@styled
def heatmap(layout: dict[str, Any], groups: list[dict[str, Any]]) -> str:
    """One panel of `lcb.report.grid.heatmap` (a dataset × model): Δ per method × topology
    with its CI, ★ when Holm-significant, hatched when non-conformant; each cell links to its
    page."""
    if not groups or not layout["cells"]:
        return ""
    by_slug = {g["slug"]: g for g in groups}
    rows, cols = layout["rows"], layout["columns"]
    scale = max([abs(g["delta_mean"]) for g in groups] + [1.0])
    cmap = matplotlib.colormaps["RdBu"]
    fig, ax = _axes(max(4.0, 1.3 * len(cols) + 1.5), 0.6 * len(rows) + 1.2)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            cell = layout["cells"].get(f"{row}|{col}")
            if cell is None:
                continue
            group = by_slug[cell["slug"]]
            shade = cmap(0.5 + 0.5 * group["delta_mean"] / scale)
            patch = Rectangle((j, i), 1, 1, facecolor=shade, edgecolor="white",
                              hatch=None if group["conformant"] else "///")
            patch.set_url(f"cells/{cell['slug']}.html")
            ax.add_patch(patch)
            dark = abs(group["delta_mean"]) / scale > 0.6
            ax.text(j + 0.5, i + 0.5, _cell_text(group), ha="center", va="center", fontsize=7,
                    color="white" if dark else "black")
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(cols))], cols)
    ax.set_yticks([i + 0.5 for i in range(len(rows))], rows)
    ax.tick_params(length=0)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    # two short lines: one long line was cut at both ends on a narrow (one-column) panel
    ax.set_title(f"Δ pass@1 (points), deployed − seed\n{layout['dataset']} · "
                 f"{layout['model']}", fontsize=9)
    return _svg(fig)


@styled
def delta_vs_tokens(groups: list[dict[str, Any]]) -> str:
    """Each group's Δ (with its CI) against the whole job's tokens (mean over seeds), one
    colour per method: what a Δ cost. Groups whose tokens are unknown have no point."""
    known = [g for g in groups if (g["cost"].get("total_tokens_mean") is not None
                                   and g["delta_mean"] is not None)]
    if not known:
        return ""
    methods = list(dict.fromkeys(g["method"] for g in known))
    labelled: set[str] = set()  # one legend entry per method
    fig, ax = _axes(5.0, 3.0)
    for g in known:
        color = COLORS[methods.index(g["method"]) % len(COLORS)]
        x, y = g["cost"]["total_tokens_mean"], g["delta_mean"]
        low, high = g["ci"] or (y, y)
        ax.errorbar([x], [y], yerr=[[y - low], [high - y]], fmt="o", ms=4, capsize=2,
                    color=color, label=None if g["method"] in labelled else g["method"])
        labelled.add(g["method"])
    ax.axhline(0, color="#888", lw=0.8, ls="--")
    if all(g["cost"]["total_tokens_mean"] > 0 for g in known):
        ax.set_xscale("log")  # plain numbers: without mathtext, 10^4 would print as TeX
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("total tokens per job (every phase, task + reflection)")
    ax.set_ylabel("Δ pass@1 (points, 95% CI)")
    ax.legend(fontsize=7, frameon=False, bbox_to_anchor=(1, 1), loc="upper left")
    return _svg(fig)


@styled
def budget_curves(panel: dict[str, Any]) -> str:
    """Every method's incumbent at each budget fraction, scored on validation (mean over
    seeds), on one axis; the seed bundle's score dashed (`lcb.report.grid.curve_panels`)."""
    if not panel["methods"]:
        return ""
    fig, ax = _axes(5.0, 3.0)
    for i, (label, points) in enumerate(panel["methods"].items()):
        ax.plot([100 * p[0] for p in points], [p[1] for p in points], "-o", ms=3,
                color=COLORS[i % len(COLORS)], label=label)
    if panel["seed"] is not None:
        ax.axhline(panel["seed"], color="#888", lw=1, ls="--", label="seed bundle")
    ax.set_xlabel("budget spent (%)")
    ax.set_ylabel("validation pass@1")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"{panel['dataset']} · {panel['model']} · {panel['column']}", fontsize=9)
    ax.legend(fontsize=7, frameon=False, bbox_to_anchor=(1, 1), loc="upper left")
    return _svg(fig)


@styled
def learning_curve(details: list[dict[str, Any]]) -> str:
    """Validation score of each candidate against charged rollouts, per seed; rejected
    proposals as dots."""
    if not any(d["curve"] or d["rejected"] for d in details):
        return ""
    fig, ax = _axes(4.5, 2.6)
    for i, detail in enumerate(details):
        color = COLORS[i % len(COLORS)]
        curve = detail["curve"]
        ax.plot([p["charged"] for p in curve], [p["score"] for p in curve], "-o", ms=3,
                color=color, label=f"seed {detail['seed']}")
        dots = [p for p in detail["rejected"] if p["score"] is not None
                and not math.isnan(p["score"])]
        ax.scatter([p["charged"] for p in dots], [p["score"] for p in dots], s=10,
                   color=color, alpha=0.4, marker="x")
    ax.set_xlabel("charged rollouts")
    ax.set_ylabel("score (candidates: validation)")
    ax.legend(fontsize=7, frameon=False)
    return _svg(fig)

"""Paper tables from `report.json`'s object: Markdown and LaTeX, one file per table.

Contract of `tables(report)`: `{file name: text}` with `runs.md` / `runs.tex` (per condition:
problems, pass@1 with its 95 % CI, extracted and truncation rates, tokens per problem
("unknown" when a server reported no usage), wall time), `grid.md` / `grid.tex` when the
report holds optimizer groups (per group: method, dataset, topology, team size, message
format, model, seeds, baseline, deployed, Δ mean ± std, CI, the whole job's compute beside it
(total tokens and calls, means over seeds: every phase, task and reflection model), seeds
deployed, the gates they met (held out / reused), significant seeds after Holm, conformance)
and `flips.md` / `flips.tex` when there is a
baseline to compare with. Numbers are the report's, rounded for print: rates as percentages to
one decimal. LaTeX cells are escaped (`latex`: the specials, and the non-ASCII signs the tables
use, as commands pdflatex knows), Markdown cells escape `|`; the tables use booktabs rules.
"""

from __future__ import annotations

from typing import Any

_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
          "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
          "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
          "|": r"\textbar{}",
          # the non-ASCII signs of these tables, in forms pdflatex sets without packages
          "Δ": r"$\Delta$", "−": r"$-$", "±": r"$\pm$", "×": r"$\times$", "★": r"$\star$",
          "–": "--", "—": "---", "→": r"$\rightarrow$", "✓": "yes", "✗": "no"}


def latex(text: str) -> str:
    r"""Text safe inside a LaTeX table cell.

    >>> latex("a_b & 50%"), latex("Δ −1")
    ('a\\_b \\& 50\\%', '$\\Delta$ $-$1')
    """
    return "".join(_LATEX.get(ch, ch) for ch in str(text))


def markdown(text: str) -> str:
    r"""Text safe inside a Markdown table cell.

    >>> markdown("a|b")
    'a\\|b'
    """
    return str(text).replace("|", r"\|").replace("\n", " ")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def _signed(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}"


def _render(header: list[str], rows: list[list[str]], caption: str) -> tuple[str, str]:
    md = ["| " + " | ".join(markdown(h) for h in header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(markdown(c) for c in row) + " |" for row in rows]
    spec = "l" + "r" * (len(header) - 1)
    tex = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex(caption)}}}",
           rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
           " & ".join(latex(h) for h in header) + r" \\", r"\midrule"]
    tex += [" & ".join("--" if c == "—" else latex(c) for c in row) + r" \\" for row in rows]
    tex += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return f"{caption}\n\n" + "\n".join(md) + "\n", "\n".join(tex) + "\n"


def _tokens(scores: dict[str, Any]) -> str:
    """Tokens per problem; "unknown" when a server reported no usage (`lcb.agents.usage`)."""
    per_problem = scores["tokens_per_problem"]
    return "unknown" if per_problem is None else f"{per_problem:.0f}"


def _runs(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["condition", "problems", "pass@1 %", "95% CI", "extracted %", "truncated %",
              "tokens / problem", "wall s"]
    rows = []
    for c in report["conditions"]:
        s = c["scores"]
        ci = s["ci"]
        rows.append([c["label"], str(s["n_problems"]), _pct(s["em"]),
                     f"{_pct(ci['low'])}–{_pct(ci['high'])}", _pct(s["extracted_rate"]),
                     _pct(s["truncation_rate"]), _tokens(s),
                     "—" if s["wall_s"] is None else f"{s['wall_s']:.1f}"])
    return header, rows


def _amount(value: float | None) -> str:
    """A mean of counts: "unknown" when not known (`lcb.optimize.aggregate`)."""
    return "unknown" if value is None else f"{value:.0f}"


def _gates(gates: dict[str, int]) -> str:
    return ", ".join(f"{name.replace('_', ' ')} {n}" for name, n in gates.items()) or "—"


def _grid(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["method", "dataset", "topology", "team size", "messages", "model", "seeds",
              "baseline", "deployed", "Δ mean ± std", "95% CI", "total tokens", "total calls",
              "deployed / seeds", "gate", "significant (Holm)", "conformant"]
    rows = []
    for g in report["grid"]["groups"]:
        std = "—" if g["delta_std"] is None else f"{g['delta_std']:.1f}"
        ci = f"[{_signed(g['ci'][0])}, {_signed(g['ci'][1])}]" if g["ci"] else "—"
        rows.append([g.get("label", g["method"]), str(g["dataset"]), str(g["topology"]),
                     "—" if g["team_size"] is None else str(g["team_size"]),
                     g["communication"] or "—", str(g["model"]), str(g["n_seeds"]),
                     f"{g['baseline_mean']:.1f}", f"{g['deployed_mean']:.1f}",
                     f"{_signed(g['delta_mean'])} ± {std}", ci,
                     _amount(g["cost"].get("total_tokens_mean")),
                     _amount(g["cost"].get("total_calls_mean")),
                     f"{g['deployed_n']}/{g['n_seeds']}", _gates(g["cost"].get("gates") or {}),
                     f"{g['n_significant']}/{g['n_seeds']}",
                     "yes" if g["conformant"] else "no"])
    return header, rows


def _flips(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["condition", "paired", "improved", "regressed", "both right", "both wrong",
              "Δ points", "McNemar p"]
    rows = [[p["other"], str(p["n_paired"]), str(p["counts"]["improved"]),
             str(p["counts"]["regressed"]), str(p["counts"]["both_right"]),
             str(p["counts"]["both_wrong"]), _signed(p["delta"]), f"{p['p_mcnemar']:.3g}"]
            for p in report["flips"]["pairs"]]
    return header, rows


def tables(report: dict[str, Any]) -> dict[str, str]:
    """The paper tables (module contract)."""
    out: dict[str, str] = {}
    parts = [("runs", _runs, "pass@1 per condition (95% bootstrap CI over problems)")]
    if report["grid"]["groups"]:
        parts.append(("grid", _grid, "Optimizer grid: Δ pass@1 in points, deployed − seed "
                                     "(seed-stratified paired bootstrap CI)"))
    if report["flips"]["pairs"]:
        parts.append(("flips", _flips, f"Flips against {report['baseline']} (exact McNemar)"))
    for name, rows_of, caption in parts:
        header, rows = rows_of(report)
        out[f"{name}.md"], out[f"{name}.tex"] = _render(header, rows, caption)
    return out

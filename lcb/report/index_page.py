"""The template of `index.html`: provenance, the runs table, plots, the optimizer grid, flips,
cost and health. It reads `report.json`'s object (`report`) and the plots (`svg`)."""

from __future__ import annotations

from lcb.report.templates import register

INDEX = """{% extends "base.html" %}{% import "macros.html" as m %}{% block body %}
<h1>{{ report.title }}</h1>
<p class="muted">lcb {{ report.lcb_version }} · generated {{ report.generated_at }} ·
<a href="report.json">report.json</a> · tables:
{% for t in tables %}<a href="tables/{{ t }}">{{ t }}</a> {% endfor %}</p>
{% if report.notes.contamination %}<p class="warn" id="contamination">
⚠ {{ report.notes.contamination }}.
Scores on it may overstate what a model can do on problems it has not seen.</p>{% endif %}
{% set conds = report.conditions %}
{% if conds %}
<h2 id="runs">Runs</h2>
<table class="sortable"><thead><tr><th class="l">condition</th><th class="l">team</th>
<th class="l">model</th><th>problems</th><th>programs</th><th>pass@1</th><th>95% CI</th>
<th class="l">pass@k</th><th>extracted</th><th>truncated</th><th>tokens</th>
<th>tokens / problem</th><th>wall s</th></tr></thead><tbody>
{% for c in conds %}{% set s = c.scores %}<tr><td class="l">{{ c.label }}</td>
<td class="l">{{ c.provenance.topology or "—" }}</td>
<td class="l">{{ c.provenance.model or "—" }}</td>
<td>{{ s.n_problems }}</td><td>{{ s.n }}</td><td>{{ m.num(s.em) }}</td>
<td data-v="{{ s.ci.low }}">{{ m.num(s.ci.low) }}–{{ m.num(s.ci.high) }}</td>
<td class="l">{% for k, v in s.pass_at_k.items() if k != "1" %}@{{ k }} {{ m.num(v) }} {% else %}—
{% endfor %}</td>
<td>{{ m.pct(s.extracted_rate) }}</td><td>{{ m.pct(s.truncation_rate) }}</td>
<td>{{ s.tokens }}</td><td>{{ m.num(s.tokens_per_problem, "%.0f") }}</td>
<td>{{ m.num(s.wall_s, "%.1f") }}</td></tr>{% endfor %}</tbody></table>
<div class="plots">{{ svg.conditions|safe }}{{ svg.teams|safe }}</div>
<h3>By difficulty, platform and contest month</h3>
<div class="plots">{{ svg.difficulty|safe }}{{ svg.platform|safe }}{{ svg.month|safe }}</div>
<h3>Provenance</h3>
<table class="sortable"><thead><tr><th class="l">condition</th><th class="l">lcb commit</th>
<th class="l">grader</th><th class="l">dataset</th><th class="l">release</th>
<th class="l">revision</th>
<th class="l">contest dates</th><th class="l">sampling (T / top-p / max)</th>
<th class="l">thinking</th>
<th class="l">seeds</th><th>samples</th><th>agents</th><th class="l">messages</th>
</tr></thead><tbody>
{% for c in conds %}{% set p = c.provenance %}<tr><td class="l">{{ c.label }}</td>
<td class="l">{% for x in p.lcb_commit or [] %}{{ x[:10] }} {% else %}—{% endfor %}
{% if p.dirty %} (dirty){% endif %}</td>
<td class="l">{{ p.grader or "—" }}</td>
<td class="l" title="{{ p.dataset or '' }}">
{{ p.dataset|short_source if p.dataset else "—" }}</td>
<td class="l">{% if p.release %}{{ p.release }}{% if p.contamination_note %} ⚠ oldest window
{% endif %}{% else %}—{% endif %}</td>
<td class="l">{{ (p.revision or "—")[:12] }}</td>
<td class="l">{% if p.window %}{{ p.window[0] }}
{% if p.window[1] != p.window[0] %} to {{ p.window[1] }}{% endif %}{% else %}—{% endif %}</td>
<td class="l">
{% if p.sampling %}{{ p.sampling.temperature }} / {{ p.sampling.top_p }}
/ {{ p.sampling.max_tokens }}
{% else %}—{% endif %}</td>
<td class="l">{{ p.thinking }}</td><td class="l">{{ (p.seeds or [])|join(", ") }}</td>
<td>{{ p.samples or "—" }}</td><td>{{ p.team_size or "—" }}</td>
<td class="l">{{ p.communication or "—" }}</td></tr>
{% endfor %}</tbody></table>
{% endif %}
{% set g = report.grid %}{% if g.groups %}
<h2 id="grid">Optimizer grid</h2>
<p>Δ = deployed − seed bundle, pass@1 in points on the test split; 95% CI: seed-stratified
paired bootstrap ({{ g.settings.bootstrap_resamples }} resamples); ★: {{ g.settings.significant }}
(alpha {{ g.settings.alpha }}, Holm over every seed of a dataset × model);
hatched / *: non-conformant.
Click a cell.</p>
<div id="heatmap">{% for panel in g.heatmap %}
<h3>{{ panel.dataset }} · {{ panel.model }}</h3>
<div class="plots wide">{{ svg.heatmaps[loop.index0]|safe }}</div>
<table class="heatmap"><thead><tr><th class="l">method</th>{% for col in panel.columns %}
<th>{{ col }}</th>{% endfor %}</tr></thead><tbody>
{% for row in panel.rows %}<tr><td class="l">{{ row }}</td>{% for col in panel.columns %}
{% set cell = panel.cells.get(row ~ "|" ~ col) %}<td>{% if cell %}
{% set x = groups[cell.slug] %}
<a href="cells/{{ cell.slug }}.html">{{ "%+.1f"|format(x.delta_mean) }}
{%- if x.holm_significant %} ★
{% endif %}</a>
{% if x.ci %}
<br><span class="muted">[{{ "%+.1f"|format(x.ci[0]) }}, {{ "%+.1f"|format(x.ci[1]) }}]</span>
{% endif %}
{% for other in cell.also %}<br><a href="cells/{{ other }}.html">other settings</a>{% endfor %}
{% else %}—{% endif %}</td>{% endfor %}</tr>{% endfor %}</tbody></table>
{% endfor %}</div>
{% if g.incomplete %}<p>Incomplete jobs (not counted):
{% for j in g.incomplete %}{{ j.path }} ({{ j.reason }}); {% endfor %}</p>{% endif %}
{% endif %}
{% if report.flips.pairs %}
<h2 id="flips-section">Flips against {{ report.baseline }}</h2>
<table class="sortable"><thead><tr><th class="l">condition</th><th>paired</th><th>both right</th>
<th>improved (c)</th><th>regressed (b)</th><th>both wrong</th><th>Δ points</th><th>McNemar p</th>
</tr></thead><tbody>
{% for p in report.flips.pairs %}<tr><td class="l">{{ p.other }}</td><td>{{ p.n_paired }}</td>
<td>{{ p.counts.both_right }}</td><td>{{ p.counts.improved }}</td><td>{{ p.counts.regressed }}</td>
<td>{{ p.counts.both_wrong }}</td><td>{{ "%+.1f"|format(p.delta) }}</td>
<td>{{ "%.3g"|format(p.p_mcnemar) }}</td></tr>
{% endfor %}</tbody></table>
{% if report.flips.pairs|selectattr("first_sample_only")|list %}<p class="muted">Some
problems have several samples: flips pair each problem's sample 0, so Δ here is of sample-0
pass rates, not of pass@1 (the runs table's).</p>{% endif %}
<p><label>Show <select id="flipfilter"><option value="">every problem</option>
{% for p in report.flips.pairs %}{% set i = loop.index0 %}
{% for ch in ["improved", "regressed", "both_wrong"] %}<option value="{{ i }}:{{ ch }}">
{{- p.other }}: {{ ch|replace("_", " ") }}</option>
{% endfor %}
{% endfor %}</select></label> <span id="flipcount" class="muted"></span></p>
<table id="flips" class="sortable"><thead><tr><th class="l">problem</th>
{% for label in labels %}<th>{{ label }}</th>{% endfor %}</tr></thead><tbody>
{% for pid, row in report.flips.matrix.items() %}<tr data-changes="{{ changes[pid]|join(' ') }}">
<td class="l"><a href="problems/{{ problem_pages[pid] }}">{{ pid }}</a></td>
{% for label in labels %}<td>{% if label in row %}{% if row[label] %}<span class="ok">✓</span>
{% else %}<span class="bad">✗</span>{% endif %}{% else %}·{% endif %}</td>{% endfor %}
</tr>{% endfor %}</tbody></table>
{% elif report.flips.matrix %}
<h2 id="problems">Problems</h2><p>
{% for pid in report.flips.matrix %}<a href="problems/{{ problem_pages[pid] }}">{{ pid }}</a>
{% endfor %}</p>
{% endif %}
{% if conds %}
<h2 id="health">Cost and health</h2>
<table class="sortable"><thead><tr><th class="l">condition</th><th>solved</th><th>wrong</th>
<th>no program</th><th>infra errors</th><th>grading infra</th><th>pass@1, infra left out</th>
<th>truncated</th><th>LLM calls</th><th>cache hits</th>
<th>tool calls</th><th>tool errors</th><th>tokens / solved sample</th><th>Pareto</th>
</tr></thead><tbody>
{% for c in conds %}{% set h = c.health %}<tr><td class="l">{{ c.label }}</td>
<td>{{ h.solved }}</td>
<td>{{ h.wrong }}</td><td>{{ h.no_code }}</td><td>{{ h.infra_error }}</td>
<td>{{ h.n_infra }}</td><td>{{ m.num(h.em_graded) }}</td><td>{{ h.truncated }}</td>
<td>{{ h.llm_calls if h.llm_calls is not none else "—" }}</td>
<td>{{ h.cache_hits if h.cache_hits is not none else "—" }}</td>
<td>{{ h.tool_calls if h.tool_calls is not none else "—" }}</td>
<td>{{ h.tool_errors if h.tool_errors is not none else "—" }}</td>
<td>{{ m.num(c.scores.tokens_per_solved_sample, "%.0f") }}</td>
<td>{{ "front" if c.pareto else "" }}</td>
</tr>
{% endfor %}</tbody></table>
<p class="muted">Infrastructure errors (endpoint, crash, timeout, grading failure) are kept apart
from wrong answers; grading infra counts the programs whose grading failed twice (verdict
<code>infra</code>): pass@1 counts them as failures, as LiveCodeBench would, and the column
beside it leaves them out; results files have no transcripts, so their call counts are unknown (—).
Tokens per solved sample: every token the condition spent over the programs that passed (with
k samples per problem, each sample is a program). The plot puts pass@1 (the mean over
problems) against tokens per sample, the Pareto front dashed.</p>
<div class="plots">{{ svg.pareto|safe }}</div>
{% set agreeing = conds|selectattr("scores.agreement", "defined")|list %}
{% if agreeing %}<h3 id="agreement">Grader agreement (<code>lcb score --grader both</code>)</h3>
<table class="sortable"><thead><tr><th class="l">condition</th><th>compared</th>
<th>agree</th><th>same pass/fail</th><th>pass@1 default</th><th>pass@1 official</th>
<th class="l">disagreements by class</th></tr></thead><tbody>
{% for c in agreeing %}{% set a = c.scores.agreement %}<tr><td class="l">{{ c.label }}</td>
<td>{{ a.n }}</td><td>{{ m.pct(a.rate) }}</td><td>{{ m.pct(a.same_em_rate) }}</td>
<td>{{ m.num(c.scores.em) }}</td><td>{{ m.num(c.scores.em_official) }}</td>
<td class="l">{% for name, count in a.by_class.items() if count %}{{ name }} {{ count }}
{% else %}none{% endfor %}</td></tr>{% endfor %}</tbody></table>
<p class="muted">Both graders graded every program; they agree when both pass or both first
fail at the same test. Each disagreement is put in a divergence class of docs/grading.md on
the program's text and both verdicts (unexplained when none fits); the results file lists
each one.</p>{% endif %}
{% if report.grader_disagreements %}<h3>Grader disagreements</h3><table><thead><tr>
<th class="l">a</th>
<th class="l">b</th><th class="l">graders</th><th>compared</th><th>disagree</th>
<th class="l">problems</th></tr></thead><tbody>
{% for d in report.grader_disagreements %}<tr><td class="l">{{ d.a }}</td>
<td class="l">{{ d.b }}</td>
<td class="l">{{ d.graders|join(" vs ") }}</td><td>{{ d.n_compared }}</td>
<td>{{ d.n_disagree }}</td>
<td class="l">{{ d.ids|join(", ") }}</td></tr>{% endfor %}</tbody></table>{% endif %}
{% endif %}
{% endblock %}"""

register("index.html", INDEX)

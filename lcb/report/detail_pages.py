"""The templates of a problem page (`problems/<id>.html`, fed by `lcb.report.problems`) and of an
optimizer cell page (`cells/<slug>.html`, fed by one group of `report.json`'s grid)."""

from __future__ import annotations

from lcb.report.templates import register

PROBLEM = """{% extends "base.html" %}{% import "macros.html" as m %}{% block body %}
<h1>Problem {{ page.id }}</h1>
{% if page.statement %}<details id="statement"><summary>Statement (as the team saw it)</summary>
<pre>{{ page.statement }}</pre></details>
{% else %}<p class="muted">No transcript holds the statement.</p>{% endif %}
<table><thead><tr><th class="l">condition</th><th class="l">verdict</th><th>tests passed</th>
<th class="l">finish reason</th></tr></thead><tbody>{% for e in page.entries %}
<tr><td class="l"><a href="#{{ loop.index }}">{{ e.label }}</a></td>
<td class="l {{ 'ok' if e.em else 'bad' }}">{{ e.outcome|replace("_", " ") }}</td>
<td>{{ e.passed if e.passed is not none else "—" }} /
{{ e.total if e.total is not none else "—" }}</td>
<td class="l">{{ e.finish_reason or "—" }}{% if e.truncated %} (truncated){% endif %}</td></tr>
{% endfor %}</tbody></table>
{% for e in page.entries %}
<h2 id="{{ loop.index }}">{{ e.label }}{% if e.label == page.baseline %} (baseline){% endif %}:
<span class="{{ 'ok' if e.em else 'bad' }}">{{ e.outcome|replace("_", " ") }}</span></h2>
{% if e.error %}<p class="bad">error: {{ e.error }}</p>{% endif %}
<h3>Program</h3>{{ m.code(e.program) }}
{% if e.verdicts %}<p>verdicts: {{ e.verdicts|join(", ") }}</p>{% endif %}
{% if e.feedback %}
<h3>First failing test (#{{ e.feedback.test_index }}, {{ e.feedback.verdict }})</h3>
<table class="feedback"><tr><th class="l">input</th>
<td class="l"><pre>{{ e.feedback.input }}</pre></td></tr>
<tr><th class="l">expected</th><td class="l"><pre>{{ e.feedback.expected }}</pre></td></tr>
<tr><th class="l">got</th><td class="l"><pre>{{ e.feedback.actual }}</pre></td></tr>
{% if e.feedback.error %}<tr><th class="l">error</th>
<td class="l"><pre>{{ e.feedback.error }}</pre></td></tr>{% endif %}</table>{% endif %}
{% if e.diff %}
<details class="diff"><summary>Program diff: {{ page.baseline }} → {{ e.label }}</summary>
<table class="diff"><tr><th class="l">{{ page.baseline }}</th><th class="l">{{ e.label }}</th></tr>
{% for row in e.diff %}<tr class="{{ row.tag }}">
<td class="a">{{ row.a if row.a is not none else "" }}</td>
<td class="b">{{ row.b if row.b is not none else "" }}</td></tr>{% endfor %}
</table></details>{% endif %}
{% if e.agents %}<h3>Agents</h3><table><thead><tr><th class="l">agent</th><th class="l">role</th>
<th>LLM calls</th><th>prompt tokens</th><th>completion tokens</th><th>latency s</th>
</tr></thead><tbody>
{% for a in e.agents %}<tr><td class="l">{{ a.agent }}</td><td class="l">{{ a.role }}</td>
<td>{{ a.calls }}</td>
<td>{{ a.prompt_tokens }}</td><td>{{ a.completion_tokens }}</td>
<td>{{ "%.2f"|format(a.latency_s) }}</td></tr>{% endfor %}
</tbody></table>
<details class="transcript">
<summary>Transcript of {{ e.label }} ({{ e.agents|length }} agent(s))</summary>
{% for a in e.agents %}<h4>{{ a.agent }} ({{ a.role }})</h4>
{% for msg in a.messages %}<div class="msg {{ msg.type }}"><b>{{ msg.type }}
{% if msg.name %} · {{ msg.name }}{% endif %}{% if msg.status %} · {{ msg.status }}{% endif %}
{% if msg.cached %} · cached{% endif %}
{% if msg.finish_reason and msg.finish_reason != "stop" %} · {{ msg.finish_reason }}{% endif %}</b>
{% if msg.content %}<pre>{{ msg.content }}</pre>{% endif %}
{% for call in msg.tool_calls %}<p>tool call <code>{{ call.name }}</code>
{% if call.invalid %} <span class="bad">(arguments did not parse)</span>
{% endif %}</p><pre>{{ call.args }}</pre>{% endfor %}
</div>{% endfor %}{% endfor %}</details>
{% else %}<p class="muted">No transcript for this condition.</p>{% endif %}
{% endfor %}{% endblock %}"""

CELL = """{% extends "base.html" %}{% import "macros.html" as m %}{% block body %}
<h1>{{ g.method }} on {{ g.column }}{% if not g.conformant %} (non-conformant){% endif %}</h1>
<p>model {{ g.model }} · dataset {{ g.dataset }} · team size {{ g.team_size or "default" }} ·
messages {{ g.communication or "default" }} ·
budget {{ g.cost.budget if g.cost.budget is not none else "—" }} ·
reflection model {{ g.settings.reflection_model or "—" }} · release {{ g.settings.release }}
{% if g.settings.release == "release_v1" %}(the oldest, most contamination-exposed window)
{% endif %}</p>
<p id="summary">Δ mean {{ "%+.1f"|format(g.delta_mean) }} points
{% if g.delta_std is not none %} ± {{ "%.1f"|format(g.delta_std) }}{% endif %}
{% if g.ci %}· 95% CI [{{ "%+.1f"|format(g.ci[0]) }}, {{ "%+.1f"|format(g.ci[1]) }}]{% endif %}
· {{ g.n_significant }} of {{ g.n_seeds }} seed(s) significant after Holm
{% if g.holm_significant %} ★{% endif %}</p>
{% if g.differs %}<p>Settings of this group that differ within the cell:
{% for k, v in g.differs.items() %}{{ k }}={{ v }} {% endfor %}</p>{% endif %}
{% for d in g.details if d.deviations %}
{% if loop.first %}<p class="warn">Deviations from the standard protocol:
{{ d.deviations|join("; ") }}</p>{% endif %}{% endfor %}
<table id="seeds"><thead><tr><th>seed</th><th>baseline</th><th>deployed</th><th>Δ</th>
<th>b / c</th>
<th>McNemar p</th><th>Holm p</th><th class="l">deployed?</th><th>charged</th><th>reflect tokens</th>
<th>judge tokens</th><th>probe tokens</th><th>wall s (optimize)</th></tr></thead><tbody>
{% for s in g.seeds %}{% set d = g.details[loop.index0] %}{% set u = s.cost.uncharged %}<tr>
<td>{{ s.seed }}</td>
<td>{{ "%.1f"|format(s.baseline) }}</td><td>{{ "%.1f"|format(s.deployed) }}</td>
<td>{{ "%+.1f"|format(s.delta) }}</td>
<td>{{ s.b }} / {{ s.c }}</td><td>{{ "%.3g"|format(s.p_mcnemar) }}</td>
<td>{{ "%.3g"|format(s.p_holm) }}</td>
<td class="l">{{ d.why }}</td>
<td>{{ s.cost.charged if s.cost.charged is not none else "—" }} /
{{ s.cost.budget if s.cost.budget is not none else "—" }}</td>
{% for kind in ["reflect", "judge", "probe"] %}<td>
{% if u %}{{ u[kind].prompt_tokens + u[kind].completion_tokens }}{% else %}—{% endif %}</td>
{% endfor %}
<td>{{ m.num(d.wall_s, "%.1f") }}</td></tr>{% endfor %}</tbody></table>
<h2>Learning curve</h2><div class="plots">{{ curve|safe }}</div>
{% if not curve %}<p class="muted">No scored candidate in the history.</p>{% endif %}
{% for d in g.details %}<h2>Seed {{ d.seed }}</h2>
<details><summary>Lineage ({{ d.lineage|length }} candidates and proposals)</summary>
<table><thead><tr><th class="l">kind</th><th>iteration</th><th class="l">bundle</th>
<th class="l">parent</th>
<th>score</th><th class="l">accepted</th><th class="l">roles</th><th class="l">note</th>
</tr></thead><tbody>
{% for e in d.lineage %}<tr><td class="l">{{ e.kind }}</td><td>{{ e.iteration }}</td>
<td class="l">{{ e.hash[:10] }}</td>
<td class="l">{{ (e.parent or "—")[:10] }}</td><td>{{ m.num(e.score) }}</td>
<td class="l">{{ e.accepted if e.accepted is not none else "" }}</td>
<td class="l">{{ e.roles|join(", ") }}</td><td class="l">{{ e.note }}</td></tr>
{% endfor %}</tbody></table></details>
<h3>Prompts, seed → deployed</h3>{% for role, parts in d.prompt_diff.items() %}
<details class="prompt"><summary>{{ role }}{% if parts|selectattr(0, "ne", "equal")|list %} (edited)
{% else %} (unchanged){% endif %}</summary>
<pre>{% for op, text in parts %}
{%- if op == "delete" %}<del>{{ text }}</del>
{%- elif op == "insert" %}<ins>{{ text }}</ins>
{%- else %}{{ text }}{% endif %}
{%- endfor %}</pre>
</details>{% endfor %}{% endfor %}
{% endblock %}"""

register("problem.html", PROBLEM)
register("cell.html", CELL)

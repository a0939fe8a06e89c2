"""The report's HTML templates (jinja2, autoescaped), its stylesheet and its one script.

Every page is self-contained: CSS and script inline, plots inline SVG, links relative. A
Content-Security-Policy forbids every fetch and allows only the script below (by its hash), so
even text that escaped escaping could neither run nor load anything. The page reads fully with
JavaScript off; the script only sorts tables (click a header) and filters the flips table.
"""

from __future__ import annotations

import base64
import hashlib

SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var up = th.dataset.dir !== 'up';
    th.dataset.dir = up ? 'up' : 'down';
    function key(row) {
      var cell = row.cells[th.cellIndex];
      var text = cell ? (cell.dataset.v || cell.textContent) : '';
      var num = parseFloat(text);
      return isNaN(num) ? text : num;
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
var filter = document.getElementById('flipfilter');
if (filter) {
  filter.addEventListener('change', function () {
    var want = filter.value, shown = 0;
    document.querySelectorAll('#flips tbody tr').forEach(function (row) {
      var ok = !want || (' ' + row.dataset.changes + ' ').indexOf(' ' + want + ' ') >= 0;
      row.hidden = !ok;
      if (ok) { shown += 1; }
    });
    document.getElementById('flipcount').textContent = shown + ' shown';
  });
}
"""
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
CSP = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       f"script-src 'sha256-{SCRIPT_HASH}'")

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;
color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right;vertical-align:top}
td.l,th.l{text-align:left}th{background:#f4f4f4;cursor:pointer}
.warn{background:#fff4d6;border:1px solid #e8c55a;padding:.4em .8em}
.muted{color:#777}.ok{color:#1a7f37}.bad{color:#c0392b}
pre{background:#f7f7f7;padding:.5em;overflow-x:auto;white-space:pre-wrap;margin:.2em 0}
details{margin:.3em 0}summary{cursor:pointer}
.msg{border-left:3px solid #ccc;padding-left:.6em;margin:.4em 0}
.msg.assistant{border-color:#4c72b0}.msg.tool{border-color:#55a868}
.msg.system{border-color:#aaa}.msg.user{border-color:#dd8452}
del{background:#fdd;text-decoration:line-through}ins{background:#dfd;text-decoration:none}
table.diff td{font-family:monospace;white-space:pre-wrap;text-align:left;width:50%}
tr.delete td.a,tr.replace td.a{background:#fee}tr.insert td.b,tr.replace td.b{background:#efe}
.plots svg{max-width:48%;height:auto;margin-right:1em}.plots.wide svg{max-width:100%}
.plots svg text{pointer-events:none}
"""

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ page_title }}</title><style>{{ css }}</style></head>
<body>{% if up %}<p><a href="{{ up }}">← {{ title }}</a></p>{% endif %}
{% block body %}{% endblock %}
<script>{{ script|safe }}</script></body></html>
"""

MACROS = """
{% macro num(v, fmt="%.3f") -%}{{ "—" if v is none else fmt|format(v) }}{%- endmacro %}
{% macro pct(v) -%}{{ "—" if v is none else "%.1f%%"|format(100 * v) }}{%- endmacro %}
{% macro code(text) -%}{% if text %}<pre>{{ text }}</pre>{% else %}
<p class="muted">no program</p>{% endif %}{%- endmacro %}
"""

TEMPLATES = {"base.html": BASE, "macros.html": MACROS}


def register(name: str, text: str) -> None:
    """Add a page template (the page modules keep their own next to the code that fills it)."""
    TEMPLATES[name] = text

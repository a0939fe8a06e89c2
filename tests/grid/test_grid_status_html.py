"""`lcb grid status --html`: the static status page (counts per axis, per cell with what each
cell spent, failed jobs' reasons and escaped logs), the pointer the grid keeps to it, the link
`lcb report` makes to it, and `job_spend` on optimize and run folders, whole, partial, damaged
or never started. Job states, logs and folders are written by hand: no job runs."""

import json
import os
import socket
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lcb.agents.usage import tokens_text
from lcb.cli import app
from lcb.grid.plan import plan
from lcb.grid.spec import parse_spec
from lcb.grid.spend import NOTHING, Spend, job_spend, total_spend
from lcb.grid.state import log_path, write_state
from lcb.grid.status_html import cell_of, pointer_path, write_status_page
from lcb.report.collect import collect
from lcb.report.pages import write_report
from tests.helpers_grid import small_grid, write_spec
from tests.helpers_report import write_run

URL = "http://127.0.0.1:9/v1"
HOSTILE = "<script>alert('log')</script> & <b>bold</b>"


class Page(HTMLParser):
    """A page's tables (by id: rows of cell texts), the texts of elements by class, and its
    links (class, href)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.texts: dict[str, list[str]] = {}
        self.links: list[tuple[str | None, str | None]] = []
        self.tags: list[str] = []
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._open: list[tuple[str, str | None, list[str]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        self.tags.append(tag)
        if tag == "table":
            self._table = self.tables.setdefault(found.get("id") or str(len(self.tables)), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "a":
            self.links.append((found.get("class"), found.get("href")))
        if tag not in ("meta", "br"):
            self._open.append((tag, found.get("class"), []))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        if tag == "table":
            self._table = None
        while self._open:
            name, cls, text = self._open.pop()
            if cls:
                self.texts.setdefault(cls, []).append("".join(text))
            if name == tag:
                break

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        for _, _, text in self._open:
            text.append(data)

    def rows(self, table: str) -> list[dict[str, str]]:
        """The table's body rows as {header: cell}."""
        head, *body = self.tables[table]
        return [dict(zip(head, row, strict=True)) for row in body]


def _lines(path: Path, rows: list[dict], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail, encoding="utf-8")


def _usage(calls, prompt, completion, without=0):
    return {"n_llm_calls": calls, "prompt_tokens": prompt, "completion_tokens": completion,
            "n_calls_without_usage": without}


def optimize_spend_job(out: Path) -> None:
    """An optimize job's files as phasecost reads them: 3 rollouts (2 calls, 120 tokens
    each), one reflect call (60 tokens), one test record (1 call, 35 tokens): 8 calls, 455."""
    _lines(out / "rollouts.jsonl", [_usage(2, 100, 20)] * 3)
    (out / "ledger.json").write_text(json.dumps(
        {"uncharged": {"reflect": {"calls": 1, "prompt_tokens": 50, "completion_tokens": 10}}}))
    _lines(out / "evals" / "test_incumbent.jsonl", [{"id": "p1", "em": 1, **_usage(1, 30, 5)}])


@pytest.fixture
def grid(tmp_path):
    """The small grid (identity, gepa x single, sequential x seeds 0, 1) in every state:
    identity/single/0 done (8 calls, 455 tokens), identity/single/1 running (a journal line
    and one cut short: 1 call, 12 tokens), gepa/single/0 failed twice (2 calls, usage
    unknown; a hostile log), gepa/single/1 interrupted, gepa/sequential/0 a damaged journal
    (pending, interrupted), identity/sequential never started."""
    spec = parse_spec(small_grid(URL), base=tmp_path)
    jobs = {(j.axes["method"], j.axes["topology"], j.axes["seed"]): j for j in plan(spec)}
    done = jobs["identity", "single", 0]
    optimize_spend_job(done.out)
    (done.out / "result.json").write_text("{}")
    running = jobs["identity", "single", 1]
    _lines(running.out / "rollouts.jsonl", [_usage(1, 10, 2)], tail='{"n_llm_calls": 5')
    write_state(running, state="running", pid=os.getpid(), host=socket.gethostname())
    failed = jobs["gepa", "single", 0]
    _lines(failed.out / "rollouts.jsonl", [_usage(2, None, None, without=2)])
    write_state(failed, state="failed", rc=1, reason="exit 1: <b>boom</b>", attempts=2)
    log = [f"line {i}" for i in range(50)] + [HOSTILE]
    log_path(failed).parent.mkdir(parents=True, exist_ok=True)
    log_path(failed).write_text("\n".join(log) + "\n", encoding="utf-8")
    write_state(jobs["gepa", "single", 1], state="interrupted", attempts=1)
    damaged = jobs["gepa", "sequential", 0]
    _lines(damaged.out / "rollouts.jsonl", [], tail="not json\n")
    return spec, plan(spec), jobs


def test_job_spend_of_an_optimize_job_done_running_unknown_damaged_or_never_started(grid):
    _, _, jobs = grid
    assert job_spend(jobs["identity", "single", 0]) == Spend(calls=8, tokens=455)
    assert job_spend(jobs["identity", "single", 1]) == Spend(calls=1, tokens=12)  # cut line out
    assert job_spend(jobs["gepa", "single", 0]) == Spend(calls=2, tokens=None, without_usage=2)
    assert job_spend(jobs["identity", "sequential", 0]) == NOTHING == Spend(calls=0, tokens=0)
    damaged = job_spend(jobs["gepa", "sequential", 0])
    assert (damaged.calls, damaged.tokens) == (0, None)
    assert "rollouts.jsonl:1" in damaged.error and "gepa/lcb/sequential" in damaged.error


def test_job_spend_never_raises_on_a_file_of_the_wrong_shape(tmp_path):
    job = plan(parse_spec(small_grid(URL, methods=["identity"], topologies=["single"],
                                     seeds=[0]), base=tmp_path))[0]
    job.out.mkdir(parents=True)
    (job.out / "ledger.json").write_text("[1, 2]")  # JSON, not an object
    assert job_spend(job).tokens is None and job_spend(job).error


def test_spends_add_by_the_usage_rule():
    unknown, known = Spend(calls=2, tokens=None, without_usage=2), Spend(calls=3, tokens=30)
    assert unknown + known == Spend(calls=5, tokens=30, without_usage=2)  # a lower bound
    assert unknown + NOTHING == unknown and total_spend([]) == NOTHING
    both = total_spend([known, Spend(0, None, errors=("a: bad",)), known])
    assert both == Spend(calls=6, tokens=60, errors=("a: bad",)) and both.error == "a: bad"


def test_job_spend_of_a_run_job_counts_its_records_and_those_moved_aside(tmp_path):
    spec = parse_spec(small_grid(URL, kind="run", methods=[], topologies=["single"], seeds=[0],
                                 settings={"data": "sample"}), base=tmp_path)
    (job,) = plan(spec)
    assert job_spend(job) == NOTHING  # never started
    record = {"id": "p1", "em": 0, **_usage(3, 100, 10)}
    _lines(job.out / "predictions.jsonl", [record, {**record, "id": "p2"}], tail='{"id": "p3')
    _lines(job.out / "predictions.errors.jsonl", [{**record, **_usage(1, 7, 0)}])
    assert job_spend(job) == Spend(calls=7, tokens=227)
    _lines(job.out / "predictions.jsonl", [record], tail="garbage\n" + json.dumps(record) + "\n")
    damaged = job_spend(job)
    assert damaged.tokens is None and "predictions.jsonl:2" in damaged.error


def test_the_page_counts_per_status_axis_and_cell_with_each_cells_spend(grid, tmp_path):
    spec, jobs, _ = grid
    page = write_status_page(spec, jobs, tmp_path / "status", lines=10)
    assert page == tmp_path / "status" / "index.html"
    shown = Page(page.read_text(encoding="utf-8"))
    (total,) = shown.rows("total")
    assert total == {"done": "1", "running": "1", "failed": "1", "pending": "5",
                     "interrupted": "2"}
    counts = {table: {row[table.removeprefix("axis-")]: [row[s] for s in
                                                          ("done", "running", "failed",
                                                           "pending")]
                      for row in shown.rows(table)}
              for table in ("axis-method", "axis-topology", "axis-seed")}
    assert counts == {"axis-method": {"identity": ["1", "1", "0", "2"],
                                      "gepa": ["0", "0", "1", "3"]},
                      "axis-topology": {"single": ["1", "1", "1", "1"],
                                        "sequential": ["0", "0", "0", "4"]},
                      "axis-seed": {"0": ["1", "0", "1", "2"], "1": ["0", "1", "0", "3"]}}
    assert "axis-model" not in shown.tables  # one value: the totals say it all
    cells = {(r["method"], r["topology"]): r for r in shown.rows("cell-table")}
    assert [cells["identity", "single"][k] for k in ("jobs", "done", "running", "calls",
                                                     "tokens")] == ["2", "1", "1", "9", "467"]
    assert (cells["gepa", "single"]["calls"], cells["gepa", "single"]["tokens"]) == (
        "2", "unknown")
    assert cells["gepa", "sequential"]["note"] == "1 unreadable"
    assert cells["identity", "sequential"]["team size"] == "2"
    assert cells["identity", "single"]["team size"] == "—"  # single has no team size
    everything = cells["all", ""]
    assert (everything["jobs"], everything["calls"], everything["tokens"],
            everything["note"]) == ("8", "11", "467 + unknown", "1 unreadable")
    for job_cell in {cell_of(job) for job in jobs}:
        spend = total_spend(job_spend(job) for job in jobs if cell_of(job) == job_cell)
        row = cells[job_cell[0], job_cell[1]]
        assert row["calls"] == str(spend.calls)
        assert row["tokens"] == tokens_text(spend.tokens, spend.without_usage)


def test_a_failed_job_shows_its_reason_attempts_and_escaped_log_tail(grid, tmp_path):
    spec, jobs, by_axes = grid
    page = write_status_page(spec, jobs, tmp_path / "status", lines=10)
    html = page.read_text(encoding="utf-8")
    shown = Page(html)
    assert shown.texts["reason"] == ["exit 1: <b>boom</b>"]  # the text, not markup
    assert shown.texts["attempts"] == ["2"]
    (log,) = shown.texts["log"]
    assert log.splitlines() == [f"line {i}" for i in range(41, 50)] + [HOSTILE]
    assert "script" not in shown.tags
    assert "&lt;script&gt;" in html and "<script" not in html  # no script at all
    assert "gepa/lcb/single/scripted/0" in shown.texts["failed-job"][0]
    href = next(h for c, h in shown.links if h and h.endswith(".log"))
    assert (page.parent / href).resolve() == log_path(by_axes["gepa", "single", 0]).resolve()


def test_the_grid_keeps_a_pointer_to_its_page(grid, tmp_path):
    spec, jobs, _ = grid
    page = write_status_page(spec, jobs, tmp_path / "status")
    pointer = json.loads(pointer_path(spec.root).read_text(encoding="utf-8"))
    assert pointer_path(spec.root) == spec.root / ".grid" / "status_page.json"
    assert pointer["page"] == str(page) and Path(pointer["page"]).is_absolute()
    assert pointer["written_at"] in page.read_text(encoding="utf-8")


def test_grid_status_html_writes_the_page_and_says_where(tmp_path):
    path = write_spec(tmp_path, small_grid(URL))
    result = CliRunner().invoke(app, ["grid", "status", str(path), "--html",
                                      str(tmp_path / "page")])
    assert result.exit_code == 0, result.output
    assert "8 job(s)" in result.stdout  # the text status as before
    page = tmp_path / "page" / "index.html"
    assert f"status page: {page}" in result.stderr
    assert Page(page.read_text(encoding="utf-8")).rows("total")[0]["pending"] == "8"


def test_lcb_report_of_the_grid_folder_links_to_its_status_page(tmp_path):
    spec = parse_spec(small_grid(URL, kind="run", methods=[], topologies=["single"], seeds=[0],
                                 settings={"data": "sample"}), base=tmp_path)
    (job,) = plan(spec)
    write_run(job.out, {"a": [1], "b": [0]})
    page = write_status_page(spec, [job], tmp_path / "status")
    out = tmp_path / "report"
    write_report(collect([spec.root]), out)
    links = [href for cls, href in Page((out / "index.html").read_text()).links
             if cls == "grid-status"]
    assert links == ["../status/index.html"]  # relative: the folders can move together
    assert (out / links[0]).resolve() == page
    page.unlink()  # a pointer to a page that is gone links nothing
    assert collect([spec.root]).status_pages == []
    pointer_path(spec.root).write_text("not json")
    assert collect([spec.root]).status_pages == []


def test_grid_status_html_imports_no_model_stack(tmp_path):
    from tests.cli.test_startup import imported_model_stack

    spec = write_spec(tmp_path, small_grid(URL))
    imported, done = imported_model_stack(tmp_path, "grid", "status", str(spec), "--html",
                                          str(tmp_path / "page"))
    assert done.returncode == 0, done.stderr
    assert imported == [] and (tmp_path / "page" / "index.html").is_file()

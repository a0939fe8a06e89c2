"""The report in headless Chromium (Debian's `chromium`, driven by Playwright), from file://:
the index, a heatmap cell's page, the flip filter, a problem page and its transcript, and the
optimizer pages as a new user reads them (issue #25). Fails on any console error, page error
or dialog, and on any request that leaves file://.

Skips when Playwright or /usr/bin/chromium is missing (`apt-get install chromium`). With
LCB_UPDATE_SCREENSHOT=1 the index screenshot also replaces docs/img/report.png (the README's).
"""

import json
import os
import shutil
from pathlib import Path

import pytest

from lcb.report.collect import collect
from lcb.report.pages import write_report
from tests.helpers_report import (
    HOSTILE,
    build_grid,
    built_report,
    write_job,
    write_results,
    write_run,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # a browser and whole reports
CHROMIUM = Path("/usr/bin/chromium")
README_SHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "report.png"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The report, built before Playwright starts: its sync API holds an event loop in this
    thread, and `lcb run` starts its own."""
    return built_report(tmp_path_factory)


@pytest.fixture(scope="module")
def optimizer_report(tmp_path_factory):
    """A grid whose jobs hold learning curves and declared compute, two local-data runs (one
    problem of each without a program) and a results file of the reference solutions."""
    root = tmp_path_factory.mktemp("new_user")
    grid = build_grid(root)
    write_job(grid, "gepa", "single", 0, model="gemr")  # a panel one column wide
    for number, result in enumerate(sorted(grid.rglob("result.json"))):
        job = result.parent
        data = json.loads(result.read_text())
        data["cost"].update(phases={"total": {"tokens": 5000 * (number + 1), "calls": 20}},
                            gate="reused" if "gepa" in str(job) else "held_out")
        result.write_text(json.dumps(data))
        points = [{"fraction": f, "score": 0.5 + 0.25 * (f > 0.3 and "gepa" in str(job))}
                  for f in (0.1, 0.25, 0.5, 1.0)]
        (job / "curve.json").write_text(json.dumps({"seed": 0.5, "points": points}))
    for name, ems in (("runs/a", {"p1": [1], "p2": [0]}), ("runs/b", {"p1": [0], "p2": [1]})):
        folder = write_run(root / name, ems)
        lines = (folder / "predictions.jsonl").read_text().splitlines()
        first = {**json.loads(lines[0]), "predicted_code": None, "em": 0, "pass": 0, "total": 6}
        (folder / "predictions.jsonl").write_text(json.dumps(first) + "\n" + lines[1] + "\n")
    write_results(root / "refs" / "results.jsonl", {"p1": 1, "p2": 1}, programs="reference")
    out = root / "report"
    write_report(collect([root / "runs", root / "refs", grid]), out, resamples=200)
    return out


@pytest.fixture(scope="module")
def browser(built, optimizer_report):
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (pip install -e '.[test]')")
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    with sync_api.sync_playwright() as play:
        launched = play.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


class Watch:
    """What a page did that it must not: console errors, page errors, dialogs, requests
    outside file://."""

    def __init__(self, context):
        self.problems: list[str] = []
        context.on("request", self._request)

    def _request(self, request):
        if not request.url.startswith("file://"):
            self.problems.append(f"request to {request.url}")

    def page(self, context):
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and self.problems.append(m.text))
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"), d.dismiss()))
        return page


def visible_rows(page) -> list[str]:
    rows = page.query_selector_all("#flips tbody tr")
    return [row.query_selector("td").inner_text() for row in rows if row.is_visible()]


def test_index_cell_flip_problem_and_transcript(browser, built, tmp_path):
    _, out, report = built
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    watch = Watch(context)
    page = watch.page(context)
    page.goto((out / "index.html").as_uri())
    assert page.inner_text("h1") == "fixture report"
    assert "most exposed to contamination" in page.inner_text("#contamination")
    page.screenshot(path=str(tmp_path / "index.png"))
    page.screenshot(path=str(tmp_path / "index_full.png"), full_page=True)

    gepa = next(g for g in report["grid"]["groups"]
                if (g["method"], g["topology"]) == ("gepa", "single"))
    page.click(f'#heatmap table a[href="cells/{gepa["slug"]}.html"]')
    page.wait_for_url(f"**/cells/{gepa['slug']}.html")
    assert "Δ mean +95.8 points ± 5.9 · 95% CI [+87.5, +100.0]" in page.inner_text("#summary")
    assert "deployed: the incumbent scored strictly higher" in page.inner_text("#seeds")
    page.click("details.prompt >> nth=0 >> summary")
    assert "Check every limit twice. <b>bold</b>" in page.inner_text("details.prompt >> nth=0")
    page.screenshot(path=str(tmp_path / "cell.png"), full_page=True)
    page.go_back()

    assert visible_rows(page) == [f"q00{i}" for i in range(6)]
    page.select_option("#flipfilter", label="decentralized: improved")
    assert visible_rows(page) == ["q002", "q003", "q004"]
    assert page.inner_text("#flipcount") == "3 shown"
    page.click('#flips a[href="problems/q003.html"]')
    page.wait_for_url("**/problems/q003.html")
    assert not page.is_visible("#statement pre")  # folded
    page.click("#statement summary")
    assert "Read two integers A and B" in page.inner_text("#statement pre")
    page.click("details.transcript >> nth=0 >> summary")
    shown = page.inner_text("details.transcript >> nth=0")
    assert HOSTILE in shown  # the script tag is text on the page, and never ran
    page.screenshot(path=str(tmp_path / "problem.png"), full_page=True)

    page.goto((out / "problems" / "q000.html").as_uri())
    page.click("details.transcript >> nth=0 >> summary")
    transcript = page.inner_text("details.transcript >> nth=0")
    assert "tool call python_exec" in transcript and "print(1 + 2)" in transcript
    assert "tool · python_exec" in transcript
    context.close()
    assert watch.problems == []
    if os.environ.get("LCB_UPDATE_SCREENSHOT") == "1":
        README_SHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "index.png", README_SHOT)


def test_the_index_reads_with_javascript_off(browser, built):
    _, out, _ = built
    context = browser.new_context(java_script_enabled=False)
    watch = Watch(context)
    page = watch.page(context)
    page.goto((out / "index.html").as_uri())
    assert len(visible_rows(page)) == 6
    assert "0.500" in page.inner_text("#runs + table")
    page.click('#heatmap svg a >> nth=0')  # the plot's cell, a link too
    page.wait_for_url("**/cells/*.html")
    assert "Δ mean" in page.inner_text("#summary")
    context.close()
    assert watch.problems == []


def test_the_optimizer_pages_read_as_a_new_user_would(browser, optimizer_report):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    watch = Watch(context)
    page = watch.page(context)
    page.goto((optimizer_report / "index.html").as_uri())
    # the heatmap's title is whole: every text of the plot lies inside its picture
    outside = page.evaluate("""() => [...document.querySelectorAll('#heatmap svg')].flatMap(svg => {
        const box = svg.getBoundingClientRect();
        return [...svg.querySelectorAll('text')].filter(t => {
            const r = t.getBoundingClientRect();
            return r.left < box.left - 1 || r.right > box.right + 1;
        }).map(t => t.textContent); })""")
    assert outside == []
    assert "deployed − seed" in page.inner_text("#heatmap")
    # the provenance table says "—", never Python's None
    provenance = page.inner_text("#runs ~ table >> nth=1")
    assert "None" not in provenance and "—" in provenance
    # compute beside every Δ, deploy rates by gate, the learning curves on one axis
    compute = page.inner_text("#compute + p + table")
    assert "total tokens" in compute and "unknown" not in compute and "reused 2" in compute
    assert page.locator("#compute ~ div.plots svg").count() >= 1
    rates = page.inner_text("#deploy-rates + p + table")
    assert "gepa" in rates and "reused" in rates and "held out" in rates
    curves = page.locator("#curves + p + div.plots svg")
    assert curves.count() == 3 and "seed bundle" in curves.first.text_content()  # 3 teams
    # the reference solutions are marked as such, never as a model's run
    assert "reference solutions, not a model run" in page.inner_text("#runs + table")
    assert "reference solutions" in page.inner_text("#flips thead")
    # a problem without a program says so instead of "0 / 6"
    page.goto((optimizer_report / "problems" / "p1.html").as_uri())
    row = page.inner_text("table >> nth=0")
    assert "no program" in row and "0 /" not in row
    context.close()
    assert watch.problems == []

"""`report --html` and `sweep --html` (issue 73): one self-contained page, opened in a real headless browser.

The pages come from a real sweep on a tiny pair (two temperatures x two prompt lengths, -r 2: about 5 s) and from the
golden record files (tests/data/golden: the server engine's slots, both engines). Without a browser: the page embeds
exactly what `report --format json` prints, every workload's answer is on it, and it fetches nothing. With Debian's
`chromium` (.ci/run installs it): the page renders with no console message, each section shows a picture (or its one
line why not), every figure div holds plotly's SVG with a marker per plotted number, and the numbers written in the
rows table equal the json's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import invoke, pair_args

from gguf_bench.results.presentation.html import page as html_page

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SECTIONS = ("answer", "by-k", "map", "request", "slots", "positions", "ceiling", "provenance")
PICTURED = ("by-k", "map", "request", "slots", "positions", "ceiling")  # a figure or one line why not


def embedded(text: str, block: str):
    """The JSON of one <script type="application/json" id=BLOCK> of the page."""
    m = re.search(rf'<script type="application/json" id="{block}">(.*?)</script>', text, re.S)
    assert m, f"no {block} block in the page"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def sweep_page(tiny_pairs, tmp_path_factory) -> tuple[Path, list[dict], str]:
    """A real sweep with --html: K 2,4 x T 0,0.7 x 64- and 160-token prompts, -r 2; (page, report --format json's rows,
    the sweep's stdout)."""
    folder = tmp_path_factory.mktemp("page")
    page = folder / "sweep.html"
    result = invoke("sweep", *pair_args(tiny_pairs["middle"]), "-K", "2,4", "--temp", "0,0.7", "--prompt-tokens", "64,160",
                    "--prompt-ids", "code-short", "-n", "8", "-t", "1", "-r", "2", "--results-dir", str(folder),
                    "--name", "s", "--html", str(page))
    assert result.exit_code == 0, result.output
    printed = invoke("report", str(folder / "s.jsonl"), "--format", "json", "--results-dir", str(folder))
    assert printed.exit_code == 0
    return page, json.loads(printed.stdout), result.stdout


@pytest.fixture(scope="module")
def golden_page(tmp_path_factory) -> tuple[Path, list[dict]]:
    """report --html over every golden file (both engines, slots and clients, an eval and a calibration)."""
    page = tmp_path_factory.mktemp("golden") / "golden.html"
    made = invoke("report", str(GOLDEN), "--html", str(page))
    assert made.exit_code == 0, made.output
    printed = invoke("report", str(GOLDEN), "--format", "json")
    return page, json.loads(printed.stdout)


def test_the_page_embeds_what_format_json_prints(sweep_page, golden_page):
    for page, rows in (sweep_page[:2], golden_page):
        text = page.read_text(encoding="utf-8")
        assert embedded(text, "gguf-bench-report") == rows
        assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=", text), "the page must fetch nothing"
        assert 1e6 < len(text.encode()) < 5.5e6  # plotly.min.js inlined: about 4.9 MB


def test_every_workload_is_answered_with_its_interval(sweep_page):
    page, rows, printed = sweep_page
    extra = embedded(page.read_text(encoding="utf-8"), "gguf-bench-extra")
    workloads = {(r["temperature"], r["prompt_length"]) for r in rows}
    assert len(workloads) == 4
    answered = {(rows[a["row"]]["temperature"], rows[a["row"]]["prompt_length"]) for a in extra["answers"]}
    assert answered == workloads
    for a in extra["answers"]:
        assert a["headline"] in printed.replace("\n", " ") or a["headline"].split(":")[0] in printed
        named = set(a["same"]) | set(a["undecided"])
        assert all(rows[j]["verdict"] in ("same", "undecided") for j in named)
    assert "wrote" in printed and "sweep.html" in printed


def test_report_html_without_runs_says_so(tmp_path):
    result = invoke("report", str(GOLDEN / "eval.jsonl"), "--html", str(tmp_path / "p.html"))
    assert result.exit_code == 1
    assert "nothing to put on a page" in result.output


def _chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                           "--virtual-time-budget=5000", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


def _figure_divs(dom: str) -> dict[str, str]:
    """Each figure div's id -> its rendered markup (up to the next figure or section)."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div class="figure[^"]*" id="([^"]+)"', dom)]
    ends = [s for s, _ in starts[1:]] + [len(dom)]
    return {name: dom[start:min(end, dom.find("</section>", start))] for (start, name), end in zip(starts, ends)}


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium; .ci/run installs it)")
@pytest.mark.parametrize("which", ["sweep", "golden"])
def test_the_page_renders_in_a_browser(which, sweep_page, golden_page, tmp_path):
    page, rows = (sweep_page[:2] if which == "sweep" else golden_page)
    run = _chromium(page, tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    assert not console, f"the page wrote to the console: {console}"
    assert re.search(r'<p id="page-error" hidden', dom), "the page caught a script error"
    figures = embedded(page.read_text(encoding="utf-8"), "gguf-bench-figures")
    assert re.search(rf'data-rendered="{len(figures)}"', dom), "not every figure was drawn"
    for section in SECTIONS:
        body = dom[dom.index(f'<section id="{section}"'):]
        body = body[:body.index("</section>")]
        if section in PICTURED:
            assert 'class="main-svg"' in body or 'class="empty"' in body, f"{section}: neither a picture nor why not"
    drawn = {"sweep": ("by-k", "map", "request", "positions"), "golden": ("by-k", "map", "slots", "positions")}[which]
    for section in drawn:  # what these records hold is drawn, not said to be missing
        body = dom[dom.index(f'<section id="{section}"'):]
        assert 'class="main-svg"' in body[:body.index("</section>")], f"{section}: no picture"
    divs = _figure_divs(dom)
    assert set(divs) == set(figures)
    for name, spec in figures.items():
        assert 'class="main-svg"' in divs[name], f"{name} drew nothing"
        _check_figure(name, spec, divs[name], rows)
    _check_rows_table(dom, rows)


def _check_figure(name: str, spec: dict, drawn: str, rows: list[dict]) -> None:
    """Every trace's points carry their rows (customdata) and show those rows' figures; a marker is drawn per point."""
    markers = 0
    for trace in spec["data"]:
        meta = trace.get("meta") or {}
        for axis, field in meta.items():
            for value, row in zip(trace[axis], trace["customdata"]):
                want = rows[row][field]
                assert (value is None and want is None) or value == pytest.approx(want, rel=1e-9), (name, field, row)
        if trace.get("type", "scatter") == "scatter" and "markers" in trace.get("mode", "markers"):
            markers += sum(1 for x, y in zip(trace.get("x") or [], trace.get("y") or []) if x is not None and y is not None)
    if markers:
        assert len(re.findall(r'class="point[" ]', drawn)) >= markers, f"{name}: fewer markers drawn than numbers plotted"


def _check_rows_table(dom: str, rows: list[dict]) -> None:
    cells = re.findall(r'<td data-row="(\d+)" data-field="([a-z_]+)">([^<]*)</td>', dom)
    assert cells, "no rows table"
    for row, field, text in cells:
        assert text == html_page.cell_text(field, rows[int(row)].get(field)).replace("&", "&amp;"), (row, field, text)
    gains = [(int(r), t) for r, f, t in cells if f == "gain_pct" and t != "–"]
    assert gains and all(abs(float(t.rstrip("%")) - rows[r]["gain_pct"]) <= 0.05 for r, t in gains)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium; .ci/run installs it)")
def test_a_screenshot_of_the_page(sweep_page, tmp_path):
    shot = tmp_path / "page.png"
    run = _chromium(sweep_page[0], tmp_path, "--hide-scrollbars", f"--screenshot={shot}", "--window-size=1280,2000")
    assert run.returncode == 0 and shot.stat().st_size > 20_000  # a picture, not a blank page

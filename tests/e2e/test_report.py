"""The HTML report: self-contained, escaped, and rendered by a real headless Chromium."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from runfactory import Extras, demo_runs, write_run

from softeval.analysis.report import build_report
from softeval.cli.app import print_table
from softeval.metrics import aggregate
from softeval.store.format import samples_digest

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
EVIL = "<script>alert(1)</script>"
CHART = re.compile(r'<img class="chart" alt="[^"]*" src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)">')


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    pairs = demo_runs(out, name_prefix=EVIL)
    (out / "half-done" / "mmlu" / "zero-shot" / "seed0.partial").mkdir(parents=True)
    return build_report(out, out.parent / "report.html", pairs, n_boot=200)


def test_report_is_self_contained_escaped_and_complete(report: Path) -> None:
    text = report.read_text(encoding="utf-8")
    assert EVIL not in text and "&lt;script&gt;alert(1)&lt;/script&gt;base-0" in text
    assert "<script" not in text.lower()
    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//|url\(|@import', text)
    charts = CHART.findall(text)
    # format/accuracy, decomposition, knowledge bars, failure causes (1 task each), learning curves,
    # rank scatter (1 task)
    assert len(charts) == 6
    for data in charts:
        assert ET.fromstring(base64.b64decode(data)).tag.endswith("svg")
    for heading in ("Metrics", "Format-following against accuracy", "Knowledge versus format",
                    "Learning curves", "Ranking", "Where strict and lenient scoring disagree"):
        assert f"<h2>{heading}" in text
    # the skipped folder is named, in a section of its own: its folder and why
    skipped = text[text.index('<h2 id="skipped">'):text.index("</table>", text.index('<h2 id="skipped">'))]
    assert "<th>run folder</th>" in skipped and "<th>reason</th>" in skipped
    assert "<code>half-done/mmlu/zero-shot/seed0.partial</code>" in skipped and "in progress or interrupted" in skipped
    assert '<a href="#skipped">1 skipped</a>' in text
    assert "items disagree" in text and "I think the answer is" in text
    assert "<th>top answer</th>" in text
    # the verdicts head the task's knowledge block: soft-prompt against both prompts, per base model
    (verdict,) = re.findall(r'<div class="verdict">(.*?)</div>', text, re.S)
    assert verdict.count("soft-prompt vs zero-shot:</b>") == 4 and verdict.count("soft-prompt vs few-shot:</b>") == 4
    assert verdict.count("McNemar p") == 8 and "&lt;script&gt;" in verdict and "post-" not in verdict
    tops = re.findall(r'<td class="num">(\w+|no answer)<br>(\d+)/60</td>', text)
    assert len(tops) == 16  # one per run; zero-shot runs that miss the format most often show "no answer"
    assert {a for a, _ in tops} >= {"A", "B", "no answer"} and all(15 <= int(k) <= 30 for _, k in tops)


def _chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={tmp / 'profile'}",
             "--enable-logging=stderr", "--v=0"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=90)


def _console_messages(stderr: str) -> list[str]:
    """Chromium logs every console message (and uncaught exceptions) as ':CONSOLE' lines."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs "
                                    "Debian's chromium package; locally: apt-get install chromium)")


@needs_chromium
def test_console_scan_catches_a_broken_page(tmp_path: Path) -> None:
    """The check below means something: a page that errors is caught by the same scan."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>console.error('boom'); missingFn();</script>")
    result = _chromium(["--dump-dom", page.as_uri()], tmp_path)
    messages = _console_messages(result.stderr)
    assert any("boom" in m for m in messages) and any("missingFn" in m for m in messages)


# Added to a copy of the report (the report itself has no scripts): once the page has loaded, with every
# <details> open, it writes the layout's measurements into the page, for --dump-dom to bring back.
LAYOUT_PROBE = """<script>addEventListener("load", () => {
  for (const d of document.querySelectorAll("details")) d.open = true;
  const tables = [...document.querySelectorAll("table")].map(t => {
    const box = t.parentElement, cells = [...t.querySelectorAll("th, td")];
    return {scrolls: box.scrollWidth > box.clientWidth, box_height: box.getBoundingClientRect().height,
            squeezed: cells.filter(c => c.scrollWidth > c.clientWidth).length,
            font: Math.min(...cells.map(c => parseFloat(getComputedStyle(c).fontSize)))};
  });
  const out = document.createElement("pre");
  out.id = "layout";
  out.textContent = JSON.stringify({width: innerWidth, height: innerHeight,
                                    page: document.documentElement.scrollWidth, tables});
  document.body.append(out);
});</script>"""


def _layout(report: Path, width: int, tmp: Path) -> tuple[str, dict]:
    """The page as Chromium has it after loading, at this window width, and its layout's measurements."""
    page = tmp / f"layout-{width}.html"
    page.write_text(report.read_text(encoding="utf-8").replace("</body>", LAYOUT_PROBE + "</body>"), encoding="utf-8")
    result = _chromium([f"--window-size={width},900", "--dump-dom", page.as_uri()], tmp)
    assert _console_messages(result.stderr) == []
    found = re.search(r'<pre id="layout">([^<]*)</pre>', result.stdout)
    assert found, result.stderr[-2000:]
    return result.stdout, json.loads(found.group(1))


@needs_chromium
def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    """It renders, without console errors; at 1280 px every table fits or wraps; at 800 px the page still
    never scrolls sideways: a table too wide for the window scrolls in its own box, whose scroll bar is on
    screen. At both, no cell is squeezed below its content and no text is shrunk to make a table fit."""
    import matplotlib.image

    shot = tmp_path / "report.png"
    result = _chromium([f"--screenshot={shot}", "--window-size=1280,2000", report.as_uri()], tmp_path)
    assert shot.exists(), result.stderr[-2000:]
    assert _console_messages(result.stderr) == []
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2000, 1280)
    colours = {tuple(p) for p in (pixels[::7, ::7, :3] * 255).astype(int).reshape(-1, 3)}
    assert shot.stat().st_size > 50_000 and len(colours) > 200  # text, tables and charts, not a blank page

    (dom, wide), (_, narrow) = _layout(report, 1280, tmp_path), _layout(report, 800, tmp_path)
    # format vs accuracy, knowledge vs format, cloze reference, failure causes, learning curves, rank scatter
    assert len(CHART.findall(dom)) == 6
    # skipped folders, metrics, knowledge, 4 failure examples, ranking, 2 sample browsers
    assert dom.count("<table") == len(wide["tables"]) == 10
    assert '<h2 id="skipped">' in dom and "half-done/mmlu/zero-shot/seed0.partial" in dom
    for layout in (wide, narrow):
        assert layout["page"] <= layout["width"], layout  # no horizontal scroll bar on the page
        for table in layout["tables"]:
            assert table["squeezed"] == 0 and table["font"] >= 12, table
    assert [t for t in wide["tables"] if t["scrolls"]] == []
    boxed = [t for t in narrow["tables"] if t["scrolls"]]
    assert len(boxed) == 2 and all(t["box_height"] <= narrow["height"] for t in boxed)  # metrics, knowledge


def _with_f1(run_dir: Path, f1: list[float]) -> dict:
    """A run written by runfactory given per-item token F1, as SQuAD and TriviaQA score it; its results.json
    agrees with its samples (metrics, digest), so it loads as a finished run. Returns the results."""
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for sample, value in zip(samples, f1, strict=True):
        sample["f1"] = value
    text = "".join(json.dumps(s) + "\n" for s in samples)
    results = json.loads((run_dir / "results.json").read_text())
    results["metrics"]["f1"] = aggregate(samples)["f1"]
    results.update(samples_digest(text))
    (run_dir / "samples.jsonl").write_text(text)
    (run_dir / "results.json").write_text(json.dumps(results))
    return results


def test_f1_shows_in_the_run_table_and_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """softeval.metrics.METRIC_TABLE promises f1 for the tasks that score token F1: the run's table and the report show
    it (the report's column only where a run has f1: a report of multiple-choice runs stays as wide as it
    was)."""
    run = write_run(tmp_path / "runs", "m", "squad", "zero-shot", [True, False, False, True])
    results = _with_f1(run, [1.0, 0.5, 0.0, 1.0])
    assert results["metrics"]["f1"]["value"] == pytest.approx(0.625)
    write_run(tmp_path / "runs", "m", "mmlu", "zero-shot", [True, False])

    print_table([results])
    header = next(line for line in capsys.readouterr().out.splitlines() if "method" in line)
    assert " f1 " in header and header.index("lenient") < header.index(" f1 ") < header.index("top answer")

    page = build_report(tmp_path / "runs", tmp_path / "r.html").read_text(encoding="utf-8")
    head = re.search(r"<h2>Metrics</h2>.*?</thead>", page, re.S).group(0)
    assert "<th>f1</th>" in head and "token F1" in head
    rows = re.findall(r"<tr><td>(squad|mmlu)</td>.*?</tr>", page[page.index("<h2>Metrics"):], re.S)
    assert rows == ["mmlu", "squad"]
    assert '<td class="num">0.625<br>' in page  # squad's f1; mmlu's is a dash
    only_mc = tmp_path / "mc"
    write_run(only_mc, "m", "mmlu", "zero-shot", [True, False])
    assert "<th>f1</th>" not in build_report(only_mc, tmp_path / "mc.html").read_text(encoding="utf-8")


def test_a_lora_run_gets_its_column_curve_and_ranking_row_and_none_without_one(tmp_path: Path) -> None:
    """lora is an ordinary method in the report: its strict accuracy beside the others in the knowledge
    table, its learning curve drawn, its row in the ranking; a report without lora runs has no lora column."""
    pairs = [(f"b{i}", f"p{i}") for i in range(3)]
    curve = [{"step": 0, "loss": None, "format_rate": 0.0, "accuracy": 0.0},
             {"step": 10, "loss": 1.2, "format_rate": 1.0, "accuracy": 0.5}]
    for i, (base, post) in enumerate(pairs):
        write_run(tmp_path / "runs", base, "mmlu", "zero-shot", [k < i for k in range(6)])
        write_run(tmp_path / "runs", base, "mmlu", "lora", [k < i + 2 for k in range(6)], extras=Extras(curve=curve))
        write_run(tmp_path / "runs", post, "mmlu", "zero-shot", [k < i + 3 for k in range(6)],
                  extras=Extras(model_kind="post-trained"))
    page = build_report(tmp_path / "runs", tmp_path / "r.html", pairs=pairs, n_boot=60).read_text(encoding="utf-8")
    assert "<th>lora</th>" in page
    assert "Learning curves (soft-prompt, lora and prefix-tuning tuning)" in page
    assert "No soft-prompt, lora or prefix-tuning runs" not in page
    assert re.search(r"<td>mmlu</td><td>lora</td>", page)
    alone = tmp_path / "alone"
    write_run(alone, "m", "mmlu", "zero-shot", [True, False])
    assert "<th>lora</th>" not in build_report(alone, tmp_path / "a.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def spread_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root of one model scored under prompt variants 0-3 (runfactory: each in <task>@v<N>): zero-shot moves with
    the format, the soft prompt does not."""
    from runfactory import outcomes

    out = tmp_path_factory.mktemp("variants")
    for variant, rate in enumerate((0.2, 0.5, 0.8, 0.35)):
        config = {"prompt_variant": variant} if variant else None
        write_run(out, "m", "mmlu", "zero-shot", outcomes(40, rate), extras=Extras(config=config))
        write_run(out, "m", "mmlu", "soft-prompt", outcomes(40, 0.6, offset=variant), extras=Extras(config=config))
    return build_report(out, out.parent / "spread.html")


def test_the_spread_section_shows_each_method_across_variants(spread_report: Path) -> None:
    text = spread_report.read_text(encoding="utf-8")
    section = text[text.index('<h2 id="spread">'):]
    assert "<td>zero-shot</td>" in section and "<td>soft-prompt</td>" in section
    assert "<td>0, 1, 2, 3</td>" in section
    said = "soft-prompt vs\nzero-shot: the soft prompt&#39;s accuracy moves less with the prompt&#39;s format"
    assert said in section
    assert len(CHART.findall(section)) >= 1  # accuracy per variant, a line per method
    assert "mmlu@v3" in text  # the metrics table names each variant's task


@needs_chromium
def test_the_spread_section_renders_in_headless_chromium(spread_report: Path, tmp_path: Path) -> None:
    (dom, wide), (_, narrow) = _layout(spread_report, 1280, tmp_path), _layout(spread_report, 800, tmp_path)
    assert '<h2 id="spread">' in dom
    for layout in (wide, narrow):
        assert layout["page"] <= layout["width"], layout
        for table in layout["tables"]:
            assert table["squeezed"] == 0 and table["font"] >= 12, table

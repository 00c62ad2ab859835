"""The HTML report: self-contained, escaped, and rendered by a real headless Chromium."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from runfactory import demo_runs

from softeval.analysis.report import build_report

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
    assert "half-done" in text and "partial" in text  # the skipped folder is named
    assert "items disagree" in text and "I think the answer is" in text
    assert "<th>top answer</th>" in text
    tops = re.findall(r'<td class="num">(\w+) (\d+)/60</td>', text)
    assert len(tops) == 16  # one per run; zero-shot runs that miss the format most often show "none"
    assert {a for a, _ in tops} >= {"A", "B", "none"} and all(15 <= int(k) <= 30 for _, k in tops)


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


@needs_chromium
def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    import matplotlib.image

    shot = tmp_path / "report.png"
    result = _chromium([f"--screenshot={shot}", "--window-size=1280,2000", report.as_uri()], tmp_path)
    assert shot.exists(), result.stderr[-2000:]
    assert _console_messages(result.stderr) == []
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2000, 1280)
    colours = {tuple(p) for p in (pixels[::7, ::7, :3] * 255).astype(int).reshape(-1, 3)}
    assert shot.stat().st_size > 50_000 and len(colours) > 200  # text, tables and charts, not a blank page

    dom = _chromium(["--dump-dom", report.as_uri()], tmp_path)
    assert _console_messages(dom.stderr) == []
    # format vs accuracy, knowledge vs format, cloze reference, failure causes, learning curves, rank scatter
    assert len(CHART.findall(dom.stdout)) == 6
    assert dom.stdout.count("<table") >= 3

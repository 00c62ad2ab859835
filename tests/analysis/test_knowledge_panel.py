"""The report's knowledge panel (softeval.analysis.report): format-free references, the format-failure
causes as bars, and the paired tests."""

from __future__ import annotations

from runfactory import demo_runs

from softeval.analysis.report import build_report


def test_report_has_the_knowledge_panel_with_failure_bars(tmp_path):
    pairs = demo_runs(tmp_path, n=40)
    page = build_report(tmp_path, tmp_path / "r.html", pairs, n_boot=50).read_text()
    assert "Knowledge: format-free references" in page
    assert "format failure causes on mmlu" in page and "cloze reference and strict accuracy on mmlu" in page
    assert "p=" in page  # the paired tests

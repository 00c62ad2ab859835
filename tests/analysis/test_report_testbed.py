"""The report's testbed section: shown when the output root holds a testbed.json, escaped, with its chart."""

import json

from runfactory import demo_runs
from testbedworlds import RECIPES, TRUE, world

from softeval.analysis.report import build_report
from softeval.analysis.report_testbed import testbed_section as section_of
from softeval.methods import names
from softeval.store.format import TESTBED_FILE
from softeval.testbed.summary import summarize

EVIL = "<script>alert(1)</script>"


def planted(tmp_path):
    demo_runs(tmp_path)  # a testbed's root holds its runs beside testbed.json
    scores = {**{m: TRUE for m in names()}, "zero-shot": [0.0, 0.1, 0.6, 0.7, 0.0]}  # every registered method
    worlds = [world(s, scores, TRUE, TRUE) for s in (0, 1)]
    notes = {w.seed: {r.name: {"seen_share": r.scored_share, "cloze": r.scored_share} for r in RECIPES} for w in worlds}
    data = summarize(worlds, RECIPES, notes, {0: 0.05, 1: 0.05}, {"quick": True}, 100, {"total_s": 1.0})
    data["controls"][0]["details"].append(EVIL)
    (tmp_path / TESTBED_FILE).write_text(json.dumps(data))
    return data


def test_the_section_holds_every_method_recipe_and_control(tmp_path):
    data = planted(tmp_path)
    section = section_of(tmp_path)
    assert [r["method"] for r in section["rows"]] == list(data["methods"]) == list(names())
    assert list(names()) == ["zero-shot", "few-shot", "soft-prompt", "lora", "prefix-tuning"]
    assert section["seeds"] == [0, 1] and set(section["recipes"]) == {r.name for r in RECIPES}
    assert section["chart"].src.startswith("data:image/svg+xml;base64,")
    page = build_report(tmp_path, tmp_path / "report.html").read_text()
    assert "Testbed: a world with known answers" in page
    assert EVIL not in page and "&lt;script&gt;" in page
    assert "did not hold" in page or "held" in page


def test_no_testbed_json_no_section_and_a_broken_one_is_a_note(tmp_path):
    demo_runs(tmp_path)
    assert section_of(tmp_path) is None
    assert "Testbed:" not in build_report(tmp_path, tmp_path / "report.html").read_text()
    (tmp_path / TESTBED_FILE).write_text("{not json")
    assert "cannot be read" in section_of(tmp_path)["error"]
    assert "testbed.json cannot be read" in build_report(tmp_path, tmp_path / "r.html").read_text()

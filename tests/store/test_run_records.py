"""The run folder's records as pydantic models (softeval.store.schema): what the pipeline writes is its record and
reads back to the same bytes, a value of another type is damage named in one line, a samples.jsonl or curve.jsonl
row that is not its record is refused, and `softeval schema results|samples|curve` prints the records' JSON Schema,
which takes the files a run writes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runfactory import outcomes, write_run
from tiny import tiny_lm, toy_config

from softeval import cli
from softeval.run.pipeline import run_job
from softeval.store.format import CURVE_FILE, RESULTS_FILE, SAMPLES_FILE, load_results, read_curve, scan
from softeval.store.record import RunFormatError
from softeval.store.runs import jsonl_text, write_json
from softeval.store.schema import RESULTS_KEYS, CurveRow, ResultsRecord, SampleRow, check_results

DAMAGED = "damaged (rerun it with `softeval run` and the same options)"


def printed(capsys, which: str) -> dict:
    """The schema `softeval schema WHICH` prints (a valid draft-7 schema)."""
    assert cli.main(["schema", which]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


def test_what_the_pipeline_writes_is_its_record_and_reads_back_to_the_same_bytes(toy, tmp_path, capsys):
    run_job(toy_config(tmp_path, methods=("zero-shot", "soft-prompt"), steps=2), lm=tiny_lm())
    schemas = {which: jsonschema.Draft7Validator(printed(capsys, which)) for which in ("results", "samples", "curve")}
    for method in ("zero-shot", "soft-prompt"):
        folder = tmp_path / "tiny-0" / "toyformat" / method / "seed0"
        written = (folder / RESULTS_FILE).read_bytes()
        record = ResultsRecord.model_validate(json.loads(written))
        write_json(tmp_path / "again.json", record.as_json())  # the store's writer, as the run writes it
        assert (tmp_path / "again.json").read_bytes() == written
        assert list(record.as_json()) == list(RESULTS_KEYS) and load_results(folder) == json.loads(written)
        schemas["results"].validate(json.loads(written))
        samples = (folder / SAMPLES_FILE).read_text(encoding="utf-8")
        rows = [json.loads(line) for line in samples.splitlines()]
        for row in rows:
            SampleRow.model_validate(row)
            schemas["samples"].validate(row)
        assert jsonl_text(rows) == samples
    curve = read_curve(tmp_path / "tiny-0" / "toyformat" / "soft-prompt" / "seed0" / CURVE_FILE)
    assert curve and all(CurveRow.model_validate(row) for row in curve)
    for row in curve:
        schemas["curve"].validate(row)


def test_the_results_schema_requires_every_key_in_the_order_written_and_no_other(capsys):
    schema = printed(capsys, "results")
    assert schema["required"] == list(schema["properties"]) == list(RESULTS_KEYS)
    assert schema["additionalProperties"] is False and schema["title"] == "softeval results.json"
    assert schema["properties"]["format_version"]["const"] == 1


def test_the_row_schemas_require_what_every_reader_computes_from(capsys):
    samples, curve = printed(capsys, "samples"), printed(capsys, "curve")
    assert sorted(samples["required"]) == ["correct", "format_ok", "gold", "lenient_correct", "strict"]
    assert curve["required"] == ["step"]
    assert {"loss", "format_rate", "accuracy", "held_out_loss"} <= set(curve["properties"])


def _rewrite_samples(run: Path, change) -> None:
    """samples.jsonl with its first row changed, and results.json's digest of it to match (not torn: a row that
    is not a scored item)."""
    rows = [json.loads(line) for line in (run / SAMPLES_FILE).read_text().splitlines()]
    change(rows[0])
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (run / SAMPLES_FILE).write_text(text)
    results = json.loads((run / RESULTS_FILE).read_text())
    results["samples_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (run / RESULTS_FILE).write_text(json.dumps(results))


@pytest.mark.parametrize("change, why", [
    (lambda row: row.update(correct="yes"), "its 'correct' is not true or false"),
    (lambda row: row.pop("gold"), "it lacks gold"),
    (lambda row: row.update(strict=3), "its 'strict' is not a string or null"),
    (lambda row: row.update(cloze_scores=["x"]), "its 'cloze_scores' is not a list of numbers or null"),
])
def test_a_samples_row_that_is_not_a_scored_item_is_damage_named_in_one_line(tmp_path, change, why):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    _rewrite_samples(run, change)
    assert scan(tmp_path).skipped == [(run, f"{SAMPLES_FILE} line 1 is not a scored item ({why}): {DAMAGED}")]


def test_a_samples_row_with_keys_of_its_task_source_and_without_the_newer_ones_is_a_scored_item(tmp_path):
    run = write_run(tmp_path, "model-a", "mmlu", "zero-shot", outcomes(10, 0.5))
    _rewrite_samples(run, lambda row: (row.pop("hit_max_new_tokens"), row.pop("prompt"),
                                       row.update(lm_eval={"strict-match": {"exact_match": 1.0}})))
    assert scan(tmp_path).skipped == []


@pytest.mark.parametrize("row", [{"step": "1", "loss": 0.5}, {"step": 1, "loss": True}, {"loss": 0.5},
                                 {"step": 1, "held_out_loss": "low"}])
def test_a_curve_row_that_is_not_a_curve_point_is_refused(tmp_path, row):
    path = tmp_path / CURVE_FILE
    path.write_text(json.dumps({"step": 0, "loss": None, "format_rate": 0.5, "accuracy": 0.25}) + "\n"
                    + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match="not a curve point"):
        read_curve(path)


# A value of each of the record's types, and values of every other kind, for the property tests.
KINDS = {"int": st.integers(-5, 10**6), "float": st.floats(allow_nan=False), "str": st.text(max_size=8),
         "bool": st.booleans(), "none": st.none(),
         "dict": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
         "list": st.lists(st.text(max_size=3), max_size=3)}
TEXTS = ("softeval_version", "model", "model_kind", "model_kind_source", "task", "method", "started_at", "finished_at",
         "samples_sha256")
OBJECTS = ("metrics", "answers", "format_failures", "split", "engine", "config", "versions")
COUNTS = ("n", "truncated_prompts", "unscorable", "samples_count")
TAKES = {"format_version": {"int"}, "seed": {"int"}, "series": {"str", "none"}, "step": {"int", "none"},
         "item_ids": {"list"}, "chat_template": {"bool"}, "tuning": {"dict", "none"}, "git": {"str", "none"},
         "wall_seconds": {"int", "float"}, **dict.fromkeys(TEXTS, {"str"}), **dict.fromkeys(OBJECTS, {"dict"}),
         **dict.fromkeys(COUNTS, {"int"})}


def _value(key: str):
    if key == "format_version":
        return st.just(1)
    if key in COUNTS:
        return st.integers(0, 10**6)
    return st.one_of(*(KINDS[kind] for kind in sorted(TAKES[key])))


RECORDS = st.fixed_dictionaries({name: _value(name) for name in RESULTS_KEYS})


@settings(max_examples=40, deadline=None)
@given(RECORDS)
def test_any_record_of_the_declared_types_is_read_and_written_back_in_its_key_order(record):
    check_results(json.loads(json.dumps(record)))  # its keys in any order
    text = json.dumps({key: record[key] for key in RESULTS_KEYS}, indent=2)  # as written
    assert json.dumps(ResultsRecord.model_validate(record).as_json(), indent=2) == text


@settings(max_examples=60, deadline=None)
@given(RECORDS, st.sampled_from([k for k in RESULTS_KEYS if k != "format_version"]), st.data())
def test_a_value_of_another_kind_is_damage_naming_its_key(record, key, data):
    others = sorted(set(KINDS) - TAKES[key])
    record[key] = data.draw(KINDS[data.draw(st.sampled_from(others))])
    with pytest.raises(RunFormatError, match=f"^results.json '{key}' is not "):
        check_results(json.loads(json.dumps(record)))

"""Bad input to `softeval run` and `softeval eval` (options, model paths, soft prompts, data files, task
files), and an option's value in `softeval track` and a sweep file: every refused command is ONE plain-text
line on stderr and exit 2, before any model loads, leaving no run folder, the option named as the user wrote
it; property tests: generated arguments get exit 2 or reach the model load, never a traceback. The one place
the command line's refusals are tested; a RunConfig the command line cannot express, given through the
library: tests/run/test_validate.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save_file
from tiny import format_task
from userfiles import FAST, GOOD_SPEC, WORDS, write_spec

from softeval import cli, tasks
from softeval.run import pipeline


class ModelLoad(Exception):
    """Raised instead of loading a model: reaching it means every check passed."""


@pytest.fixture
def toy(monkeypatch):
    task = format_task()
    monkeypatch.setitem(tasks.TASKS, task.name, task)

    def no_load(*args, **kwargs):
        raise ModelLoad

    monkeypatch.setattr(pipeline, "load_model", no_load)
    return task


def refused(args: list[str], capsys) -> str:
    """Run the CLI; it must exit 2 with exactly one plain line on stderr (returned) and load nothing."""
    try:
        code = cli.main(args)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith(("error: ", "softeval")), err
    assert "Traceback" not in err and "\x1b" not in err
    return lines[0]


def run_args(out: Path, *extra: str, task: str = "toyformat", model: str = "org/model") -> list[str]:
    return ["run", "--model", model, "--task", task, "--out", str(out), *extra]


def no_partial(out: Path) -> None:
    assert not list(Path(out).rglob("*.partial")) if Path(out).is_dir() else True


# ---- options -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("option", "value", "message"), [
    ("--lr", "nan", "--lr must be a positive finite number, not nan"),
    ("--lr", "-1", "--lr must be a positive finite number, not -1.0"),
    ("--lr", "inf", "--lr must be a positive finite number"),
    ("--lr", "0", "--lr must be a positive finite number"),
    ("--lr", "abc", "softeval run: argument --lr: invalid float value: 'abc'"),
    ("--steps", "0", "--steps must be between 1 and 1000000, not 0"),
    ("--steps", "-5", "--steps must be between 1 and"),
    ("--tokens", "0", "--tokens must be between 1 and"),
    ("--tokens", "100000", "--tokens must be between 1 and 4096, not 100000"),
    ("--batch-size", "0", "--batch-size must be between 1 and"),
    ("--eval-batch-size", "-1", "--eval-batch-size must be between 1 and"),
    ("--shots", "-1", "--shots must be between 0 and"),
    ("--shots", "500", "--shots 500 is more than the"),
    ("--limit", "0", "--limit must be between 1 and"),
    ("--limit", "1000", "--limit 1000 is larger than the 24 scored items"),
    ("--curve-every", "0", "--curve-every must be between 1 and"),
    ("--curve-items", "-1", "--curve-items must be between 0 and"),
    ("--length-group", "0", "--length-group must be between 1 and"),
    ("--seed", str(2**70), "--seed must fit in 64 bits"),
    ("--steps", "1.5", "softeval run: argument --steps: invalid int value: '1.5'"),
    ("--init", "bogus", "--init must be vocab, random, instruction, text:"),
    ("--init", "text:", "--init must be vocab, random, instruction, text:"),
    ("--init", "from:/nowhere", "--init from:/nowhere: no such folder"),
    ("--method", "zero-shot,bogus", "unknown method 'bogus'"),
    ("--method", ",", "no method given"),
    ("--dtype", "float8", "unknown dtype 'float8'"),
    ("--device", "gpu0", "unknown --device 'gpu0': use auto, cpu, cuda, cuda:N or mps"),
    ("--device", "cuda:x", "unknown --device 'cuda:x'"),
    ("--chat-template", "maybe", "softeval run: argument --chat-template: invalid choice: 'maybe'"),
])
def test_bad_option_is_one_line_exit_2_before_the_model_loads(toy, tmp_path, capsys, option, value, message):
    line = refused(run_args(tmp_path, f"{option}={value}"), capsys)
    assert line.startswith(f"error: {message}"), line
    no_partial(tmp_path)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("steps", "0", "'steps' must be between 1 and 1000000, not 0"),
    ("lr", "-1.0", "'lr' must be a positive finite number, not -1.0"),
    ("chat_template", "x", "unknown 'chat_template' 'x': use auto, on or off"),
    ("init", "from:/nowhere", "init: from:/nowhere: no such folder"),
])
def test_a_bad_value_in_a_sweep_file_is_named_as_its_key(tmp_path, capsys, key, value, message):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"out: out\nmodels: [smollm2-135m-instruct]\ntasks: [mmlu]\n{key}: {value}\n")
    line = refused(["sweep", str(sweep), "--dry-run"], capsys)
    # where in the file (the file, or the job: its model and task), then the message
    assert re.fullmatch(f"error: sweep file {re.escape(str(sweep))}(, [^:]+)?: {re.escape(message)}.*", line), line
    assert not (tmp_path / "out").exists()


def test_track_names_its_flags(tmp_path, capsys):
    """`softeval track` builds a sweep from flags: its errors name the flag the user typed."""
    (tmp_path / "s" / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "s" / "checkpoint-1" / "config.json").write_text("{}")
    line = refused(["track", str(tmp_path / "s"), "--task", "mmlu", "--steps", "0", "--out", str(tmp_path / "out"),
                    "--dry-run"], capsys)
    assert re.fullmatch(r"error: softeval track(, [^:]+)?: --steps must be between 1 and 1000000, not 0", line), line
    assert not (tmp_path / "out").exists()


def test_cuda_without_cuda_is_refused_before_loading(toy, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = refused(run_args(tmp_path, "--device", "cuda"), capsys)
    assert "--device cuda:" in line and "use --device cpu" in line


def test_cuda_index_beyond_the_devices_is_refused(toy, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert "only 1 CUDA device(s) here" in refused(run_args(tmp_path, "--device", "cuda:3"), capsys)


def test_out_pointing_at_a_file(toy, tmp_path, capsys):
    file = tmp_path / "afile"
    file.write_text("x")
    assert refused(run_args(file), capsys) == (
        f"error: --out {file} is a file, not a folder: give a folder for the run folders")
    assert f"{file} is a file, not a folder" in refused(run_args(file / "below"), capsys)
    assert file.read_text() == "x"


def test_out_inside_a_run_folder_is_refused(toy, tmp_path, capsys):
    """--out inside a finished run's folder wrote a second model tree and an index there, which
    neither the integrity check nor `softeval runs` saw."""
    from runfactory import write_run

    run = write_run(tmp_path / "base", "smollm2-135m-instruct", "mmlu", "zero-shot", [True, False])
    for out in (run, run / "below" / "deeper"):
        line = refused(run_args(out), capsys)
        assert line == (f"error: --out {out} is inside a run folder ({run}): give an output root outside it, "
                        f"such as the one that holds it ({tmp_path / 'base'})")
    partial = tmp_path / "base/m/t/zero-shot/seed1.partial"
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("{}")
    assert "is inside a run folder" in refused(run_args(partial / "x"), capsys)
    assert sorted(p.name for p in run.iterdir()) == ["results.json", "samples.jsonl"]
    with pytest.raises(ModelLoad):  # a folder named like one, but holding no run, is a folder
        cli.main(run_args(tmp_path / "seed3", "--device", "cpu"))


def test_good_options_reach_the_model_load(toy, tmp_path):
    with pytest.raises(ModelLoad):
        cli.main(run_args(tmp_path, "--lr", "0.1", "--steps", "2", "--limit", "3", "--device", "cpu"))
    no_partial(tmp_path)


@pytest.mark.parametrize("name", ["[/x]", "a[/b]", "[bold red]x[/bold red]", "[num_virtual_tokens, 576]"])
def test_square_brackets_in_names_print_as_they_are(toy, tmp_path, capsys, name):
    line = refused(run_args(tmp_path, task=name), capsys)
    assert line.startswith(f"error: unknown task {name!r}")
    line = refused(run_args(tmp_path, model=name), capsys)
    assert line.startswith(f"error: unknown model {name!r}")


# ---- model folders and soft prompts ------------------------------------------------------------

@pytest.mark.parametrize(("make", "message"), [
    (None, "no model folder at"),
    ("empty", "has no config.json"),
    ("file", "no model folder at"),
])
def test_a_model_path_that_is_no_model_folder_is_refused_before_loading(toy, tmp_path, capsys, monkeypatch,
                                                                        make, message):
    """A path (not a hub id: './m' used to be sent to the hub as a repo id) that names no model folder."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "m"
    if make == "empty":
        path.mkdir()
    elif make == "file":
        path.write_text("x")
    for name in (str(path), "./m"):
        line = refused(run_args(tmp_path / "out", model=name), capsys)
        assert message in line and name in line
    no_partial(tmp_path / "out")


@pytest.mark.parametrize(("weights", "message"), [
    (b"", "cannot read soft prompt"),
    ("torn", "cannot read soft prompt"),
    ({"other": [4, 32]}, "not the tensor 'prompt_embeddings'"),
    ({"prompt_embeddings": [32]}, "not [num_virtual_tokens, hidden_size]"),
    (None, "no soft prompt at"),
])
def test_an_unreadable_soft_prompt_is_refused_before_the_model_loads(toy, tmp_path, capsys, weights, message):
    """`softeval eval --soft-prompt DIR` reads the adapter's header before loading a model (a damaged
    one used to be found only after the load), as --init from:DIR does."""
    folder = tmp_path / "soft_prompt"
    folder.mkdir()
    path = folder / "adapter_model.safetensors"
    if weights == "torn":
        save_file({"prompt_embeddings": torch.zeros(4, 32)}, str(path))
        path.write_bytes(path.read_bytes()[:100])
    elif isinstance(weights, bytes):
        path.write_bytes(weights)
    elif weights is not None:
        save_file({k: torch.zeros(*shape) for k, shape in weights.items()}, str(path))
    args = ["eval", "--model", "org/model", "--task", "toyformat", "--out", str(tmp_path / "out"),
            "--soft-prompt", str(folder)]
    line = refused(args, capsys)
    assert message in line and str(folder) in line
    no_partial(tmp_path / "out")


@pytest.mark.parametrize("flag", ["--soft-prompt", "--init"])
def test_a_soft_prompt_of_another_width_is_refused_before_the_model_loads(toy, tmp_path, capsys, monkeypatch,
                                                                          flag):
    """Where the model's hidden size is in its files (a preset, a local folder's config.json), a saved
    soft prompt of another width is refused before loading (a 70B model would load for minutes first)."""
    monkeypatch.setattr(pipeline, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    folder = tmp_path / "soft_prompt"
    folder.mkdir()
    save_file({"prompt_embeddings": torch.zeros(4, 32)}, str(folder / "adapter_model.safetensors"))
    local = tmp_path / "model"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"model_type": "llava",
                                                   "text_config": {"hidden_size": 48}}))
    for model, hidden in (("smollm2-135m-instruct", 576), (str(local), 48)):
        command = ["eval", "--soft-prompt", str(folder)] if flag == "--soft-prompt" else \
            ["run", "--method", "soft-prompt", "--tokens", "4", "--init", f"from:{folder}"]
        line = refused([*command, "--model", model, "--task", "toyformat", "--out", str(tmp_path / "out")],
                       capsys)
        assert f"its vectors have 32 dimensions, model {model} has hidden size {hidden}" in line


# ---- data files --------------------------------------------------------------------------------

BAD_BYTES = b"\xff\xfe\x80 not utf-8"


@pytest.mark.parametrize(("name", "content", "message"), [
    ("bad.jsonl", b'{"question": "ok"}\n' + BAD_BYTES + b"\n",
     "bad.jsonl: line 2 is not UTF-8 text (byte 0xff)"),
    ("bad.csv", b"question,answer\n" + BAD_BYTES + b",A\n", "bad.csv: line 2 is not UTF-8 text"),
    ("bad.json", b'[{"question": "x", "choices": ["a", "b"], "answer": 0}, {"quest',
     "bad.json: not valid JSON at line 1"),
    ("bad.json", b"5", "bad.json: expected a JSON list of rows, not a int"),
    ("bad.json", b"[" * 100_000, "bad.json: nested too deeply"),
    ("bad.jsonl.gz", b"not gzip at all", "bad.jsonl.gz: cannot be read"),
    ("bad.parquet", b"PAR1 nonsense", "bad.parquet: not a readable parquet file"),
    ("bad.arrow", b"nonsense", "bad.arrow: not a readable arrow file"),
    ("bad.csv", b"a,b\n\"x\x00y\",1\n", "bad.csv"),
])
def test_unreadable_data_file_through_source_is_one_line(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    line = refused(run_args(tmp_path / "out", "--source", str(path), task="mmlu"), capsys)
    assert message in line
    no_partial(tmp_path / "out")


def test_a_data_path_that_is_a_folder_or_a_fifo_says_what_it_is(tmp_path, capsys):
    """a data path that exists but is a folder or a FIFO was 'data file not found'."""
    import os

    folder, fifo = tmp_path / "d.jsonl", tmp_path / "p.jsonl"
    folder.mkdir()
    os.mkfifo(fifo)
    for path, what in ((folder, "a folder"), (fifo, "a named pipe (FIFO)")):
        line = refused(run_args(tmp_path / "out", "--source", str(path), task="mmlu"), capsys)
        assert line == f"error: --source {path} is {what}, not a file (give offline, hub or a data file)"
        task = tmp_path / "t.yaml"
        task.write_text(yaml.safe_dump({"data": path.name, "prompt": "{{ q }}", "answer_field": "a",
                                        "answer_regex": "(.*)"}))
        line = refused(run_args(tmp_path / "out", task=str(task)), capsys)
        assert line == f"error: data file {path} is {what}, not a file"
    (tmp_path / "dir.yaml").mkdir()
    assert refused(run_args(tmp_path / "out", task=str(tmp_path / "dir.yaml")), capsys) == \
        f"error: task file {tmp_path / 'dir.yaml'} is a folder, not a file"


def test_non_utf8_task_data_file(tmp_path, capsys):
    (tmp_path / "rows.jsonl").write_bytes(BAD_BYTES)
    task = tmp_path / "t.yaml"
    task.write_text(yaml.safe_dump({"data": "rows.jsonl", "prompt": "{{ q }}", "answer_field": "a",
                                    "answer_regex": "(.*)"}))
    line = refused(run_args(tmp_path / "out", task=str(task)), capsys)
    assert "rows.jsonl: line 1 is not UTF-8 text" in line


# ---- task files --------------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "message"), [
    ({"split": {"n_tune": "abc"}}, "split.n_tune must be a whole number of at least 1, not 'abc'"),
    ({"n_tune": "abc"}, "unknown setting(s) n_tune"),
    ({"stop": 5}, "stop must be a string or a list of non-empty strings, not int 5"),
    ({"stop": [""]}, "stop must be a string or a list of non-empty strings"),
    ({"answer_field": ["capital"]}, "answer_field must be a field name, not list ['capital']"),
    ({"data": 123}, "data must be a file path, not int 123"),
    ({"max_new_tokens": "lots"}, "max_new_tokens must be a whole number from 1 to 32768, not str 'lots'"),
    ({"max_new_tokens": True}, "max_new_tokens must be a whole number"),
    ({"fields": "country"}, "fields must be a list of field names, not str 'country'"),
    ({"split": [1, 2]}, "split must be a mapping, not list"),
    ({"split": {"seed": 1.5}}, "split.seed must be a whole number, not 1.5"),
    ({"prompt": "{{ 1 / 0 }}"}, "the prompt template cannot be filled (division by zero)"),
    ({"answer_regex": "a{99999999999}"}, "answer_regex is not a valid regular expression"),
    ({"name": 2024}, "name must be a string, not int 2024"),
])
def test_wrongly_typed_task_file_setting(tmp_path, capsys, change, message):
    path = write_spec(tmp_path, {**GOOD_SPEC, **change})
    line = refused(run_args(tmp_path / "out", task=str(path)), capsys)
    assert f"task file {path}: {message}" in line or message in line


# ---- properties: generated input answers exit 2 or works, never a traceback ----------------------

NUMERIC = ["--lr", "--steps", "--tokens", "--batch-size", "--eval-batch-size", "--shots", "--limit", "--seed",
           "--curve-every", "--curve-items", "--length-group"]
VALUES = st.one_of(st.integers(min_value=-(2**80), max_value=2**80).map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.text(max_size=20))


@FAST
@given(option=st.sampled_from(NUMERIC), value=VALUES)
def test_property_numeric_options(toy, tmp_path, capsys, option, value):
    _exit_2_or_reaches_the_model(run_args(tmp_path, f"{option}={value}"), capsys)


@FAST
@given(option=st.sampled_from(["--device", "--dtype", "--init", "--method", "--task", "--model", "--out",
                               "--source", "--chat-template", "--kind"]), value=WORDS)
def test_property_text_options(toy, tmp_path, capsys, option, value):
    if option == "--out" and not value.strip():
        value = "x"
    if option == "--out":
        value = str(tmp_path / value.replace("\x00", ""))
    if option == "--source" and value not in ("offline", "hub"):
        value = str(tmp_path / "missing") + value  # never a real file of this machine
    _exit_2_or_reaches_the_model(run_args(tmp_path, f"{option}={value}"), capsys)


def _exit_2_or_reaches_the_model(args, capsys):
    try:
        code = cli.main(args)
    except ModelLoad:
        code = None
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    if code is not None:
        assert code == 2 and len(err.strip("\n").split("\n")) == 1, err

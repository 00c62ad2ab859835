"""`softeval tasks --show TASK` (cli/show.py): it prints what a run's model reads, so each variant's printed prompt is
the prompt a zero-shot run of that variant wrote for the same item, followed by the gold answer; bad flags are one
line and exit 2, before any data loads."""

from __future__ import annotations

import json
import re

import pytest
from tiny import tiny_lm
from toymc import mc_config

from softeval import cli
from softeval.run import pipeline
from softeval.run.pipeline import run_variants


def _shown(capsys) -> tuple[str, dict[int, str]]:
    """The item id of the header and each variant's block, its indentation taken off."""
    out = capsys.readouterr().out
    item = re.search(r", item (\S+) \(item", out).group(1)
    blocks = re.split(r"^variant (\d+): .*$", out, flags=re.M)[1:]
    return item, {int(v): "\n".join(line[4:] for line in block.strip("\n").split("\n"))
                  for v, block in zip(blocks[::2], blocks[1::2])}


def test_each_variant_shown_is_the_prompt_its_zero_shot_run_read_then_the_gold_answer(toymc, tmp_path, monkeypatch,
                                                                                        capsys):
    monkeypatch.setattr(pipeline, "load_lm", lambda config: tiny_lm())
    monkeypatch.setattr(pipeline, "check_config", lambda *a, **kw: None)  # the tiny model is no preset
    run_variants(mc_config(tmp_path), 3)
    capsys.readouterr()
    assert cli.main(["tasks", "--show", "toymc", "--prompt-variants", "3"]) == 0
    item, blocks = _shown(capsys)
    assert sorted(blocks) == [0, 1, 2]
    for variant, shown in blocks.items():
        folder = "toymc" if variant == 0 else f"toymc@v{variant}"
        samples = (tmp_path / "tiny-0" / folder / "zero-shot" / "seed0" / "samples.jsonl").read_text()
        [sample] = [s for s in map(json.loads, samples.splitlines()) if s["id"] == item]
        assert shown.startswith(sample["prompt"])  # the first item every run scores, as the run read it
        answer = shown[len(sample["prompt"]):]  # the gold letter, in the variant's case: " a" under lower-case labels
        assert answer.strip().upper() == sample["gold"] and answer == " " + answer.strip()
    assert blocks[0] != blocks[1] != blocks[2]
    assert cli.main(["tasks", "--show", "toymc", "--prompt-variant", "2"]) == 0
    assert _shown(capsys)[1] == {2: blocks[2]}


@pytest.mark.parametrize(("argv", "said"), [
    (["--show", "toymc", "--item", "99999"], "--item 99999: task toymc scores items 0 to "),
    (["--show", "toymc", "--prompt-variants", "0"], "--prompt-variants 0: give 1 to 64"),
    (["--show", "toymc", "--prompt-variant", "2", "--prompt-variants", "3"],
     "--prompt-variants 3 runs variants 0 to 2: leave out --prompt-variant 2"),
    (["--show", "toymc", "--prompt-variant", "99999"], "--prompt-variant 99999: task toymc has prompt variants 0 to "),
    (["--item", "3"], "--item is for --show TASK: add it"),
    (["--prompt-variants", "2"], "--prompt-variants is for --show TASK: add it"),
])
def test_a_bad_flag_is_one_line_and_exit_2(toymc, capsys, argv, said):
    assert cli.main(["tasks", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: {said}"), err


def test_json_holds_each_variant_s_prompt_and_target(toymc, capsys):
    assert cli.main(["tasks", "--show", "toymc", "--prompt-variants", "2", "--item", "1"]) == 0
    item, blocks = _shown(capsys)
    assert cli.main(["tasks", "--show", "toymc", "--prompt-variants", "2", "--item", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["task"], r["item"], r["variant"]) for r in rows] == [("toymc", item, 0), ("toymc", item, 1)]
    assert rows[0]["format"] == "" and rows[1]["format"].startswith("names=")
    assert [r["prompt"] + r["target"] for r in rows] == [blocks[0], blocks[1]]

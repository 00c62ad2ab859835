"""Small lm-eval task YAMLs over local JSONL files, written into a test's folder (an ``--include-path``):
a generative task with a strict and a flexible regex filter, and a multiple-choice task."""

from __future__ import annotations

import json
from pathlib import Path

ADD = "toy_add"
MC = "toy_mc"

ADD_YAML = """task: toy_add
dataset_path: json
dataset_kwargs:
  data_files:
    train: {folder}/add_train.jsonl
    test: {folder}/add_test.jsonl
output_type: generate_until
training_split: train
fewshot_split: train
test_split: test
description: "Add the numbers.\\n\\n"
doc_to_text: "Q: {{{{q}}}}\\nA:"
doc_to_target: "= {{{{a}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    regexes_to_ignore:
      - "= "
generation_kwargs:
  until:
    - "\\n"
  max_gen_toks: {max_gen_toks}
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "^ ?= (\\\\d+)"
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        regex_pattern: "(\\\\d+)"
        group_select: -1
      - function: take_first
metadata:
  version: 1.0
"""

MC_YAML = """task: toy_mc
dataset_path: json
dataset_kwargs:
  data_files:
    validation: {folder}/mc_validation.jsonl
    test: {folder}/mc_test.jsonl
output_type: multiple_choice
validation_split: validation
test_split: test
doc_to_text: "Q: {{{{q}}}}\\nA:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def _rows(n: int, start: int) -> list[dict]:
    return [{"q": f"{i} + {i % 3}", "a": str(i + i % 3)} for i in range(start, start + n)]


def _mc_rows(n: int, start: int) -> list[dict]:
    colours = ["red", "green", "blue", "black"]
    return [{"q": f"colour {i}?", "choices": colours, "label": i % 4} for i in range(start, start + n)]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_tasks(folder: Path, max_gen_toks: int = 6) -> Path:
    """Both tasks and their data in ``folder`` (returned): 16 tuning and 10 scored additions; 12
    validation and 8 scored colour questions."""
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "add_train.jsonl", _rows(16, 0))
    write_jsonl(folder / "add_test.jsonl", _rows(10, 100))
    write_jsonl(folder / "mc_validation.jsonl", _mc_rows(12, 0))
    write_jsonl(folder / "mc_test.jsonl", _mc_rows(8, 50))
    (folder / "toy_add.yaml").write_text(ADD_YAML.format(folder=folder, max_gen_toks=max_gen_toks))
    (folder / "toy_mc.yaml").write_text(MC_YAML.format(folder=folder))
    return folder


GROUP = "toy_group"
MC2 = "toy_mc2"

MC2_YAML = """include: toy_mc.yaml
task: toy_mc2
dataset_kwargs:
  data_files:
    validation: {folder}/mc_validation.jsonl
    test: {folder}/mc2_test.jsonl
"""

GROUP_YAML = """group: toy_group
group_alias: toy colours
task:
  - toy_mc
  - toy_mc2
aggregate_metric_list:
  - metric: acc
    weight_by_size: {weighted}
  - metric: acc_norm
    weight_by_size: {weighted}
metadata:
  version: 1.0
"""


def write_group(folder: Path, weighted: bool = True) -> Path:
    """``write_tasks`` and a group of two multiple-choice tasks (toy_mc: 8 scored items, toy_mc2: 4),
    aggregated size-weighted or not."""
    write_tasks(folder)
    write_jsonl(folder / "mc2_test.jsonl", _mc_rows(4, 80))
    (folder / "toy_mc2.yaml").write_text(MC2_YAML.format(folder=folder))
    (folder / "toy_group.yaml").write_text(GROUP_YAML.format(weighted=str(weighted).lower()))
    return folder

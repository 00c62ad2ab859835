"""Two synthetic task files (first and last letter of a word) that sweep workers can read."""

import json
from pathlib import Path

import yaml

TASK = {"data": "{name}.jsonl", "fields": ["word", "answer"], "answer_field": "answer",
        "instruction": "Write # and the {which} letter.", "prompt": "Word: {{{{ word }}}}\nAnswer:",
        "target": " #{{{{ answer }}}}", "answer_regex": "^ ?#([a-h])", "matcher": "exact",
        "split": {"n_tune": 40, "seed": 1}, "stop": ["\n"], "max_new_tokens": 3}


def write_tasks(folder: Path) -> list[str]:
    """Two synthetic tasks (first and last letter of a word) as task files the workers can read."""
    import random

    rng = random.Random(0)
    names = []
    for name, which, pick in (("first", "first", 0), ("last", "last", -1)):
        rows = []
        for i in range(60):
            word = "".join(rng.choice("abcdefgh") for _ in range(3))
            rows.append({"id": f"{name}{i}", "word": word, "answer": word[pick]})
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        spec = {k: v.format(name=name, which=which) if isinstance(v, str) else v for k, v in TASK.items()}
        spec["name"] = name
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
        names.append(f"{name}.yaml")
    return names

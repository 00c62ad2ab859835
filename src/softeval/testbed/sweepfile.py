"""The comparison as an ordinary sweep file, one per world seed, written into the output root: every base
model with every method softeval knows (the registry's: softeval.methods), every post-trained partner with the
reference method (the bare prompt, how it is used), all on that world's QA task file. `softeval sweep FILE` runs
it by hand just as the testbed does."""

from __future__ import annotations

import json
from pathlib import Path

from softeval.constants import BASE, POST_TRAINED
from softeval.methods import names, reference
from softeval.store.format import TESTBED_SWEEP


def post_method() -> str:
    """The method a post-trained partner is scored with: the REFERENCE method (the bare prompt, how it is used)."""
    return reference()


def base_methods() -> tuple[str, ...]:
    """The methods a base model is scored with: every registered method (a new one joins here)."""
    return names()


def write_sweep(root: Path, world_seed: int, task_file: Path, pairs: list[tuple[Path, Path]],
                options: dict, variants: int = 1) -> Path:
    """``pairs``: (base folder, post-trained folder). Paths are written relative to ``root``, where the
    file lies (a sweep file's paths are relative to its folder). JSON is YAML: the file is JSON text. ``variants``:
    each base model is scored under prompt variants 0 to variants-1; a partner under its task's own prompt (the
    ranking the base models' rankings are held against)."""
    models = []
    for base, post in pairs:
        models.append({"name": str(base.relative_to(root)), "kind": BASE,
                       "post_trained": str(post.relative_to(root)), "methods": list(base_methods()),
                       "resources": {"cpus": 1}, **({"prompt_variants": variants} if variants > 1 else {})})
        models.append({"name": str(post.relative_to(root)), "kind": POST_TRAINED, "methods": [post_method()],
                       "resources": {"cpus": 1}})
    spec = {"out": ".", "models": models, "tasks": [str(task_file.relative_to(root))], "seeds": [0], **options}
    path = root / TESTBED_SWEEP.format(seed=world_seed)
    text = "# written by `softeval testbed` (`softeval sweep` runs it too)\n" + json.dumps(spec, indent=1)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)
    return path

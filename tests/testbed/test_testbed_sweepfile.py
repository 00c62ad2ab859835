"""The testbed's comparison is an ordinary sweep file: softeval's own reader takes it as it is."""

from softeval.methods import names
from softeval.store.format import TESTBED_SWEEP
from softeval.sweep.file import load_sweep
from softeval.testbed.build import write_task
from softeval.testbed.sweepfile import write_sweep
from softeval.testbed.world import make_world


def test_the_sweep_file_pairs_each_base_with_its_partner_and_scores_every_method(tmp_path):
    pairs = []
    for name in ("w0-a", "w0-b", "w0-c"):
        base, post = tmp_path / "testbed" / "w0" / name, tmp_path / "testbed" / "w0" / f"{name}-post"
        for folder in (base, post):
            folder.mkdir(parents=True)
            (folder / "config.json").write_text("{}")  # the sweep reader checks a model folder by its config
        pairs.append((base, post))
    task = write_task(make_world(0, n_people=8), tmp_path / "testbed" / "w0")
    path = write_sweep(tmp_path, 0, task, pairs, {"steps": 7})
    assert path == tmp_path / TESTBED_SWEEP.format(seed=0)
    sweep = load_sweep(path)
    assert sweep.out == tmp_path and len(sweep.pairs) == 3
    by_model = {}
    for job in sweep.jobs:
        by_model.setdefault(job.model.label, set()).add(job.method)
        assert job.config.steps == 7 and job.config.task.endswith("testbed-qa-w0.yaml")
    assert [by_model[str(b.relative_to(tmp_path))] for b, _ in pairs] == [set(names())] * 3
    assert [by_model[str(p.relative_to(tmp_path))] for _, p in pairs] == [{"zero-shot"}] * 3


def test_base_models_are_scored_under_every_prompt_variant_and_partners_under_the_task_s_own(tmp_path):
    base, post = tmp_path / "testbed" / "w0" / "w0-a", tmp_path / "testbed" / "w0" / "w0-a-post"
    for folder in (base, post):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    task = write_task(make_world(0, n_people=8), tmp_path / "testbed" / "w0")
    sweep = load_sweep(write_sweep(tmp_path, 0, task, [(base, post)], {"steps": 7}, variants=3))
    variants = {}
    for job in sweep.jobs:
        variants.setdefault(job.model.label, []).append((job.method, job.config.prompt_variant))
    assert sorted(variants["testbed/w0/w0-a"]) == sorted((m, v) for m in names() for v in range(3))
    assert variants["testbed/w0/w0-a-post"] == [("zero-shot", 0)]

"""Series discovery and ordering (pure functions, property-tested), and series/step in the index."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from softeval.errors import UserError
from softeval.sweep.series import discover, from_list, order, step_of

PATTERNS = ["checkpoint-{}", "checkpoint_{}", "step{}", "step-{}", "step_{}", "global_step{}", "global-step{}",
            "iter_{:07d}", "ckpt-{}", "{}", "run1-checkpoint-{}", "Step{}", "model.step{}"]


@given(st.integers(0, 10**12), st.sampled_from(PATTERNS))
def test_step_is_the_number_the_name_ends_with(step, pattern):
    assert step_of(pattern.format(step)) == step


@pytest.mark.parametrize("name", ["final", "checkpoint", "step", "best-model", "checkpoint-1000-old", "v2-final",
                                  "tokenizer", "step1e3", ""])
def test_names_without_a_step(name):
    assert step_of(name) is None


@given(st.lists(st.integers(0, 10**9), unique=True), st.lists(st.sampled_from(PATTERNS)),
       st.lists(st.sampled_from(["final", "logs", "runs", "tokenizer"])), st.randoms())
def test_order_is_by_number_not_by_text(steps, patterns, others, rng):
    names = [(patterns[i % len(patterns)] if patterns else "checkpoint-{}").format(s) for i, s in enumerate(steps)]
    shuffled = names + others
    rng.shuffle(shuffled)
    ordered = order(shuffled)
    assert [s for s, _ in ordered] == sorted(steps)
    assert {n for _, n in ordered} == set(names)


def test_the_same_step_twice_is_an_error():
    with pytest.raises(UserError, match="two checkpoints for step 100: step100 and checkpoint-100"):
        order(["step100", "checkpoint-100"])


def test_discover_keeps_model_folders_in_step_order(tmp_path):
    for name in ["checkpoint-1000", "checkpoint-200", "checkpoint-30", "checkpoint-500"]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    (tmp_path / "checkpoint-999").mkdir()  # no model in it (an interrupted save): not a checkpoint
    (tmp_path / "runs").mkdir()
    (tmp_path / "step7.txt").write_text("")
    assert [c.step for c in discover(tmp_path)] == [30, 200, 500, 1000]
    with pytest.raises(UserError, match="no checkpoint folders"):
        discover(tmp_path / "runs")
    with pytest.raises(UserError, match="no such folder"):
        discover(tmp_path / "missing")


def test_explicit_list(tmp_path):
    got = from_list([{"path": "b", "step": 20}, {"path": "checkpoint-5"}, "a/step10"], "here", tmp_path)
    assert [(c.step, c.path.name) for c in got] == [(5, "checkpoint-5"), (10, "step10"), (20, "b")]
    for bad, message in [([], "non-empty list"), ([{"path": "final"}], "'step' must be"),
                         ([{"path": "a", "step": 1}, {"path": "b", "step": 1}], "two checkpoints for step 1"),
                         ([{"path": "a", "step": 1, "x": 2}], "mapping with 'path' and 'step'")]:
        with pytest.raises(UserError, match=message):
            from_list(bad, "here", tmp_path)


def test_series_report_has_a_curve_per_series_and_task(tmp_path):
    from runfactory import Items, write_run

    from softeval.analysis.report import build_report

    for step in (100, 200, 300):
        for method, k in (("zero-shot", step // 100 % 2), ("soft-prompt", step // 100)):
            run = write_run(tmp_path, f"r--checkpoint-{step}", "facts", method, [True] * k + [False] * (4 - k),
                            items=Items(cloze_correct=[True] * 3 + [False]))
            results = json.loads((run / "results.json").read_text())
            results.update(series="r", step=step)
            if method == "soft-prompt":
                results["tuning"] = {"steps_run": 10, "seconds": 1.0, "init_from": {"step": step - 100}}
            (run / "results.json").write_text(json.dumps(results))
    page = build_report(tmp_path, tmp_path / "report.html").read_text()
    section = page[page.index("Training runs (series)"):]
    assert "<h3>r · facts</h3>" in section and section.count('<td class="num">300</td>') == 1
    assert "10 steps, 1s (from step 200)" in section and "data:image/svg+xml" in section


def _checkpoint(folder, seed=0):
    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_model(len(tok), seed=seed).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_the_fingerdigestis_what_the_folder_holds_not_where_it_lies(tmp_path):
    import shutil

    from softeval.lm.fingerprint import checkpoint_fingerprint

    first = _checkpoint(tmp_path / "a" / "checkpoint-500")
    digest = checkpoint_fingerprint(first)
    copy = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(first, copy)
    assert checkpoint_fingerprint(copy) == digest  # copied (or moved, renamed): the same checkpoint
    # Trainer leftovers are not what is scored (and are often deleted after training).
    (copy / "optimizer.pt").write_bytes(b"adam" * 1000)
    (copy / "trainer_state.json").write_text('{"global_step": 500}')
    (copy / "rng_state.pth").write_bytes(b"rng")
    assert checkpoint_fingerprint(copy) == digest
    # One weight byte in the first MiB: another checkpoint.
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    assert checkpoint_fingerprint(copy) != digest
    # Another training run saved under the same folder names: another checkpoint.
    assert checkpoint_fingerprint(_checkpoint(tmp_path / "b" / "checkpoint-500", seed=1)) != digest
    assert checkpoint_fingerprint(tmp_path / "missing") is None


def test_the_fingerdigestreads_a_large_weight_file_only_at_its_ends(tmp_path, monkeypatch):
    """A 70B checkpoint is not read whole each time a sweep checks what is finished: a large file gives its
    first and last MiB (a sparse 3 GiB file here; the reads are counted)."""
    import builtins

    from softeval.lm import fingerprint

    folder = tmp_path / "checkpoint-1"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    big = folder / "model-00001-of-00002.safetensors"
    with open(big, "wb") as f:
        f.truncate(3 * 2**30)
    read = []
    real_open = builtins.open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def read(self, n=-1):
            data = self.f.read(n)
            read.append(len(data))
            return data

        def seek(self, *a):
            return self.f.seek(*a)

    monkeypatch.setattr(builtins, "open", lambda *a, **kw: Counting(real_open(*a, **kw)))
    before = fingerprint.checkpoint_fingerprint(folder)
    assert sum(read) <= 2 * 2**20 + 2
    monkeypatch.setattr(builtins, "open", real_open)
    with open(big, "r+b") as f:  # a byte in the last MiB
        f.seek(3 * 2**30 - 10)
        f.write(b"\1")
    assert fingerprint.checkpoint_fingerprint(folder) != before


def test_reports_group_a_checkpoint_by_series_and_step_not_by_its_path(tmp_path):
    """A checkpoint scored before its series folder moved and after it has two paths: one model in the
    knowledge section and the paired tests."""
    from pathlib import Path

    from softeval.store.format import Run

    before = Run(Path("a"), "a", {"model": "/old/ckpts/checkpoint-5", "series": "ckpts", "step": 5})
    after = Run(Path("b"), "b", {"model": "/new/ckpts/checkpoint-5", "series": "ckpts", "step": 5})
    plain = Run(Path("c"), "c", {"model": "org/m", "series": None, "step": None})
    assert before.model_key == after.model_key == "ckpts@5" and plain.model_key == "org/m"

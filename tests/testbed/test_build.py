"""Model folders of the testbed: ordinary HF folders softeval loads, written atomically, reused when complete."""

import json

import pytest

from softeval.testbed import build
from softeval.testbed.recipes import Recipe
from softeval.testbed.world import make_world

WORLD = make_world(5, n_people=8)
TINY = Recipe("tiny", 0.5, 2, 2, 0.5, hidden=32, layers=1)


@pytest.fixture(autouse=True)
def small_and_single_threaded(monkeypatch):
    import torch

    monkeypatch.setattr(build, "POST_STEPS", 20)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the testbed trains: tiny models train fastest on one thread
    yield
    torch.set_num_threads(threads)


def test_a_base_and_its_partner_are_loadable_folders_with_their_ground_truth(tmp_path):
    from softeval.lm.models import load_model

    base = tmp_path / build.model_name(WORLD, TINY)
    note = build.build_base(WORLD, TINY, base, seed=0)
    assert note["ids"] == [f.id for f in WORLD.facts()]
    assert note["truth"]["seen"] == [int(f.person in {p.name for p in WORLD.scored[:2]}) for f in WORLD.facts()]
    assert note["seen_share"] == 0.5 and len(note["truth"]["cloze"]) == len(note["ids"])
    post = tmp_path / build.model_name(WORLD, TINY, post=True)
    assert build.build_post(WORLD, TINY, base, post, seed=0)["kind"] == "post-trained"
    lm = load_model(str(post), device="cpu", kind="post-trained")
    assert lm.tokenizer.decode(lm.tokenizer(" " + WORLD.cities[0]).input_ids, skip_special_tokens=True) \
        == " " + WORLD.cities[0]
    assert not list(tmp_path.glob("*.partial"))


def test_a_complete_folder_is_reused_and_a_killed_one_is_rebuilt(tmp_path, monkeypatch):
    base = tmp_path / "m"
    note = build.build_base(WORLD, TINY, base, seed=0)
    weights = base / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    monkeypatch.setattr(build, "train", lambda *a, **k: pytest.fail("a finished model was trained again"))
    assert build.build_base(WORLD, TINY, base, seed=0) == note and weights.stat().st_mtime_ns == stamp

    other = tmp_path / "killed"
    (tmp_path / "killed.partial").mkdir()
    (tmp_path / "killed.partial" / "half.bin").write_text("x")

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "train", killed)
    with pytest.raises(KeyboardInterrupt):
        build.build_base(WORLD, TINY, other, seed=0)
    assert not other.exists()  # never a half model under the final name
    monkeypatch.undo()
    assert build.build_base(WORLD, TINY, other, seed=0)["recipe"]["name"] == "tiny"
    assert not (tmp_path / "killed.partial").exists()


def test_the_task_file_is_softevals_own_format(tmp_path):
    from softeval.tasks.custom import load_task_file

    path = build.write_task(WORLD, tmp_path / "task")
    spec = json.loads(path.read_text())
    assert spec["name"] == build.task_name(WORLD) and spec["answer_regex"] == build.ANSWER_REGEX
    task = load_task_file(path)
    splits = task.load("offline")
    assert {e.id for e in splits.eval} == {f.id for f in WORLD.facts()}
    assert not {e.id for e in splits.eval} & {e.id for e in splits.tune}

"""What an lm-eval group or tag holds, read from lm-eval's index without its data: mmlu's 57 subjects and
its four subgroups (size-weighted), a tag's members, an include path's group; and the refusals."""

from __future__ import annotations

import pytest
from lmevalyamls import GROUP, MC, MC2, write_group

from softeval.errors import UserError
from softeval.tasks import get_task
from softeval.tasks.lmeval_bridge import manager
from softeval.tasks.lmeval_group import is_group, plan

pytest.importorskip("lm_eval")


def test_mmlu_expands_to_its_57_subjects_and_four_size_weighted_subgroups():
    mmlu = plan("lm-eval:mmlu", None)
    index = manager(None).task_index
    subjects = {name for tag in ("mmlu_stem_tasks", "mmlu_other_tasks", "mmlu_social_sciences_tasks",
                                 "mmlu_humanities_tasks") for name in index[tag].tags}
    assert (mmlu.kind, len(mmlu.tasks), set(mmlu.tasks)) == ("group", 57, subjects)
    assert list(mmlu.groups) == ["mmlu", "mmlu_stem", "mmlu_other", "mmlu_social_sciences", "mmlu_humanities"]
    assert mmlu.groups["mmlu"]["aggregate"] == [{"metric": "acc", "filter_list": None, "weight_by_size": True}]
    assert sorted(len(g["tasks"]) for name, g in mmlu.groups.items() if name != "mmlu") == [12, 13, 13, 19]
    assert mmlu.groups["mmlu_stem"]["alias"] == "stem" and "mmlu_abstract_algebra" in mmlu.groups["mmlu_stem"]["tasks"]
    assert is_group("lm-eval:mmlu", None) and not is_group("lm-eval:mmlu_anatomy", None)


def test_a_tag_is_its_members_without_a_score_of_its_own():
    arc = plan("lm-eval:ai2_arc", None)
    assert (arc.kind, arc.tasks, arc.groups) == ("tag", ["arc_challenge", "arc_easy"], {})


def test_an_include_paths_group(tmp_path):
    folder = str(write_group(tmp_path / "yamls", weighted=False))
    toy = plan(f"lm-eval:{GROUP}", folder)
    assert toy.tasks == [MC, MC2]
    assert toy.groups[GROUP]["alias"] == "toy colours"
    assert [a["weight_by_size"] for a in toy.groups[GROUP]["aggregate"]] == [False, False]


def test_what_a_group_cannot_be(tmp_path):
    folder = write_group(tmp_path / "yamls")
    (folder / "shots.yaml").write_text(f"group: shots\ntask:\n  - task: {MC}\n    num_fewshot: 2\n")
    with pytest.raises(UserError, match=f"lists {MC} with options of its own"):
        plan("lm-eval:shots", str(folder))
    with pytest.raises(UserError, match="`softeval run` and sweep files run it as its tasks"):  # eval, tune: one task
        get_task(f"lm-eval:{GROUP}", str(folder))

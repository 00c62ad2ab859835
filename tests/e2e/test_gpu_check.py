"""benchmarks/gpu_check.py runs end to end on CPU with tiny shapes, so it is never untested code
when a GPU machine is finally at hand (the GPU run is the same code with bigger shapes)."""

import json

from benchscripts import BENCHMARKS, load_benchmark


def _module():
    return load_benchmark("gpu_check")


def test_gpu_check_tiny_on_cpu(tmp_path, capsys):
    out = tmp_path / "check.json"
    assert _module().main(["--device", "cpu", "--tiny", "--json-out", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    assert result == json.loads(out.read_text())
    assert result["ok"] and result["errors"] == {}
    agree = result["agree"]
    assert agree["ok"] and agree["padding_max_rel_diff"] < 1e-4
    assert agree["fp32"]["logits_max_rel_diff"] == 0.0  # CPU against CPU: the very same numbers
    assert set(agree["bf16_vs_fp32_cpu"]) >= {"generations_identical", "option_argmax_identical"}
    assert result["peak"]["bfloat16_tflops"] > 0 and result["peak"]["float32_tflops"] > 0
    for name in ("llama_1b", "llama_8b"):
        section = result[name]
        assert section["tune"]["steps_per_s"] > 0 and 0 < section["tune"]["tune_mfu"]
        assert {"zero_shot_generate", "few_shot_generate", "soft_prompt_generate", "zero_shot_loglik"} <= set(
            section["score"])
        assert section["long"]["oom"] is False and section["long"]["auto_batch_loglik"] >= 1


def test_check_assets_are_small_and_load():
    mod = _module()
    sizes = sum(f.stat().st_size for f in (BENCHMARKS / "check_assets").iterdir())
    assert sizes < 1 << 20  # they travel with the repository
    tok = mod.load_tokenizer()
    prompts = mod.Prompts(tok)
    ids = prompts.prompts("mmlu", 2, shots=5)
    assert len(ids) == 2 and len(ids[0]) > 200
    p, t = prompts.tuning(3)
    assert all(x[-1] == prompts.eos for x in t)
    assert [len(o) for o in prompts.options(1)[0]] == [1, 1, 1, 1]  # letters are single tokens


def test_the_check_builds_its_prompts_as_a_run_does():
    """gpu_check's prompts are softeval's Prompter's for an instruction-tuned model (chat template on): the
    instruction as the system turn, each shot a user turn and an assistant turn, the item a user turn and
    the answer cue opening the assistant's; targets and option letters cut from the joint encoding."""
    from softeval.run.prompting import Prompter
    from softeval.tasks import get_task

    mod = _module()
    prompts = mod.Prompts(mod.load_tokenizer())
    item, shots = prompts.items["mmlu"][0], prompts.shots["mmlu"]
    few = prompts.tok.decode(prompts.prompts("mmlu", 1, shots=5)[0])
    instruction = get_task("mmlu").instruction
    assert few.startswith(f"<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n")
    assert few.count("<|im_start|>user\n") == 6 and few.count("<|im_start|>assistant\nAnswer: ") == 5
    assert few.endswith(f"{item.fields['question']}\n" + "".join(
        f"{letter}. {option}\n" for letter, option in zip("ABCD", item.options)).rstrip("\n")
        + "<|im_end|>\n<|im_start|>assistant\nAnswer:")
    run = Prompter(prompts.lm, get_task("mmlu"), chat=True, shots=shots)
    assert prompts.prompts("mmlu", 1)[0] == run.ids(item, "zero-shot")
    assert prompts.tuning(1) == ([run.ids(item, "soft-prompt")], [run.target_ids(item)])
    assert [prompts.tok.decode(o) for o in prompts.options(1)[0]] == [" A", " B", " C", " D"]
    tiny = mod.Prompts(prompts.tok, max_tokens=48)  # --tiny: the prompts' last 48 tokens
    assert tiny.prompts("gsm8k", 2)[1] == prompts.prompts("gsm8k", 2)[1][-48:]
    assert [len(x) for x in prompts.long(3, 96)] == [96, 88, 80]

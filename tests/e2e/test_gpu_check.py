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
    assert ids[0][-3:] == prompts.encode("<|im_start|>assistant\n")[-3:]
    p, t = prompts.tuning(3)
    assert all(x[-1] == prompts.eos for x in t)
    assert [len(o) for o in prompts.options(1)[0]] == [1, 1, 1, 1]  # letters are single tokens

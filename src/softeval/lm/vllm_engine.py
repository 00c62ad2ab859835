"""Generation on vLLM (``--backend vllm``): the same prompts, the same greedy rule, the field's engine.

``VllmEngine`` is an ``engine.Engine``, as the HF engine is; this module is the engine only (importing
vLLM and the checks of its engine arguments: ``vllm_args``). softeval builds every prompt as for its own
engine (tokenizer, chat template, shots, soft prompt) and hands vLLM what its model would read: token ids
for zero- and few-shot, and for a soft prompt the embeddings ``[soft prompt][embeddings of the prompt's
tokens]`` (``EmbedsPrompt``), laid out by ``softprompt.layout_inputs`` as the HF engine's rows are, one
prompt per row without pads (BOS and all after the soft prompt). vLLM never tokenises a prompt.
Greedy decoding stops where softeval's engine stops: the task's stop strings, the end markers and
EOS ids of ``generation`` (``ignore_eos``: vLLM's own idea of EOS from the model's generation config
does not apply; ``generation_config="vllm"``: nor do its sampling defaults), and outputs are decoded
by softeval's tokenizer with special tokens kept and cut by ``generation.finish`` (stop strings, then a task's
complete answer, which vLLM generates past and softeval cuts after), so texts and ``hit_limit`` mean what they
mean for the HF engine. Log-likelihoods (cloze, permutations, options longer than a token) come from
vLLM's prompt log-probabilities of token-id prompts (``loglikelihood``); vLLM gives none of prompt embeddings, so
under a soft prompt the HF engine computes them (``loglikelihood_refusal``). Tuning stays on the HF model.

One engine per loaded model, kept on it between jobs (``backends.start_engine``); ``close`` shuts its
processes down and frees its memory. Sizing (docs/reference/backends.md): on CPU the engine runs in this process,
the KV cache gets a quarter of the available memory (1 to 8 GiB) and the engine's threads are bound to the
CPUs this process may use when torch's threads fill them (else left unbound, as many as torch uses), none
reserved; on CUDA ``gpu_memory_utilization`` is half of what is free after the HF model.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence

import torch

from softeval.errors import UserError, shown
from softeval.lm.batching import Progress
from softeval.lm.engine import AnswerEnd, Generation
from softeval.lm.generation import end_markers, finish
from softeval.lm.memory import release_freed_memory
from softeval.lm.models import LoadedModel
from softeval.lm.softprompt import layout_inputs
from softeval.lm.vllm_args import import_vllm

KV_CACHE_SHARE, KV_CACHE_GIB = 0.25, (1, 8)  # CPU: the KV cache's share of available memory, and its bounds
# CUDA: the share of the memory left free by the HF model that the engine may take; the rest is for the HF
# model's own batches (tuning a sweep worker's next soft prompt, log-likelihoods) beside the engine
GPU_SHARE = 0.5
DEFAULT_MAX_MODEL_LEN = 4096  # at most; a longer prompt is refused with the engine argument that fixes it
# CPU: no graph compile unless asked (--engine-arg enforce_eager=false). On 2 cores with SmolLM2 the compiled
# engine started in 76-203 s by host (28-58 s from torch's compile cache) and generated GSM8K 1.25-1.44x
# faster than the eager one, which started in 8-18 s: the compile pays for itself only after ~300 GSM8K
# items per cached start, ~1,000-1,500 the first time (docs/research/backends.md).
CPU_EAGER = True
NO_EMBEDS_LOGLIK = "vLLM gives no prompt log-probabilities of prompt embeddings"


def refusal(err: ValueError) -> str:
    """vLLM's reason for refusing an engine's configuration, in one line (pydantic's message without its
    preamble and link)."""
    errors = getattr(err, "errors", None)
    text = errors()[0]["msg"] if callable(errors) else str(err)
    return " ".join(text.removeprefix("Value error, ").split()).rstrip(".")


def thread_binding() -> str:
    """``VLLM_CPU_OMP_THREADS_BIND``: every CPU this process may use when its torch threads fill them (a
    machine or a pinned share of one), else ``nobind`` with torch's thread count: a Ray worker given 2 of
    a machine's 8 CPUs is not pinned to any, so binding it to "the first 2" would put every such worker
    on the same two cores; unbound, the OS spreads them."""
    allowed = sorted(os.sched_getaffinity(0))
    if max(1, torch.get_num_threads()) < len(allowed):
        return "nobind"
    return ",".join(map(str, allowed))


def cpu_settings() -> dict[str, str]:
    """The environment of vLLM's CPU engine: its threads bound as ``thread_binding`` says, none reserved
    for the front end, a KV cache sized from the available memory, the engine in this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: on 2 cores a start in ~18 s instead of ~47 s, each spawned
    engine process importing torch and vLLM anew, and no inter-process hop per step), and the compile
    cache that loads on CPU (``VLLM_USE_AOT_COMPILE=0``: vllm-cpu 0.32's whole-model AOT artifact fails to
    load there, "'function' object has no attribute 'finalize_loading'", so every compiled start compiled
    again, ~150 s; torch's own compile cache loads, a second start in ~46 s). A variable the user set is
    left as it is."""
    import psutil

    gib = psutil.virtual_memory().available / 2**30
    space = int(min(KV_CACHE_GIB[1], max(KV_CACHE_GIB[0], gib * KV_CACHE_SHARE)))
    wanted = {"VLLM_CPU_OMP_THREADS_BIND": thread_binding(), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
              "VLLM_CPU_KVCACHE_SPACE": str(space), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
              "VLLM_USE_AOT_COMPILE": "0"}
    return {k: os.environ.get(k, v) for k, v in wanted.items()}


@contextlib.contextmanager
def engine_env(env: dict[str, str]) -> Iterator[None]:
    """``env`` set while a vLLM engine starts (it reads its CPU settings then), the caller's back after."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def gpu_share(device: torch.device) -> float:
    """``gpu_memory_utilization`` beside an HF model already on the GPU: ``GPU_SHARE`` of what is free, as a
    share of the whole device (vLLM's unit)."""
    free, total = torch.cuda.mem_get_info(device)
    return round(GPU_SHARE * free / total, 3)


class VllmEngine:
    """One vLLM engine for one loaded model (``lm``): an ``engine.Engine``, as the HF engine is."""

    def __init__(self, lm: LoadedModel, engine_args: dict | None = None) -> None:
        vllm = import_vllm()
        if not lm.source:  # a model built in memory: vLLM loads weights from a folder or a hub id
            raise UserError(f"--backend vllm needs the folder or hub id that model {shown(lm.name)} was "
                            "loaded from")
        self.lm = lm
        self.version = vllm.__version__
        self.user_args = dict(engine_args or {})
        started = time.time()
        args = {"max_model_len": min(lm.max_length, DEFAULT_MAX_MODEL_LEN)}
        on_cuda = lm.device.type == "cuda"
        if on_cuda:
            args["gpu_memory_utilization"] = gpu_share(lm.device)
        else:
            args["enforce_eager"] = CPU_EAGER
        args.update(engine_args or {})
        args.update(model=lm.source, tokenizer=lm.source, dtype=str(lm.model.dtype).removeprefix("torch."),
                    enable_prompt_embeds=True, generation_config="vllm",
                    seed=0)  # greedy: the seed changes nothing
        self.env = {} if on_cuda else cpu_settings()
        self.args = args
        with engine_env(self.env):
            try:
                self.llm = vllm.LLM(**args)
            except ValueError as err:  # pydantic's ValidationError is one: vLLM's checks of its whole config
                raise UserError(f"vLLM refused the engine for {shown(lm.name)}: {refusal(err)}; change the "
                                f"engine arguments ({engine_args or 'none given'}: --engine-arg, a sweep's "
                                "'engine_args')") from None
        self.max_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.start_seconds = time.time() - started

    def record(self) -> dict:
        """What results.json keeps of the engine: its version, its arguments and its CPU settings."""
        args = {k: v for k, v in self.args.items() if k not in ("model", "tokenizer")}
        return {"backend": "vllm", "vllm": self.version, "engine_args": args, "cpu_env": self.env}

    @torch.no_grad()
    def generate(self, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None,
                 max_new_tokens: int = 32, stop: Sequence[str] = (), progress: Progress = None,
                 first_ids: Sequence[list[int]] | None = None, answer_end: AnswerEnd = None) -> Generation:
        """``engine.Engine.generate`` on vLLM (``answer_end`` cuts its outputs after they are generated: vLLM takes
        stop strings, not rules). ``first_ids``: per sequence, tokens (a multiple-choice item's
        letters) whose log-probabilities as the first new token come back in ``first_logprobs``, read off the
        same step that picks it (``logprob_token_ids``: from the raw logits, as the HF engine reads them)."""
        from vllm import SamplingParams

        if not seqs:
            return Generation([], [])
        n_soft = 0 if soft is None else soft.shape[0]
        longest = max(len(s) for s in seqs) + n_soft + max_new_tokens
        if longest > self.max_len:
            raise UserError(f"a prompt of {longest - max_new_tokens} tokens and {max_new_tokens} new ones "
                            f"exceed the vLLM engine's max_model_len {self.max_len}: give --engine-arg "
                            f"max_model_len={longest} (at most {self.lm.max_length}), or --limit fewer shots")
        lm = self.lm
        eos = set(lm.eos_ids or ())
        stop = tuple(stop) + end_markers(lm)
        if first_ids is not None and max_new_tokens < 1:
            raise ValueError("first_ids needs max_new_tokens >= 1")
        # longest first, as the HF engine batches
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        seqs = [seqs[i] for i in order]

        def sampling(scored: list[int] | None = None) -> SamplingParams:
            return SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop=list(stop) or None,
                                  stop_token_ids=sorted(eos), ignore_eos=True, skip_special_tokens=False,
                                  logprob_token_ids=scored)

        params = sampling() if first_ids is None else [sampling(list(first_ids[i])) for i in order]
        if soft is None:
            prompts = [{"prompt_token_ids": list(s)} for s in seqs]
        else:  # each prompt alone in the one input layout: [soft prompt][embeddings of its tokens], no pads
            prompts = [{"prompt_embeds": layout_inputs(lm, [s], soft)["inputs_embeds"][0].cpu()}
                       for s in seqs]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        texts, limited = [""] * len(seqs), [False] * len(seqs)  # in the caller's order
        firsts: list[list[float]] = [[] for _ in seqs]
        decode = lm.tokenizer.decode
        for i, out in zip(order, outputs):
            if first_ids is not None:
                first = out.outputs[0].logprobs[0]
                firsts[i] = [float(first[t].logprob) for t in first_ids[i]]
            ids = list(out.outputs[0].token_ids)
            ended = bool(ids) and ids[-1] in eos
            if ended:
                ids = ids[:-1]
            texts[i], cut = finish(decode(ids, skip_special_tokens=False), stop, answer_end)
            limited[i] = not (ended or cut) and max_new_tokens > 0
        if progress:
            progress(len(seqs))
        return Generation(texts, limited, first_logprobs=None if first_ids is None else firsts)

    def loglikelihood_refusal(self, soft: torch.Tensor | None) -> str | None:
        """vLLM gives prompt log-probabilities of token-id prompts only."""
        return None if soft is None else NO_EMBEDS_LOGLIK

    @torch.no_grad()
    def loglikelihood(self, contexts: Sequence[list[int]], continuations: Sequence[Sequence[list[int]]], *,
                      soft: torch.Tensor | None = None, progress: Progress = None) -> list[list[float]]:
        """``engine.Engine.loglikelihood`` on vLLM: each context+continuation one token-id prompt, read off vLLM's
        prompt log-probabilities (``prompt_logprobs=0``: the prompt's own token at each position, from the raw
        logits), one new token generated and dropped; the continuation's tokens summed in order."""
        from vllm import SamplingParams

        if soft is not None:
            raise ValueError(f"{NO_EMBEDS_LOGLIK}: ask loglikelihood_refusal first")
        if any(not c for c in contexts):
            raise ValueError("every context needs at least one token")
        scores = [[0.0] * len(conts) for conts in continuations]
        asked = [(i, j) for i, conts in enumerate(continuations) for j, cont in enumerate(conts) if cont]
        prompts = [list(contexts[i]) + list(continuations[i][j]) for i, j in asked]
        longest = max(map(len, prompts), default=0) + 1
        if longest > self.max_len:
            raise UserError(f"a context and continuation of {longest - 1} tokens exceed the vLLM engine's "
                            f"max_model_len {self.max_len}: give --engine-arg max_model_len={longest} (at most "
                            f"{self.lm.max_length}), or --limit fewer shots")
        params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        for (i, j), out in zip(asked, outputs):
            at, rows = len(contexts[i]), out.prompt_logprobs  # rows[t]: token t given those before it
            scores[i][j] = float(sum(rows[at + t][tok].logprob for t, tok in enumerate(continuations[i][j])))
        if progress:
            progress(len(contexts))
        return scores

    def close(self) -> None:
        """Shut the engine's processes down and free its memory (a sweep worker, before its next model)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        engine = getattr(llm, "llm_engine", None)
        shutdown = (getattr(engine, "shutdown", None)
                    or getattr(getattr(engine, "engine_core", None), "shutdown", None))
        if shutdown is not None:
            shutdown()
        del llm
        release_freed_memory()  # the engine's host memory back to the system, as after each method
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def start(lm: LoadedModel, batch_size: int, engine_args: dict | None) -> VllmEngine:
    """The vllm backend's engine (``backends.Backend.engine``: this module is imported only when that backend
    starts one); vLLM batches by itself, so the run's batch size is not its."""
    return VllmEngine(lm, engine_args)

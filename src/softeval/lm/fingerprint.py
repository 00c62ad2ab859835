"""What a model folder is, not where it lies: ``checkpoint_fingerprint``, the digest a checkpoint of a
series is identified by in a run's identity (store/identity.py FINGERPRINT), so a moved or renamed series
folder keeps its runs. Read from the files that loading the model reads."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
from pathlib import Path

from softeval.lm.models import MODEL_CONFIG

# The files of a checkpoint folder that loading its model reads (checkpoint_fingerprint): config, weights
# and their shard indexes, tokenizer. Matched against the names at the folder's top level, lower-cased.
LOADED_FILES = (MODEL_CONFIG, "generation_config.json",
                "*.safetensors", "*.bin", "*.pt", "*.gguf", "*.safetensors.index.json", "*.bin.index.json",
                "tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab*", "merges.txt", "*.model",
                "chat_template*")
# What a trainer leaves beside them, never read to load the model (and often deleted to save space).
TRAINER_FILES = ("optimizer*", "scheduler*", "rng_state*", "trainer_state.json", "training_args.bin")
WHOLE_BELOW = 2 * 2**20  # files up to this size are read whole; larger ones ...
SAMPLED = 2**20  # ... by their first and last this many bytes


def fingerprint_files(folder: Path) -> list[Path]:
    """The files of a checkpoint folder that loading its model reads, sorted by name (LOADED_FILES,
    less TRAINER_FILES)."""
    def wanted(name: str) -> bool:
        name = name.lower()
        return any(fnmatch.fnmatchcase(name, p) for p in LOADED_FILES) \
            and not any(fnmatch.fnmatchcase(name, p) for p in TRAINER_FILES)

    return sorted((p for p in folder.iterdir() if p.is_file() and wanted(p.name)), key=lambda p: p.name)


def checkpoint_fingerprint(folder: str | Path) -> str | None:
    """A cheap sha256 of what a checkpoint is, not of where it lies: a series folder moved or renamed
    keeps its fingerprint, and a checkpoint of another training run saved under the same folder names
    (``output/checkpoint-500`` twice) gets another one. None when ``folder`` is not a folder.

    Over the files that loading the model reads (config, weights and shard indexes, tokenizer: see
    LOADED_FILES), in name order: each file's name, its size, and its bytes when it is at most 2 MiB,
    else its first and last MiB. Reading whole weights would take minutes for a 70B checkpoint each
    time a sweep checks what is finished; the sampled bytes still tell two training runs apart, since
    a weight file's first MiB (the safetensors header, then the first tensor's values) and last MiB
    are trained values, which differ between two training runs (another seed, data or number of steps).
    What the sample skips
    (an edit in the middle of a shard that keeps its size) is not seen: a checkpoint is not edited in
    place. Trainer leftovers (optimizer and scheduler states, RNG states, trainer_state.json,
    training_args.bin) are left out: nothing scored depends on them, and deleting the optimizer state
    of a finished training to save space must not make its checkpoints other models.

    The digest of a folder whose files have the same names, sizes and modification times as at the
    previous call in this process is not computed again (a sweep asks for every job).
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    files = fingerprint_files(folder)
    stats = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _fingerprint(folder.resolve(), stats)


@functools.lru_cache(maxsize=4096)
def _fingerprint(folder: Path, stats: tuple) -> str:
    digest = hashlib.sha256()
    for name, size, _ in stats:
        digest.update(f"{name}\0{size}\0".encode())
        with open(folder / name, "rb") as f:
            if size <= WHOLE_BELOW:
                digest.update(f.read())
            else:
                digest.update(f.read(SAMPLED))
                f.seek(size - SAMPLED)
                digest.update(f.read(SAMPLED))
    return digest.hexdigest()

"""The tuning checkpoint in a run's .partial folder: tensors in safetensors, the rest in JSON. No pickles.

A runs folder may be shared, so a checkpoint is untrusted input: loading one must never run code
(``torch.load`` of a pickle can), and a damaged or foreign one must be discarded with a message, not
crash or be resumed from. Files:

- ``tune_state-<step>.safetensors``: the tuned tensors by name (``soft``: the soft prompt; a LoRA adapter's
  A and B by their parameter names) and ``optim.<param>.<name>`` (AdamW's moment tensors and step counter);
- ``tune_state.json``: format, step, loss, curve so far, seconds, resumed_at, the RNG states as lists,
  the optimizer's non-tensor state, the run identity, and the tensor file's name and sha256; ``score_pending``
  (true) where the run was interrupted while its last curve point was scored: the resumed run scores it first.

The JSON is written last and names its tensor file, so a process killed between the two writes leaves
the previous, consistent pair. No other file is ever read as a checkpoint (a pickle such as
``tune_state.pt`` beside it is left unread: a finished run deletes every ``tune_state*`` file).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as tensor_bytes

from softeval.checks import is_number, is_whole
from softeval.errors import shown
from softeval.store.format import (
    TUNE_STATE_FILE,
    TUNE_TENSORS_GLOB,
    tune_tensors_file,
)

FORMAT = "softeval-tune-state/1"


def files(folder: Path) -> list[Path]:
    """Every checkpoint file in a folder (what a finished run deletes)."""
    folder = Path(folder)
    candidates = [folder / TUNE_STATE_FILE, *folder.glob(TUNE_TENSORS_GLOB)]
    return [p for p in candidates if p.exists()]


def save(folder: Path, params: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer, identity: dict,
         meta: dict) -> None:
    """Write the checkpoint of step ``meta['step']`` (meta: step, loss, curve, seconds, resumed_at, and
    score_pending where set); ``params``:
    the tuned tensors by name, in the optimizer's order."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = optimizer.state_dict()
    tensors = {name: p.detach().cpu().contiguous() for name, p in params.items()}
    plain: dict[str, dict] = {}
    for pid, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{name}"] = value.detach().cpu().contiguous()
            else:
                plain.setdefault(str(pid), {})[name] = value
    name = tune_tensors_file(meta["step"])
    tmp = folder / (name + ".tmp")
    tmp.write_bytes(tensor_bytes(tensors))  # not save_file: a full disk is then an OSError (ENOSPC), as for every file
    os.replace(tmp, folder / name)
    record = {"format": FORMAT, **meta, "identity": identity, "tensors": name, "sha256": _sha256(folder / name),
              "optimizer": {"param_groups": state["param_groups"], "state": plain}, "rng": _rng_state()}
    tmp = folder / (TUNE_STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(record, default=_jsonable))
    os.replace(tmp, folder / TUNE_STATE_FILE)
    for old in folder.glob(TUNE_TENSORS_GLOB):
        if old.name != name:
            old.unlink(missing_ok=True)


def load(folder: Path, identity: dict, params: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer,
         log: Callable[[str], None]) -> dict | None:
    """Restore the tuned tensors (``params``, by name, in the optimizer's order), optimizer and RNG from the
    folder's checkpoint and return its JSON record;
    None (and nothing changed) when there is none. A damaged file or a checkpoint of another run is
    deleted with a message via ``log``, and None returned: tuning starts afresh."""
    folder = Path(folder)
    if not (folder / TUNE_STATE_FILE).exists():
        _discard(folder)  # tensor files whose JSON never got written
        return None
    try:
        record, tensors = _read(folder)
        if record["identity"] != json.loads(json.dumps(identity, default=_jsonable)):
            raise ValueError("it was written for other settings")
        optim_state = _optimizer_state(record, tensors, params)
        rng = _rng_from(record["rng"])
        optimizer.load_state_dict(optim_state)  # last: it either fails unchanged or succeeds
    except (OSError, ValueError, KeyError, TypeError, IndexError, SafetensorError, RuntimeError) as err:
        _discard(folder)
        log(f"discarded the tuning checkpoint in {folder} ({err}); tuning starts afresh")
        return None
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(tensors[name].to(param.device))
    set_rng_states(rng)
    return record


def rng_states() -> dict:
    """The RNG states a tuning draws from (torch's, Python's, CUDA's once in use), as their objects."""
    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    """Put back what ``rng_states`` (or a checked checkpoint, ``_rng_from``) holds."""
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def _read(folder: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    try:
        record = json.loads((folder / TUNE_STATE_FILE).read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{TUNE_STATE_FILE} is not text: {err}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ValueError(f"{TUNE_STATE_FILE} is not a {FORMAT} checkpoint")
    _check_meta(record)
    path = folder / str(record["tensors"])
    if path.parent != folder or path.name != tune_tensors_file(record["step"]):
        raise ValueError(f"{TUNE_STATE_FILE} names a tensor file outside the checkpoint or of another step")
    if _sha256(path) != record["sha256"]:
        raise ValueError(f"{path.name} does not match the sha256 in {TUNE_STATE_FILE}")
    return record, load_file(str(path))


def _check_meta(record: dict) -> None:
    """What ``save`` wrote beside the tensors (which their sha256 covers, unlike these): a step >= 0 (0: the
    learning curve's first point, before any step), the curve up to it, a loss, the seconds and the steps resumed
    at; anything else is damage."""
    step, curve = record.get("step"), record.get("curve")
    if not is_whole(step) or step < 0:
        raise ValueError(f"{TUNE_STATE_FILE} has step {shown(step)}")
    if not isinstance(curve, list) or not all(isinstance(p, dict) and is_whole(p.get("step")) for p in curve) \
            or not curve or curve[-1]["step"] != step:
        raise ValueError(f"{TUNE_STATE_FILE} has a curve that does not end at its step {step}")
    if not (record.get("loss") is None or is_number(record["loss"])):
        raise ValueError(f"{TUNE_STATE_FILE} has loss {shown(record['loss'])}")
    if not is_number(record.get("seconds")) or record["seconds"] < 0:
        raise ValueError(f"{TUNE_STATE_FILE} has seconds {shown(record.get('seconds'))}")
    resumed = record.get("resumed_at")
    if not isinstance(resumed, list) or not all(is_whole(s) for s in resumed):
        raise ValueError(f"{TUNE_STATE_FILE} has resumed_at {shown(resumed)}")
    if record.get("score_pending", False) is not False and (record["score_pending"] is not True or step == 0):
        raise ValueError(f"{TUNE_STATE_FILE} has score_pending {shown(record['score_pending'])}")


def _optimizer_state(record: dict, tensors: dict[str, torch.Tensor], params: dict[str, torch.Tensor]) -> dict:
    saved = {k for k in tensors if not k.startswith("optim.")}
    if saved != set(params):
        raise ValueError(f"it holds the tensors {sorted(saved)[:4]}, this run tunes {sorted(params)[:4]}")
    for name, param in params.items():
        if tensors[name].shape != param.shape or tensors[name].dtype != param.dtype:
            raise ValueError(f"its {name} is {tuple(tensors[name].shape)} {tensors[name].dtype}, this run's is "
                             f"{tuple(param.shape)} {param.dtype}")
    shapes = [param.shape for param in params.values()]
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            if name.startswith("exp_avg") and value.shape != shapes[int(pid)]:
                raise ValueError(f"optimizer tensor {name} has shape {tuple(value.shape)}")
            state.setdefault(int(pid), {})[name] = value.to(next(iter(params.values())).device)
    for pid, values in record["optimizer"]["state"].items():
        state.setdefault(int(pid), {}).update(values)
    return {"state": state, "param_groups": record["optimizer"]["param_groups"]}


def _rng_state() -> dict:
    return _jsonable(rng_states())


def _rng_from(state: dict) -> dict:
    """The saved RNG states as the objects torch and random take back (checked before any is set)."""
    out = {"torch": torch.tensor(state["torch"], dtype=torch.uint8)}
    if out["torch"].shape != torch.get_rng_state().shape:
        raise ValueError("its torch RNG state has the wrong size")
    version, internal, gauss = state["python"]
    out["python"] = (version, tuple(internal), gauss)
    random.Random().setstate(out["python"])  # validates without touching the global generator
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        out["cuda"] = [torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]]
    return out


def _discard(folder: Path) -> None:
    for path in files(folder):
        path.unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value

"""What a method trains: the ``TrainedPart`` interface, and the ``PartMaker`` that builds one on a loaded model.

A method that tunes names its maker in its spec (``MethodSpec.part``, a lazy ``"module:attr"``, resolved by
``softeval.methods.maker_of``). The tuning loop (run/tuning_loop.py), the run (run/training.py), validation,
sweeps, the CLI and the engines read a part only through these two protocols, never by its kind: a soft prompt
(lm.softprompt.SoftPrompt, maker run/parts.py), a LoRA adapter (lm.lora.LoraAdapter, maker run/parts.py) and
prefix tuning's per-layer keys and values (methods/prefix_tuning.py, maker and part in one module) implement them.

How a part enters the forward pass (``enters``) is what an engine must be able to read (lm/backends.py:
``Backend.parts``): ``INPUT_PREFIX``, vectors put before the prompt's embeddings (``TrainedPart.soft``, which every
engine call takes); ``LAYER_PREFIX``, trained keys and values before every layer's own; ``ADAPTER``, layers put into
the model. The last two are in the model while the part is attached, so they reach every forward pass.

This module is a leaf, imported by every layer: annotations only, nothing heavy.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

INPUT_PREFIX, LAYER_PREFIX, ADAPTER = "input prefix", "per-layer prefix", "adapter"
ENTERS = (INPUT_PREFIX, LAYER_PREFIX, ADAPTER)


@runtime_checkable
class TrainedPart(Protocol):
    """What a method trains, built on a loaded model (by its ``PartMaker``).

    ``what``: how messages name it ("soft prompt"); ``enters``: ENTERS; ``soft``: the vectors put before the prompt's
    embeddings ([n, hidden], INPUT_PREFIX) or None; ``loaded_from``: the saved part it was read from (scored
    without tuning: `softeval eval --soft-prompt`) or None."""

    what: str
    enters: str
    loaded_from: str | None

    @property
    def soft(self) -> Any: ...

    def trainable(self) -> dict[str, Any]:
        """The tensors tuning trains, by name (the checkpoint's keys), in float32."""
        ...

    def tuning(self, model: Any, on: bool) -> None:
        """Switch ``model`` (the loaded model, or its copy in the tuning dtype) to tuning (``on``: dropout and the
        like) or to scoring; the part is in ``model`` either way once this has run."""
        ...

    def save(self, folder: Path, lm: Any, tuned_on: dict) -> None:
        """Write the part in PEFT's format into ``folder``, with softeval's notes (``tuned_on``: the run's task,
        seed, series and step) beside it."""
        ...

    def record(self, summary: dict) -> dict:
        """results.json's ``tuning``: the tuning loop's ``summary`` with what this part records of itself (and
        without the loop's settings it does not read)."""
        ...


class PartMaker(Protocol):
    """Builds a method's ``TrainedPart``. ``what`` and ``enters`` as the part's; ``folder``: the folder of a finished
    run that keeps it; ``warm_starts``: a series' run can start from the previous checkpoint's part (``--init
    from:FOLDER``)."""

    what: str
    enters: str
    warm_starts: bool

    def learning_rate(self, cfg: Any) -> float:
        """Its learning rate, from the run's options (a RunConfig)."""
        ...

    def check(self, cfg: Any, spelling: Any) -> None:
        """Before any model loads: what this part needs of the options, the model and the installed packages; a
        UserError in one line naming the option as ``spelling`` (run.config.Spelling) spells it."""
        ...

    def attached(self, lm: Any, cfg: Any, method: str, instruction: str,
                 spelling: Any) -> AbstractContextManager[TrainedPart]:
        """The part, built on ``lm`` (initialised from ``cfg``, or loaded where ``cfg`` names a saved one) and in
        the model for the block's duration; taken out however the block ends."""
        ...


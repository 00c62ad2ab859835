"""lora: a LoRA adapter tuned on the tuning split, the zero-shot prompt scored through it: the train-before-test
comparison (docs/reference/protocol.md); asked for by name."""

from softeval.constants import LORA_FOLDER
from softeval.methods.spec import ALTERNATIVE, LORA_OPTIONS, POOL_OPTIONS, TUNING_OPTIONS, MethodSpec

SPEC = MethodSpec(
    name="lora", label="lora", colour="#5b9a5b", who="the adapter", role=ALTERNATIVE, part="softeval.run.parts:LORA",
    reads=(*TUNING_OPTIONS, *LORA_OPTIONS, *POOL_OPTIONS), default=False, folder=LORA_FOLDER,
    advice="the adapter did not learn the format, so its scores are not format-free; try more --steps (or "
           "--epochs), another --lora-lr, and --answer-share 0.5 where the targets are worked solutions "
           "(docs/reference/protocol.md, train-before-test)")

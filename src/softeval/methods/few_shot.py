"""few-shot: k solved items drawn (seeded) from the tuning split before each item (`--shots`)."""

from softeval.methods.spec import BASELINE, POOL_OPTIONS, SHOT_OPTIONS, MethodSpec

SPEC = MethodSpec(
    name="few-shot", label="few-shot", colour="#e0a458", who="the shots", role=BASELINE, shots=True,
    reads=(*SHOT_OPTIONS, *POOL_OPTIONS))

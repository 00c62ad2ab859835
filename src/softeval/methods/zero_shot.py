"""zero-shot: the task's prompt alone, as lm-eval scores it; the reference every gain is measured from."""

from softeval.methods.spec import REFERENCE, MethodSpec

SPEC = MethodSpec(
    name="zero-shot", label="zero-shot", colour="#9aa5b1", who="the bare prompt", role=REFERENCE)

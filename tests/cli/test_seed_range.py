"""A seed beyond 64 bits is one line and exit 2 in every command that takes seeds (run's --seed, a sweep file's
seeds, track's --seed, the testbed's --seeds): one range, run.config.SEED_RANGE. The testbed gave torch's
ValueError (seed overflow) after it had started."""

from __future__ import annotations

import pytest
import yaml
from tiny import tiny_model, tiny_tokenizer

from softeval.cli.app import main

HUGE = "99999999999999999999999"


@pytest.mark.parametrize("command", ["run", "sweep", "track", "testbed"])
def test_a_seed_beyond_64_bits_is_one_line_and_exit_2(tmp_path, capsys, command):
    out = tmp_path / "out"
    if command == "run":
        argv = ["run", "--model", "smollm2-135m-instruct", "--task", "arc_easy", "--seed", HUGE, "--out", str(out)]
    elif command == "sweep":
        (tmp_path / "s.yaml").write_text(yaml.safe_dump({"out": str(out), "models": ["smollm2-135m-instruct"],
                                                         "tasks": ["arc_easy"], "seeds": [int(HUGE)]}))
        argv = ["sweep", str(tmp_path / "s.yaml"), "--dry-run"]
    elif command == "track":
        tiny_model(len(tiny_tokenizer())).config.save_pretrained(tmp_path / "series" / "checkpoint-1")
        argv = ["track", str(tmp_path / "series"), "--task", "arc_easy", "--seed", HUGE, "--out", str(out),
                "--dry-run"]
    else:
        argv = ["testbed", "--quick", "--seeds", HUGE, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "64 bits" in err and HUGE in err, err
    assert not out.exists()

"""`softeval testbed` refuses bad flags with one line and exit 2, before anything is built."""

import json

import pytest

from softeval.cli.app import main


@pytest.mark.parametrize("flags, words", [
    (["--seeds", "a,b"], "--seeds must be whole numbers"),
    (["--seeds", "1,1"], "--seeds must be distinct"),
    (["--seeds", "-1"], "--seeds must be distinct whole numbers >= 0"),
    (["--seeds", "99999999999999999999999"], "that fit in 64 bits"),  # was torch's ValueError (seed overflow)
    (["--seeds", f"0,{2**63}"], "that fit in 64 bits"),
    (["--people", "3"], "--people must be between 8 and 100000"),
    (["--steps", "0"], "--steps must be between 1"),
    (["--exposure-scale", "0"], "--exposure-scale must be above 0"),
    (["--max-parallel", "0"], "--max-parallel must be at least 1"),
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys, flags, words):
    out = tmp_path / "out"
    assert main(["testbed", "--quick", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_out_that_is_a_file_and_a_missing_out_are_refused(tmp_path, capsys):
    file = tmp_path / "f"
    file.write_text("x")
    assert main(["testbed", "--quick", "--out", str(file)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["testbed", "--quick"])
    assert exit_.value.code == 2 and "--out" in capsys.readouterr().err


def test_a_root_with_a_testbed_of_other_settings_is_refused_before_anything_is_built(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "testbed").mkdir(parents=True)
    (out / "testbed" / "settings.json").write_text(json.dumps({"quick": True, "world_seeds": [0], "people": 12,
                                                               "steps": 80, "exposure_scale": 1.0}))
    assert main(["testbed", "--quick", "--out", str(out)]) == 2
    assert "holds a testbed made with other settings" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "testbed").iterdir()) == ["settings.json"]


def test_an_out_inside_a_finished_run_folder_is_refused_before_any_model_is_trained(tmp_path, capsys, monkeypatch):
    """As `softeval run` refuses it (run.validate.check_out), before the testbed trains anything (it trained 8
    models, then refused)."""
    from softeval.testbed import driver

    run = tmp_path / "runs" / "m" / "t" / "zero-shot" / "seed0"
    run.mkdir(parents=True)
    (run / "results.json").write_text("{}")
    monkeypatch.setattr(driver, "run_testbed", lambda *a, **kw: pytest.fail("the testbed started"))
    assert main(["testbed", "--quick", "--out", str(run / "tb")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--out {run / 'tb'} is inside a run folder ({run})" in err and len(err.splitlines()) == 1
    assert not (run / "tb").exists()

"""benchmarks/readme_figure.py: the README's picture drawn from finished runs, refused when there are none."""

from benchscripts import load_benchmark
from runfactory import Extras, Items, write_run

readme_figure = load_benchmark("readme_figure")


def _job(out):
    n = 10
    write_run(out, "m", "squad", "zero-shot", [True] + [False] * 9, items=Items(format_ok=[True] * 5 + [False] * 5))
    write_run(out, "m", "squad", "few-shot", [True] * 2 + [False] * 8)
    curve = [{"step": 0, "loss": None, "format_rate": 0.5, "accuracy": 0.2, "held_out_loss": 1.7},
             {"step": 10, "loss": 1.0, "format_rate": 0.875, "accuracy": 0.25, "held_out_loss": 1.1},
             {"step": 20, "loss": 0.8, "format_rate": 1.0, "accuracy": 0.25, "held_out_loss": 0.9}]
    write_run(out, "m", "squad", "soft-prompt", [True] * 4 + [False] * 6, extras=Extras(curve=curve))
    return n


def test_draws_every_method_of_the_seed_and_the_curve(tmp_path, capsys):
    _job(tmp_path / "runs")
    png = tmp_path / "job.png"
    assert readme_figure.main(["--runs", str(tmp_path / "runs"), "--model", "m", "--task", "squad",
                               "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "from 3 runs: zero-shot, few-shot, soft-prompt" in capsys.readouterr().out
    first = png.read_bytes()
    readme_figure.main(["--runs", str(tmp_path / "runs"), "--model", "m", "--task", "squad", "--out", str(png)])
    assert png.read_bytes() == first  # the same runs give the same bytes: the committed picture only changes with them


def test_no_run_of_that_seed_is_refused_naming_make_run(tmp_path, capsys):
    _job(tmp_path / "runs")
    assert readme_figure.main(["--runs", str(tmp_path / "runs"), "--model", "m", "--task", "squad", "--seed", "3",
                               "--out", str(tmp_path / "x.png")]) == 2
    assert "make run" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_a_missing_runs_folder_is_one_line(tmp_path, capsys):
    assert readme_figure.main(["--runs", str(tmp_path / "none"), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "make run" in err and len(err.strip().splitlines()) == 1

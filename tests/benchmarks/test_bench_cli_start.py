"""benchmarks/bench_cli_start.py: the runs it writes are finished runs every reader takes (the index lists
them, a scan skips none, `softeval compare` pairs them), and its table names host, flags and the ratio."""

from benchscripts import load_benchmark

from softeval.store import index
from softeval.store.format import scan

bench = load_benchmark("bench_cli_start")


def test_the_written_runs_are_finished_runs_the_index_and_a_scan_take(tmp_path):
    written = bench.write_runs(tmp_path, 7)
    assert len(written) == 7 and all(p.is_dir() for p in written)
    listed = index.list_runs(tmp_path)
    assert len(listed) == 7
    assert {(r["method"], r["seed"]) for r in listed} == set(bench.PER_MODEL)
    report = scan(tmp_path)
    assert len(report.runs) == 7 and report.skipped == []


def test_the_table_names_the_host_and_says_before_against_after():
    about = {"processor": "Some CPU", "cores": 2, "flags": ["avx2"], "python": "3.11", "date": "today",
             "load_average": None}
    times = {"after": {"--help": [0.3, 0.2, 0.4]}, "before": {"--help": [4.0, 3.0, 5.0]}}
    text = bench.table(times, about, 50)
    assert "Some CPU, 2 cores, flags avx2" in text
    assert "| `softeval --help` | 0.300 (0.200) | 4.000 (3.000) | 13.3x |" in text

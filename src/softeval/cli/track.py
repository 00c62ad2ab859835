"""`softeval track FOLDER --task T ...`: the series sweep of one folder of checkpoints, without writing a
sweep file. It builds the sweep a file with one ``series:`` entry would give (softeval.sweep.file), so
the runs, their folders and identities, the resume rule and the report are the sweep's."""

from __future__ import annotations

import argparse
from pathlib import Path

from softeval.cli.options import add_option, option_group
from softeval.consoles import table_console
from softeval.errors import UserError
from softeval.methods import default_names
from softeval.run.config import METHODS, MODEL, OPTIONS, SWEEP_OPTIONS

# The `softeval run` options track passes on to every run: those a sweep file may set (the option table's
# sweep keys, by their sweep-file names), since track is the sweep of one series entry.
PASSED = SWEEP_OPTIONS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("track", help="score every checkpoint of a training run (a series), each soft "
                                            "prompt warm-started from the previous checkpoint's")
    p.add_argument("folder", metavar="FOLDER", help="folder of checkpoints (checkpoint-1000/, step2000/, ...)")
    p.add_argument("--name", default=None, help="series name (default: the folder's name)")
    option_group(p, MODEL).add_argument("--task", action="append", required=True,
                                        help="task name or task file; repeat or comma-separate for several")
    methods = option_group(p, METHODS)
    methods.add_argument("--method", default=",".join(default_names()), help="comma-separated methods")
    methods.add_argument("--seed", type=int, action="append", default=None,
                         help="seed (repeat for several; default 0)")
    add_option(option_group(p, OPTIONS["out"].group), OPTIONS["out"])
    p.add_argument("--warm-start", choices=["previous", "none"], default="previous",
                   help="previous (default): tune each checkpoint's soft prompt from the previous checkpoint's")
    p.add_argument("--warm-steps", type=int, default=None,
                   help="tuning steps of a warm-started soft prompt (default: a third of --steps, rounded up; "
                        "see docs/guide/tracking.md)")
    for key in PASSED:
        add_option(option_group(p, OPTIONS[key].group), OPTIONS[key], passed_on=True)
    p.add_argument("--dry-run", action="store_true", help="print the job table, load no model")
    p.add_argument("--address", default=None, help="Ray cluster to join (default: Ray on this machine)")
    p.add_argument("--max-parallel", type=int, default=None, metavar="N")
    p.set_defaults(handler=cmd_track)


def track_spec(args: argparse.Namespace) -> dict:
    """The sweep file ``softeval track`` stands for (paths absolute: it has no folder of its own)."""
    tasks = [t.strip() for given in args.task for t in given.split(",") if t.strip()]
    tasks = [str(Path(t).absolute()) if Path(t).is_file() else t for t in tasks]
    series = {"series": str(Path(args.folder).absolute()), "warm_start": args.warm_start}
    if args.name is not None:
        series["name"] = args.name
    if args.warm_steps is not None:
        series["warm_steps"] = args.warm_steps
    spec = {"out": str(Path(args.out).absolute()), "models": [series], "tasks": tasks,
            "methods": [m.strip() for m in args.method.split(",") if m.strip()], "seeds": args.seed or [0]}
    for key in PASSED:
        if hasattr(args, key):  # given (none included); not given: the run's default (add_option)
            value = getattr(args, key)
            is_file = key == "source" and isinstance(value, str) and Path(value).is_file()
            spec[key] = str(Path(value).absolute()) if is_file else value
    return spec


def cmd_track(args: argparse.Namespace) -> int:
    from softeval.sweep.driver import plan, run_sweep  # Ray, torch: only when the sweep is read or run
    from softeval.sweep.file import parse_sweep
    from softeval.sweep.view import print_plan

    if args.max_parallel is not None and args.max_parallel < 1:
        raise UserError("--max-parallel must be at least 1")
    sweep = parse_sweep(track_spec(args), Path.cwd() / "track", where="softeval track", command="track",
                        local=args.address is None)
    if args.dry_run:
        print_plan(table_console(), sweep, plan(sweep))
        return 0
    result = run_sweep(sweep, address=args.address, max_parallel=args.max_parallel)
    return 1 if result.failed else 0

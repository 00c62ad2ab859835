"""The `sweep` subcommand: a thin layer over softeval.sweep.driver (parse, call, print, exit code)."""

from __future__ import annotations

import argparse

from softeval.consoles import table_console
from softeval.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sweep", help="run a sweep file's models x tasks x methods x seeds on Ray")
    p.add_argument("file", metavar="FILE", help="sweep file (YAML, see docs/reference/sweeps.md)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the job table and the resources per model, load no model, start nothing")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join: auto (this machine is in a cluster) or ray://host:port "
                        "(default: start Ray on this machine with its CPUs and GPUs)")
    p.add_argument("--max-parallel", type=int, default=None, metavar="N",
                   help="at most N models (workers) at a time (default: as many as the cluster fits)")
    p.set_defaults(handler=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    from softeval.sweep.driver import plan, run_sweep  # Ray, torch: only when a sweep is read or run
    from softeval.sweep.file import load_sweep
    from softeval.sweep.view import print_plan

    if args.max_parallel is not None and args.max_parallel < 1:
        raise UserError("--max-parallel must be at least 1")
    sweep = load_sweep(args.file, local=args.address is None)
    if args.dry_run:
        print_plan(table_console(), sweep, plan(sweep))
        return 0
    result = run_sweep(sweep, address=args.address, max_parallel=args.max_parallel)
    return 1 if result.failed else 0

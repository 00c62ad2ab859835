"""The `testbed` subcommand: a world with known answers, its models and the ranking claim checked on it
(softeval.testbed; docs/research/testbed.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from softeval.consoles import message_console
from softeval.errors import UserError
from softeval.run.config import SEED_RANGE

if TYPE_CHECKING:
    from softeval.testbed.driver import Settings

QUICK_PEOPLE, FULL_PEOPLE = 40, 120
QUICK_SEEDS, FULL_SEEDS = "0", "0,1,2"
QUICK_VARIANTS, FULL_VARIANTS = 2, 4  # prompt variants each world's base models are scored under


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("testbed", help="pre-train tiny models on a synthetic world with known answers, "
                              "post-train each, and check which method's base scores rank them as the truth does")
    p.add_argument("--out", required=True, metavar="DIR", help="output root: models, run folders, testbed.json")
    p.add_argument("--quick", action="store_true",
                   help=f"4 recipes, one world of {QUICK_PEOPLE} people (a few minutes; CI runs it)")
    p.add_argument("--seeds", default=None, metavar="S,S",
                   help=f"world seeds (default {FULL_SEEDS}; with --quick {QUICK_SEEDS})")
    p.add_argument("--people", type=int, default=None, metavar="N",
                   help=f"people per world, half of them scored (default {FULL_PEOPLE}; with --quick {QUICK_PEOPLE})")
    p.add_argument("--steps", type=int, default=80, metavar="N", help="soft-prompt tuning steps (default 80)")
    p.add_argument("--exposure-scale", type=float, default=1.0, metavar="X",
                   help="multiply every recipe's biographies per person (default 1)")
    p.add_argument("--prompt-variants", type=int, default=None, metavar="K",
                   help=f"score each base model under prompt variants 0 to K-1, for the rankings' stability across "
                        f"prompt formats (default {FULL_VARIANTS}; with --quick {QUICK_VARIANTS})")
    p.add_argument("--max-parallel", type=int, default=None, metavar="N",
                   help="at most N models scored at a time in the sweeps (default: as many as the cores fit)")
    p.set_defaults(handler=cmd_testbed)


def settings_of(args: argparse.Namespace) -> Settings:
    """The flags checked (one line naming the flag and the fix) before anything is built."""
    text = args.seeds if args.seeds is not None else (QUICK_SEEDS if args.quick else FULL_SEEDS)
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise UserError(f"--seeds must be whole numbers separated by commas (e.g. 0,1,2), not {text!r}") from None
    if len(set(seeds)) != len(seeds) or any(not 0 <= s <= SEED_RANGE[1] for s in seeds):  # a seed's range: 64 bits
        raise UserError(f"--seeds must be distinct whole numbers >= 0 that fit in 64 bits, not {text!r}")
    people = args.people if args.people is not None else (QUICK_PEOPLE if args.quick else FULL_PEOPLE)
    if not 8 <= people <= 100_000:
        raise UserError(f"--people must be between 8 and 100000, not {people}")
    if not 1 <= args.steps <= 1_000_000:
        raise UserError(f"--steps must be between 1 and 1000000, not {args.steps}")
    if not 0 < args.exposure_scale <= 100:
        raise UserError(f"--exposure-scale must be above 0 and at most 100, not {args.exposure_scale}")
    variants = args.prompt_variants if args.prompt_variants is not None else (
        QUICK_VARIANTS if args.quick else FULL_VARIANTS)
    if not 1 <= variants <= 64:
        raise UserError(f"--prompt-variants must be between 1 and 64, not {variants}")
    if args.max_parallel is not None and args.max_parallel < 1:
        raise UserError("--max-parallel must be at least 1")
    from softeval.testbed.driver import Settings  # the testbed's driver imports torch and Ray: when it runs

    return Settings(args.quick, seeds, people, args.steps, args.exposure_scale, variants=variants)


def cmd_testbed(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    from softeval.run.validate import check_out  # torch: the testbed imports it anyway

    check_out(args.out)  # as `softeval run` checks it: a folder, writable, not inside a run folder; before any work
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from softeval.testbed.driver import run_testbed

    run_testbed(out, settings, message_console(), args.max_parallel)
    return 0

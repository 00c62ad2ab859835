"""`softeval tasks --show TASK`: one scored item's prompt as the bare (zero-shot) prompt renders it, with its gold
answer, under the task's own prompt or its prompt variants (docs/guide/prompt-variants.md): what a run's model reads,
before any model loads."""

from __future__ import annotations

import argparse
import json
import textwrap

from softeval.consoles import table_console
from softeval.errors import UserError


def add_arguments(tasks: argparse.ArgumentParser) -> None:
    """`softeval tasks`' flags of --show."""
    tasks.add_argument("--show", metavar="TASK", help="print one scored item's prompt and gold answer, as the bare "
                                                      "prompt renders it (docs/guide/prompt-variants.md)")
    tasks.add_argument("--item", type=int, default=0, metavar="N",
                       help="with --show: the item (default 0: the first item every run scores)")
    tasks.add_argument("--prompt-variant", type=int, default=None, metavar="N", help="with --show: in format N")
    tasks.add_argument("--prompt-variants", type=int, default=None, metavar="K",
                       help="with --show: in formats 0 to K-1")


def refuse_without_show(args: argparse.Namespace) -> None:
    """A flag of --show given to the listing is refused, naming it."""
    given = [flag for flag, value in (("--item", args.item), ("--prompt-variant", args.prompt_variant),
                                      ("--prompt-variants", args.prompt_variants)) if value]
    if given:
        raise UserError(f"{given[0]} is for --show TASK: add it")


def variants_asked(variant: int | None, variants: int | None) -> list[int]:
    """The prompt variants ``--prompt-variant N`` (one) or ``--prompt-variants K`` (0 to K-1) ask for, as `softeval run`
    reads the two flags: K in 1 to MOST_VARIANTS, not both given."""
    from softeval.tasks.variants import MOST_VARIANTS

    if variants is None:
        return [variant or 0]
    if not 1 <= variants <= MOST_VARIANTS:
        raise UserError(f"--prompt-variants {variants}: give 1 to {MOST_VARIANTS}")
    if variant:
        raise UserError(f"--prompt-variants {variants} runs variants 0 to {variants - 1}: leave out --prompt-variant "
                        f"{variant}")
    return list(range(variants))


def cmd_show(args: argparse.Namespace) -> int:
    """Print item ``--item`` (0: the first item every run scores, whatever its --limit) of ``--show``'s task under each
    variant asked: its format, then the prompt and the gold answer after it, indented (``--json``: a list of objects
    with ``task``, ``item``, ``variant``, ``format`` ("" for the task's own), ``prompt`` and ``target``)."""
    from softeval.run.pipeline import ITEM_SEED, check_variants
    from softeval.run.prompting import Prompter
    from softeval.tasks import get_task
    from softeval.tasks.data import seeded_subset
    from softeval.tasks.variants import variant_task

    variants = variants_asked(args.prompt_variant, args.prompt_variants)
    task = get_task(args.show, args.include_path)
    if args.prompt_variants is not None:
        check_variants(task, args.prompt_variants)
    tasks = [variant_task(task, v) for v in variants]  # every variant checked before any data loads
    items = seeded_subset(task.splits(args.source).eval, None, ITEM_SEED)
    if not 0 <= args.item < len(items):
        raise UserError(f"--item {args.item}: task {task.name} scores items 0 to {len(items) - 1}")
    item = items[args.item]
    rows = [{"task": task.name, "item": item.id, "variant": variant, "format": shown.prompt_format,
             # the bare prompt (an lm-eval task renders its own) and the gold answer after it
             "prompt": Prompter(None, shown, chat=False, shots=[], items=[item]).full_text(item),
             "target": shown.target(item)} for variant, shown in zip(variants, tasks)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    console = table_console()
    console.print(f"{task.name}, item {item.id} (item {args.item} of every run; a post-trained model reads it in its "
                  "chat template, few-shot after its shots; each run's samples.jsonl holds every prompt as read)",
                  markup=False, highlight=False, soft_wrap=True)
    for row in rows:
        console.print(f"\nvariant {row['variant']}: {row['format'] or 'the task itself'}", style="bold", markup=False,
                      highlight=False)
        console.print(textwrap.indent(row["prompt"] + row["target"], "    ", lambda line: True), markup=False,
                      highlight=False, soft_wrap=True)
    return 0

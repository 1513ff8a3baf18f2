"""`memerobust compare --recipe A1.json A2.json ... --recipe B1.json B2.json ...`: recipe against recipe, over their
seeds (judge/recipes.py). Exit 0 whatever the answer: a recipe comparison informs a choice, it gates no checkpoint."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from .common import check_output_json, parsed_rules, strict_json

RECIPES_FORMAT = "pytest-memerobust-recipes/1"


def run(args) -> int:
    from ..judge.gate import summarize
    from ..judge.recipes import RecipeCell, judge_recipes, seed_warnings
    from ..report.comparisons import recipe_lines
    from ..track.baseline import baseline_checkpoints, recipe_arm, recipe_cells

    checks, control = parsed_rules(args)
    paths = [list(dict.fromkeys(arm)) for arm in args.recipe]
    if args.json is not None:
        check_output_json(Path(args.json), "--json", reads=[p for arm in paths for p in arm])
    arms = [recipe_arm(arm, name) for arm, name in zip(paths, "AB")]
    ks = [len(baseline_checkpoints(arm)) for arm in arms]
    for k, name in zip(ks, "AB"):
        if k < 2:
            raise ConfigError(f"recipe {name} holds {k} checkpoint: a recipe is judged over its seeds, at least 2 "
                              f"(3 or more to estimate their spread); train the recipe with other seeds and give "
                              "each checkpoint's baseline")
    cells = [RecipeCell(model, spec, condition, "clean" if condition == "clean" else "perturbed", tuple(a), tuple(b))
             for model, spec, condition, a, b in recipe_cells(*arms, names=("recipe A", "recipe B"))]
    if not cells:
        raise ConfigError("recipe A and recipe B share no model, dataset and condition to compare")
    comparisons = judge_recipes(cells, checks, control=control, n_resamples=args.resamples, seed=arms[1]["seed"],
                                confidence=args.confidence)
    summary = summarize(comparisons, closest=len(comparisons))
    warnings = seed_warnings(*ks)
    for line in recipe_lines(paths, ks, comparisons, summary, control, warnings):
        print(line)
    if args.json is not None:
        from ..atomic import atomic_write_text

        document = {"format": RECIPES_FORMAT, "recipes": {"A": paths[0], "B": paths[1]},
                    "seeds": {"A": ks[0], "B": ks[1]}, "rules": [c.spec for c in checks], "warnings": warnings,
                    "control": {"spec": control.spec, "two_sided": True},
                    "verdict": {k: v for k, v in summary.items() if k != "rows"},
                    "comparisons": [c.as_dict() for c in comparisons]}
        atomic_write_text(Path(args.json), json.dumps(strict_json(document), indent=2, allow_nan=False) + "\n")
        print(f"wrote {len(comparisons)} comparisons to {args.json}")
    return 0

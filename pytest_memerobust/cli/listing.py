"""`memerobust list`: models, datasets, perturbations (textattack's recipes with what each lacks here), defences,
evasion-budget families and suites."""
from __future__ import annotations

from ..errors import MemeRobustError
from .common import CACHE_DIR


def add_parser(sub) -> None:
    listing = sub.add_parser("list", help="models, datasets, perturbations (textattack's recipes with what each "
                                          "lacks here), defences, evasion-budget families and suites")
    listing.add_argument("--cache-dir", dest="cache_dir", default=CACHE_DIR,
                         help="the test runs' cache folder, where textattack's cache lives (its textattack/ folder)")


def run(args) -> int:
    from ..data import LOADERS
    from ..detectors import architectures, available_cards
    from ..perturb import get, names
    from ..perturb.textattack_recipes import (INSTALL_HINT, PREFIX, RECIPES, WORD_BUDGET, installed, recipe_status,
                                              textattack_home)
    from ..perturb.budget_edits import family_names, get_family
    from ..run.suite import builtin_suite_paths

    print("models:")
    for line in model_lines(available_cards()):
        print(f"  {line}")
    print("architectures:", ", ".join(sorted(architectures())))
    print("datasets:", ", ".join(sorted(LOADERS)))
    for modality in ("text", "image"):
        print(f"{modality} perturbations:")
        for name in names(modality):
            p = get(name)
            if "textattack" not in p.tags:
                print(f"  {name:22s} severities {list(p.parameters.severities) or '-'}  {p.code.doc}")
    print(f"textattack recipes (text perturbations; severity s changes at most {list(WORD_BUDGET)}[s-1] words):")
    home = textattack_home(args.cache_dir)
    if not installed():
        print(f"  (textattack is not installed: {INSTALL_HINT})")
    for recipe in RECIPES.values():
        name = PREFIX + recipe.name
        print(f"  {name:29s} {recipe_status(recipe, home)}")
    print("defences (suites' [defence] text = [...]; chained in order):")
    for line in defence_lines():
        print(f"  {line}")
    print("evasion-budget families (suites' [budgets], memerobust budgets --family):")
    for family in (get_family(n) for n in family_names()):
        levels = list(family.levels)
        contiguous = levels == list(range(levels[0], levels[-1] + 1))
        shown = f"{levels[0]} to {levels[-1]}" if contiguous else ", ".join(map(str, levels))
        edits = "the caption" if family.modality == "text" else "the picture"
        print(f"  {family.name:22s} edits {edits:11s}  budgets {shown} ({family.unit})")
    print("built-in suites:", ", ".join(p.name for p in builtin_suite_paths()))
    return 0


def defence_lines() -> list[str]:
    """One line per registered normaliser: what it undoes, and what it lacks on this machine."""
    from ..detectors import defences
    from ..errors import BackendMissing

    lines = []
    for name in defences.names():
        normaliser = defences.get(name)
        try:
            normaliser("")  # a normaliser whose backend is missing says so even on an empty caption
            status = ""
        except BackendMissing as exc:
            status = f"  (not available here: {exc})"
        except Exception as exc:  # a third party's normaliser that fails on an empty caption
            status = f"  (fails here: {type(exc).__name__}: {exc})"
        lines.append(f"{name:22s} {normaliser.description}{status}")
    return lines


def model_lines(cards: dict) -> list[str]:
    """One line per card: its backbone's weights and whether they are on this machine, and its head's checkpoint."""
    from ..detectors import load_card
    from ..detectors.backbones import backbone_weights

    here = {True: "on this machine", False: "not on this machine", None: "unknown here (open_clip missing)"}
    lines = []
    for name, path in cards.items():
        try:
            card = load_card(path)
        except MemeRobustError as exc:
            lines.append(f"{name:22s} unreadable card: {exc}")
            continue
        network = card.network
        if network.demo_weights:
            weights, present = "demo weights (tiny random backbone, shipped)", True
        else:
            weights, present = backbone_weights(network.backbone)
        checkpoint = card.checkpoint_path()
        head = ("head: none shipped (train one; pass --memerobust-checkpoint)" if checkpoint is None
                else f"head: {checkpoint.name}" + ("" if checkpoint.is_file() else " (missing)"))
        if card.architecture == "hosted":  # an endpoint: whether its key is set is what can be told here
            import os

            env = str(network.params.get("api_key_env", "OPENAI_API_KEY"))
            from ..detectors.hosted import redact

            weights = f"endpoint {redact(str(network.params.get('base_url')))} model {network.params.get('model')}"
            present = f"key {'set' if os.environ.get(env) else 'not set'} in ${env}"
            head = f"prompted, label words {' / '.join(network.params.get('label_words', ['No', 'Yes']))}"
        elif network.backbone.get("kind") == "vlm":  # no head: asked, answered through its label words
            weights = f"vision-language model {network.backbone.get('name')}"
            head = f"prompted, label words {' / '.join(network.params.get('label_words', ['No', 'Yes']))}"
        elif network.backbone.get("kind") == "shieldgemma2":  # no head: its policies' answers, combined
            weights = f"safety classifier {network.backbone.get('name')}"
            head = (f"policies {', '.join(network.params.get('policies', ['dangerous', 'sexual', 'violence']))} "
                    f"({network.params.get('combine', 'max')})")
        status = present if isinstance(present, str) else here[present]
        lines.append(f"{name:22s} {card.architecture:17s} backbone: {weights}, {status}; {head}")
    return lines

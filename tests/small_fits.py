"""Universal attacks fitted small, for tests that check where a run's fits go or that their cases get a verdict, not
their strength: the trigger search and the UAP on `examples` training memes (their defaults: 64), the UAP in `steps`
(default 20). The same code, a fraction of the queries."""
from __future__ import annotations

import functools


def _keywords(examples: int, steps: int | None) -> tuple[dict, dict]:
    """find_trigger's and fit_uap's keyword arguments."""
    return {"examples": examples}, {"examples": examples, **({} if steps is None else {"steps": steps})}


def patch_small_fits(patch, examples: int, steps: int | None = None) -> None:
    """In this process, through `patch` (a pytest MonkeyPatch)."""
    from pytest_memerobust.perturb import attacks, uap

    trigger, pattern = _keywords(examples, steps)
    patch.setattr(attacks, "find_trigger", functools.partial(attacks.find_trigger, **trigger))
    patch.setattr(uap, "fit_uap", functools.partial(uap.fit_uap, **pattern))


def small_fits_plugin(examples: int, steps: int | None = None) -> str:
    """The source of a pytest plugin that does the same in a fresh process (written to a file, loaded with -p)."""
    trigger, pattern = _keywords(examples, steps)
    return (f'"""Loaded with -p: universal attacks fitted small (tests/small_fits.py)."""\n'
            f"import functools\n\nfrom pytest_memerobust.perturb import attacks, uap\n\n"
            f"attacks.find_trigger = functools.partial(attacks.find_trigger, **{trigger!r})\n"
            f"uap.fit_uap = functools.partial(uap.fit_uap, **{pattern!r})\n")

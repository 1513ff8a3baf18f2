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


def fit_small_in_pool_worker(examples: int, steps: int | None, shared: bytes, side: tuple):
    """engine/executors._fit_in_pool_worker with the fits made small first, in the LocalPool worker that runs it:
    the workers are spawned, so a patch made in the driver does not reach them, but this function does (pickled by
    name; the worker has the driver's sys.path). Hand it to the pool with `patch_small_pool_fits`."""
    from pytest_memerobust.engine import executors
    from pytest_memerobust.perturb import attacks

    if not isinstance(attacks.find_trigger, functools.partial):  # once per worker, for its life (it is the test's)
        import types

        patch_small_fits(types.SimpleNamespace(setattr=setattr), examples, steps)
    return executors._fit_in_pool_worker(shared, side)


def patch_small_pool_fits(patch, examples: int, steps: int | None = None) -> None:
    """Universal attacks fitted small in this process and in the LocalPool workers it starts, through `patch`."""
    from pytest_memerobust.engine import executors

    patch_small_fits(patch, examples, steps)
    patch.setattr(executors, "_fit_in_pool_worker", functools.partial(fit_small_in_pool_worker, examples, steps))

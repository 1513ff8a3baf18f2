"""Recipe against recipe: does a training recipe change robustness, or was it the seed?

The gate compares checkpoints; a recipe is a law over checkpoints, and one checkpoint a side says nothing of it (two
seeds of one plain recipe "differ beyond noise" about as often as a plain and an augmented checkpoint do). Here each
arm is k >= 2 checkpoints, each one seed of its recipe, all scored on the same memes, and the unit of replication is
the seed.

The statistic, per rule (and per family mean over a perturbation family's severities), is the difference of the arms'
seed means, w = how much worse arm B is than arm A (the gate's sign: positive is worse). Its variance has two parts,
estimated apart and added:
- the seeds': with the memes held fixed, the checkpoints of an arm differ only by their seed, so the pooled
  within-arm variance of their scores s_p^2 (df = k_A + k_B - 2) gives s_p^2 (1/k_A + 1/k_B): the two-sample t on
  seed-level means;
- the memes': the bootstrap variance of the same difference over resamples of the memes (one set of draws per
  dataset, shared by every checkpoint, condition and rule, as the gate draws them), which the seed part, conditional
  on these memes, does not carry. Part of the per-meme seed noise is in both, so the sum errs on the wide side.
The decision's law is simulated jointly for every test on the same draws: the memes' centred bootstrap draws, plus a
seed draw of the seed part's size, studentized by a variance whose seed part is scaled by one chi-square(df)/df per
draw (the estimated spread's own uncertainty): with no meme part that is Student's t on df degrees of freedom, with no
seed part the gate's bootstrap. The seed draws are the memes' own draws, standardized and taken from other resamples
(one shuffle for every test): the seeds' noise across tests is given the memes' correlation. Six checkpoints cannot
estimate a correlation between dozens of rules (their residuals span 4 dimensions, which makes the maximum look
tamer than it is: 6% false alarms at a nominal 5% in the simulation), and independent seed draws overstate the
maximum (2.7%); a seed acts through the memes it gets right, so their correlation is the nearer guess.
Error control over the whole family is the gate's (max-T step-down, Holm, BH or none), and what improved is the
mirrored family, as in the gate. Beside each decision, the change it would detect with 80% power: with 3 seeds a side
only large effects show, and a comparison that sees nothing says how much it could have seen.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

import numpy as np

from .gate import (DEFAULT_CHECKS, DEFAULT_CONTROL, Comparison, Decision, ErrorControl, Power, Procedure, Scores,
                   _Change, _family_means, _Resampler, _Sample, _Test, _too_few_of_a_class, _why_undefined,
                   _with_improvements)
from .metrics import _percentile_interval
from .multiplicity import bh_adjusted_p, decision_critical_values, holm_adjusted_p, marginal_p, maxt_adjusted_p

FEWEST_SEEDS = 3  # fewer a side: the seeds' spread rests on 0-2 degrees of freedom and is not estimated, only guessed
POWER_QUANTILE = 0.8


@dataclass(frozen=True)
class RecipeCell:
    """One condition of one model on one dataset in both arms: each arm the cells ({"y", "clean", "perturbed"}) of
    its checkpoints, every one over the same memes in the same order."""

    model: str
    dataset: str
    condition: str
    kind: str  # "clean" or not: which rules apply
    a: tuple
    b: tuple


@dataclass(frozen=True, eq=False)  # compared by identity: it holds arrays
class _Seeds:
    """A seed-level test's per-arm checkpoints' scores [k] and draws [k, B], the two variance parts (`_statistics`)
    and the studentized draws under the null its decision reads."""

    scores: list[np.ndarray] = field(default_factory=list)
    draws: list[np.ndarray] = field(default_factory=list)
    seed_var: float = float("nan")
    meme_var: float = float("nan")
    null_draws: np.ndarray | None = None

    @property
    def se(self) -> float:
        """The difference's standard error: the seeds' and the memes' variance parts added."""
        return float(np.sqrt(self.seed_var + self.meme_var))


@dataclass(eq=False)
class _SeedTest(_Test):
    """A gate test (gate._Test) whose unit is the seed (`seeds`)."""

    seeds: _Seeds = field(default_factory=_Seeds)


def seed_warnings(k_a: int, k_b: int, names=("A", "B")) -> list[str]:
    """What a comparison of k_a against k_b seeds cannot do, said before its numbers."""
    out = []
    for name, k in zip(names, (k_a, k_b)):
        if k < FEWEST_SEEDS:
            out.append(f"recipe {name} has {k} seed{'s' * (k != 1)}: the seeds' spread cannot be estimated from fewer "
                       f"than {FEWEST_SEEDS} (its decisions rest on {max(k_a + k_b - 2, 0)} degrees of freedom); add "
                       "seeds before reading a difference as the recipe's")
    return out


def judge_recipes(cells, checks=DEFAULT_CHECKS, *, control: ErrorControl = DEFAULT_CONTROL, n_resamples: int = 10_000,
                  seed: int = 0, scale: str = "percent", confidence: float = 0.95,
                  family_means: bool = True, two_sided: bool = True) -> list[Comparison]:
    """Every rule that applies to every `RecipeCell`, arm B against arm A, as one family under `control` (see the
    module's docstring); `two_sided`: worse and better each at half the level, so that a claim either way errs at
    most at the level (a recipe comparison has no side it guards, as the gate guards the baseline). `before` is arm
    A's seed mean, `now` arm B's, `recipe` the seeds a side (A's; B's is in the test's name), `detectable` the
    worsening detected with 80% power; the interval is the difference's at `confidence`. A pure function of the
    per-meme outputs."""
    cells = list(cells)
    if not cells:
        raise ValueError("no condition to compare")
    k_a, k_b = len(cells[0].a), len(cells[0].b)
    if min(k_a, k_b) < 2:
        raise ValueError(f"a recipe comparison needs at least 2 checkpoints a side (got {k_a} and {k_b})")
    if any((len(c.a), len(c.b)) != (k_a, k_b) for c in cells):
        raise ValueError("every condition must hold the same checkpoints of each arm")
    sides: dict[tuple, _Resampler] = {}
    tests: list[_SeedTest] = []
    for cell in cells:
        y = np.asarray(cell.a[0]["y"])
        key = (seed, cell.dataset, _Resampler._digest(y), "recipes")
        if key not in sides:
            sides[key] = _Resampler(y, n_resamples, key)
        side = sides[key]
        arrays = [[[np.asarray(c[k], dtype=np.float64) for k in ("clean", "perturbed")] for c in arm]
                  for arm in (cell.a, cell.b)]
        for check in checks:
            if not check.applies_to(cell.kind):
                continue
            test = _SeedTest((cell.model, cell.dataset, cell.condition), check,
                             1.0 if check.higher_is_better else -1.0, _Sample(len(y)),
                             reason=_too_few_of_a_class(check, y))
            tests.append(test)
            if test.reason is not None:
                continue
            scores, draws = [], []
            for arm in arrays:
                scores.append(np.array([float(check._score(y, *cp, scale)) for cp in arm]))
                draws.append(np.stack([check._resampled(side, tuple(cp), tuple(cp), scale)[0] for cp in arm]))
            test.seeds = _Seeds(scores, draws)
            if any(np.isnan(s).any() for s in scores):
                test.reason = _why_undefined(check, y)
    if family_means:
        tests += _family_means(tests, _mean_scores)
    rng = _seed_rng(seed, cells)
    df = k_a + k_b - 2
    shuffled, chi2 = rng.permutation(n_resamples), rng.chisquare(df, n_resamples) / df
    for t in tests:
        if t.reason is None:
            _statistics(t, shuffled, chi2, k_a, k_b)
    if two_sided:
        control = replace(control, alpha=control.alpha / 2)
    worse = _decide(tests, control, confidence, k_a, k_b, n_resamples, mirrored=False)
    better = _decide(tests, control, confidence, k_a, k_b, n_resamples, mirrored=True)
    return _with_improvements(worse, better)


def _seed_rng(seed: int, cells) -> np.random.Generator:
    """The seed draws' generator, keyed by the run's seed and the memes (never by thread, order or process)."""
    key = [str(seed), "recipe-seeds"] + sorted({c.dataset + ":" + _Resampler._digest(np.asarray(c.a[0]["y"]))
                                                 for c in cells})
    digest = hashlib.sha256(json.dumps(key).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _mean_scores(members: list[_SeedTest]) -> dict:
    """A family mean's fields here: each checkpoint's mean score over the severities, and its draws' row means."""
    return dict(seeds=_Seeds([np.mean([t.seeds.scores[arm] for t in members], axis=0) for arm in (0, 1)],
                             [np.mean([t.seeds.draws[arm] for t in members], axis=0) for arm in (0, 1)]))


def _statistics(t: _SeedTest, shuffled: np.ndarray, chi2: np.ndarray, k_a: int, k_b: int) -> None:
    """w, the two variance parts, se, and the test's centred, studentized draws under the null (see the module)."""
    sign = t.sign
    (a, b), (draws_a, draws_b) = t.seeds.scores, t.seeds.draws
    before, now = float(a.mean()), float(b.mean())
    w = sign * (before - now)
    t.change = _Change(before, now, w)
    df = k_a + k_b - 2
    residuals = sign * np.concatenate([a - a.mean(), b - b.mean()])
    seed_var = float(residuals @ residuals) / df * (1 / k_a + 1 / k_b)
    meme_draws = sign * (draws_a.mean(axis=0) - draws_b.mean(axis=0))
    defined = ~np.isnan(meme_draws)
    meme_var = float(np.var(meme_draws[defined], ddof=1)) if defined.sum() >= 2 else 0.0
    with np.errstate(invalid="ignore"):  # the seed draw: the memes' draws standardized, from other resamples
        standard = (meme_draws - np.nanmean(meme_draws)) / np.sqrt(meme_var) if meme_var > 0 else \
            np.zeros_like(meme_draws)
    seed_draws = np.nan_to_num(standard[shuffled]) * np.sqrt(seed_var)
    with np.errstate(invalid="ignore", divide="ignore"):
        denominator = np.sqrt(meme_var + seed_var * chi2)
        null_draws = np.where(denominator > 0, (meme_draws - w + seed_draws) / denominator, -np.inf)
    null_draws[~defined] = np.nan
    t.seeds = replace(t.seeds, seed_var=seed_var, meme_var=meme_var, null_draws=null_draws)


def _decide(tests: list[_SeedTest], control: ErrorControl, confidence: float, k_a: int, k_b: int, n_resamples: int,
            mirrored: bool) -> list[Comparison]:
    """The family's decisions in one direction: worse (B than A) or, `mirrored`, better, each with its adjusted p,
    the bound its decision used and the change detected at 80% power."""
    direction = -1.0 if mirrored else 1.0
    judged = [t for t in tests if t.reason is None]
    decided: dict[int, dict] = {}
    if judged:
        nulls = np.array([t.check.min_effect for t in judged])
        w = direction * np.array([t.change.w for t in judged])
        se = np.array([t.seeds.se for t in judged])
        draws = direction * np.stack([t.seeds.null_draws for t in judged])
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(se > 0, (w - nulls) / se, np.where(w > nulls, np.inf, -np.inf))
        raw = marginal_p(z, draws)
        adjusted = {"fwer": lambda: maxt_adjusted_p(z, draws), "holm": lambda: holm_adjusted_p(raw),
                    "fdr": lambda: bh_adjusted_p(raw), "none": lambda: raw}[control.method]()
        c = decision_critical_values(control.method, z, draws, raw, adjusted, control.alpha)
        for i, t in enumerate(judged):
            power = float(np.nanquantile(draws[i], POWER_QUANTILE)) if np.isfinite(draws[i]).any() else float("nan")
            spread = c[i] * se[i] if se[i] > 0 and np.isfinite(c[i]) else 0.0
            low, high = _percentile_interval(t.change.w - se[i] * t.seeds.null_draws, confidence)
            decided[id(t)] = dict(p=float(adjusted[i]), p_raw=float(raw[i]), bound=float(w[i] - spread),
                                  detectable=float((c[i] + power) * se[i] + nulls[i]), low=low, high=high)
    out = []
    test_name = (f"seed-level means ({k_a} + {k_b} seeds) and paired bootstrap of the memes"
                 + {"fwer": ", max-T", "holm": ", Holm", "fdr": ", Benjamini-Hochberg", "none": ""}[control.method])
    for t in tests:
        subject, before, now = t.subject(), t.change.before, t.change.now
        procedure = Procedure(test_name, t.check.min_effect, control, "regressions", "recipes", n_resamples, k_a)
        if id(t) not in decided:
            out.append(Comparison(subject, Scores(before, now), Decision(t.reason), procedure, Power(t.sample.n)))
            continue
        d = decided[id(t)]
        rejected = d["p"] <= control.alpha
        # bounds and intervals as now - before on the rule's own scale (the gate's convention)
        sign = t.sign * direction
        low, high = sorted((-t.sign * d["low"], -t.sign * d["high"]))
        decision = Decision("regressed" if rejected else "no regression", bool(rejected), d["p"], d["p_raw"],
                            float(-sign * d["bound"]) + 0.0)
        out.append(Comparison(subject, Scores(before, now, low, high), decision, procedure,
                              Power(t.sample.n, d["detectable"])))
    return out

"""The white-box attacks are not no-ops: on every backbone kind, each flips more predictions than a random edit of
the same budget, with a paired bootstrap interval of the difference above 0 (AutoAttack's sanity check: a random
attack that matches a white-box one means the white-box one is broken).

- HotFlip at severity 3 (up to 4 character edits, gradient-chosen) against 4 random character edits (HotFlip's own
  operations: flip, insert, delete, swap) in random words;
- the universal trigger of 3 words against 3 random whole-word tokens of the same vocabulary, prefixed the same way;
- the UAP at 16/255 against a random sign pattern of the same L-infinity norm, on the image channel (a head trained
  on it alone, seen through its `image` view): with the caption in the fusion, a tiny random backbone's head hardly
  reads the picture, and neither pattern flips anything there.

Detectors: each kind's tiny random backbone with a head trained for 40 epochs on the demo memes (for the UAP, on the
image channel alone); the 160 demo test memes are attacked, by HotFlip the first HOTFLIP_MEMES of them (its queries on
the real MiniLM cost about half a second a meme on 2 CPU cores; every kind's difference interval stays well above 0),
and on the real MiniLM the trigger is fitted on 32 memes in 1 round (TRIGGER_FIT_BY_KIND), not 64 in 2.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.engine import AttackState, Engine
from pytest_memerobust.judge.metrics import paired_bootstrap_ci
from pytest_memerobust.perturb import attacks, get
from pytest_memerobust.perturb.attacks import _LETTERS, vocabulary_words
from pytest_memerobust.perturb.uap import add_pattern_batch, pattern_for
from minilm_model import require_minilm
from tiny_backbones import KINDS, trained_detector

_WORD = re.compile(r"[A-Za-z]{2,}")


def random_char_edits(text: str, edits: int, rng: np.random.Generator) -> str:
    """`edits` random character edits of HotFlip's kinds, each in a random word of at least two letters."""
    for _ in range(edits):
        words = list(_WORD.finditer(text))
        if not words:
            break
        word = words[int(rng.integers(len(words)))]
        a, w = word.start(), word.group()
        i, letter = int(rng.integers(len(w))), _LETTERS[int(rng.integers(26))]
        op = int(rng.integers(4))
        if op == 0:
            w = w[:i] + letter + w[i + 1 :]
        elif op == 1:
            w = w[:i] + letter + w[i:]
        elif op == 2 and len(w) > 2:
            w = w[:i] + w[i + 1 :]
        else:
            i = min(i, len(w) - 2)
            w = w[:i] + w[i + 1] + w[i] + w[i + 2 :]
        text = text[:a] + w + text[word.end() :]
    return text


class Attacked:
    """One kind's detector, its attack context on the demo test memes and its clean predictions."""

    def __init__(self, kind: str, mode: str = "multimodal", train_mode: str = "multimodal"):
        base = trained_detector(kind, mode=train_mode)
        self.detector = base if mode == "multimodal" else base.with_mode(mode)
        test, train = demo_dataset("test"), demo_dataset("train")
        self.texts, self.ids = [m.text for m in test.memes], [m.id for m in test.memes]
        self.pictures = [m.image for m in test.memes]
        training = lambda: ([m.text for m in train.memes], train.labels("hate"), train.memes)  # noqa: E731
        self.context = Engine(self.detector, test,
                              attacks=AttackState(labels=test.labels("hate"), training=training)).attack_context()
        self.clean = self.predict(self.pictures, self.texts)

    def predict(self, pictures, texts) -> np.ndarray:
        return self.detector.predict_proba(pictures, texts).argmax(1)

    def flips(self, pictures=None, texts=None) -> np.ndarray:
        """1 where the perturbed pictures or captions (of the first as many memes) change the clean prediction."""
        n = len(pictures or texts)
        return (self.predict(pictures or self.pictures[:n], texts or self.texts[:n]) != self.clean[:n]).astype(float)


def assert_stronger(attack: np.ndarray, random: np.ndarray, what: str) -> None:
    low, high = paired_bootstrap_ci(lambda a, r: float(a.mean() - r.mean()), attack, random, n_resamples=2000)
    assert low > 0, (f"{what}: flip rate {attack.mean():.3f} vs random {random.mean():.3f}, "
                     f"difference interval {low:.3f}..{high:.3f} does not exclude 0")


_CACHE: dict = {}


def attacked(kind: str) -> Attacked:
    if kind == "open_clip":
        pytest.importorskip("open_clip", reason="the open_clip kind needs the clip extra")
    if kind == "minilm":
        require_minilm()
    if kind not in _CACHE:
        _CACHE[kind] = Attacked(kind)
    return _CACHE[kind]


@pytest.fixture(scope="module", autouse=True)
def _forget():
    yield
    _CACHE.clear()


HOTFLIP_MEMES = 80  # measured at 80 (of 160): the difference interval's low end 0.15 (open_clip) to 0.49 (minilm)
# ... except on the real MiniLM, whose queries cost the most (95 s of CI at 80 memes) and whose margin is widest:
# measured at 32 memes (2026-11-29), its difference interval is 0.344..0.719
HOTFLIP_MEMES_BY_KIND = {"minilm": 32}


@pytest.mark.parametrize("kind", list(KINDS))
def test_hotflip_flips_more_than_random_character_edits(kind):
    run = attacked(kind)
    memes = HOTFLIP_MEMES_BY_KIND.get(kind, HOTFLIP_MEMES)
    texts, ids = run.texts[:memes], run.ids[:memes]
    flipped = get("hotflip").apply(texts, ids, 3, 0, run.context)
    rng = np.random.default_rng(0)
    random = [random_char_edits(t, 4, rng) for t in texts]
    assert_stronger(run.flips(texts=flipped), run.flips(texts=random), f"hotflip@3 on {kind}")


# Measured 2026-11-23, open in issue 13: on the tiny BLIP-2 (Q-Former initialised wide, 0.5) any 3-word prefix flips
# about 40% of the memes, and the fitted trigger flips no more than random words do (0.394 vs 0.394).
TRIGGER_NO_BETTER = pytest.mark.xfail(strict=True, reason="issue 13: on the tiny BLIP-2 the trigger is no better "
                                                          "than random words (0.394 vs 0.394 flipped)")
# ... and on the tiny random CLIPs the image channel classifies at chance (0.50), so the UAP test judges the fit on its
# own objective: measured 2026-11-30, the pattern raises the mean fitting loss by 0.0019 (open_clip) and 0.0070
# (hf-clip), the 19 noise patterns by at most 0.00005 and 0.00026. A bootstrap over the 64 memes, used before, put
# hf-clip's interval across 0 on one CPU and not on another.


# The trigger's fit on the real MiniLM, the costliest (60 s of CPU at find_trigger's 64 memes and 2 rounds), on 32 memes
# in 1 round (17 s): measured 2026-11-30 against six draws of random words (seeds 0-5), the trigger flips 0.456 and
# the difference interval's low end is 0.24 to 0.37
TRIGGER_FIT_BY_KIND = {"minilm": {"examples": 32, "rounds": 1}}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=TRIGGER_NO_BETTER) if k == "hf-blip2" else k for k in KINDS])
def test_the_universal_trigger_flips_more_than_random_words(kind, monkeypatch):
    run = attacked(kind)
    if kind in TRIGGER_FIT_BY_KIND:
        smaller_fit = functools.partial(attacks.find_trigger, **TRIGGER_FIT_BY_KIND[kind])
        monkeypatch.setattr(attacks, "find_trigger", smaller_fit)
    triggered = get("universal_trigger").apply(run.texts, run.ids, 3, 0, run.context)
    trigger = triggered[0][: -len(run.texts[0]) - 1]
    vocabulary = [w for _, w in vocabulary_words(run.detector.text_backbone)]
    rng = np.random.default_rng(0)
    words = " ".join(vocabulary[int(i)] for i in rng.choice(len(vocabulary), 3, replace=False))
    random = [f"{words} {t}" for t in run.texts]
    assert len(trigger.split()) == 3
    assert_stronger(run.flips(texts=triggered), run.flips(texts=random), f"universal_trigger@3 ({trigger!r}) on {kind}")


def _losses(detector, pictures, texts, labels) -> np.ndarray:
    proba = detector.predict_proba(pictures, texts)
    return -np.log(proba[np.arange(len(proba)), labels] + 1e-12)


@pytest.mark.parametrize("kind", [k for k, (_, _, backbone) in KINDS.items() if backbone["kind"] != "minilm"])
def test_the_uap_beats_random_noise_of_the_same_norm_on_the_image_channel(kind):
    """On a head trained on the image channel alone. Where that channel classifies the held-out memes above chance,
    the UAP flips more of them than the noise does. Where it does not (tiny random CLIPs: accuracy 0.50, so there is
    nothing to flip), the fitted pattern must still raise the loss on the memes it was fitted on more than the noise:
    a zero gradient or a pattern lost in resizing fails here either way."""
    if kind == "open_clip":
        pytest.importorskip("open_clip", reason="the open_clip kind needs the clip extra")
    run = Attacked(kind, "image", train_mode="image")
    epsilon = 16 / 255
    pattern = pattern_for(run.context, epsilon)
    assert np.abs(pattern).max() <= epsilon + 1e-6 and (pattern != 0).mean() > 0.5
    noise = _sign_noise(pattern.shape, epsilon, 0)
    correct = (run.clean == run.context.labels).astype(float)
    low, _ = paired_bootstrap_ci(lambda c: float(c.mean()), correct, n_resamples=2000)
    if low > 0.5:
        assert_stronger(run.flips(pictures=add_pattern_batch(run.pictures, pattern)),
                        run.flips(pictures=add_pattern_batch(run.pictures, noise)), f"uap@5 on {kind}'s image channel")
        return
    texts, labels, memes = run.context.training()
    rows = np.random.default_rng(0).permutation(len(memes))[:64]  # the memes fit_uap fits on (seed 0, 64 examples)
    pictures, texts, labels = [memes[r].image for r in rows], [texts[r] for r in rows], np.asarray(labels)[rows]
    clean = _losses(run.detector, pictures, texts, labels)

    def mean_rise(added) -> float:
        return float((_losses(run.detector, add_pattern_batch(pictures, added), texts, labels) - clean).mean())

    # The fit maximises the mean loss on these memes, so its objective is the statistic: the pattern must raise it
    # more than every one of 19 sign-noise patterns of the same norm (p < 1/20 were it no better than noise).
    noise_rises = [mean_rise(_sign_noise(pattern.shape, epsilon, seed)) for seed in range(19)]
    assert mean_rise(pattern) > max(noise_rises), \
        f"uap@5 on {kind}: fitting loss rise {mean_rise(pattern):.5f} vs noise at most {max(noise_rises):.5f}"


def _sign_noise(shape, epsilon: float, seed: int) -> np.ndarray:
    return (np.sign(np.random.default_rng(seed).standard_normal(shape)) * epsilon).astype(np.float32)

"""Repeat sampling: a card that asks each meme k times (`samples = k`, and/or `temperature = T` at the card's top
level), and the keyed draws that make the k answers the same on every run, thread count, shard and worker.

    samples = 5          # any card; 1 (the default) asks once, as before; at most MAX_SAMPLES (100)
    temperature = 0.7    # any card; with samples unset, > 0 means samples = 5

What one sample is, per kind of detector:
- hosted (detectors/hosted.py): one request at temperature T whose `seed` is keyed by (run seed, meme id, condition,
  sample index); the answer is the word the server sampled (no label word: declined). Each answer is cached under
  a key holding the temperature, the seed and the sample index, so a re-run asks nothing.
- every other card (a prompted vision-language model, any classifier): a class drawn from its class probabilities
  tempered by T (softmax(log p / T): for a VLM, the label words' logits over T, each class's summed over its first
  tokens; for a classifier, its logits over T), by a uniform keyed by the same (run seed, meme id, condition, sample
  index). T = 0 draws the most probable class every time. A meme the model declines (a VLM's label words below
  `abstain_below`) is declined in every sample: sampling does not change where its mass went.

The condition's probabilities are then the share of the answered samples that named each class, so its argmax is
the consensus (majority) answer, AUROC ranks memes by how often the model names each class, and every existing
metric, interval and gate reads the sampled model's k-vote verdict; a meme none of whose samples was answered is
declined. `judge/sampling.py` reports the samples themselves (expected and consensus accuracy, internal variance,
consistency, flip rates against the model's own noise).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from ..data.meme import DECLINED
from ..errors import ConfigError

DEFAULT_SAMPLES = 5  # with a temperature > 0 and no `samples`
DEFAULT_TEMPERATURE = 1.0  # with samples > 1 and no `temperature`: the model's own distribution (the APIs' default)
MAX_SAMPLES = 100  # samples per meme at most: a vote share to 1%, beyond anything the papers ask (self-consistency
# uses 5-40); a hosted card would send this many requests per meme and condition


@dataclass(frozen=True)
class Sampling:
    """How a sampled detector is asked: k samples per meme at temperature T."""

    k: int
    temperature: float

    @classmethod
    def from_card(cls, card) -> "Sampling | None":
        """The card's sampling, None where it asks each meme once (neither key set, or samples = 1 at temperature
        0 or unset): the deterministic path, unchanged. A bad value is one error naming the key."""
        samples, temperature = card.scoring.samples, card.scoring.temperature
        where = f"model card {getattr(card, 'path', None) or getattr(card, 'name', '?')!r}"
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 1):
            raise ConfigError(f"{where}: samples must be a whole number >= 1 (how often each meme is asked), got "
                              f"{samples!r}")
        if samples is not None and samples > MAX_SAMPLES:
            raise ConfigError(f"{where}: samples = {samples} is more than {MAX_SAMPLES}, the most a run takes (each "
                              f"meme and condition is asked that many times: a hosted card sends a request each)")
        if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                                        or not math.isfinite(temperature) or temperature < 0):
            raise ConfigError(f"{where}: temperature must be a number >= 0, got {temperature!r}")
        if samples in (None, 1) and not temperature:
            return None
        if samples == 1:
            raise ConfigError(f"{where}: samples = 1 at temperature {temperature} asks each meme once, which cannot "
                              f"show the model's noise: set samples >= 2, or temperature = 0")
        if card.scoring.multilabel:
            raise ConfigError(f"{where}: repeat sampling (samples, temperature) is for single-label tasks; this card "
                              f"is multi-label")
        return cls(DEFAULT_SAMPLES if samples is None else samples,
                   DEFAULT_TEMPERATURE if temperature is None else float(temperature))


def misplaced(keys) -> str:
    """A hint for an error about unknown [params] keys that are this module's top-level card keys."""
    found = sorted(set(keys) & {"samples", "temperature"})
    return f" ({' and '.join(found)} go at the card's top level, above [params])" if found else ""


def sample_keys(seed: int, ids, condition_id: str) -> list[str]:
    """Each meme's sampling key under one condition of a run: (run seed, meme id, condition)."""
    return [f"{seed}\0{meme_id}\0{condition_id}" for meme_id in ids]


def request_seed(key: str, index: int) -> int:
    """The `seed` of sample `index` of the meme keyed `key` in a request to an endpoint (31 bits, which every
    OpenAI-compatible server takes)."""
    digest = hashlib.blake2b(f"{key}\0{index}".encode("utf-8", "surrogatepass"), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


def uniforms(keys, k: int) -> np.ndarray:
    """[memes, k] keyed uniforms in (0, 1): element j of meme i is a function of (keys[i], j) alone."""
    import torch

    from ..data.keyed import field_keys, uniforms as keyed_uniforms

    rounds = torch.tensor([field_keys(key, 0) for key in keys], dtype=torch.int32).reshape(len(keys), 2)
    return keyed_uniforms(rounds, (k,), torch.float64).numpy()


def tempered(proba, temperature: float) -> np.ndarray:
    """Class probabilities tempered: softmax(log p / T), the most probable class alone at T = 0 (float64)."""
    p = np.asarray(proba, dtype=np.float64)
    if temperature == 0:
        return np.eye(p.shape[1])[p.argmax(axis=1)]
    with np.errstate(divide="ignore"):
        logits = np.log(p) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=1, keepdims=True)


def draw_answers(proba, abstained, keys, sampling: Sampling) -> np.ndarray:
    """[memes, k] answers (class indices; DECLINED for a meme the detector declined) drawn from the tempered
    probabilities by inversion of the keyed uniforms."""
    p = tempered(proba, sampling.temperature)
    cumulative = np.cumsum(p, axis=1)
    cumulative[:, -1] = 1.0
    u = uniforms(keys, sampling.k)
    answers = (u[:, :, None] > cumulative[:, None, :]).sum(axis=2).astype(np.int8)
    if abstained is not None:
        answers[np.asarray(abstained, bool)] = DECLINED
    return answers


def vote_shares(answers, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(class probabilities [memes, classes]: the share of each meme's answered samples that named each class,
    uniform where none was answered; declined [memes]: no sample answered)."""
    answers = np.asarray(answers)
    counts = (answers[:, :, None] == np.arange(n_classes)).sum(axis=1).astype(np.float64)
    answered = counts.sum(axis=1)
    declined = answered == 0
    shares = np.full(counts.shape, 1.0 / n_classes)
    shares[~declined] = counts[~declined] / answered[~declined, None]
    return shares, declined

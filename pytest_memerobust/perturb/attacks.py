"""Caption attacks that query the detector: HotFlip character edits and universal adversarial triggers.

They are perturbations like the others (registered, severities, deterministic per seed, meme and severity) but take
an `AttackContext` with the detector, the true labels and the clean image features; the engine passes it. A
detector with a `text_saliency` method (token-embedding gradients) is attacked white-box; any other detector is
attacked with queries alone.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, ClassVar, Sequence

import numpy as np

from ..atomic import atomic_write_text
from ..determinism import caption_buckets, device_type, encode_fixed, filled, fixed_shapes, shaped_batches
from .registry import register
from .text import _check_caption

_WORD = re.compile(r"[A-Za-z]{2,}")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# captions per query batch of a model-aware attack, by the detector's device: on one CPU thread a batch of 8 costs
# about what its captions cost, and a caption bucket's last batch is filled up to it (fixed shapes: measured on
# PrideMM's HotFlip queries, 8 rows cost 8% less than 16); a GPU wants larger batches
QUERY_BATCH = {"cpu": 8, "cuda": 256}
# ... of a set asked as a whole (a trigger fit's candidates, each over the fit memes: 16 x 64 captions at once, which
# fill their buckets' batches, where one candidate's 64 captions spread over several buckets would fill a third)
SET_QUERY_BATCH = {"cpu": 32, "cuda": 256}


@dataclass(frozen=True)
class CleanInputs:
    """The memes' clean inputs (row i: the i-th meme): the side an attack holds fixed, paired with the side it
    perturbs whenever it asks the detector."""

    image_features: np.ndarray | None = None  # clean image features (split detectors)
    images: Sequence | None = None  # clean pictures (black-box detectors)
    captions: Sequence[str] | None = None  # the clean captions (what an image attack holds fixed)


@dataclass
class AttackContext:
    """What a model-aware perturbation may use, for the memes being perturbed (index i = the i-th meme)."""

    detector: object
    labels: np.ndarray
    clean: CleanInputs = field(default_factory=CleanInputs)
    training: Callable[[], tuple[list[str], np.ndarray, Sequence]] | None = None  # (captions, labels, memes)
    cache_dir: Path | None = None
    memo: dict = field(default_factory=dict)
    ids: Sequence[str] | None = None  # the memes' ids (what a per-meme attack's memo is keyed by)
    seed: int = 0  # the run's seed: an attack made of other registered attacks draws each one's own generator
    # state the context accumulates as attacks run, never passed in:
    outcomes: dict = field(init=False, default_factory=dict)  # (perturbation, severity) -> an attack's own measures
    searches: dict = field(init=False, default_factory=dict)  # HotFlip's searches per meme, shared by its severities
    # the class a universal trigger pushes towards (0: make hateful memes pass as benign); part of a trigger's cache key
    trigger_target: ClassVar[int] = 0

    def probabilities(self, captions: Sequence[str], rows: Sequence[int], batch_size: int | None = None,
                      per_query: bool = True) -> np.ndarray:
        """Class probabilities of `captions`, each paired with the clean image of meme `rows[k]`, in batches of
        `batch_size` (default: QUERY_BATCH for the detector's device).

        A detector that pads captions by bucket (engine/features.caption_buckets) is asked in fixed-shape batches:
        captions of one bucket together, each batch filled to `batch_size` rows, encoder and head alike, so each
        query's answer is the same bytes in any batch, and a meme attacked alone gets the caption it gets among
        others. Any other detector (a black box: filling its batches would cost queries) is asked shortest caption
        first, each batch padded to its longest caption (PrideMM's captions: median 31 tokens, a tenth beyond 87),
        in an order that depends on the captions alone. `per_query=False` marks a large set asked as a whole (a
        universal trigger's candidates): its batches default to SET_QUERY_BATCH rows."""
        det, rows, captions = self.detector, list(rows), list(captions)
        if batch_size is None:
            sizes = QUERY_BATCH if per_query else SET_QUERY_BATCH
            batch_size = sizes["cuda" if device_type(det) == "cuda" else "cpu"]
        clean = self.clean
        split = hasattr(det, "head") and clean.image_features is not None

        def ask(part_rows: list[int], part: list[str]) -> np.ndarray:
            if split:
                return det.head(clean.image_features[part_rows], det.encode_texts(part))
            pictures = [clean.images[r] for r in part_rows] if clean.images is not None else [None] * len(part)
            return det.predict_proba(pictures, part)

        buckets = caption_buckets(det)
        if buckets is not None:
            return encode_fixed(lambda ks: ask([rows[k] for k in ks], [captions[k] for k in ks]),
                                list(range(len(captions))), batch_size,
                                lambda ks: buckets([captions[k] for k in ks]))
        order = sorted(range(len(captions)), key=lambda k: len(captions[k]))
        out = [ask([rows[j] for j in order[k : k + batch_size]], [captions[j] for j in order[k : k + batch_size]])
               for k in range(0, len(order), batch_size)]
        proba = np.concatenate(out)
        back = np.empty(len(order), dtype=np.int64)
        back[order] = np.arange(len(order))
        return proba[back]

    def losses(self, captions: Sequence[str], rows: Sequence[int], labels: Sequence[int],
               per_query: bool = True) -> np.ndarray:
        proba = self.probabilities(captions, rows, per_query=per_query)
        return -np.log(proba[np.arange(len(proba)), np.asarray(labels)] + 1e-12)

    @property
    def white_box(self) -> bool:
        return callable(getattr(self.detector, "text_saliency", None)) and self.clean.image_features is not None

    @property
    def fingerprint(self) -> str:
        """The detector's weights, and the fusion mode of an ablation view: a trigger or pattern fitted on one mode
        is not the one for another."""
        base = str(getattr(self.detector, "fingerprint", type(self.detector).__name__))
        mode = getattr(self.detector, "mode", "multimodal")
        return base if mode == "multimodal" else f"{base}:{mode}"

    @cached_property
    def fit_digest(self) -> str:
        """A digest of the memes universal attacks fit on (data/fit_memes.py): part of every fit's key, so a fit on
        one dataset or split is never reused for another. Worked out once per context: a per-meme attack asks for its
        trigger meme by meme."""
        if self.training is None:
            return "none"
        fit = self.training()
        if hasattr(fit, "digest"):
            return fit.digest[:16]
        from ..data.fit_memes import fit_digest

        captions, labels, memes = fit  # a plain (captions, labels, memes) triple
        return fit_digest([m.id for m in memes], captions, labels)[:16]


def _word_scores(texts: Sequence[str], rows: Sequence[int], context: AttackContext) -> list[list[tuple]]:
    """Per caption, (importance, start, end) of each word: gradient norm of its tokens (white-box, one backward
    pass for the batch) or the loss change when the word is deleted (queries)."""
    spans = [[(m.start(), m.end()) for m in _WORD.finditer(t)] for t in texts]
    labels = [int(context.labels[r]) for r in rows]
    if context.white_box:
        tokens = _saliencies(list(texts), list(rows), labels, context)
        scores = [[sum(g for a, b, g in toks if a < end and b > start) for start, end in sp]
                  for toks, sp in zip(tokens, spans)]
    else:
        variants = [t[:a] + t[b:] for t, sp in zip(texts, spans) for a, b in sp]
        owners = [i for i, sp in enumerate(spans) for _ in sp]
        base = context.losses(texts, rows, labels)
        dropped = context.losses(variants, [rows[i] for i in owners], [labels[i] for i in owners])
        scores, k = [], 0
        for i, sp in enumerate(spans):
            scores.append(list(dropped[k : k + len(sp)] - base[i]))
            k += len(sp)
    return [[(sc, a, b) for sc, (a, b) in zip(score, sp)] for score, sp in zip(scores, spans)]


# captions per gradient pass of a white-box word ranking: one, padded to its bucket (measured on PrideMM's HotFlip at
# one thread: a gradient pass per caption cost 5.5 s where passes of 16 captions, each bucket's last filled up, cost
# 21.1 s, and passes of 64 padded to their longest caption 7.8 s)
SALIENCY_BATCH = 1


def _saliencies(texts: list[str], rows: list[int], labels: list[int], context: AttackContext) -> list[list[tuple]]:
    """Per caption, (start, end, gradient norm) of its tokens (`text_saliency`). A detector that pads captions by
    bucket is asked in fixed-shape batches (one bucket, SALIENCY_BATCH rows, the fill's rows dropped: the loss is a
    sum, so a row's gradient is its own), so a caption's ranking is the same bytes in any batch; any other in
    batches of 64 padded to their longest caption."""
    detector, buckets = context.detector, caption_buckets(context.detector)
    if buckets is None:
        return [tokens for k in range(0, len(texts), 64)
                for tokens in detector.text_saliency(texts[k : k + 64], labels[k : k + 64],
                                                     context.clean.image_features[rows[k : k + 64]])]
    out: list = [None] * len(texts)
    for length, members in shaped_batches(len(texts), SALIENCY_BATCH, buckets(texts)):
        batch = filled(members, SALIENCY_BATCH)
        with fixed_shapes(length):
            found = detector.text_saliency([texts[i] for i in batch], [labels[i] for i in batch],
                                           context.clean.image_features[[rows[i] for i in batch]])
        for i, tokens in zip(members, found):
            out[i] = tokens
    return out


def _char_edits(word: str, rng: np.random.Generator, limit: int) -> list[str]:
    """HotFlip's operations on one word: flip (substitute), insert, delete and swap adjacent letters."""
    n = len(word)
    out = {word[:i] + word[i + 1 :] for i in range(n) if n > 2}
    out |= {word[:i] + word[i + 1] + word[i] + word[i + 2 :] for i in range(n - 1) if word[i] != word[i + 1]}
    for _ in range(limit):
        i, letter = int(rng.integers(n)), _LETTERS[int(rng.integers(26))]
        out.add(word[:i] + letter + word[i + 1 :])
        out.add(word[:i] + letter + word[i:])
    out.discard(word)
    candidates = sorted(out)
    if len(candidates) > limit:
        candidates = [candidates[i] for i in sorted(rng.choice(len(candidates), limit, replace=False))]
    return candidates


HOTFLIP_STEPS = (1, 2, 4, 6, 8)  # greedy edits per caption, by severity


def hotflip_batch(texts: Sequence[str], rows: Sequence[int], severity: int, rngs, context: AttackContext,
                  steps: int | None = None, edits: Callable | None = None) -> list[str]:
    """HotFlip on many captions at once: each step is one gradient pass and one batch of candidate queries for all
    of them, while every caption keeps its own generator, budget and choices. `steps` overrides the severity's
    number of edits (a joint attack spends them over its rounds); `edits(word, rng, limit)` the rewrites of a word
    tried (default HotFlip's character flips; human_edits.human_candidates keeps them human-plausible).

    The severities of a meme share one greedy search (its generator is keyed without the severity): severity k's
    caption is that search after HOTFLIP_STEPS[k - 1] edits, so a higher severity never attacks less, and a search
    a lower severity ran in this context is resumed where it stopped (`context.searches`), not run again. Each
    step's queries run in fixed-shape batches, so a meme's search is the same bytes alone, among other memes and
    resumed."""
    edits = _char_edits if edits is None else edits
    budget = HOTFLIP_STEPS[severity - 1] if steps is None else steps
    texts, rows = [_check_caption(t) for t in texts], list(rows)
    labels = [int(context.labels[r]) for r in rows]
    # each meme's search: (caption, loss, still improving, generator state) after 0, 1, 2, ... steps
    keys = [None if steps is not None else
            (edits.__module__, edits.__qualname__, row, text, repr(rng.bit_generator.state))
            for row, text, rng in zip(rows, texts, rngs)]
    paths = [context.searches.get(key) if key is not None else None for key in keys]
    fresh = [i for i, path in enumerate(paths) if path is None]
    if fresh:
        first = context.losses([texts[i] for i in fresh], [rows[i] for i in fresh], [labels[i] for i in fresh])
        for i, loss in zip(fresh, first):
            paths[i] = [(texts[i], float(loss), True, rngs[i].bit_generator.state)]
            if keys[i] is not None:
                context.searches[keys[i]] = paths[i]
    for step in range(1, budget + 1):
        order = [i for i, path in enumerate(paths) if len(path) == step and path[-1][2]]  # not taken, improving
        if not order:
            continue
        for i in order:
            rngs[i].bit_generator.state = paths[i][-1][3]
        now = [paths[i][-1][0] for i in order]
        scored = _word_scores(now, [rows[i] for i in order], context)
        candidates, owners = [], []
        for i, text, words in zip(order, now, scored):
            for _, a, b in sorted(words, key=lambda t: -t[0])[:3]:
                for edit in edits(text[a:b], rngs[i], 8):
                    candidates.append(text[:a] + edit + text[b:])
                    owners.append(i)
        losses = (context.losses(candidates, [rows[i] for i in owners], [labels[i] for i in owners])
                  if candidates else [])
        best: dict[int, int] = {}
        for k, i in enumerate(owners):
            if i not in best or losses[k] > losses[best[i]]:
                best[i] = k
        for i in order:
            k, (text, loss, _, _) = best.get(i), paths[i][-1]
            if k is None or losses[k] <= loss:  # no edit raises the loss: stop, never help the detector
                paths[i].append((text, loss, False, rngs[i].bit_generator.state))
            else:
                paths[i].append((candidates[k], float(losses[k]), True, rngs[i].bit_generator.state))
    return [path[min(budget, len(path) - 1)][0] for path in paths]


@register("hotflip", modality="text", family="hotflip", needs_model=True, tags=("white_box", "char"),
          batch=hotflip_batch, keyed_by_severity=False)
def hotflip(text: str, severity: int, rng: np.random.Generator, context: AttackContext, index: int) -> str:
    """HotFlip (Ebrahimi et al. 2018): greedy character edits that raise the detector's loss on the true label.

    Each step ranks words by token-embedding gradient (or by queries for a black-box detector), tries flips,
    insertions, deletions and swaps in the top three words, and keeps the edit with the highest loss.
    """
    return hotflip_batch([text], [index], severity, [rng], context)[0]


def hotflip_human_batch(texts: Sequence[str], rows: Sequence[int], severity: int, rngs,
                        context: AttackContext) -> list[str]:
    from .human_edits import human_candidates

    return hotflip_batch(texts, rows, severity, rngs, context, edits=human_candidates)


@register("hotflip_human", modality="text", family="hotflip", needs_model=True,
          tags=("white_box", "char", "human_plausible"), batch=hotflip_human_batch, keyed_by_severity=False)
def hotflip_human(text: str, severity: int, rng: np.random.Generator, context: AttackContext, index: int) -> str:
    """HotFlip's search (the same words ranked, the same budgets) over human-style rewrites of a word (leetspeak,
    emoji, spacing, stretched letters: human_edits.human_candidates) instead of random character flips: the caption
    side of co_attack_human, alone."""
    return hotflip_human_batch([text], [index], severity, [rng], context)[0]


def vocabulary_words(backbone, limit: int = 20000) -> list[tuple[int, str]]:
    """(token id, word) of the whole-word, alphabetic tokens of `backbone`'s caption tokenizer: what a trigger may be
    made of. WordPiece marks word pieces with a leading "##"; open_clip's BPE marks word ends with "</w>"."""
    words = []
    tokenizer = getattr(backbone, "tokenizer", None)
    if tokenizer is not None:
        entries = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
        spell = lambda token: "" if token.startswith("##") else tokenizer.convert_tokens_to_string([token]).strip()  # noqa: E731
    else:  # open_clip's SimpleTokenizer
        bpe = getattr(getattr(backbone, "tokenizer_fn", None), "encoder", {})
        entries = sorted(bpe.items(), key=lambda kv: kv[1])
        spell = lambda token: token[: -len("</w>")] if token.endswith("</w>") else ""  # noqa: E731
    for token, token_id in entries:
        word = spell(token)
        if not word.isascii() or not word.isalpha() or len(word) < 2:
            continue
        words.append((token_id, word.lower()))
        if len(words) >= limit:
            break
    return words


def find_trigger(context: AttackContext, length: int, seed: int, candidates: int = 16, rounds: int = 2,
                 examples: int = 64) -> str:
    """Universal adversarial trigger (Wallace et al. 2019): a `length`-word prefix that pushes memes of other classes
    towards `context.trigger_target`, found by gradient-guided search over whole-word tokens (HotFlip's first-order
    estimate ranks candidates, real losses choose) on the training memes, or by random search for a black box."""
    if context.training is None:
        raise ValueError("a universal trigger is fitted on training memes: this context has none")
    all_texts, all_labels, memes = context.training()
    rng = np.random.default_rng(seed)
    rows = np.flatnonzero(np.asarray(all_labels) != context.trigger_target)
    rows = rows[rng.permutation(len(rows))[:examples]] if len(rows) else np.arange(min(len(all_texts), examples))
    texts = [all_texts[r] for r in rows]
    detector = context.detector
    reads_images = "image" in getattr(detector, "modalities", ("image", "text"))
    pictures = [memes[r].image for r in rows] if reads_images else None
    image_features = None
    if hasattr(detector, "head"):
        image_features = (detector.encode_images(pictures) if reads_images
                          else np.zeros((len(rows), 0), dtype=np.float32))
    train = AttackContext(detector, np.asarray(all_labels)[rows], CleanInputs(image_features, pictures))
    rows = np.arange(len(rows))
    target = [context.trigger_target] * len(rows)
    backbone = getattr(context.detector, "text_backbone", None)
    vocabulary = (vocabulary_words(backbone) if backbone is not None else []) or list(enumerate(_FALLBACK_WORDS))
    words = ["the"] * length

    def losses(trials: list[list[str]]) -> np.ndarray:
        """The mean target loss over the fit memes of each trigger in `trials`, asked as one set (fixed-shape batches
        by caption bucket, where the detector pads so: a trial's loss is the same bytes beside any other trials)."""
        captions = [f"{' '.join(trial)} {texts[r]}" for trial in trials for r in rows]
        per = train.losses(captions, np.tile(rows, len(trials)), target * len(trials), per_query=False)
        return per.reshape(len(trials), len(rows)).mean(axis=1)

    best = float(losses([words])[0])
    embedding = None
    if train.white_box:
        embedding = backbone.token_embedding().weight.detach()
        ids = np.array([i for i, _ in vocabulary])
    for _ in range(rounds):
        for position in range(length):
            if embedding is not None:
                prefix = " ".join(words)
                start = sum(len(w) + 1 for w in words[:position])
                end = start + len(words[position])
                grads = detector.text_saliency_vectors([f"{prefix} {texts[r]}" for r in rows], target,
                                                       image_features, (start, end))
                scores = -(embedding[ids] @ grads).cpu().numpy()
                picks = np.argsort(-scores)[:candidates]
            else:
                picks = rng.choice(len(vocabulary), size=min(candidates, len(vocabulary)), replace=False)
            # a position's candidates differ from `words` at that position alone, so all of them are asked at once;
            # the first to beat the best so far, then any lower, is kept, as when they were asked one by one
            trials = [words[:position] + [vocabulary[int(pick)][1]] + words[position + 1 :] for pick in picks]
            for trial, trial_loss in zip(trials, losses(trials)):
                if trial_loss < best:
                    best, words = float(trial_loss), trial
    return " ".join(words)


_FALLBACK_WORDS = ("the", "and", "not", "love", "pride", "lol", "meme", "joke", "just", "kidding", "friends",
                   "happy", "peace", "fun", "cute", "wholesome", "nice", "great", "good", "kind")


# bump when find_trigger may find another trigger for the same detector and memes (2: a position's candidates asked as
# one set in fixed-shape batches, issue 61), so a trigger cached by an earlier search is fitted again, never mixed in
TRIGGER_SEARCH = 2


def _cached_trigger(path: Path, length: int) -> str | None:
    """The trigger stored at `path` if the file holds one of the right shape (`length` lowercase words) that this
    search (TRIGGER_SEARCH) found."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None
    if not isinstance(data, dict) or data.get("search") != TRIGGER_SEARCH:
        return None
    trigger = data.get("trigger")
    if not isinstance(trigger, str) or len(trigger.split()) != length or not all(w.isalpha() for w in trigger.split()):
        return None
    return trigger


def trigger_for(context: AttackContext, length: int, seed: int) -> str:
    """The trigger for this detector, length and seed: computed once, kept in memory and in the cache folder
    (keyed by the checkpoint fingerprint and the memes it is fitted on), since searching is the expensive part."""
    fit = context.fit_digest
    key = ("trigger", context.fingerprint, fit, length, seed, context.trigger_target)
    if key not in context.memo:
        path = None
        if context.cache_dir is not None:
            name = f"{context.fingerprint[:16]}-{fit}-{length}-{seed}-{context.trigger_target}.json"
            path = Path(context.cache_dir) / "triggers" / name
        if path is not None and path.is_file():
            trigger = _cached_trigger(path, length)
            if trigger is None:
                path.unlink(missing_ok=True)  # a corrupt or foreign entry is recomputed, never trusted
            else:
                context.memo[key] = trigger
        if key not in context.memo:
            context.memo[key] = find_trigger(context, length, seed)
            if path is not None:
                atomic_write_text(path, json.dumps({"trigger": context.memo[key], "fingerprint": context.fingerprint,
                                                    "fit_memes": fit, "search": TRIGGER_SEARCH}))
    return context.memo[key]


@register("universal_trigger", modality="text", family="universal_triggers", needs_model=True,
          tags=("white_box", "word", "universal"), label_preserving=True)
def universal_trigger(text: str, severity: int, rng: np.random.Generator, context: AttackContext, index: int) -> str:
    """Prepend the detector's universal adversarial trigger; severity = trigger length in words."""
    length = [1, 2, 3, 4, 5][severity - 1]
    return f"{trigger_for(context, length, seed=0)} {_check_caption(text)}"

"""Caption attacks that query the detector (HotFlip, universal triggers), the white-box hook they use
(`text_saliency`), their path through the engine and session, and back-translation (with a tiny offline MarianMT)."""
import json
import os
import re

import numpy as np
import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import load_detector
from pytest_memerobust.engine import AttackState, Engine
from pytest_memerobust.errors import BackendMissing
from pytest_memerobust.perturb import attacks, get, translation
from pytest_memerobust.perturb.attacks import SALIENCY_BATCH, AttackContext, CleanInputs, find_trigger, trigger_for
from pytest_memerobust.perturb.distance import levenshtein
from pytest_memerobust.judge.results import StatsConfig
from pytest_memerobust.run.options import DataOptions, JudgingOptions, Options, training_spec
from pytest_memerobust.run.session import RobustnessSession

BUDGET = {1: 1, 2: 2, 3: 4, 4: 6, 5: 8}  # HotFlip steps per severity
SEVERITIES = (1, 2, 3)


def damerau_levenshtein(a: str, b: str) -> int:
    """Levenshtein plus transposition of adjacent characters as one edit (unrestricted: an edited pair may be edited
    again, as successive HotFlip steps can do). HotFlip's four operations (flip, insert, delete, swap) each cost 1."""
    inf = len(a) + len(b)
    last_row: dict[str, int] = {}
    d = [[inf] * (len(b) + 2) for _ in range(len(a) + 2)]
    for i in range(len(a) + 1):
        d[i + 1][0], d[i + 1][1] = inf, i
    for j in range(len(b) + 1):
        d[0][j + 1], d[1][j + 1] = inf, j
    for i in range(1, len(a) + 1):
        last_match_col = 0
        for j in range(1, len(b) + 1):
            k, l = last_row.get(b[j - 1], 0), last_match_col
            cost = 0 if a[i - 1] == b[j - 1] else 1
            if cost == 0:
                last_match_col = j
            d[i + 1][j + 1] = min(d[i][j] + cost, d[i + 1][j] + 1, d[i][j + 1] + 1,
                                  d[k][l] + (i - k - 1) + 1 + (j - l - 1))
        last_row[a[i - 1]] = i
    return d[len(a) + 1][len(b) + 1]


def test_distance_helpers():
    assert levenshtein("kitten", "sitting") == 3 and damerau_levenshtein("kitten", "sitting") == 3
    assert levenshtein("belong", "beolng") == 2 and damerau_levenshtein("belong", "beolng") == 1
    assert damerau_levenshtein("moment", "mmfoent") == 2  # swap 'om', then insert 'f' between the swapped pair
    assert levenshtein("", "abc") == damerau_levenshtein("abc", "") == 3


# --- fixtures ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The models here are tiny: one thread is as fast, and on a busy two-core machine torch's second thread
    spin-waits and made this module four times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def blip():
    return load_detector("memeblip2-tda")


@pytest.fixture(scope="module")
def demo_detector():
    return load_detector("demo")


@pytest.fixture(scope="module")
def memes():
    return demo_dataset("test").head(8)


def _context(detector, memes, training=None, cache_dir=None) -> AttackContext:
    engine = Engine(detector, memes, attacks=AttackState(memes.labels("hate"), training, cache_dir))
    return engine.attack_context()


@pytest.fixture(scope="module")
def white(blip, memes):
    return _context(blip, memes)


@pytest.fixture(scope="module")
def black(demo_detector, memes):
    return _context(demo_detector, memes)


def _texts_ids(memes):
    return [m.text for m in memes.memes], [m.id for m in memes.memes]


def _all_losses(context, texts):
    return context.losses(texts, range(len(texts)), context.labels)


@pytest.fixture(scope="module")
def flipped(white, memes):
    texts, ids = _texts_ids(memes)
    return {s: get("hotflip").apply(texts, ids, s, 0, white) for s in SEVERITIES}


@pytest.fixture(scope="module")
def flipped_black(black, memes):
    texts, ids = _texts_ids(memes)
    return {s: get("hotflip").apply(texts, ids, s, 0, black) for s in (1, 2)}


# --- the context --------------------------------------------------------------------------------------------


def test_context_is_white_box_only_for_a_detector_with_saliency_and_image_features(white, black, blip):
    assert white.white_box and white.clean.image_features is not None and white.clean.image_features.shape[0] == 8
    assert not black.white_box
    assert not AttackContext(blip, np.zeros(1, dtype=int)).white_box  # no image features: queries only
    assert white.fingerprint == blip.fingerprint and len(white.fingerprint) == 64


@pytest.mark.parametrize("name", ["hotflip", "universal_trigger"])
def test_apply_without_a_context_raises(name, memes):
    texts, ids = _texts_ids(memes)
    p = get(name)
    assert p.needs_model and p.modality == "text"
    with pytest.raises(ValueError, match="AttackContext"):
        p.apply(texts, ids, 1, seed=0)


# --- HotFlip ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("severity", SEVERITIES)
def test_hotflip_changes_every_caption_within_the_edit_budget(flipped, memes, severity):
    texts, _ = _texts_ids(memes)
    for before, after in zip(texts, flipped[severity]):
        assert isinstance(after, str) and after != before
        assert 0 < damerau_levenshtein(before, after) <= BUDGET[severity], (before, after)
        # a swap is one HotFlip step but two Levenshtein edits
        assert 0 < levenshtein(before, after) <= 2 * BUDGET[severity], (before, after)


@pytest.mark.parametrize("severity", SEVERITIES)
def test_hotflip_raises_the_mean_loss_on_the_true_label(white, memes, flipped, severity):
    texts, _ = _texts_ids(memes)
    before, after = _all_losses(white, texts), _all_losses(white, flipped[severity])
    assert after.mean() > before.mean()
    assert (after >= before - 1e-6).all()  # a step is kept only when it raises the loss


def test_hotflip_more_budget_hurts_more(white, flipped):
    means = [_all_losses(white, flipped[s]).mean() for s in SEVERITIES]
    assert means[-1] > means[0]


def test_hotflip_never_lowers_the_loss_of_a_meme(blip):
    ds = demo_dataset("test")
    meme = next(m for m in ds.memes if m.id == "demo-0774")  # 'how it started the weekend how it is going', benign
    labels = ds.labels("hate")[[i for i, m in enumerate(ds.memes) if m.id == "demo-0774"]]
    context = AttackContext(blip, labels, CleanInputs(blip.encode_images([meme.image])))
    out = get("hotflip").apply([meme.text], [meme.id], 1, 0, context)
    # observed: 'how it started the weeked how it is going', loss 0.243 -> 0.084 (p(benign) 0.78 -> 0.92)
    assert context.losses(out, [0], labels)[0] >= context.losses([meme.text], [0], labels)[0]


def test_hotflip_is_deterministic_per_seed_and_meme(blip, memes, flipped):
    texts, ids = _texts_ids(memes)
    fresh = _context(blip, memes)  # another context: no shared state
    assert get("hotflip").apply(texts, ids, 2, 0, fresh) == flipped[2]
    # another meme id (same caption, same picture) draws other candidate edits
    row = 1
    repeated = AttackContext(blip, np.repeat(fresh.labels[[row]], 5),
                             CleanInputs(np.repeat(fresh.clean.image_features[[row]], 5, 0)))
    outs = get("hotflip").apply([texts[row]] * 5, [f"other-{k}" for k in range(5)], 2, 0, repeated)
    assert len(set(outs)) > 1
    assert outs == get("hotflip").apply([texts[row]] * 5, [f"other-{k}" for k in range(5)], 2, 0, repeated)


def test_hotflip_white_box_ranks_words_by_saliency_once_per_step_and_caption(blip, memes, monkeypatch):
    texts, ids = _texts_ids(memes)
    white = _context(blip, memes)  # a context of its own: no search to resume
    calls = []
    original = type(blip).text_saliency

    def spy(self, *args, **kwargs):
        calls.append(list(args[0]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(blip), "text_saliency", spy)
    out = get("hotflip").apply(texts[:3], ids[:3], 2, 0, white)
    # per step, one gradient pass per caption still being edited (SALIENCY_BATCH rows, padded to its bucket)
    assert all(len(c) == SALIENCY_BATCH for c in calls)
    assert sorted(c[0] for c in calls[:3]) == sorted(texts[:3])
    assert 3 <= len(calls) <= 3 * BUDGET[2]
    assert all(o != t for o, t in zip(out, texts[:3]))
    # a higher severity resumes the same searches: the steps already taken are not taken again
    calls.clear()
    get("hotflip").apply(texts[:3], ids[:3], 3, 0, white)
    assert len(calls) <= 3 * (BUDGET[3] - BUDGET[2])


def test_hotflips_severities_are_points_on_one_search(white, memes, flipped, blip):
    """Issue 61: a meme's severities share one greedy search, resumed from the lower severities' in the same
    context: each severity's captions are those a search run afresh finds, and a higher severity never lowers the
    loss."""
    texts, ids = _texts_ids(memes)
    for severity in SEVERITIES:
        assert get("hotflip").apply(texts, ids, severity, 0, _context(blip, memes)) == flipped[severity]
    rows = range(len(texts))
    losses = [white.losses(flipped[s], rows, white.labels[list(rows)]) for s in SEVERITIES]
    assert all((after >= before).all() for before, after in zip(losses, losses[1:]))
    assert (losses[-1] > white.losses(texts, rows, white.labels[list(rows)])).all()


@pytest.mark.parametrize("detector", ["white", "black"])
def test_hotflip_batched_equals_one_caption_at_a_time(detector, request, memes, flipped, flipped_black):
    context = request.getfixturevalue(detector)
    texts, ids = _texts_ids(memes)
    p = get("hotflip")
    batched = (flipped if detector == "white" else flipped_black)[2]
    alone = [p.code.fn(t, 2, p.rng(0, mid, 2), context, i) for i, (t, mid) in enumerate(zip(texts, ids))]
    assert alone == batched


def test_a_query_gets_the_same_probabilities_alone_as_among_other_captions(white, memes):
    """Issue 61: the attacks' queries run in fixed-shape batches (one caption bucket, QUERY_BATCH rows, encoder and
    head alike), so a meme attacked alone is scored as it is among others, to the last bit."""
    texts, _ = _texts_ids(memes)
    queries = texts + [t.upper() for t in texts]
    rows = list(range(len(texts))) * 2
    together = white.probabilities(queries, rows)
    alone = np.concatenate([white.probabilities([q], [r]) for q, r in zip(queries, rows)])
    np.testing.assert_array_equal(together, alone)
    assert together.shape == (len(queries), 2)


def test_hotflip_black_box_through_queries(black, memes, flipped_black, demo_detector):
    assert not hasattr(demo_detector, "text_saliency")
    texts, _ = _texts_ids(memes)
    for severity, outs in flipped_black.items():
        for before, after in zip(texts, outs):
            assert after != before
            assert 0 < damerau_levenshtein(before, after) <= BUDGET[severity], (before, after)
        assert _all_losses(black, outs).mean() > _all_losses(black, texts).mean()


def test_hotflip_on_a_detector_with_predict_proba_only(demo_detector, memes):
    class Opaque:  # only what a black box has: classes and predict_proba
        classes = demo_detector.classes

        def predict_proba(self, images, texts):
            return demo_detector.predict_proba(images, texts)

    texts, ids = _texts_ids(memes)
    images = [m.image for m in memes.memes]
    labels = memes.labels("hate")
    context = _context(Opaque(), memes)
    assert context.clean.image_features is None and context.clean.images is not None and not context.white_box
    out = get("hotflip").apply(texts[:4], ids[:4], 1, 0, context)
    assert all(a != b for a, b in zip(texts, out))
    np.testing.assert_allclose(context.probabilities(texts[:4], range(4)),
                               demo_detector.predict_proba(images[:4], texts[:4]), rtol=1e-5)
    assert context.losses(out, range(4), labels[:4]).mean() > context.losses(texts[:4], range(4), labels[:4]).mean()


# --- text_saliency ------------------------------------------------------------------------------------------


def test_text_saliency_spans_cover_the_words_and_leave_no_gradients(blip, white, memes):
    texts, _ = _texts_ids(memes)
    texts = texts + ["nobody: absolutely nobody... (the wifi password!)"]
    features = np.concatenate([white.clean.image_features, white.clean.image_features[:1]])
    labels = list(white.labels) + [1]
    saliency = blip.text_saliency(texts, labels, features)
    assert len(saliency) == len(texts)
    for text, tokens in zip(texts, saliency):
        assert tokens
        for a, b, g in tokens:
            assert 0 <= a < b <= len(text)
            assert isinstance(g, float) and np.isfinite(g) and g >= 0
        for word in re.finditer(r"\S+", text):
            assert any(a < word.end() and b > word.start() for a, b, _ in tokens), (text, word.group())
        assert any(g > 0 for _, _, g in tokens)
    assert all(p.grad is None for p in blip.head_module.parameters())
    for backbone in blip._backbones():
        assert all(not p.requires_grad and p.grad is None for p in backbone.parameters())
    # and the predictions are unchanged by the gradient pass
    np.testing.assert_allclose(white.probabilities(texts[:8], range(8)),
                               blip.head(white.clean.image_features, blip.encode_texts(texts[:8])), rtol=1e-5)


def test_text_saliency_vectors_has_the_embedding_width(blip, white, memes):
    texts, _ = _texts_ids(memes)
    prefixed = [f"the the {t}" for t in texts]
    g = blip.text_saliency_vectors(prefixed, [0] * 8, white.clean.image_features, (4, 7))
    assert tuple(g.shape) == (blip.token_embedding().weight.shape[1],) and torch.isfinite(g).all()
    assert all(p.grad is None for p in blip.head_module.parameters())


# --- universal triggers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def training():
    ds = demo_dataset("train").head(24)
    texts, labels = [m.text for m in ds.memes], ds.labels("hate")
    assert 0 < (labels != 0).sum() <= 16  # every non-target meme is used by the search below (examples=16)
    return lambda: (texts, labels, ds.memes)


@pytest.fixture
def counted(monkeypatch):
    """find_trigger, counted and kept small (few candidates, one round)."""
    calls = []
    original = attacks.find_trigger

    def small(context, length, seed, **kwargs):
        calls.append((length, seed))
        return original(context, length, seed, candidates=4, rounds=1, examples=16)

    monkeypatch.setattr(attacks, "find_trigger", small)
    return calls


def _trigger_context(blip, memes, training, cache_dir):
    return _context(blip, memes, training=training, cache_dir=cache_dir)


def _target_loss(detector, training, trigger: str) -> float:
    texts, labels, ds_memes = training()
    rows = np.flatnonzero(labels != 0)
    pictures = [ds_memes[r].image for r in rows]
    context = AttackContext(detector, labels[rows], CleanInputs(detector.encode_images(pictures), pictures))
    return float(context.losses([f"{trigger} {texts[r]}" for r in rows], range(len(rows)), [0] * len(rows)).mean())


def test_universal_trigger_is_found_once_cached_on_disk_and_reused(blip, memes, training, counted, tmp_path):
    context = _trigger_context(blip, memes, training, tmp_path)
    trigger = trigger_for(context, 2, 0)
    assert counted == [(2, 0)]
    words = trigger.split(" ")
    assert len(words) == 2 and all(w.isalpha() and w.islower() and w.isascii() for w in words)
    # the search only accepts improvements: the loss towards the target class is at most the initial trigger's
    assert _target_loss(blip, training, trigger) <= _target_loss(blip, training, "the the") + 1e-6
    # memoised in the context
    assert trigger_for(context, 2, 0) == trigger and counted == [(2, 0)]
    texts, ids = _texts_ids(memes)
    out = get("universal_trigger").apply(texts, ids, 2, 0, context)
    assert out == [f"{trigger} {t}" for t in texts] and counted == [(2, 0)]
    # on disk, keyed by the checkpoint fingerprint and the memes it was fitted on
    files = list((tmp_path / "triggers").glob("*.json"))
    assert [f.name for f in files] == [f"{blip.fingerprint[:16]}-{context.fit_digest}-2-0-0.json"]
    assert json.loads(files[0].read_text()) == {"trigger": trigger, "fingerprint": blip.fingerprint,
                                                "fit_memes": context.fit_digest, "search": attacks.TRIGGER_SEARCH}
    # another context (another run) with the same cache folder reads it without searching
    again = _trigger_context(blip, memes, training, tmp_path)
    assert trigger_for(again, 2, 0) == trigger and counted == [(2, 0)]
    # another length is another search
    assert len(trigger_for(again, 1, 0).split()) == 1 and counted == [(2, 0), (1, 0)]


def test_a_corrupt_trigger_cache_is_recomputed(blip, memes, training, counted, tmp_path):
    context = _trigger_context(blip, memes, training, tmp_path)
    trigger = trigger_for(context, 1, 0)
    path = tmp_path / "triggers" / f"{blip.fingerprint[:16]}-{context.fit_digest}-1-0-0.json"
    path.write_text('{"trigger": "tru')
    assert trigger_for(_trigger_context(blip, memes, training, tmp_path), 1, 0) == trigger
    assert len(counted) == 2
    assert json.loads(path.read_text())["trigger"] == trigger  # rewritten whole


class _Fingerprinted:
    fingerprint = "f" * 64


@pytest.mark.parametrize("content", [
    "[1]",
    "null",
    '{"trigger": 5}',
    '{"trigger": ""}',
    '{"fingerprint": "x"}',
    "",
    '{"trigger": "older search", "fingerprint": "ff", "fit_memes": "none"}',  # before TRIGGER_SEARCH: fitted again
])
def test_a_trigger_cache_entry_of_the_wrong_shape_is_recomputed(content, tmp_path, monkeypatch):
    monkeypatch.setattr(attacks, "find_trigger", lambda context, length, seed: "fresh words")
    path = tmp_path / "triggers" / f"{'f' * 16}-2-0-0.json"
    path.parent.mkdir()
    path.write_text(content)
    context = AttackContext(_Fingerprinted(), np.zeros(1, dtype=int), cache_dir=tmp_path)
    assert trigger_for(context, 2, 0) == "fresh words"


def test_a_trigger_needs_training_memes(blip, white):
    assert white.training is None
    with pytest.raises(ValueError, match="training"):
        find_trigger(white, 1, 0)


def test_black_box_trigger_search_uses_the_fallback_words(demo_detector, memes, training):
    context = _context(demo_detector, memes, training=training)
    trigger = find_trigger(context, 2, 0, candidates=5, rounds=1, examples=16)
    assert all(w in attacks._FALLBACK_WORDS for w in trigger.split()) and len(trigger.split()) == 2
    assert _target_loss(demo_detector, training, trigger) <= _target_loss(demo_detector, training, "the the") + 1e-6


# --- through the session ------------------------------------------------------------------------------------


def test_hotflip_through_the_session_lowers_accuracy():
    session = RobustnessSession(Options(models=("memeblip2-tda",), data=DataOptions(limit=16),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=50))))
    result = session.evaluate("memeblip2-tda", "text=hotflip@1")
    assert result.condition.id == "text=hotflip@1"
    assert result.values["accuracy"] < result.clean_values["accuracy"]
    engine = session.engine("memeblip2-tda", session.data_spec())
    assert engine.attack_context().white_box
    texts, labels, _ = engine.attacks.training()
    assert len(texts) == len(labels) > 0


def test_training_spec():
    assert training_spec("demo") == "demo:train"
    assert training_spec("demo:test") == "demo:train"
    assert training_spec("pridemm:/x:test") == "pridemm:/x:train"
    assert training_spec("csv:/x.csv") is None


# --- back-translation ---------------------------------------------------------------------------------------


@pytest.fixture
def no_translation_state(monkeypatch):
    monkeypatch.delenv("MEMEROBUST_MARIAN_DIR", raising=False)
    translation._translator.cache_clear()
    translation._cache.cache_clear()
    yield
    translation._translator.cache_clear()
    translation._cache.cache_clear()


def _hub_cached(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return isinstance(try_to_load_from_cache(f"Helsinki-NLP/{name}", "config.json"), str)


def test_back_translation_without_models_raises_backend_missing(no_translation_state):
    if _hub_cached("opus-mt-en-de"):
        pytest.skip("Helsinki-NLP/opus-mt-en-de is in the local Hugging Face cache, so back-translation works here")
    p = get("back_translation")
    assert p.parameters.severities == () and "needs_backend" in p.tags
    with pytest.raises(BackendMissing) as info:
        p("hello", None, np.random.default_rng(0))
    assert "MEMEROBUST_MARIAN_DIR" in str(info.value) and "opus-mt-en-de" in str(info.value)


@pytest.fixture
def tiny_marian(tmp_path, monkeypatch, no_translation_state):
    """Two tiny random MarianMT models (en->de, de->en) with the MiniLM WordPiece tokenizer, saved offline."""
    from transformers import AutoTokenizer, MarianConfig, MarianMTModel
    from transformers.utils import logging

    from pytest_memerobust.detectors.tokenizers import MINILM_TOKENIZER

    logging.disable_progress_bar()
    # MarianMT's generate rejects token_type_ids, which a BERT tokenizer returns by default
    tokenizer = AutoTokenizer.from_pretrained(str(MINILM_TOKENIZER), model_input_names=["input_ids", "attention_mask"])
    for seed, name in enumerate(("opus-mt-en-de", "opus-mt-de-en")):
        torch.manual_seed(seed)
        config = MarianConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                              encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                              decoder_ffn_dim=32, decoder_start_token_id=tokenizer.cls_token_id,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id,
                              forced_eos_token_id=None)
        model = MarianMTModel(config)
        # Random weights never emit [SEP], so greedy decoding would run the full 256 new tokens (seconds per
        # caption): every token ends the sentence here, so a translation is one decoding step.
        model.generation_config.eos_token_id = [i for i in range(len(tokenizer)) if i != tokenizer.pad_token_id]
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    monkeypatch.setenv("MEMEROBUST_MARIAN_DIR", str(tmp_path))
    return tmp_path


def test_back_translation_with_local_marian_models(tiny_marian, monkeypatch):
    p = get("back_translation")
    captions = ["hello there", "love is love and drag queens belong"]
    out = [p(c, None, np.random.default_rng(0)) for c in captions]
    assert all(isinstance(o, str) for o in out)
    cache_file = tiny_marian / "translations-de.json"
    assert json.loads(cache_file.read_text(encoding="utf-8")) == dict(zip(captions, out))
    # deterministic: the same from a fresh process state, with no cache anywhere
    cache_file.unlink()
    translation._translator.cache_clear()
    translation._cache.cache_clear()
    assert [p(c, None, np.random.default_rng(1)) for c in captions] == out
    assert translation.translate(captions, "opus-mt-en-de") == translation.translate(captions, "opus-mt-en-de")
    # the disk cache is used: a new in-memory cache translates nothing
    translation._cache.cache_clear()
    calls = []
    real = translation.translate
    monkeypatch.setattr(translation, "translate", lambda texts, name: calls.append(name) or real(texts, name))
    assert p(captions[0], None, np.random.default_rng(0)) == out[0]
    assert calls == []


def test_a_corrupt_translation_cache_is_ignored_and_rebuilt(tiny_marian):
    cache_file = tiny_marian / "translations-de.json"
    cache_file.write_text('{"hello there": "stale', encoding="utf-8")
    out = get("back_translation")("hello there", None, np.random.default_rng(0))
    assert isinstance(out, str)
    assert json.loads(cache_file.read_text(encoding="utf-8")) == {"hello there": out}


def test_a_translation_cache_of_the_wrong_shape_is_rebuilt(tiny_marian):
    (tiny_marian / "translations-de.json").write_text("[]", encoding="utf-8")
    assert isinstance(get("back_translation")("hello there", None, np.random.default_rng(0)), str)


BT_SUITE = """
[suite]
name = "bt"

[text]
back_translation = true
"""


def test_a_suite_case_whose_backend_is_missing_is_skipped_with_the_reason(pytester, no_translation_state):
    if _hub_cached("opus-mt-en-de"):
        pytest.skip("Helsinki-NLP/opus-mt-en-de is in the local Hugging Face cache, so back-translation works here")
    assert "MEMEROBUST_MARIAN_DIR" not in os.environ
    pytester.makefile(".toml", **{"memerobust-bt": BT_SUITE})
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-limit=8", "--memerobust-bootstrap=50",
                                "-rs", "-p", "no:cacheprovider", ".")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped") == 1 and not outcomes.get("failed") and not outcomes.get("errors")
    result.stdout.fnmatch_lines(["*SKIPPED*back-translation needs MarianMT models*MEMEROBUST_MARIAN_DIR*"])


def test_ablation_views_share_clean_features_but_not_attacked_captions():
    session = RobustnessSession(Options(models=("memeblip2-tda",), data=DataOptions(limit=6),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    session.evaluate("memeblip2-tda", "text=hotflip@1")
    session.evaluate("memeblip2-tda:text", "text=hotflip@1")
    base, view = session.engine("memeblip2-tda", "demo"), session.engine("memeblip2-tda:text", "demo")
    assert base.sides is view.sides  # one cache for both
    attacked = [k for k in base.sides.inputs if k[1] == "hotflip"]
    assert len(attacked) == 2 and {k[-1] for k in attacked} == {id(base), id(view)}  # attacked once per view
    assert base.inputs("text", "hotflip", 1) is not view.inputs("text", "hotflip", 1)


class _QueryRecorder:
    """A detector that records the caption batches an attack's queries reach it in; its class probability is a
    function of the caption alone, so answers can be checked against their captions."""

    def __init__(self, device):
        self.device, self.batches = device, []

    def predict_proba(self, pictures, captions):
        self.batches.append(list(captions))
        p = np.array([len(c) / 100.0 for c in captions])
        return np.stack([1 - p, p], axis=1)


@pytest.mark.parametrize("device, batch", [("cpu", 8), ("cuda:1", 256), (torch.device("cpu"), 8)])
def test_an_attacks_queries_go_shortest_first_in_batches_of_the_devices_size_and_come_back_in_order(device, batch):
    captions = [("word " * (k * 37 % 61)).strip() or "x" for k in range(300)]
    detector = _QueryRecorder(device)
    proba = AttackContext(detector, np.zeros(300, dtype=int)).probabilities(captions, list(range(300)))
    np.testing.assert_array_equal(proba[:, 1], [len(c) / 100.0 for c in captions])  # each answer at its query
    assert [len(b) for b in detector.batches] == [batch] * (300 // batch) + ([300 % batch] if 300 % batch else [])
    sent = [c for b in detector.batches for c in b]
    assert sorted(sent) == sorted(captions) and [len(c) for c in sent] == sorted(len(c) for c in captions)

"""The adaptation-benchmark caption corruptions (perturb/catalogue.py): registry wiring, determinism, how many edits
each severity makes, the exact semantics of each edit, the input contract and the needs-backend errors."""
from __future__ import annotations

import pickle
import re
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# registry._ensure_loaded does not import the catalogue (yet): importing it here registers its perturbations
import pytest_memerobust.perturb.catalogue as catalogue
from pytest_memerobust import errors
from pytest_memerobust.errors import MemeRobustError
from pytest_memerobust.perturb import get, names
from pytest_memerobust.perturb.catalogue import (
    ADVERBS, BACKEND_REASONS, IRRELEVANT_PHRASES, NEGATIONS, OCR_CONFUSIONS, PUNCTUATION_MARKS, SPELLING_RULES,
    STOP_WORDS, BackendMissing)
from pytest_memerobust.perturb.text import QWERTY_NEIGHBOURS, split_core

CHAR = ["ocr", "punctuation", "keyboard", "spelling_error", "char_random_insert", "char_random_replace",
        "char_random_swap", "char_random_delete"]
WORD = ["insert_adverb", "append_irrelevant_phrase", "random_word_insert", "drop_first", "drop_last",
        "drop_first_and_last", "shuffle_order", "random_delete", "random_swap"]
BACKEND = ["synonym_replace", "word_embedding_swap", "pos_aware_insert", "formal_style", "casual_style",
           "passive_voice", "active_voice"]
WORKING = CHAR + WORD
DETERMINISTIC = {"drop_first", "drop_last", "drop_first_and_last"}  # no randomness: the rng is ignored
MAY_CHANGE_MEANING = {"drop_first", "drop_last", "drop_first_and_last", "shuffle_order", "random_delete",
                      "random_swap", "synonym_replace", "word_embedding_swap", "formal_style", "casual_style",
                      "passive_voice", "active_voice"}
SHARES = [0.1, 0.2, 0.3, 0.4, 0.5]
SEP = re.compile(r"(\s+)")

# lower-case words without punctuation, none of them an adverb, stop word or negation of the catalogue, many of them
# with a misspelling rule (believe, receive, phone, back, tonight, when, coffee, later, offence, possible, ...)
VOCAB = (
    "when believe receive phone back tonight coffee later offence possible acceptable make necessary city meme "
    "people cats dogs friday monday internet strangers angry group chat tomorrow yesterday politics football "
    "weather format everyone moved another finally understand nice picture funny mean world kitchen garden "
    "window bottle market teacher student"
).split()
assert not set(VOCAB) & (set(ADVERBS) | set(STOP_WORDS) | NEGATIONS) and len(set(VOCAB)) == len(VOCAB)
LONG = "When the Phone rings at midnight, nobody believes   that the offence\tis real, but everyone laughs anyway!"


def _captions(n: int = 100, seed: int = 0, distinct: bool = False) -> list[str]:
    """n captions of 10 to 30 words from VOCAB (distinct words when asked); every other one Title Cased."""
    r = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = r.choice(VOCAB, size=int(r.integers(10, 31)), replace=not distinct).tolist()
        out.append(" ".join(w.title() if i % 2 else w for w in words))
    return out


def _run(name, captions, severity, seed=11):
    return get(name).apply(captions, [f"m{i}" for i in range(len(captions))], severity, seed)


def _words(text):
    return SEP.split(text)[0::2]


def _seps(text):
    return SEP.split(text)[1::2]


def _n_chars(text):
    return sum(not ch.isspace() for ch in text)


def _hamming(a, b):
    assert len(a) == len(b)
    return sum(x != y for x, y in zip(a, b))


def _expected(share, n):
    return max(1, round(share * n)) if n else 0


def _misspellings(core):
    return {core[:m.start()] + m.expand(repl) + core[m.end():]
            for _, pattern, repl in SPELLING_RULES for m in re.finditer(pattern, core)}


def _ocr_sites(text):
    return len({i for i in range(len(text)) for p in OCR_CONFUSIONS if text.startswith(p, i)})


def _ocr_edits(before, after):
    """Fewest OCR_CONFUSIONS substitutions turning `before` into `after` (inf: no table substitution can)."""

    @lru_cache(maxsize=None)
    def best(i, j):
        if i == len(before):
            return 0 if j == len(after) else float("inf")
        cost = best(i + 1, j + 1) if j < len(after) and before[i] == after[j] else float("inf")
        for pattern, options in OCR_CONFUSIONS.items():
            if before.startswith(pattern, i):
                for new in options:
                    if after.startswith(new, j):
                        cost = min(cost, 1 + best(i + len(pattern), j + len(new)))
        return cost

    return best(0, 0)


def _is_subsequence(short, long):
    it = iter(long)
    return all(w in it for w in short)


# --- registry wiring ----------------------------------------------------------------------------------------


def test_all_names_are_registered_as_text_with_the_benchmark_tag():
    assert set(names(tag="adaptation_benchmark")) == set(WORKING + BACKEND)
    assert set(WORKING + BACKEND) <= set(names(modality="text"))
    assert set(names(tag="needs_backend")) >= set(BACKEND)
    assert not set(WORKING) & set(names(tag="needs_backend"))
    assert set(BACKEND_REASONS) == set(BACKEND)


@pytest.mark.parametrize("name", WORKING + BACKEND)
def test_registry_records(name):
    p = get(name)
    assert p.modality == "text" and not p.needs_model
    assert {"adaptation_benchmark", "text"} <= p.tags
    assert len(p.tags & {"char", "word", "sentence"}) == 1
    assert ("needs_backend" in p.tags) == (name in BACKEND)
    assert p.family in {"char_modification", "text_addition", "positional_drop", "text_swap", "text_style"}
    assert p.traits.label_preserving == (name not in MAY_CHANGE_MEANING)
    assert p.code.doc and "\n" not in p.code.doc
    assert p.parameters.severities == ((1,) if p.family == "text_style" else (1, 2, 3, 4, 5))
    with pytest.raises(ValueError, match="severity 6"):
        p("some caption here", 6, np.random.default_rng(0))


def test_levels_and_families():
    assert {n for n in WORKING + BACKEND if "char" in get(n).tags} == set(CHAR)
    assert {n for n in WORKING + BACKEND if "sentence" in get(n).tags} == {
        "shuffle_order", "formal_style", "casual_style", "passive_voice", "active_voice"}
    assert get("drop_first").family == get("random_delete").family == "positional_drop"


# --- determinism --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", WORKING)
def test_deterministic_per_seed_and_meme(name):
    p = get(name)
    assert p(LONG, 3, np.random.default_rng(5)) == p(LONG, 3, np.random.default_rng(5))
    ids = [f"meme-{i}" for i in range(6)]
    outputs = p.apply([LONG] * 6, ids, 3, seed=7)
    assert outputs == p.apply([LONG] * 6, ids, 3, seed=7)
    assert outputs[2] == p.apply([LONG], ["meme-2"], 3, seed=7)[0]  # batch composition does not matter
    assert all(out != LONG for out in outputs)
    if name in DETERMINISTIC:
        assert len(set(outputs)) == 1
    else:
        assert len(set(outputs)) > 1  # other meme id, other edit



# --- how many edits each severity makes ---------------------------------------------------------------------
# Each measure returns (edits, sites) for one caption. "exact" ones must make max(1, round(share * sites)) edits on
# every caption; the others may fall a little short (a swap or OCR substitution never reuses a character already
# edited). The mean share over 100 captions must be within TOLERANCE of the table.

TOLERANCE = 0.02  # exact counts: only rounding, averaged over 100 captions of 10..30 words
TOLERANCE_SHORT = 0.04  # swaps and OCR: rounding plus the odd site blocked by an earlier edit
TOLERANCE_FEW = 0.03  # spelling_error: only ~6 eligible words a caption, so max(1, round(.)) weighs more


def _keyboard(before, after):
    return _hamming(before, after), sum(ch.isascii() and ch.isalpha() for ch in before)


def _replace(before, after):
    return _hamming(before, after), _n_chars(before)


def _length_change(before, after):
    return abs(len(after) - len(before)), _n_chars(before)


def _swap(before, after):  # a swap moves two characters
    return _hamming(before, after), _n_chars(before)


def _ocr(before, after):
    return _ocr_edits(before, after), _ocr_sites(before)


def _punctuation(before, after):
    return sum(a != b for a, b in zip(_words(before), _words(after))), len(before.split())


def _spelling(before, after):
    eligible = sum(bool(_misspellings(split_core(w)[1])) for w in before.split())
    return sum(a != b for a, b in zip(_words(before), _words(after))), eligible


def _word_count_change(before, after):
    return abs(len(after.split()) - len(before.split())), len(before.split())


def _displaced(before, after):
    return sum(a != b for a, b in zip(before.split(), after.split())), len(before.split())


MEASURES = {  # name: (measure, exact, table, distinct words)
    "keyboard": (_keyboard, True, SHARES, False),
    "char_random_replace": (_replace, True, SHARES, False),
    "char_random_insert": (_length_change, True, SHARES, False),
    "char_random_delete": (_length_change, True, SHARES, False),
    "char_random_swap": (_swap, False, SHARES, False),
    "ocr": (_ocr, False, SHARES, False),
    "punctuation": (_punctuation, True, SHARES, False),
    "spelling_error": (_spelling, True, SHARES, False),
    "insert_adverb": (_word_count_change, True, SHARES, False),
    "random_word_insert": (_word_count_change, True, SHARES, False),
    "random_delete": (_word_count_change, True, SHARES, False),
    "random_swap": (_displaced, True, SHARES, True),
    "shuffle_order": (_displaced, True, [0.2, 0.4, 0.6, 0.8, 1.0], True),
}


@pytest.mark.parametrize("name", sorted(MEASURES))
def test_share_of_edits_follows_the_severity_table(name):
    measure, exact, table, distinct = MEASURES[name]
    captions = _captions(100, seed=1, distinct=distinct)
    means = []
    for severity, share in enumerate(table, start=1):
        shares = []
        for before, after in zip(captions, _run(name, captions, severity)):
            edits, sites = measure(before, after)
            want = _expected(share, sites)
            if name == "char_random_swap":
                want = 2 * _expected(share / 2, sites)
            elif name == "random_swap":
                want = 2 * min(_expected(share / 2, sites), sites // 2)
            elif name == "shuffle_order":
                want = min(sites, max(2, round(share * sites)))
            assert edits == want if exact else 0 < edits <= want, (severity, before, after, edits, want)
            shares.append(edits / sites)
        means.append(float(np.mean(shares)))
    tolerance = TOLERANCE_FEW if name == "spelling_error" else TOLERANCE if exact else TOLERANCE_SHORT
    assert all(abs(got - want) <= tolerance for got, want in zip(means, table)), (means, table)
    assert all(a < b for a, b in zip(means, means[1:])), means


@pytest.mark.parametrize("name", ["drop_first", "drop_last", "drop_first_and_last", "append_irrelevant_phrase"])
def test_count_of_edits_is_the_severity(name):
    for caption in _captions(20, seed=2):
        n = len(caption.split())
        for severity in range(1, 6):
            out = get(name)(caption, severity, np.random.default_rng(severity))
            removed = n - len(out.split())
            if name == "append_irrelevant_phrase":
                assert len(re.findall(r"\.", out)) == severity
            else:  # at least one word stays
                assert removed == min(2 * severity if name == "drop_first_and_last" else severity, n - 1)


# --- semantics of each edit ---------------------------------------------------------------------------------


def test_ocr_only_uses_table_substitutions():
    captions = _captions(40, seed=3) + [LONG, "rn cl vv m d w Il1 O0 e c S5 B8 b6 g9 Z2"]
    for severity in (1, 5):
        for before, after in zip(captions, _run("ocr", captions, severity)):
            assert 0 < _ocr_edits(before, after) < float("inf"), (before, after)
    assert get("ocr")("rn", 1, np.random.default_rng(0)) in {"m", "kn"}  # "rn" -> m, or r -> k
    assert get("ocr")("vv", 1, np.random.default_rng(0)) == "w"
    assert get("ocr")("xxx", 5, np.random.default_rng(0)) == "xxx"  # nothing in the table


def test_keyboard_substitutions_are_qwerty_neighbours_in_case():
    captions = _captions(50, seed=4)
    for before, after in zip(captions, _run("keyboard", captions, 5)):
        for old, new in zip(before, after):
            if old != new:
                assert new.lower() in QWERTY_NEIGHBOURS[old.lower()] and old.isupper() == new.isupper()
    assert get("keyboard")("42 !? 7", 5, np.random.default_rng(0)) == "42 !? 7"


def test_keyboard_hits_characters_not_words():
    # typos/char_keyboard change one letter per hit word; keyboard can change several letters of the same word
    out = get("keyboard")("abcdefghijklmnopqrstuvwxyz", 5, np.random.default_rng(0))
    assert _hamming(out, "abcdefghijklmnopqrstuvwxyz") == 13


def test_punctuation_attaches_listed_marks_after_words():
    captions = _captions(40, seed=5)
    for before, after in zip(captions, _run("punctuation", captions, 5)):
        assert _seps(after) == _seps(before)
        for a, b in zip(_words(before), _words(after)):
            assert b == a or (b[:-1] == a and b[-1] in PUNCTUATION_MARKS)


def test_spelling_errors_come_from_the_rule_table():
    captions = _captions(60, seed=6)
    for before, after in zip(captions, _run("spelling_error", captions, 5)):
        assert _seps(after) == _seps(before)
        for a, b in zip(_words(before), _words(after)):
            if a != b:
                assert b in _misspellings(a), (a, b)
    one = lambda word: {get("spelling_error")(word, 1, np.random.default_rng(s)) for s in range(30)}  # noqa: E731
    assert one("phone") == {"fone", "phonne", "phon"}  # ph -> f, doubled n, silent e
    assert one("receive") == {"recieve", "reseive", "receiv"}  # ei -> ie, soft c, silent e
    assert one("coffee") == {"cofee", "coffe"}
    assert get("spelling_error")("xyz", 5, np.random.default_rng(0)) == "xyz"  # no rule applies


@pytest.mark.parametrize("name", [n for n in CHAR if n != "punctuation"])
def test_character_edits_keep_whitespace_and_word_count(name):
    caption = "  Leading spaces,\ttabs\tand\nnew lines   between words — and trailing!  "
    for seed in range(10):
        out = get(name)(caption, 5, np.random.default_rng(seed))
        assert _seps(out) == _seps(caption) and len(out.split()) == len(caption.split())


def test_char_random_insert_adds_letters_a_to_z():
    captions = _captions(30, seed=7)
    for before, after in zip(captions, _run("char_random_insert", captions, 5)):
        assert _is_subsequence(before, after)
        assert (Counter(after) - Counter(before)).keys() <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def test_char_random_replace_writes_other_letters_in_case():
    captions = _captions(30, seed=8) + ["Hello, World 42!"]
    for before, after in zip(captions, _run("char_random_replace", captions, 5)):
        for old, new in zip(before, after):
            if old != new:
                assert new.lower() in "abcdefghijklmnopqrstuvwxyz" and new.lower() != old.lower()
                assert new.isupper() == old.isupper()


def test_char_random_delete_keeps_the_first_letter_of_every_word():
    captions = _captions(30, seed=9) + ["a b c de"]
    for before, after in zip(captions, _run("char_random_delete", captions, 5)):
        for a, b in zip(before.split(), after.split()):
            assert b and b[0] == a[0] and _is_subsequence(b, a)
    assert get("char_random_delete")("a b c", 5, np.random.default_rng(0)) == "a b c"


def test_char_random_swap_transposes_adjacent_letters_of_one_word():
    captions = _captions(30, seed=10)
    for before, after in zip(captions, _run("char_random_swap", captions, 5)):
        diff = [i for i, (x, y) in enumerate(zip(before, after)) if x != y]
        assert len(diff) % 2 == 0
        for i, j in zip(diff[0::2], diff[1::2]):
            assert j == i + 1 and (after[i], after[j]) == (before[j], before[i])


def test_insert_adverb_inserts_listed_adverbs_before_words():
    captions = _captions(40, seed=12)
    for before, after in zip(captions, _run("insert_adverb", captions, 5)):
        words = iter(before.split())
        expected = next(words)
        for w in after.split():
            if w == expected:
                expected = next(words, None)
            else:
                assert w in ADVERBS
        assert expected is None and after.split()[-1] == before.split()[-1]  # before a word, never at the end


def test_append_irrelevant_phrase_appends_distinct_listed_phrases():
    caption = "  this is fine \n"
    for severity in range(1, 6):
        for seed in range(5):
            out = get("append_irrelevant_phrase")(caption, severity, np.random.default_rng(seed))
            assert out.startswith("  this is fine ") and out.endswith(" \n")
            rest, found = out[len("  this is fine "):-2], []
            while rest:
                phrase = next(p for p in IRRELEVANT_PHRASES if rest.startswith(p))
                found.append(phrase)
                rest = rest[len(phrase):].removeprefix(" ")
            assert len(found) == len(set(found)) == severity


def test_random_word_insert_draws_from_the_caption_and_stop_words_never_negations():
    captions = _captions(40, seed=13)
    for before, after in zip(captions, _run("random_word_insert", captions, 5)):
        assert _is_subsequence(before.split(), after.split())
        assert set(after.split()) <= set(before.split()) | {w.lower() for w in before.split()} | set(STOP_WORDS)
    for seed in range(30):
        out = get("random_word_insert")("i do not hate you, never", 5, np.random.default_rng(seed))
        assert out.split().count("not") == 1 and out.count("never") == 1


@pytest.mark.parametrize("name, severity, caption, want", [
    ("drop_first", 1, "  a b c d e  ", "  b c d e  "),
    ("drop_first", 3, "a b\tc d e", "d e"),
    ("drop_first", 5, "a b c", "c"),
    ("drop_last", 1, "a b c d e\n", "a b c d\n"),
    ("drop_last", 2, "a b\tc  d e", "a b\tc"),
    ("drop_last", 5, "a b c", "a"),
    ("drop_first_and_last", 1, " a b c d e ", " b c d "),
    ("drop_first_and_last", 2, "a b c d e", "c"),
    ("drop_first_and_last", 2, "a b c d", "c"),
    ("drop_first_and_last", 1, "a b", "b"),
    ("drop_first_and_last", 5, "a b c d e f g", "d"),
])
def test_drops_remove_exactly_the_end_words(name, severity, caption, want):
    assert get(name)(caption, severity, np.random.default_rng(0)) == want


@pytest.mark.parametrize("name", ["drop_first", "drop_last", "drop_first_and_last"])
def test_drops_keep_a_contiguous_run_of_words(name):
    for caption in _captions(20, seed=14):
        words = caption.split()
        if len(words) <= 10:  # 2 x 5 words can go: the capped cases are in the table above
            continue
        for severity in range(1, 6):
            out = get(name)(caption, severity, np.random.default_rng(0)).split()
            k = severity
            front = k if name != "drop_last" else 0
            back = k if name != "drop_first" else 0
            assert out == words[front:len(words) - back]


@pytest.mark.parametrize("name", ["shuffle_order", "random_swap"])
def test_reordering_keeps_the_multiset_of_words_and_the_spacing(name):
    captions = [" " + c.replace(" ", "  ", 3) + "\t" for c in _captions(40, seed=15)]
    for severity in range(1, 6):
        for before, after in zip(captions, _run(name, captions, severity)):
            assert Counter(after.split()) == Counter(before.split())
            assert _seps(after) == _seps(before)


def test_shuffle_at_severity_5_moves_every_word():
    for before, after in zip(_captions(30, seed=16, distinct=True),
                             _run("shuffle_order", _captions(30, seed=16, distinct=True), 5)):
        assert all(a != b for a, b in zip(before.split(), after.split()))


def test_random_delete_never_empties_and_keeps_order():
    for caption in ["one", "one two", "  one two  ", *_captions(20, seed=17)]:
        for severity in range(1, 6):
            for seed in range(5):
                out = get("random_delete")(caption, severity, np.random.default_rng(seed))
                assert out.split() and _is_subsequence(out.split(), caption.split())
    assert get("random_delete")("one two", 5, np.random.default_rng(0)).split() in (["one"], ["two"])


# --- the input contract -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", WORKING + BACKEND)
@pytest.mark.parametrize("bad", ["", "   ", "\n\t"])
def test_empty_caption_is_rejected(name, bad):
    with pytest.raises(ValueError, match="empty"):
        get(name)(bad, 1, np.random.default_rng(0))


@pytest.mark.parametrize("name", WORKING)
def test_one_word_caption_never_becomes_empty(name):
    for word in ["hello", "a", "  Wow!\n", "42"]:
        for severity in range(1, 6):
            for seed in range(3):
                out = get(name)(word, severity, np.random.default_rng(seed))
                assert isinstance(out, str) and out.strip(), (word, severity, out)


@settings(max_examples=150, deadline=None)
@given(caption=st.text(min_size=1, max_size=40).filter(lambda s: s.strip()), name=st.sampled_from(WORKING),
       severity=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_any_unicode_caption(caption, name, severity, seed):
    out = get(name)(caption, severity, np.random.default_rng(seed))
    assert isinstance(out, str) and out.strip() and out == get(name)(caption, severity, np.random.default_rng(seed))
    lead, trail = caption[:len(caption) - len(caption.lstrip())], caption[len(caption.rstrip()):]
    assert out.startswith(lead) and out.endswith(trail)
    if name in CHAR:
        assert _seps(out) == _seps(caption)


# --- perturbations that need a backend ----------------------------------------------------------------------


def _wordnet_present() -> bool:
    try:
        catalogue._wordnet()
    except BackendMissing:
        return False
    return True


@pytest.mark.parametrize("name", BACKEND)
def test_needs_backend_raises_backend_missing_with_its_reason(name):
    if name == "synonym_replace" and _wordnet_present():
        pytest.skip("nltk with its WordNet corpus is installed here: synonym_replace works")
    with pytest.raises(BackendMissing, match=re.escape(BACKEND_REASONS[name])) as info:
        get(name)("a caption to rewrite", 1, np.random.default_rng(0))
    assert isinstance(info.value, MemeRobustError)
    if hasattr(errors, "BackendMissing"):  # what suite items turn into a skip
        assert isinstance(info.value, errors.BackendMissing)
    assert info.value.name == name and info.value.reason == BACKEND_REASONS[name]
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value) and again.name == name


def test_backend_reasons_are_one_line_and_name_their_perturbation():
    for name, reason in BACKEND_REASONS.items():
        assert reason.startswith(name + " needs ") and "\n" not in reason
    assert "python -m nltk.downloader wordnet" in BACKEND_REASONS["synonym_replace"]


class _Lemma:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


class _FakeWordNet:
    SYNONYMS = {"happy": ["glad", "felicitous"], "cats": ["true_cat"], "angry": ["furious", "irate"],
                "picture": ["image", "icon"]}

    def synsets(self, word):
        return [type("Synset", (), {"lemmas": lambda self, w=w: [_Lemma(w)]})() for w in self.SYNONYMS.get(word, [])]


def test_synonym_replace_with_a_wordnet_backend(monkeypatch):
    monkeypatch.setattr(catalogue, "_wordnet", lambda: _FakeWordNet())
    caption = "Happy cats and angry dogs in a picture"
    eligible = {"Happy": {"Glad", "Felicitous"}, "angry": {"furious", "irate"}, "picture": {"image", "icon"}}
    for severity in range(1, 6):
        for seed in range(5):
            out = get("synonym_replace")(caption, severity, np.random.default_rng(seed))
            changed = [(a, b) for a, b in zip(caption.split(), out.split()) if a != b]
            assert len(changed) == max(1, round(SHARES[severity - 1] * 3))  # multi-word lemmas are not used
            assert all(b in eligible[a] for a, b in changed), changed

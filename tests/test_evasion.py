"""Behaviour of the moderation-evasion caption perturbations: registry wiring, determinism, severity scaling and,
for each edit, that a human (or a simple normaliser) gets the original words back."""
from __future__ import annotations

import re
import sys
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytest_memerobust.perturb.evasion as evasion  # registers the module until registry._ensure_loaded does
from pytest_memerobust.perturb import get, names
from pytest_memerobust.perturb.text import split_core

NAMES = [
    "homoglyphs", "leetspeak", "zero_width", "spaced_letters", "dotted_letters", "intra_word_punctuation",
    "case_mixing", "fancy_fonts", "emoji_insertion",
]
UNICODE_NAMES = {"homoglyphs", "zero_width", "fancy_fonts", "emoji_insertion"}
CHAR_LEVEL = {"homoglyphs", "leetspeak"}  # severity = share of eligible characters; the others: words or gaps
ADDS_WHITESPACE = {"spaced_letters", "emoji_insertion"}
SHARES = [0.1, 0.2, 0.3, 0.4, 0.5]
ZW = "".join(evasion.ZERO_WIDTH)
SEP = re.compile(r"(\s+)")
SPLIT_SEPARATORS = {"spaced_letters": " ", "dotted_letters": ".", "intra_word_punctuation": ".-_"}

VOCAB = (
    "when you finally understand the meme but everyone already moved on to another format this is fine "
    "nobody expects cats dogs people friday monday coffee internet strangers really angry about nothing "
    "literally every single group chat tonight tomorrow yesterday politics football weather"
).split()
CAPTION = "  Honestly,\tthis (meme) is SO mean to everybody involved...\nbut I still laugh at it 24/7!  "


def _captions(n: int, seed: int = 0) -> list[str]:
    r = np.random.default_rng(seed)
    return [" ".join(r.choice(VOCAB, size=int(r.integers(10, 31)))) for _ in range(n)]


def _words(text: str) -> list[str]:
    return SEP.split(text)[0::2]


def _seps(text: str) -> list[str]:
    return SEP.split(text)[1::2]


def _run(name: str, captions: list[str], severity: int, seed: int = 0) -> list[str]:
    return get(name).apply(captions, [f"m{i}" for i in range(len(captions))], severity, seed)


def _unsplit(before: str, after: str, seps: str) -> list[bool]:
    """Walk `after` along `before`: each word must be there as is, or with one of `seps` between every two
    characters of its core (punctuation around it kept); every separator must be there as is. Returns which words
    were split."""
    pos, split = 0, []
    for k, token in enumerate(SEP.split(before)):
        if k % 2 == 0:
            lead, core, trail = split_core(token)
            forms = [lead + s.join(core) + trail for s in seps] if len(core) >= 2 else []
            hit = next((f for f in forms if after.startswith(f, pos)), None)
            split.append(hit is not None)
            token = token if hit is None else hit
        assert after.startswith(token, pos), (before, after, pos, token)
        pos += len(token)
    assert pos == len(after), (before, after)
    return split


def _strip_emoji(text: str) -> str:
    for e in evasion._emoji_pool():
        text = text.replace(e + " ", "")
    return text


def _hits(name: str, before: str, after: str) -> tuple[int, int]:
    """(units changed, units eligible) of one caption; captions are VOCAB words, so every word/gap is eligible."""
    if name in CHAR_LEVEL:
        table = evasion.homoglyph_table() if name == "homoglyphs" else evasion._LEET_OPTIONS
        assert len(after) == len(before)
        return sum(a != b for a, b in zip(before, after)), sum(ch in table for ch in before)
    if name == "emoji_insertion":
        assert _strip_emoji(after) == before
        return sum(after.count(e) for e in evasion._emoji_pool()), len(_seps(before))
    if name in SPLIT_SEPARATORS:
        split = _unsplit(before, after, SPLIT_SEPARATORS[name])
        return sum(split), len(split)
    wb, wa = _words(before), _words(after)
    assert len(wa) == len(wb)
    return sum(a != b for a, b in zip(wb, wa)), len(wb)


# --- registry wiring ----------------------------------------------------------------------------------------


def test_all_names_are_registered_with_the_evasion_tag():
    assert names(tag="evasion") == sorted(NAMES)
    assert set(NAMES) <= set(names(modality="text"))
    assert set(names(tag="unicode")) & set(NAMES) == UNICODE_NAMES
    assert set(names(tag="ascii")) & set(NAMES) == set(NAMES) - UNICODE_NAMES


@pytest.mark.parametrize("name", NAMES)
def test_registry_records(name):
    p = get(name)
    assert (p.modality, p.family) == ("text", "evasion")
    assert p.parameters.severities == (1, 2, 3, 4, 5)
    assert p.traits.label_preserving and not p.needs_model
    level = "word" if name == "emoji_insertion" else "char"
    assert p.tags == {"text", "evasion", "unicode" if name in UNICODE_NAMES else "ascii", level}
    assert p.code.doc and "\n" not in p.code.doc
    assert p.code.fn is getattr(evasion, name)


# --- determinism and the input contract ---------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_apply_is_deterministic_per_seed_and_meme(name):
    p, x = get(name), CAPTION
    first = p.apply([x, x], ["m1", "m2"], 3, seed=7)
    assert first[0] == p.apply([x], ["m1"], 3, seed=7)[0]  # other batch composition, same meme
    assert first[0] != first[1]  # other meme id
    assert first[0] != p.apply([x], ["m1"], 3, seed=8)[0]  # other seed
    assert first[0] != x



@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", ["", "   ", "\n\t"])
def test_empty_caption_is_rejected(name, bad):
    with pytest.raises(ValueError, match="empty"):
        get(name)(bad, 1, np.random.default_rng(0))


@pytest.mark.parametrize("name", NAMES)
def test_non_str_caption_is_rejected(name):
    with pytest.raises(ValueError, match="str"):
        get(name)(b"bytes caption", 1, np.random.default_rng(0))


@pytest.mark.parametrize("name, caption", [(n, "... !? \u2014") for n in NAMES if n != "emoji_insertion"] + [
    (n, "2024 ... 42 \u00bf?") for n in NAMES if n not in {"fancy_fonts", "emoji_insertion"}  # no letter
] + [
    ("homoglyphs", "kt mm tk"),  # k, m, t have no look-alike in the chosen scripts
    ("leetspeak", "ruwu kyr"),  # none of a b e g i o s t
    ("case_mixing", "I 4 a 2"),  # fewer than two letters per word
    ("emoji_insertion", "  lonely  "),  # no gap between two words
])
def test_nothing_eligible_leaves_the_caption_alone(name, caption):
    for seed in range(5):
        assert get(name)(caption, 5, np.random.default_rng(seed)) == caption


# --- severity scaling ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_share_of_units_hit_follows_the_table(name):
    captions = _captions(100)
    means = []
    for severity in range(1, 6):
        shares = []
        for before, after in zip(captions, _run(name, captions, severity)):
            hit, eligible = _hits(name, before, after)
            assert hit == max(1, round(SHARES[severity - 1] * eligible)), (before, after)
            shares.append(hit / eligible)
        means.append(float(np.mean(shares)))
    assert all(a < b for a, b in zip(means, means[1:])), means
    for got, want in zip(means, SHARES):
        assert abs(got - want) <= 0.03, (means, SHARES)


@pytest.mark.parametrize("name", sorted(set(NAMES) - ADDS_WHITESPACE))
def test_whitespace_is_kept_exactly(name):
    for seed in range(20):
        out = get(name)(CAPTION, 5, np.random.default_rng(seed))
        assert _seps(out) == _seps(CAPTION)
        assert len(_words(out)) == len(_words(CAPTION))


def test_one_word_is_hit_at_least():
    caption = "one two three four"  # 0.1 * 4 rounds to 0, but severity 1 must still do something
    for name in sorted(set(NAMES) - CHAR_LEVEL - {"emoji_insertion"}):
        hit, _ = _hits(name, caption, get(name)(caption, 1, np.random.default_rng(0)))
        assert hit == 1, name


# --- homoglyphs ---------------------------------------------------------------------------------------------


def _package_class(ch: str) -> set:
    """Independent of the module: code points reachable from `ch` through the package's confusables pairs."""
    from confusable_homoglyphs import confusables

    seen, todo = {ch}, [ch]
    while todo:
        for entry in confusables.confusables_data.get(todo.pop(), []):
            if len(entry["c"]) == 1 and entry["c"] not in seen:
                seen.add(entry["c"])
                todo.append(entry["c"])
    return seen


def test_homoglyph_table_is_single_letters_of_other_scripts():
    from confusable_homoglyphs import categories

    table = evasion.homoglyph_table()
    assert set("aceijopsxyABEHIKMOPTX") <= set(table)
    assert "а" in table["a"] and "о" in table["o"] and "Α" in table["A"]  # Cyrillic a, o; Greek Alpha
    assert "І" in table["I"]  # Cyrillic I, reached through the prototype "l"
    for letter, lookalikes in table.items():
        assert list(lookalikes) == sorted(set(lookalikes)) and letter not in lookalikes
        for ch in lookalikes:
            assert len(ch) == 1 and ord(ch) <= 0xFFFF
            assert unicodedata.category(ch) in {"Lu", "Ll", "Lo"}
            assert unicodedata.normalize("NFKC", ch) == ch
            assert categories.alias(ch) in evasion.HOMOGLYPH_SCRIPTS
            assert letter in _package_class(ch)


def test_homoglyphs_are_confusable_with_the_letter_they_replace():
    from confusable_homoglyphs import confusables

    captions = _captions(30, seed=1) + [c.upper() for c in _captions(30, seed=2)]
    changed = 0
    for before, after in zip(captions, _run("homoglyphs", captions, 5)):
        assert after != before and len(after) == len(before)
        for old, new in zip(before, after):
            if old != new:
                changed += 1
                assert old.isascii() and old.isalpha()
                assert new in evasion.homoglyph_table()[old]
                assert old in _package_class(new)
                assert confusables.is_confusable(new, preferred_aliases=["latin"])
                assert confusables.is_dangerous(after)  # mixed script with a Latin look-alike
    assert changed > 500


def test_homoglyphs_without_the_package_name_it(monkeypatch):
    evasion.homoglyph_table.cache_clear()
    monkeypatch.setitem(sys.modules, "confusable_homoglyphs", None)
    try:
        with pytest.raises(ImportError, match="confusable-homoglyphs"):
            get("homoglyphs")("some caption", 1, np.random.default_rng(0))
        with pytest.raises(ValueError, match="empty"):  # bad input is still reported first
            get("homoglyphs")(" ", 1, np.random.default_rng(0))
    finally:
        monkeypatch.undo()
        evasion.homoglyph_table.cache_clear()
    assert evasion.homoglyph_table()["a"]


# --- leetspeak ----------------------------------------------------------------------------------------------


def test_leetspeak_substitutes_only_table_letters():
    captions = _captions(30) + [c.title() for c in _captions(30, seed=3)]
    for before, after in zip(captions, _run("leetspeak", captions, 5)):
        assert len(after) == len(before) and after != before
        for old, new in zip(before, after):
            if old != new:
                assert new in evasion.LEET[old.lower()]
    out = get("leetspeak")("Big Boss SAYS it, 2024!", 5, np.random.default_rng(0))
    assert re.sub(r"[a-zA-Z]", "", out).count("2024!") == 1


# --- zero width ---------------------------------------------------------------------------------------------


def test_removing_zero_width_characters_gives_the_original():
    captions = _captions(50) + [CAPTION, "(hi), ok... don't!"]
    for severity in (1, 5):
        for before, after in zip(captions, _run("zero_width", captions, severity)):
            assert after != before
            assert after.translate({ord(z): None for z in ZW}) == before
            for word in _words(after):
                inserted = [i for i, ch in enumerate(word) if ch in ZW]
                assert len(inserted) <= 1  # one per hit word
                if inserted:
                    lead, core, trail = split_core(word.translate({ord(z): None for z in ZW}))
                    assert len(lead) < inserted[0] < len(lead) + len(core)  # inside the core, not at an edge


# --- letters split by separators ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SPLIT_SEPARATORS))
def test_split_letters_join_back_to_the_original_word(name):
    captions = _captions(40) + [CAPTION]
    for before, after in zip(captions, _run(name, captions, 5)):
        assert any(_unsplit(before, after, SPLIT_SEPARATORS[name]))
    for seed in range(10):  # punctuation around a word stays outside: "(h.a.t.e)," not "(.h.a.t.e.),"
        out = get(name)("(hate), them!", 5, np.random.default_rng(seed))
        assert _unsplit("(hate), them!", out, SPLIT_SEPARATORS[name]).count(True) == 1
        assert out.startswith("(h") and out.endswith("m!")


def test_spaced_letters_examples():
    assert get("spaced_letters")("hate", 1, np.random.default_rng(0)) == "h a t e"
    assert get("dotted_letters")("hate", 1, np.random.default_rng(0)) == "h.a.t.e"
    seps = {get("intra_word_punctuation")("hate", 1, np.random.default_rng(s))[1] for s in range(30)}
    assert seps == set(evasion.INTRA_WORD_SEPARATORS)


# --- case mixing --------------------------------------------------------------------------------------------


def test_case_mixing_lowercases_back_to_the_original():
    captions = _captions(50) + [CAPTION, "Éclair café NAÏVE straße Ǆungla"]
    for before, after in zip(captions, _run("case_mixing", captions, 5)):
        assert after != before
        assert after.lower() == before.lower()
    assert get("case_mixing")("hate", 1, np.random.default_rng(0)).lower() == "hate"


@pytest.mark.parametrize("word", ["ab", "AB", "aB", "hate"])
def test_case_mixing_always_changes_a_hit_word(word):
    for seed in range(30):
        assert get("case_mixing")(word, 1, np.random.default_rng(seed)) != word


# --- fancy fonts --------------------------------------------------------------------------------------------


def test_font_tables_are_complete_and_nfkc_reversible():
    tables = evasion._font_tables()
    assert len(tables) == len(evasion.FONT_STYLES) >= 7
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    with_digits = 0
    for table in tables:
        assert set(letters) <= set(table)
        with_digits += set("0123456789") <= set(table)
        assert len(set(table.values())) == len(table)  # one styled character per letter/digit
        for plain, fancy in table.items():
            assert len(fancy) == 1 and unicodedata.normalize("NFKC", fancy) == plain
            # the math block, or one of its reserved holes filled by the Letterlike Symbols block
            assert 0x1D400 <= ord(fancy) <= 0x1D7FF or 0x2100 <= ord(fancy) <= 0x214F
    assert with_digits == 5  # bold, double-struck, sans-serif, sans-serif bold, monospace
    style = dict(zip(evasion.FONT_STYLES, tables))
    assert style["SCRIPT"]["e"] == "\u212f" and style["SCRIPT"]["B"] == "\u212c"
    assert style["FRAKTUR"]["C"] == "\u212d" and style["DOUBLE-STRUCK"]["R"] == "\u211d"
    assert style["ITALIC"]["h"] == "\u210e" and style["BOLD"]["A"] == unicodedata.lookup("MATHEMATICAL BOLD CAPITAL A")


def test_fancy_fonts_nfkc_normalise_back_to_the_original():
    captions = _captions(60) + [CAPTION, "Zebra Quiz HIGH CRISP scrub gog 0123456789"]
    styles_seen = set()
    for severity in (1, 5):
        for before, after in zip(captions, _run("fancy_fonts", captions, severity)):
            assert after != before
            assert unicodedata.normalize("NFKC", after) == before
            fancy = [ch for ch in after if not ch.isascii()]
            styles_seen |= {i for i, t in enumerate(evasion._font_tables()) if set(fancy) <= set(t.values())}
    assert len(styles_seen) >= 10  # the style is drawn per caption


# --- emoji --------------------------------------------------------------------------------------------------


def test_emoji_pool_is_sorted_single_fully_qualified_emoji():
    emoji = pytest.importorskip("emoji")
    pool = evasion._emoji_pool()
    assert list(pool) == sorted(set(pool)) and len(pool) > 500
    for e in pool:
        assert len(e) == 1
        data = emoji.EMOJI_DATA[e]
        assert data["status"] == emoji.STATUS["fully_qualified"] and data["E"] <= evasion.EMOJI_MAX_VERSION
    for e in evasion.FALLBACK_EMOJI:
        assert e in emoji.EMOJI_DATA and len(e) == 1


def test_removing_the_emoji_gives_back_the_original():
    captions = _captions(50) + [CAPTION]
    for before, after in zip(captions, _run("emoji_insertion", captions, 5)):
        assert after != before
        assert _strip_emoji(after) == before
        assert _words(_strip_emoji(after)) == _words(before)


def test_emoji_fallback_without_the_package(monkeypatch):
    evasion._emoji_pool.cache_clear()
    monkeypatch.setitem(sys.modules, "emoji", None)
    try:
        assert evasion._emoji_pool() == evasion.FALLBACK_EMOJI
        out = get("emoji_insertion")("one two three four five", 5, np.random.default_rng(0))
        added = [ch for ch in out if not ch.isascii()]
        assert added and set(added) <= set(evasion.FALLBACK_EMOJI)
    finally:
        monkeypatch.undo()
        evasion._emoji_pool.cache_clear()
    assert len(evasion._emoji_pool()) >= len(evasion.FALLBACK_EMOJI)


# --- properties ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(caption=st.text(min_size=1, max_size=40).filter(lambda s: s.strip()), name=st.sampled_from(NAMES),
       severity=st.integers(1, 5))
def test_any_unicode_caption(caption, name, severity):
    out = get(name)(caption, severity, np.random.default_rng(0))
    assert isinstance(out, str)
    assert out == get(name)(caption, severity, np.random.default_rng(0))
    if name not in ADDS_WHITESPACE:
        assert _seps(out) == _seps(caption)
    if name == "zero_width":
        assert out.translate({ord(z): None for z in ZW}) == caption.translate({ord(z): None for z in ZW})
    if name == "fancy_fonts":
        assert unicodedata.normalize("NFKC", out) == unicodedata.normalize("NFKC", caption)

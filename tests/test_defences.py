"""Input normalisers in front of a detector: each on concrete strings, each against the evasion edit it is meant
to undo, the registry and its entry points, and the adaptive attacker that re-chooses the edits a defence undoes."""
from __future__ import annotations

import sys
from importlib.metadata import EntryPoint

import pytest

from pytest_memerobust.detectors import defences
from pytest_memerobust.detectors.defences import Defence, adaptive_perturb, undoes
from pytest_memerobust.errors import BackendMissing
from pytest_memerobust.perturb import get as get_perturbation
from pytest_memerobust.perturb import names as perturbation_names

BUILT_INS = ["case", "confusables", "leetspeak", "nfkc", "spelling", "whitespace", "zero_width"]
# evasion perturbation -> the built-in normaliser that undoes it
UNDONE_BY = {
    "homoglyphs": "confusables", "leetspeak": "leetspeak", "zero_width": "zero_width",
    "spaced_letters": "whitespace", "dotted_letters": "whitespace", "intra_word_punctuation": "whitespace",
    "case_mixing": "case", "fancy_fonts": "nfkc",
}
# Four words, so severity 3 (30%) hits exactly one word and two spaced-out words never touch ("t h e y h a t e"
# cannot be split back); every word has three letters or more, one of them not leetspeak-eligible (so a word never
# becomes all digits: "to" -> "70" stays), no capital that leetspeak writes (it folds to lowercase), no word-initial
# "l" (confusables reads Greek Iota / Cyrillic I there as "I").
CAPTIONS = ["they hate women everywhere", "send them back home", "nobody wants your kind", "Muslims are pure trash"]


# --- each normaliser on concrete strings --------------------------------------------------------------------


@pytest.mark.parametrize("name, text, expected", [
    ("nfkc", "𝐡𝐚𝐭𝐞", "hate"),
    ("nfkc", "ｈａｔｅ ｔｈｅｍ", "hate them"),
    ("confusables", "h\u0430te", "hate"),                          # Cyrillic a
    ("confusables", "\u0397\u0391\u03a4\u0395", "HATE"),           # Greek capitals
    ("confusables", "he\u0399\u0399o \u0399t", "hello It"),        # Greek Iota: "l" after a lowercase letter, else "I"
    ("confusables", "привет hеllo", "привет hello"),          # a Russian word (п, и, в, т) is kept
    ("zero_width", "ha\u200bte", "hate"),
    ("zero_width", "ha\u00adte \u202ethem\u202c\u200f", "hate them"),
    ("leetspeak", "h4t3", "hate"),
    ("leetspeak", "2024", "2024"),
    ("leetspeak", "5 cats", "5 cats"),
    ("leetspeak", "k!ll $ay h@te, 7h3m!!", "kill say hate, them!!"),
    ("leetspeak", "the 3rd time in the 90s 4nd", "the 3rd time in the 90s and"),
    ("whitespace", "h a t e them", "hate them"),
    ("whitespace", "  we \t hate\n them ", "we hate them"),
    ("whitespace", "h.a.t.e h-a-t-e h_a_t_e", "hate hate hate"),
    ("whitespace", "(h a t e), (h.a.t.e).", "(hate), (hate)."),
    ("whitespace", "i s not a b e.g. U.S.A", "i s not a b e.g. USA"),  # two single letters stay apart
    ("case", "HaTe", "hate"),
])
def test_normaliser_on_concrete_strings(name, text, expected):
    assert defences.get(name)(text) == expected


def test_spelling_corrects_word_by_word_keeping_punctuation_and_first_letter_case():
    pytest.importorskip("spellchecker")
    assert defences.get("spelling")("I realy hatte them, Peple!") == "I really hate them, People!"


def test_spelling_without_pyspellchecker_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "spellchecker", None)  # `import spellchecker` raises ImportError
    defences._spell_checker.cache_clear()
    try:
        with pytest.raises(BackendMissing, match=r"pytest-memerobust\[defences\]"):
            defences.get("spelling")("hello")
    finally:
        defences._spell_checker.cache_clear()


# --- each defence against its evasion perturbation ----------------------------------------------------------


def test_the_evasion_perturbations_are_registered_under_these_names():
    assert set(UNDONE_BY) <= set(perturbation_names("text"))


@pytest.mark.parametrize("perturbation", sorted(UNDONE_BY))
def test_each_defence_undoes_its_evasion_edit_at_severity_3(perturbation):
    p, defence = get_perturbation(perturbation), Defence.parse(UNDONE_BY[perturbation])
    for seed in range(5):
        for caption, edited in zip(CAPTIONS, p.apply(CAPTIONS, ["a", "b", "c", "d"], 3, seed)):
            assert edited != caption
            assert undoes(defence, caption, edited), (caption, edited)


def test_a_composed_defence_undoes_stacked_edits():
    chain = Defence.parse("nfkc+zero_width+confusables+leetspeak+whitespace+case")
    assert chain("Т h e y  h4\u200bt3 ｗｏｍｅｎ 𝐄𝐕𝐄𝐑𝐘𝐖𝐇𝐄𝐑𝐄") == "they hate women everywhere"
    assert undoes(chain, "They hate women", "Т h e y  h4\u200bt3 ｗｏｍｅｎ")
    assert not undoes(chain, "They hate women", "They love women")


# --- registry and specs -------------------------------------------------------------------------------------


def test_built_ins_are_registered_with_a_description():
    assert set(BUILT_INS) <= set(defences.names())
    assert all(defences.get(name).description for name in BUILT_INS)


def test_defence_specs_parse_to_the_same_defence():
    d = Defence.parse("nfkc + confusables+zero_width")
    assert d == Defence.parse(["nfkc", "confusables", "zero_width"]) == defences.parse(d.id)
    assert d.names == ("nfkc", "confusables", "zero_width")
    assert d.id == "nfkc+confusables+zero_width"
    assert d("𝐡\u0430\u200bte") == "hate"


def test_an_unknown_normaliser_is_named_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown normaliser 'bogus'.*confusables.*zero_width"):
        Defence.parse("nfkc+bogus")
    with pytest.raises(KeyError, match="'leet'"):
        defences.get("leet")
    with pytest.raises(ValueError, match="at least one"):
        Defence.parse([])


def test_register_refuses_a_second_function_under_a_taken_name_or_a_plus(monkeypatch):
    monkeypatch.setattr(defences, "_REGISTRY", dict(defences._REGISTRY))
    with pytest.raises(ValueError, match="'nfkc' is already registered"):
        defences.register("nfkc", str.upper)
    with pytest.raises(ValueError, match="without '\\+'"):
        defences.register("a+b", str.upper)
    defences.register("upper", str.upper, "shout")
    assert defences.get("upper").description == "shout"
    assert Defence.parse("upper+case")("Hate") == "hate"


def test_a_third_party_normaliser_loads_through_the_entry_point_group(monkeypatch):
    seen = []

    def fake_entry_points(group):
        seen.append(group)
        return [EntryPoint(name="capwords", value="string:capwords", group=group)]

    monkeypatch.setattr(defences, "_REGISTRY", dict(defences._REGISTRY))
    monkeypatch.setattr(defences, "_entry_points_loaded", False)
    monkeypatch.setattr(defences, "entry_points", fake_entry_points)
    assert "capwords" in defences.names()
    assert seen == ["pytest_memerobust.defences"]
    assert Defence.parse("whitespace+capwords")("h a t e   them") == "Hate Them"
    defences.names()
    assert seen == ["pytest_memerobust.defences"]  # loaded once


# --- adaptive attack ----------------------------------------------------------------------------------------


def test_adaptive_rechooses_homoglyphs_that_confusables_undoes():
    # Seed 4 writes "losers" with a Greek omicron, which confusables reads back; a look-alike of the first "l"
    # (Greek Iota, Cyrillic I or palochka) reads as "I" there, which the adaptive attacker picks instead.
    caption, key = "look at these losers", (4, "m")
    plain = get_perturbation("homoglyphs").apply([caption], ["m"], 3, 4)[0]
    assert undoes("confusables", caption, plain)
    adaptive = adaptive_perturb("homoglyphs", caption, 3, key, "confusables")
    assert not undoes("confusables", caption, adaptive)
    assert defences.confusables(adaptive) == "Iook at these Iosers"
    assert adaptive == adaptive_perturb("homoglyphs", caption, 3, key, Defence.parse("confusables"))


@pytest.mark.parametrize("seed", range(3))
def test_adaptive_keeps_the_plain_edit_when_the_perturbation_offers_nothing_better(seed):
    # no "l": every homoglyph edit of these words is read back, so each word keeps its first (undone) edit
    caption = CAPTIONS[0]
    plain = get_perturbation("homoglyphs").apply([caption], ["m"], 3, seed)[0]
    assert adaptive_perturb("homoglyphs", caption, 3, (seed, "m"), "confusables") == plain


def test_adaptive_keeps_an_edit_the_defence_leaves():
    caption = CAPTIONS[1]
    plain = get_perturbation("leetspeak").apply([caption], ["m"], 3, 0)[0]
    assert adaptive_perturb("leetspeak", caption, 3, (0, "m"), "case") == plain  # casefold leaves leetspeak


def test_adaptive_redraws_the_whole_caption_when_words_are_split():
    # Seed 1 spaces out "hate", which the whitespace normaliser joins back; "i s" (two letters) it leaves.
    caption = "hate is real"
    plain = get_perturbation("spaced_letters").apply([caption], ["m"], 3, 1)[0]
    assert plain == "h a t e is real" and undoes("whitespace", caption, plain)
    assert adaptive_perturb("spaced_letters", caption, 3, (1, "m"), "whitespace") == "hate i s real"


def test_adaptive_is_deterministic_and_keyed():
    caption = "lazy liars like lemmings and losers"
    runs = {adaptive_perturb("homoglyphs", caption, 3, (0, "m"), "confusables") for _ in range(3)}
    assert len(runs) == 1
    assert adaptive_perturb("homoglyphs", caption, 3, "m", "confusables") in runs  # a bare meme id is seed 0
    assert adaptive_perturb("homoglyphs", caption, 3, (1, "m"), "confusables") not in runs


def test_adaptive_refuses_what_is_not_a_caption_perturbation():
    with pytest.raises(ValueError, match="'gaussian_noise'"):
        adaptive_perturb("gaussian_noise", "hate", 3, 0, "nfkc")
    with pytest.raises(KeyError, match="'no_such_edit'"):
        adaptive_perturb("no_such_edit", "hate", 3, 0, "nfkc")


def test_public_names_exist():
    assert all(hasattr(defences, name) for name in defences.__all__)

"""HateProof-style human caption edits (perturb/human_edits.py): known outputs, what each edit may and may not
change, severity, determinism, the input contract, the defence that reads leet_mix back, and the word-rewrite
candidates for attacks."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_memerobust.detectors import defences
from pytest_memerobust.detectors.defences import Defence, undoes
from pytest_memerobust.perturb import get, names
from pytest_memerobust.perturb.distance import words_changed
from pytest_memerobust.perturb.evasion import LEET
from pytest_memerobust.perturb.human_edits import EMOJI_WORDS, FILLERS, LETTER_EMOJI, human_candidates

NAMES = ["emoji_substitution", "emoji_leetspeak", "leet_mix", "word_merge", "word_split", "filler_words",
         "letter_repeat"]
SHARES = [0.1, 0.2, 0.3, 0.4, 0.5]
CAPTION = "They want to kill all women and call them rats, so disgusting!"
SEP = re.compile(r"(\s+)")
# lower-case words, a third of them in EMOJI_WORDS, none a filler
VOCAB = ("when believe receive phone back tonight coffee later people friday monday internet strangers group chat "
         "women kill rats pigs love muslims gay eyes money fire police snake").split()


def _captions(n: int = 60, seed: int = 0) -> list[str]:
    r = np.random.default_rng(seed)
    return [" ".join(r.choice(VOCAB, size=int(r.integers(8, 16))).tolist()) for _ in range(n)]


def _run(name, captions, severity, seed=5):
    return get(name).apply(captions, [f"m{i}" for i in range(len(captions))], severity, seed)


def _words(text):
    return SEP.split(text)[0::2]


def _hits(n: int, share: float) -> int:
    return max(1, round(share * n)) if n else 0


# --- registry -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_registered_as_a_label_preserving_human_edit_with_five_severities(name):
    p = get(name)
    assert (p.modality, p.family, p.parameters.severities) == ("text", "human_edits", (1, 2, 3, 4, 5))
    assert p.traits.label_preserving and not p.needs_model
    assert {"human_edit", "text"} <= p.tags and len(p.tags & {"char", "word"}) == 1
    assert name in names("text", tag="human_edit")
    assert p.code.doc  # `memerobust list` prints the docstring's first line


# --- known outputs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, severity, seed, expected", [
    ("emoji_substitution", 2, 0, "They want to kill all women and call them 🐀, so 🤮!"),
    ("emoji_substitution", 5, 1, "They want to 💀 all 👩 and call them 🐀, so 🤢!"),
    ("emoji_leetspeak", 2, 0, "They want to kill all women and call th❤️m rats, so d❤️sgusting!"),
    ("emoji_leetspeak", 5, 1, "They want to k1️⃣ll all w❤️men and call th3️⃣m rats, so disg❤️sting!"),
    ("leet_mix", 2, 0, "They want to kill all women and C4ll 7Hem rats, so disgusting!"),
    ("leet_mix", 5, 1, "7hEy want to k1lL @Ll women and C4ll them ra7S, so disgusting!"),
    ("word_merge", 2, 0, "They want to kill all women and callthemrats, so disgusting!"),
    ("word_merge", 5, 1, "Theywanttokillall women andcall themrats, so disgusting!"),
    ("word_split", 2, 0, "They want to kill all women and c all t hem rats, so disgusting!"),
    ("filler_words", 2, 0, "They want to kill all women and call tbh them rats, tbh so disgusting!"),
    ("letter_repeat", 2, 0, "They want to kill all women and caaall them raaats, so disgusting!"),
])
def test_known_outputs(name, severity, seed, expected):
    assert get(name)(CAPTION, severity, np.random.default_rng(seed)) == expected


# --- what each edit changes ---------------------------------------------------------------------------------


def test_emoji_substitution_at_severity_5_swaps_every_table_word_and_nothing_else():
    text = "(Women), the BLACK car and Muslims love rats; nothing else"
    out = get("emoji_substitution")(text, 5, np.random.default_rng(0))
    assert out == "(👩), the BLACK car and 👳🏾 ❤️ 🐀; nothing else"  # "black" is not in the table
    assert get("emoji_substitution")("a calm sunny morning", 5, np.random.default_rng(0)) == "a calm sunny morning"


def test_emoji_substitution_hits_the_share_of_table_words():
    for severity, share in zip(range(1, 6), [0.2, 0.4, 0.6, 0.8, 1.0]):
        for before, after in zip(_captions(), _run("emoji_substitution", _captions(), severity)):
            old, new = _words(before), _words(after)
            eligible = [w for w in old if w in EMOJI_WORDS]
            changed = [(a, b) for a, b in zip(old, new) if a != b]
            assert len(new) == len(old) and len(changed) == _hits(len(eligible), share)
            assert all(b in EMOJI_WORDS[a] for a, b in changed)


def test_every_table_emoji_is_a_fully_qualified_emoji():
    emoji = pytest.importorskip("emoji")
    qualified = emoji.STATUS["fully_qualified"]
    for word, options in EMOJI_WORDS.items():
        assert word == word.lower() and options
        for e in options:
            assert emoji.EMOJI_DATA.get(e, {}).get("status") == qualified, (word, e)


def test_emoji_leetspeak_replaces_one_inner_vowel_per_hit_word():
    for before, after in zip(_captions(), _run("emoji_leetspeak", _captions(), 3)):
        old, new = _words(before), _words(after)
        eligible = [w for w in old if any(ch in "aeiou" for ch in w[1:-1])]
        changed = [(a, b) for a, b in zip(old, new) if a != b]
        assert len(changed) == _hits(len(eligible), 0.3)
        for a, b in changed:
            i = next(k for k in range(len(a)) if a[k] != b[k])
            assert 0 < i < len(a) - 1 and a[i] in "aeiou"
            keycaps = tuple(d + "\ufe0f\u20e3" for d in LEET.get(a[i], "") if d.isdigit())
            assert b[i:len(b) - (len(a) - i - 1)] in LETTER_EMOJI + keycaps
            assert b[:i] == a[:i] and b.endswith(a[i + 1:])


def test_leet_mix_mixes_a_leet_substitute_and_a_case_flip_in_each_hit_word():
    for before, after in zip(_captions(), _run("leet_mix", _captions(), 4)):
        changed = [(a, b) for a, b in zip(_words(before), _words(after)) if a != b]
        assert changed
        for a, b in changed:
            assert len(a) == len(b) and not b.endswith("!")
            diffs = [(x, y) for x, y in zip(a, b) if x != y]
            assert len(diffs) == max(2, round(0.4 * len(a)))
            assert any(y in LEET.get(x, "") for x, y in diffs) and any(y == x.upper() for x, y in diffs)


def test_the_leetspeak_and_case_defence_reads_leet_mix_back():
    defence = Defence.parse("leetspeak+case")
    for severity in range(1, 6):
        for before, after in zip(_captions(), _run("leet_mix", _captions(), severity)):
            assert after != before and undoes(defence, before, after), (before, after)


def test_word_merge_only_removes_whitespace_between_words():
    for severity, share in zip(range(1, 6), SHARES):
        for before, after in zip(_captions(), _run("word_merge", _captions(), severity)):
            assert after.split() != before.split() and "".join(after.split()) == "".join(before.split())
            gaps = len(before.split()) - 1
            assert len(before.split()) - len(after.split()) == _hits(gaps, share)
    assert get("word_merge")("  lonely  ", 5, np.random.default_rng(0)) == "  lonely  "


def test_word_split_puts_one_space_between_two_letters_of_each_hit_word():
    for before, after in zip(_captions(), _run("word_split", _captions(), 3)):
        assert "".join(after.split()) == "".join(before.split())
        assert len(after.split()) - len(before.split()) == _hits(len(before.split()), 0.3)  # every word has 3+ letters
    assert get("word_split")("go to it", 5, np.random.default_rng(0)) == "go to it"  # no word of three characters


def test_filler_words_inserts_fillers_and_keeps_every_word():
    for severity, share in zip(range(1, 6), SHARES):
        for before, after in zip(_captions(), _run("filler_words", _captions(), severity)):
            words = after.split()
            kept = [w for w in words if w not in FILLERS]
            assert kept == before.split() and len(words) - len(kept) == _hits(len(kept), share)


def test_letter_repeat_stretches_one_letter_by_two_to_four():
    for before, after in zip(_captions(), _run("letter_repeat", _captions(), 5)):
        changed = [(a, b) for a, b in zip(_words(before), _words(after)) if a != b]
        assert len(changed) == _hits(len(_words(before)), 0.5)
        for a, b in changed:
            i = next((k for k in range(len(a)) if a[k] != b[k]), len(a)) - 1  # the stretched letter
            assert a[i] in "aeiou" or i == len(a) - 1
            assert 2 <= len(b) - len(a) <= 4 and b == a[:i + 1] + a[i] * (len(b) - len(a)) + a[i + 1:]


# --- severity, determinism, input contract ------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_higher_severity_changes_more_words(name):
    captions = _captions()
    means = [np.mean([words_changed(c, o) for c, o in zip(captions, _run(name, captions, s))]) for s in range(1, 6)]
    assert all(a < b for a, b in zip(means, means[1:])), means
    assert means[0] > 0


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_per_seed_and_meme(name):
    captions = _captions(20)
    first = _run(name, captions, 3)
    assert _run(name, captions, 3) == first
    assert get(name).apply(captions[::-1], [f"m{i}" for i in range(20)][::-1], 3, 5) == first[::-1]  # not by order
    assert _run(name, captions, 3, seed=6) != first


@settings(max_examples=100, deadline=None)
@given(caption=st.text(min_size=1, max_size=40).filter(lambda s: s.strip()), name=st.sampled_from(NAMES),
       severity=st.integers(1, 5))
def test_any_unicode_caption_gives_a_non_empty_caption_deterministically(caption, name, severity):
    out = get(name)(caption, severity, np.random.default_rng(0))
    assert isinstance(out, str) and out.strip()
    assert out == get(name)(caption, severity, np.random.default_rng(0))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad, message", [("", "empty"), (" \t\n", "empty"), (None, "must be a str"),
                                          (b"bytes", "must be a str")])
def test_what_is_not_a_caption_is_refused(name, bad, message):
    with pytest.raises(ValueError, match=message):
        get(name)(bad, 3, np.random.default_rng(0))


# --- candidates for word-rewrite attacks --------------------------------------------------------------------


def test_candidates_for_hate_are_the_human_rewrites():
    got = human_candidates("hate", np.random.default_rng(0), 100)
    assert {"h4te", "h@te", "hat3", "ha7e", "ha te", "h ate", "h a t e", "h.a.t.e", "h-a-t-e", "h_a_t_e",
            "h❤️te", "h🌟te", "h4️⃣te", "haaaate", "hateeee"} <= set(got)
    assert got == sorted(set(got)) and "hate" not in got
    for c in got:  # no homoglyph, no invisible character
        assert defences.confusables(c) == c and defences.zero_width(c) == c


def test_candidates_keep_edge_punctuation_and_offer_the_emoji():
    got = human_candidates("(Muslims),", np.random.default_rng(0), 100)
    assert "(👳🏾)," in got and "(Mu$lims)," in got
    assert all(c.startswith("(") and c.endswith("),") for c in got)


@pytest.mark.parametrize("word", ["hate", "Muslims", "kill", "ok", "x", "...", "2024", "women!"])
def test_candidates_contract(word):
    everything = human_candidates(word, np.random.default_rng(1), 1000)
    assert len(set(everything)) == len(everything) and word not in everything and all(everything)
    for limit in (0, 1, 5):
        few = human_candidates(word, np.random.default_rng(1), limit)
        assert len(few) == min(limit, len(everything)) and set(few) <= set(everything)
        assert few == human_candidates(word, np.random.default_rng(1), limit)  # same generator state, same list
    assert human_candidates("...", np.random.default_rng(1), 10) == []


@pytest.mark.parametrize("word, limit, message", [
    ("two words", 3, "one word"), ("", 3, "one word"), (None, 3, "one word"),
    ("hate", -1, "limit"), ("hate", 2.5, "limit"), ("hate", True, "limit"),
])
def test_candidates_refuse_bad_input_naming_it(word, limit, message):
    with pytest.raises(ValueError, match=message):
        human_candidates(word, np.random.default_rng(0), limit)


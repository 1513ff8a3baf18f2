"""Natural typos: the shipped misspelling table, `typos` preferring a real misspelling, `natural_typos`, user corpora
(`load_misspellings` in TSV and Birkbeck layouts) and `register_natural_typos`."""
import re
from importlib import resources

import numpy as np
import pytest

from pytest_memerobust.errors import DataError
from pytest_memerobust.perturb import get
from pytest_memerobust.perturb import registry
from pytest_memerobust.perturb.natural import (load_misspellings, parse_misspellings, shipped_misspellings,
                                               with_case_of)
from pytest_memerobust.perturb.text import natural_typos, register_natural_typos, typos

TABLE = shipped_misspellings()
NO_TABLE_WORDS = "Zebras galloping quickly across savannah grasslands"
WITH_TABLE_WORDS = "Definitely the people from school should respect everyone, literally!"
CAPTIONS = [
    WITH_TABLE_WORDS,
    "happy pride to all queer kids",
    "nobody wants trans women near our children",
    "I think THEY should RESPECT their friends",
    "when the weekend finally arrives",
]


def rng(seed=0):
    return np.random.default_rng(seed)


def _changed_words(before: str, after: str) -> list[tuple[str, str]]:
    a, b = before.split(" "), after.split(" ")
    assert len(a) == len(b), (before, after)  # typos keep the whitespace (and no misspelling holds a space)
    return [(x, y) for x, y in zip(a, b) if x != y]


def _core(word: str) -> str:
    return word.strip(".,!?:;()\"")


def _natural_options(word: str) -> set[str]:
    core = _core(word)
    return {word.replace(core, with_case_of(core, w), 1) for w in TABLE.get(core.lower(), ())}


# --- the shipped table -----------------------------------------------------------------------------------------


def test_shipped_table_parses_with_no_empty_entries_and_every_misspelling_differs_from_its_word():
    assert len(TABLE) >= 100
    for word, wrong in TABLE.items():
        assert word and word == word.strip() == word.lower()
        assert isinstance(wrong, tuple) and wrong, word
        assert len(set(wrong)) == len(wrong), word
        for w in wrong:
            assert w and w == w.strip(), (word, w)
            assert w.lower() != word, (word, w)


def test_shipped_file_lines_are_well_formed_so_nothing_is_dropped_silently():
    text = resources.files("pytest_memerobust.perturb").joinpath("data/misspellings.tsv").read_text("utf-8")
    rows = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    for line in rows:
        fields = line.split("\t")
        assert len(fields) >= 2 and all(f and f == f.strip() for f in fields), repr(line)
        assert all(f.lower() != fields[0].lower() for f in fields[1:]), repr(line)
    words = [line.split("\t")[0].lower() for line in rows]
    assert len(set(words)) == len(words) == len(TABLE)  # no duplicated headword merged or dropped
    assert parse_misspellings(text, "x") == TABLE


def test_with_case_of_keeps_title_upper_and_lower_case():
    assert with_case_of("Definitely", "definately") == "Definately"
    assert with_case_of("DEFINITELY", "definately") == "DEFINATELY"
    assert with_case_of("definitely", "definately") == "definately"


# --- typos ------------------------------------------------------------------------------------------------------


def test_typos_replaces_a_table_word_by_one_of_its_listed_misspellings_keeping_case():
    assert "definitely" in TABLE
    expected = {with_case_of("Definitely", w) for w in TABLE["definitely"]}
    assert expected == {"Definately", "Definitly", "Defiantly"}
    seen = {typos("Definitely", 1, rng(seed)) for seed in range(60)}
    assert seen == expected  # always a listed misspelling, and every one of them is drawn
    assert {typos("DEFINITELY", 3, rng(seed)) for seed in range(20)} <= {w.upper() for w in TABLE["definitely"]}
    assert {typos("(definitely!)", 3, rng(seed)) for seed in range(20)} <= {f"({w}!)" for w in TABLE["definitely"]}


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_typos_hit_table_words_always_get_a_real_misspelling(severity):
    for caption in CAPTIONS:
        for seed in range(15):
            out = typos(caption, severity, rng(seed))
            assert out != caption
            for before, after in _changed_words(caption, out):
                if _core(before).lower() in TABLE:
                    assert after in _natural_options(before), (caption, before, after)


def test_typos_still_add_synthetic_noise_to_words_without_a_table_entry():
    assert not any(_core(w).lower() in TABLE for w in NO_TABLE_WORDS.split())
    for severity in (1, 3, 5):
        outs = {typos(NO_TABLE_WORDS, severity, rng(seed)) for seed in range(10)}
        assert NO_TABLE_WORDS not in outs
        assert len(outs) > 1
    assert typos("zebra", 1, rng(0)) != "zebra"
    # a caption mixing both kinds: the words without an entry are hit too, by synthetic noise
    mixed = "zebras definitely gallop"
    hit = set()
    for seed in range(40):
        hit |= {before for before, _ in _changed_words(mixed, typos(mixed, 1, rng(seed)))}
    assert {"zebras", "gallop"} & hit and "definitely" in hit


# --- natural_typos ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_natural_typos_only_ever_use_table_entries(severity):
    for caption in CAPTIONS:
        for seed in range(10):
            out = natural_typos(caption, severity, rng(seed))
            changed = _changed_words(caption, out)
            assert changed, caption  # each of these captions has table words
            for before, after in changed:
                assert after in _natural_options(before), (caption, before, after)


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_natural_typos_leave_captions_without_table_words_unchanged(severity):
    for caption in (NO_TABLE_WORDS, "zebra", "12345 ???", "xylophone quartz"):
        for seed in range(5):
            assert natural_typos(caption, severity, rng(seed)) == caption


def test_natural_typos_severity_hits_more_words():
    caption = "the people from school should respect everyone and their friends"
    counts = {s: np.mean([len(_changed_words(caption, natural_typos(caption, s, rng(seed)))) for seed in range(20)])
              for s in (1, 5)}
    assert counts[5] > counts[1]


def test_natural_typos_are_registered_in_the_typos_family():
    p = get("natural_typos")
    assert (p.modality, p.family, p.parameters.severities, p.needs_model) == ("text", "typos", (1, 2, 3, 4, 5), False)
    assert get("typos").family == "typos"


# --- determinism --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["typos", "natural_typos"])
def test_same_generator_same_output_and_apply_is_deterministic_per_meme(name):
    p = get(name)
    for caption in CAPTIONS:
        assert p(caption, 3, rng(7)) == p(caption, 3, rng(7))
    ids = [f"m{i}" for i in range(len(CAPTIONS))]
    first = p.apply(CAPTIONS, ids, 3, seed=0)
    assert first == p.apply(CAPTIONS, ids, 3, seed=0)
    # batch order does not matter: each meme has its own generator
    assert p.apply(CAPTIONS[::-1], ids[::-1], 3, seed=0) == first[::-1]
    # other meme ids (or seeds) draw other words
    caption = "the people from school should respect everyone and their friends"
    outs = {p.apply([caption], [f"id{k}"], 3, seed=0)[0] for k in range(10)}
    assert len(outs) > 1
    assert len({p.apply([caption], ["x"], 3, seed=s)[0] for s in range(10)}) > 1


# --- user corpora -------------------------------------------------------------------------------------------


def test_load_misspellings_reads_tsv_pairs(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("# my corpus\n\nZebra\tzebar\tzeebra\ngallop\tgalop\ngallop\tgallup\nquick\tQuick\tkwik\n",
                    encoding="utf-8")
    table = load_misspellings(path)
    assert table == {"zebra": ("zebar", "zeebra"), "gallop": ("galop", "gallup"), "quick": ("kwik",)}


def test_load_misspellings_reads_birkbeck_lists(tmp_path):
    path = tmp_path / "birkbeck.dat"
    path.write_text("$Zebra\nzebar\nzeebra\nzebra\n$gallop\ngalop\n$nothingwrong\n$quick\nkwik\nkwik\n",
                    encoding="utf-8")
    table = load_misspellings(path)
    assert table == {"zebra": ("zebar", "zeebra"), "gallop": ("galop",), "quick": ("kwik",)}


@pytest.mark.parametrize("content, line", [
    ("zebra\tzebar\nlonely\n", 2),           # a single word with no '$' header before it
    ("zebra\tzebar\n\n$\nzeebra\n", 3),     # '$' with no word
    ("# comment\nwordonly\n", 2),
])
def test_load_misspellings_names_file_and_line_of_a_malformed_line(tmp_path, content, line):
    path = tmp_path / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_misspellings(path)
    message = str(info.value)
    assert str(path) in message and f"line {line}" in message


def test_load_misspellings_rejects_an_empty_or_unreadable_corpus(tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("# nothing\n$alone\n", encoding="utf-8")
    with pytest.raises(DataError, match="no"):
        load_misspellings(empty)
    with pytest.raises(DataError, match="cannot read"):
        load_misspellings(tmp_path / "missing.tsv")
    binary = tmp_path / "binary.tsv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(DataError, match=re.escape(str(binary))):
        load_misspellings(binary)


@pytest.fixture
def my_typos():
    yield "my_typos"
    registry._REGISTRY.pop("my_typos", None)


def test_register_natural_typos_registers_a_working_perturbation(tmp_path, my_typos):
    path = tmp_path / "corpus.tsv"
    path.write_text("zebra\tzebar\tzeebra\ngallop\tgalop\n", encoding="utf-8")
    table = load_misspellings(path)
    register_natural_typos(my_typos, table)
    p = get(my_typos)
    assert (p.modality, p.family, p.parameters.severities, p.needs_model) == ("text", "typos", (1, 2, 3, 4, 5), False)
    assert my_typos in registry.names("text")
    caption = "Zebras and Zebra gallop, GALLOP"
    for severity in (1, 5):
        for seed in range(10):
            out = p(caption, severity, rng(seed))
            changed = _changed_words(caption, out)
            assert changed
            for before, after in changed:
                assert after in {"Zebar", "Zeebra", "galop,", "GALOP"}, (before, after)
    # only the corpus: a word of the shipped table is left alone, as is a caption with no corpus word
    assert p("definitely the people", 5, rng(0)) == "definitely the people"
    ids = ["a", "b"]
    assert p.apply([caption, "zebra"], ids, 5, seed=3) == p.apply([caption, "zebra"], ids, 5, seed=3)
    assert p.apply([caption, "zebra"], ids, 5, seed=3)[1] in {"zebar", "zeebra"}

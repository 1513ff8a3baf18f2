"""The size of a caption edit and an attack's success, measured alike for every perturbation (TextAttack's units),
and the textattack recipes as this project lists them when textattack is not installed."""
import math

import numpy as np
import pytest

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import load_detector
from pytest_memerobust.engine import AttackState, Condition, Engine
from pytest_memerobust.errors import BackendMissing
from pytest_memerobust.judge.metrics import attack_success_rate
from pytest_memerobust.perturb import get, names
from pytest_memerobust.perturb.distance import words_changed
from pytest_memerobust.perturb.textattack_recipes import RECIPES, installed, recipe_status, textattack_home
from pytest_memerobust.report.tables import caption_attack_table
from pytest_memerobust.judge.results import Answers, AttackMeasures, ConditionResult, Memes, StatsConfig

@pytest.mark.parametrize("before, after, share", [
    ("the cat sat down", "the cat sat down", 0.0),
    ("the cat sat down", "the cta sat down", 0.25),  # one word substituted
    ("the cat sat down", "the cat down", 0.25),  # one deleted
    ("the cat sat down", "lol the cat sat down", 0.25),  # one inserted (a trigger word)
    ("the cat sat down", "a dog stood up", 1.0),
    ("", "", 0.0), ("", "new words", 1.0),
    ("don't stop", "don't stpo", 0.5),  # a contraction is one word
])
def test_words_changed_counts_word_edits_over_the_clean_words(before, after, share):
    assert words_changed(before, after) == pytest.approx(share)


def test_attack_success_rate_counts_only_memes_that_were_right():
    truth = np.array([0, 1, 1, 0, 1])
    clean = np.array([0, 1, 0, 0, 1])  # meme 2 already wrong: skipped, as TextAttack does
    after = np.array([1, 1, 1, 0, 0])  # memes 0 and 4 flipped to wrong; meme 2 "fixed" does not count
    assert attack_success_rate(truth, clean, after) == pytest.approx(2 / 4)
    assert math.isnan(attack_success_rate(truth, 1 - truth, truth))  # nothing right to attack
    with pytest.raises(ValueError, match="shape"):
        attack_success_rate(truth[:3], clean, after)


def test_a_namespaced_perturbation_round_trips_through_condition_ids():
    condition = Condition.parse("text=textattack:deepwordbug@3+image=gaussian_noise@2")
    assert (condition.text, condition.text_severity) == ("textattack:deepwordbug", 3)
    assert condition.id == "text=textattack:deepwordbug@3+image=gaussian_noise@2"
    assert condition.test_name == "textattack:deepwordbug-3+gaussian_noise-2"


def test_every_english_evasion_recipe_is_a_registered_text_perturbation_and_the_rest_say_why_not(tmp_path):
    registered = set(names("text", tag="textattack"))
    for recipe in RECIPES.values():
        status = recipe_status(recipe, textattack_home(tmp_path))
        if recipe.not_an_evasion:
            assert f"textattack:{recipe.name}" not in registered and status.startswith("not a caption attack")
        else:
            assert f"textattack:{recipe.name}" in registered
            assert get(f"textattack:{recipe.name}").needs_model
    assert {"textattack:deepwordbug", "textattack:pruthi", "textattack:textbugger-chars",
            "textattack:pwws"} <= registered
    assert "Universal Sentence Encoder" in recipe_status(RECIPES["textfooler"], textattack_home(tmp_path))


def test_memerobust_list_shows_each_recipe_with_its_status(capsys, tmp_path):
    from pytest_memerobust.cli import main

    assert main(["list", "--cache-dir", str(tmp_path)]) == 0
    pytest.LineMatcher(capsys.readouterr().out.splitlines()).fnmatch_lines(["textattack recipes*", "*textattack:deepwordbug *runs offline*",
                                 "*textattack:textfooler *skipped, lacks counter-fitted word embeddings*",
                                 "*textattack:morpheus *not a caption attack here*"])


@pytest.mark.skipif(installed(), reason="textattack is installed here")
def test_without_textattack_a_recipe_raises_backend_missing_naming_the_install():
    memes = demo_dataset("test").head(3)
    context = Engine(load_detector("demo"), memes, attacks=AttackState(labels=memes.labels("hate"))).attack_context()
    with pytest.raises(BackendMissing, match=r"textattack:pwws needs .*constraints-textattack\.txt"):
        get("textattack:pwws").apply([m.text for m in memes.memes], [m.id for m in memes.memes], 1, 0, context)


def test_the_engine_measures_every_caption_edit_and_the_result_carries_it_across_the_wire():
    memes = demo_dataset("test").head(10)
    engine = Engine(load_detector("demo"), memes, attacks=AttackState(labels=memes.labels("hate")))
    condition = Condition("typos", 5)
    edit = engine.caption_edit(condition)
    clean, typed = engine.inputs("text", None, None), engine.inputs("text", "typos", 5)
    assert edit == {"words_changed": pytest.approx(np.mean([words_changed(a, b) for a, b in zip(clean, typed)]))}
    assert 0 < edit["words_changed"] <= 1
    assert engine.caption_edit(Condition(image="gaussian_noise", image_severity=1)) is None
    y = np.asarray(memes.labels("hate"))
    result = ConditionResult("demo", "demo", condition, Memes(y),
                             Answers(engine.predict(Condition()), engine.predict(condition)),
                             StatsConfig(n_resamples=20), measures=AttackMeasures(caption_edit=edit))
    again = ConditionResult.from_wire(result.to_wire(), result.stats)
    assert again.measures.caption_edit == edit and again.as_dict()["caption_edit"] == edit
    assert result.as_dict()["attack_success_rate"] == pytest.approx(result.attack_success_rate)


def _row(condition, success, measured=None):
    return {"condition": condition, "kind": "text", "attack_success_rate": success,
            "caption_edit": {"words_changed": 0.2, **({"textattack": measured} if measured else {})},
            "relative_robustness_ci": {"accuracy": [0.8, 0.95]}, "metrics": {"accuracy": 0.7},
            "relative_robustness": {"accuracy": 0.9}, "flip_rate": 0.1}


def test_the_caption_attack_table_shows_textattacks_measures_beside_ours_only_when_there_are_some():
    measured = {"success_rate": 0.25, "avg_queries": 17.345, "words_changed": 0.31}
    group = {"results": [_row("text=textattack:pwws@1", 0.25, measured), _row("text=hotflip@1", 0.5)]}
    table = caption_attack_table(group, "simple")
    pwws = next(line for line in table.splitlines() if line.startswith("textattack:pwws@1"))
    assert pwws.split() == ["textattack:pwws@1", "0.250", "0.250", "17.3", "0.200", "0.310", "0.700", "0.900",
                            "0.800..0.950", "0.100"]
    hotflip = next(line for line in table.splitlines() if line.startswith("hotflip@1"))
    assert hotflip.split()[1:4] == ["0.500", "–", "–"]
    assert caption_attack_table({"results": [_row("text=hotflip@1", 0.5)]}, "simple") is None

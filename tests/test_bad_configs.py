"""A corpus of broken suites and model cards (issue 19): each kind is one short error of the exact class that names
the file and the key at fault, raised while the file is read, before any case runs."""
from __future__ import annotations

import pytest

from pytest_memerobust.detectors import load_card
from pytest_memerobust.detectors.cards import available_cards
from pytest_memerobust.errors import ConfigError, SuiteError
from pytest_memerobust.run.suite import load_suite

# kind -> (suite text, substrings the message must hold besides the file's name)
BAD_SUITES = {
    "toml_syntax": ('[suite\nname = "x"\n', ["line 1"]),
    "duplicate_key": ("[text]\ntypos = [1]\ntypos = [2]\n", ["line 3"]),
    "unknown_table": ("[txet]\ntypos = [1]\n", ["'txet'"]),
    "unknown_suite_key": ('[suite]\nnmae = "x"\n[text]\ntypos = [1]\n', ["'nmae'"]),
    "name_not_text": ("[suite]\nname = 3\n[text]\ntypos = [1]\n", ["[suite].name", "3"]),
    "empty_name": ('[suite]\nname = "  "\n[text]\ntypos = [1]\n', ["[suite].name"]),
    "task_not_text": ("[suite]\ntask = [1]\n[text]\ntypos = [1]\n", ["[suite].task"]),
    "captions_unknown": ('[suite]\ncaptions = "pixels"\n[text]\ntypos = [1]\n', ["[suite].captions", "'pixels'"]),
    "modes_unknown": ('[suite]\nmodes = ["audio"]\n[text]\ntypos = [1]\n', ["[suite].modes", "audio"]),
    "unknown_perturbation": ("[text]\ntypoz = [1]\n", ["'typoz'", "did you mean 'typos'", "memerobust list"]),
    "unregistered_textattack_recipe": ('[text]\n"textattack:morpheus" = [1]\n',
                                       ["'textattack:morpheus'", "text-to-text"]),
    "severity_out_of_range": ("[text]\ntypos = [9]\n", ["'typos'", "[9]"]),
    "negative_severity": ("[text]\ntypos = [-1]\n", ["'typos'", "[-1]"]),
    "severities_not_a_list": ('[text]\ntypos = "3"\n', ["'typos'"]),
    "severity_a_flag": ("[text]\ntypos = [true]\n", ["'typos'"]),
    "image_edit_under_text": ("[text]\ngaussian_noise = [1]\n", ["'gaussian_noise'", "[text]"]),
    "text_edit_under_image": ("[image]\ntypos = [1]\n", ["'typos'", "[image]"]),
    "grid_entry_without_severity_number": ('[grid]\ntext = ["typos@x"]\nimage = ["gaussian_noise@1"]\n',
                                           ["[grid].text", "'typos@x'"]),
    "grid_without_image": ('[grid]\ntext = ["typos@1"]\n', ["[grid]"]),
    "grid_unknown_key": ('[grid]\ntext = ["typos@1"]\nimage = ["gaussian_noise@1"]\naudio = []\n', ["[grid]"]),
    "decision_unknown": ('[thresholds]\ndecision = "maybe"\n[text]\ntypos = [1]\n', ["decision", "'maybe'"]),
    "metric_misspelt": ("[thresholds]\nmin_relative_robustness = { acuracy = 0.9 }\n[text]\ntypos = [1]\n",
                        ["'acuracy'"]),
    "robustness_not_a_table": ("[thresholds]\nmin_relative_robustness = 0.9\n[text]\ntypos = [1]\n",
                               ["min_relative_robustness"]),
    "flip_rate_above_one": ("[thresholds]\nmax_flip_rate = 2.0\n[text]\ntypos = [1]\n", ["max_flip_rate", "2.0"]),
    "flip_rate_text": ('[thresholds]\nmax_flip_rate = "low"\n[text]\ntypos = [1]\n', ["max_flip_rate", "'low'"]),
    "override_without_match": ("[text]\ntypos = [1]\n[[override]]\nmax_flip_rate = 0.5\n", ["[[override]] #1"]),
}


@pytest.mark.parametrize("kind", sorted(BAD_SUITES))
def test_a_broken_suite_is_one_suite_error_naming_the_file_and_key(kind, tmp_path):
    text, culprits = BAD_SUITES[kind]
    path = tmp_path / f"memerobust-{kind}.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SuiteError) as err:
        load_suite(path)
    assert type(err.value) is SuiteError
    message = str(err.value)
    assert path.name in message and "\n" not in message and len(message) < 700, message
    for culprit in culprits:
        assert culprit in message, message


def test_a_suite_not_in_utf8_is_one_suite_error(tmp_path):
    path = tmp_path / "memerobust-utf16.toml"
    path.write_bytes("[text]\ntypos = [1]\n".encode("utf-16"))
    with pytest.raises(SuiteError, match=r"memerobust-utf16\.toml.*utf-8"):
        load_suite(path)


DEMO_CARD = available_cards()["demo"].read_text(encoding="utf-8")
TOP, PARAMS = DEMO_CARD.split("[params]")


def _card(tmp_path, top: str = TOP, rest: str = "[params]" + PARAMS):
    path = tmp_path / "card.toml"
    path.write_text(top + rest, encoding="utf-8")
    return path


# kind -> (a change to the demo card's top-level keys, the key the message must name)
BAD_CARDS = {
    "classes_a_string": (lambda t: t.replace('classes = ["non-hateful", "hateful"]', 'classes = "hateful"'), "classes"),
    "one_class": (lambda t: t.replace('classes = ["non-hateful", "hateful"]', 'classes = ["hateful"]'), "classes"),
    "repeated_class": (lambda t: t.replace('"non-hateful", "hateful"', '"hateful", "hateful"'), "classes"),
    "name_a_number": (lambda t: t.replace('name = "demo"', "name = 7"), "name"),
    "empty_architecture": (lambda t: t.replace('architecture = "demo"', 'architecture = ""'), "architecture"),
    "checkpoint_a_number": (lambda t: t.replace('checkpoint = "demo.safetensors"', "checkpoint = 3"), "checkpoint"),
    "demo_weights_text": (lambda t: t.replace("demo_weights = true", 'demo_weights = "yes"'), "demo_weights"),
    "unknown_key": (lambda t: t + "frobnicate = 1\n", "frobnicate"),
    "missing_classes": (lambda t: t.replace('classes = ["non-hateful", "hateful"]', ""), "classes"),
}


@pytest.mark.parametrize("kind", sorted(BAD_CARDS))
def test_a_broken_card_is_one_config_error_naming_the_key(kind, tmp_path):
    change, key = BAD_CARDS[kind]
    path = _card(tmp_path, change(TOP))
    with pytest.raises(ConfigError) as err:
        load_card(path)
    assert type(err.value) is ConfigError
    message = str(err.value)
    assert str(path) in message and key in message and "\n" not in message, message


def test_params_that_are_not_a_table_are_one_config_error(tmp_path):
    with pytest.raises(ConfigError, match="params must be a table"):
        load_card(_card(tmp_path, TOP + "params = 3\n", ""))


def test_the_demo_card_itself_loads(tmp_path):
    assert load_card(_card(tmp_path)).classes == ("non-hateful", "hateful")

"""Suite files: TOML in, conditions and per-condition thresholds out; every malformed file is a SuiteError that names
the file and the key at fault."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_memerobust.engine import Condition
from pytest_memerobust.errors import SuiteError
from pytest_memerobust.perturb import names
from pytest_memerobust.run.suite import builtin_suite_paths, load_suite
from pytest_memerobust.judge.thresholds import Thresholds

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SHIPPED = Path(__file__).resolve().parents[1] / "suites" / "rainbow-noise.toml"


@pytest.fixture
def write(tmp_path):
    def _write(text: str, name: str = "memerobust-case.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write


def ids(suite) -> list[str]:
    return [c.id for c in suite.conditions]


# --- conditions -------------------------------------------------------------------------------------------------


def test_empty_suite_is_only_clean_and_takes_the_file_stem_as_name(write):
    suite = load_suite(write(""))
    assert ids(suite) == ["clean"]
    assert suite.conditions[0] == Condition()
    assert suite.name == "memerobust-case"
    assert suite.checks.thresholds == Thresholds()
    assert suite.checks.overrides == () and suite.grid.text == () and suite.grid.image == ()
    settings = suite.settings
    assert settings.description == "" and settings.task is None and settings.dataset is None


def test_suite_metadata_is_read(write):
    path = write('[suite]\nname = "mine"\ndescription = "d"\ntask = "hate"\ndataset = "demo:val"\n')
    suite = load_suite(path)
    settings = suite.settings
    assert (suite.name, settings.description, settings.task, settings.dataset) == ("mine", "d", "hate", "demo:val")
    assert suite.path == path


def test_conditions_are_clean_then_text_then_image_then_grid_pairs(write):
    # [image] is written before [text] on purpose: text singles still come first.
    suite = load_suite(write(
        "[image]\n"
        "contrast = [2, 1]\n"
        "gaussian_noise = [3]\n"
        "[text]\n"
        "char_swap = [4]\n"
        "typos = [1, 5]\n"
        "[grid]\n"
        'text = ["typos@3", "char_swap@1"]\n'
        'image = ["contrast@3", "jpeg_compression@2"]\n'
    ))
    assert ids(suite) == [
        "clean",
        "text=char_swap@4",
        "text=typos@1",
        "text=typos@5",
        "image=contrast@2",
        "image=contrast@1",
        "image=gaussian_noise@3",
        "text=typos@3+image=contrast@3",
        "text=typos@3+image=jpeg_compression@2",
        "text=char_swap@1+image=contrast@3",
        "text=char_swap@1+image=jpeg_compression@2",
    ]
    assert suite.grid.text == ("text=typos@3", "text=char_swap@1")
    assert suite.grid.image == ("image=contrast@3", "image=jpeg_compression@2")
    assert [c.kind for c in suite.conditions] == ["clean"] + ["text"] * 3 + ["image"] * 3 + ["combined"] * 4
    assert suite.conditions[-1] == Condition(text="char_swap", text_severity=1, image="jpeg_compression",
                                             image_severity=2)


def test_all_expands_to_the_registry_severities(write):
    suite = load_suite(write('[text]\ntypos = "all"\n[image]\nbrightness = "all"\n'))
    assert ids(suite) == (["clean"] + [f"text=typos@{s}" for s in range(1, 6)]
                          + [f"image=brightness@{s}" for s in range(1, 6)])


def test_duplicate_conditions_are_removed_keeping_first_position(write):
    suite = load_suite(write(
        '[text]\ntypos = [2, 3, 2, 3]\n'
        '[image]\ncontrast = [1, 1]\n'
        '[grid]\ntext = ["typos@2", "typos@2"]\nimage = ["contrast@1", "contrast@1"]\n'
    ))
    assert ids(suite) == ["clean", "text=typos@2", "text=typos@3", "image=contrast@1",
                          "text=typos@2+image=contrast@1"]
    assert len(set(ids(suite))) == len(suite.conditions)


def test_all_plus_explicit_severities_do_not_duplicate(write):
    suite = load_suite(write('[text]\ntypos = "all"\n[grid]\ntext = ["typos@1"]\nimage = ["contrast@5"]\n'))
    assert ids(suite).count("text=typos@1") == 1
    assert ids(suite)[-1] == "text=typos@1+image=contrast@5"
    assert len(suite.conditions) == 1 + 5 + 1


# --- thresholds and overrides -----------------------------------------------------------------------------------

OVERRIDES = """
[thresholds]
min_relative_robustness = { accuracy = 0.9, auroc = 0.9 }
min_absolute_robustness = { macro_f1 = 0.85 }
max_flip_rate = 0.1
min_clean = { accuracy = 0.7 }

[text]
typos = "all"

[image]
contrast = [2, 5]

[[override]]
match = "*typos*"
min_relative_robustness = { accuracy = 0.8 }

[[override]]
match = "*@5*"
min_relative_robustness = { accuracy = 0.7 }
max_flip_rate = 0.3
decision = "confident"
"""


def test_thresholds_defaults(write):
    suite = load_suite(write(OVERRIDES))
    t = suite.checks.thresholds
    assert t.per_metric.min_relative_robustness == {"accuracy": 0.9, "auroc": 0.9}
    assert t.per_metric.min_absolute_robustness == {"macro_f1": 0.85}
    assert t.max_flip_rate == 0.1
    assert t.per_metric.min_clean == {"accuracy": 0.7}
    assert t.decision == "estimate"
    assert [p for p, _ in suite.checks.overrides] == ["*typos*", "*@5*"]
    assert suite.checks.overrides[0][1] == {"min_relative_robustness": {"accuracy": 0.8}}


@pytest.mark.parametrize("condition, accuracy, flip, decision", [
    ("clean", 0.9, 0.1, "estimate"),
    ("image=contrast@2", 0.9, 0.1, "estimate"),
    ("text=typos@2", 0.8, 0.1, "estimate"),            # first override only
    ("text=typos@5", 0.7, 0.3, "confident"),           # both match: the later one wins on accuracy
    ("image=contrast@5", 0.7, 0.3, "confident"),       # second override only
    ("text=typos@5+image=contrast@2", 0.7, 0.3, "confident"),
])
def test_thresholds_for_applies_matching_overrides_in_order(write, condition, accuracy, flip, decision):
    suite = load_suite(write(OVERRIDES))
    t = suite.checks.thresholds_for(Condition.parse(condition))
    # per-metric merge: the overrides only set accuracy, so auroc keeps the default
    assert t.per_metric.min_relative_robustness == {"accuracy": accuracy, "auroc": 0.9}
    assert t.max_flip_rate == flip
    assert t.decision == decision
    # keys no override touches are the defaults
    assert t.per_metric.min_absolute_robustness == {"macro_f1": 0.85}
    assert t.per_metric.min_clean == {"accuracy": 0.7}


def test_thresholds_for_without_a_match_is_the_defaults_and_defaults_are_not_mutated(write):
    suite = load_suite(write(OVERRIDES))
    assert suite.checks.thresholds_for(Condition.parse("image=contrast@2")) == suite.checks.thresholds
    suite.checks.thresholds_for(Condition.parse("text=typos@5"))
    assert suite.checks.thresholds.per_metric.min_relative_robustness == {"accuracy": 0.9, "auroc": 0.9}
    assert suite.checks.thresholds.max_flip_rate == 0.1


def test_later_override_wins_whatever_it_is(write):
    # the same two override bodies as in OVERRIDES, in the opposite order: the typos one is now applied last
    head = OVERRIDES.split("[[override]]")[0]
    suite = load_suite(write(head + """
[[override]]
match = "*@5*"
min_relative_robustness = { accuracy = 0.7 }
max_flip_rate = 0.3

[[override]]
match = "*typos*"
min_relative_robustness = { accuracy = 0.8 }
"""))
    t = suite.checks.thresholds_for(Condition.parse("text=typos@5"))
    assert t.per_metric.min_relative_robustness == {"accuracy": 0.8, "auroc": 0.9}
    assert t.max_flip_rate == 0.3  # set by the @5 override; the typos one does not touch it
    contrast = suite.checks.thresholds_for(Condition.parse("image=contrast@5"))
    assert contrast.per_metric.min_relative_robustness["accuracy"] == 0.7


def test_override_glob_is_case_sensitive(write):
    suite = load_suite(write(OVERRIDES))
    char_swap = suite.checks.thresholds_for(Condition.parse("text=char_swap@2"))
    assert char_swap.per_metric.min_relative_robustness["accuracy"] == 0.9


# --- malformed suites -------------------------------------------------------------------------------------------


def raises_naming(path: Path, *fragments: str) -> SuiteError:
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return info.value


def test_unknown_top_level_table(write):
    raises_naming(write("[suite]\nname = 'x'\n[textt]\ntypos = [1]\n"), "textt", "unknown table")


def test_unknown_suite_key(write):
    raises_naming(write("[suite]\nname = 'x'\nmodel = 'demo'\n"), "[suite]", "model")


def test_unknown_perturbation_gives_the_closest_names_and_where_all_are_listed(write):
    error = raises_naming(write("[text]\ntypoz = [1]\n"), "[text]", "typoz", "did you mean 'typos'",
                          f"{len(names())} known: `memerobust list`")
    assert len(str(error)) < 400  # not a page of names


def test_unknown_perturbation_in_the_grid(write):
    raises_naming(write('[grid]\ntext = ["typos@1"]\nimage = ["blur@1"]\n'), "[grid].image", "'blur'",
                  "did you mean", "_blur'")


@pytest.mark.parametrize("text, fragments", [
    ("[text]\ngaussian_noise = [1]\n", ("[text]", "gaussian_noise", "image perturbation")),
    ("[image]\ntypos = [1]\n", ("[image]", "typos", "text perturbation")),
    ('[grid]\ntext = ["contrast@1"]\nimage = ["contrast@1"]\n', ("[grid].text", "contrast")),
    ('[grid]\ntext = ["typos@1"]\nimage = ["typos@1"]\n', ("[grid].image", "typos")),
])
def test_perturbation_under_the_wrong_modality(write, text, fragments):
    raises_naming(write(text), *fragments)


def test_severity_out_of_range_lists_valid_severities(write):
    raises_naming(write("[text]\ntypos = [1, 6]\n"), "[text]", "typos", "6", "[1, 2, 3, 4, 5]")


def test_grid_severity_out_of_range(write):
    raises_naming(write('[grid]\ntext = ["typos@6"]\nimage = ["contrast@1"]\n'), "[grid].text", "typos",
                  "[1, 2, 3, 4, 5]")


@pytest.mark.parametrize("value", ["[]", '"some"', "[1.5]", "[true]", "false"])
def test_bad_severity_list(write, value):
    raises_naming(write(f"[image]\ncontrast = {value}\n"), "[image]", "contrast", "non-empty list")


def test_true_for_a_perturbation_that_needs_severities(write):
    raises_naming(write("[text]\ntypos = true\n"), "[text]", "typos", "needs severities", "[1, 2, 3, 4, 5]")


def test_grid_with_only_text(write):
    raises_naming(write('[grid]\ntext = ["typos@3"]\n'), "[grid]", "both")


def test_grid_with_only_image(write):
    raises_naming(write('[grid]\nimage = ["contrast@3"]\n'), "[grid]", "both")


def test_grid_unknown_key(write):
    raises_naming(write('[grid]\ntext = ["typos@3"]\nimage = ["contrast@3"]\naudio = ["x@1"]\n'), "[grid]")


def test_bad_grid_entry(write):
    raises_naming(write('[grid]\ntext = ["typos@x"]\nimage = ["contrast@3"]\n'), "[grid].text", "'typos@x'",
                  "name@severity")


def test_override_without_match(write):
    raises_naming(write("[[override]]\nmax_flip_rate = 0.2\n"), "[[override]] #1", "match")


def test_second_override_without_match_is_numbered(write):
    raises_naming(write("[[override]]\nmatch = '*'\n[[override]]\nmax_flip_rate = 0.2\n"), "[[override]] #2")


def test_unknown_threshold_key(write):
    raises_naming(write("[thresholds]\nmin_relative_robustnes = { accuracy = 0.9 }\n"), "[thresholds]",
                  "min_relative_robustnes")


def test_unknown_threshold_key_in_an_override(write):
    raises_naming(write("[[override]]\nmatch = '*'\nmax_flips = 0.2\n"), "[[override]] #1", "max_flips")


def test_unknown_metric_in_min_relative_robustness(write):
    raises_naming(write("[thresholds]\nmin_relative_robustness = { acuracy = 0.9 }\n"),
                  "[thresholds].min_relative_robustness", "acuracy", "accuracy", "auroc", "macro_f1")


def test_non_numeric_floor(write):
    raises_naming(write("[thresholds]\nmin_clean = { accuracy = 'high' }\n"), "min_clean.accuracy", "'high'")


@pytest.mark.parametrize("value", ["1.5", "-0.1", "'0.1'", "nan"])
def test_max_flip_rate_outside_unit_interval(write, value):
    raises_naming(write(f"[thresholds]\nmax_flip_rate = {value}\n"), "[thresholds].max_flip_rate", "[0, 1]")


def test_max_flip_rate_outside_unit_interval_in_an_override(write):
    raises_naming(write("[[override]]\nmatch = '*'\nmax_flip_rate = 2\n"), "[[override]] #1.max_flip_rate")


def test_max_flip_rate_bounds_are_inclusive(write):
    assert load_suite(write("[thresholds]\nmax_flip_rate = 0\n")).checks.thresholds.max_flip_rate == 0
    assert load_suite(write("[thresholds]\nmax_flip_rate = 1.0\n")).checks.thresholds.max_flip_rate == 1.0


def test_bad_decision(write):
    raises_naming(write("[thresholds]\ndecision = 'strict'\n"), "[thresholds].decision", "'strict'", "confident")


def test_invalid_toml_syntax(write):
    raises_naming(write("[text\ntypos = [1]\n"), "cannot read suite")


def test_non_utf8_file(tmp_path):
    path = tmp_path / "memerobust-latin1.toml"
    path.write_bytes('[suite]\nname = "café"\n'.encode("latin-1"))
    raises_naming(path, "cannot read suite")


def test_missing_file(tmp_path):
    raises_naming(tmp_path / "memerobust-missing.toml", "cannot read suite")


@pytest.mark.parametrize("text", [
    pytest.param("[thresholds]\nmax_flip_rate = true\n", id="bool-max-flip-rate"),
    pytest.param("[thresholds]\nmin_clean = 0.7\n", id="scalar-metric-table"),
    pytest.param("text = 3\n", id="scalar-modality-table"),
    pytest.param('[grid]\ntext = [3]\nimage = ["contrast@1"]\n', id="non-string-grid-entry"),
    pytest.param("[override]\nmatch = '*'\nmax_flip_rate = 0.2\n", id="single-override-table"),
    pytest.param("[[override]]\nmatch = 3\nmax_flip_rate = 0.2\n", id="non-string-match"),
])
def test_malformed_value_types_raise_suite_error_naming_the_file(write, text):
    path = write(text)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert str(path) in str(info.value)


# --- the shipped suite ------------------------------------------------------------------------------------------


def test_shipped_rainbow_noise_suite_parses():
    assert "rainbow-noise.toml" in [p.name for p in builtin_suite_paths()]
    suite = load_suite(SHIPPED)
    raw = tomllib.loads(SHIPPED.read_text(encoding="utf-8"))
    assert suite.name == "rainbow-noise"
    assert suite.grid.text == tuple(f"text={s}" for s in raw["grid"]["text"]) == (
        "text=typos@3", "text=hotflip@3", "text=universal_trigger@3", "text=back_translation")
    assert suite.grid.image == tuple(f"image={s}" for s in raw["grid"]["image"]) == (
        "image=uap@3", "image=imagenet_c@3", "image=augmix@3")
    expected = (["clean"] + [f"text=typos@{s}" for s in range(1, 6)] + [f"text=hotflip@{s}" for s in (1, 3, 5)]
                + [f"text=universal_trigger@{s}" for s in (1, 3, 5)] + ["text=back_translation"]
                + [f"image=uap@{s}" for s in (1, 3, 5)]
                + [f"image={n}@{s}" for n in ("imagenet_c", "augmix") for s in range(1, 6)]
                + [f"{t}+{i}" for t in suite.grid.text for i in suite.grid.image])
    assert ids(suite) == expected
    floors = suite.checks.thresholds.per_metric
    assert floors.min_relative_robustness == {"accuracy": 0.9, "auroc": 0.9, "macro_f1": 0.9}
    assert suite.checks.thresholds.max_flip_rate == 0.1
    assert suite.checks.thresholds.per_metric.min_clean == {"accuracy": 0.7, "auroc": 0.75}
    strict = suite.checks.thresholds_for(Condition.parse("image=contrast@5"))
    assert strict.per_metric.min_relative_robustness == {"accuracy": 0.8, "auroc": 0.8, "macro_f1": 0.8}
    assert strict.max_flip_rate == 0.2
    assert suite.checks.thresholds_for(Condition.parse("text=typos@3+image=contrast@3")) == suite.checks.thresholds

"""Defences in suites: every case with a caption side runs again behind the suite's text defence, with the caption
edits re-chosen against it, and the report puts the two side by side."""
import json

import numpy as np
import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash

from pytest_memerobust.data import load_dataset
from pytest_memerobust.detectors.defences import DefendedDetector, Defence, undoes
from pytest_memerobust.engine import Condition, EncodingSettings, Engine
from pytest_memerobust.errors import SuiteError
from pytest_memerobust.judge.summaries import defence_summary, defence_verdict
from pytest_memerobust.run.accounting import run_notes
from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, Options
from pytest_memerobust.run.session import RobustnessSession
from pytest_memerobust.run.suite import parse_suite

QUICK = ["--memerobust-limit=40", "--memerobust-bootstrap=100", "-p", "no:cacheprovider"]


def test_a_defended_condition_names_its_defence_and_parses_back():
    c = Condition(text="typos", text_severity=3, defence="nfkc+confusables")
    assert c.id == "text=typos@3+defence=nfkc,confusables"
    assert c.test_name == "typos-3+defended"
    assert Condition.parse(c.id) == c
    assert c.undefended == Condition(text="typos", text_severity=3)
    clean = Condition.parse("defence=zero_width")
    assert (clean.kind, clean.defence, clean.id) == ("clean", "zero_width", "defence=zero_width")
    with pytest.raises(ValueError, match="defence=nfkc,confusables"):
        Condition.parse("text=typos@3+defence=")


def _suite(extra: str = "", defence='text = ["nfkc", "confusables"]'):
    import tomllib
    from pathlib import Path

    data = tomllib.loads(f'[suite]\nname = "d"\n[text]\ntypos = [3]\n[image]\ncontrast = [2]\n'
                         f'[grid]\ntext = ["typos@3"]\nimage = ["contrast@2"]\n{extra}\n[defence]\n{defence}\n')
    return parse_suite(data, Path("memerobust-d.toml"))


def test_the_defence_doubles_the_clean_case_and_every_case_that_edits_the_caption():
    suite = _suite()
    assert suite.defence == "nfkc+confusables"
    assert [c.id for c in suite.conditions] == [
        "clean", "text=typos@3", "image=contrast@2", "text=typos@3+image=contrast@2",
        "defence=nfkc,confusables", "text=typos@3+defence=nfkc,confusables",
        "text=typos@3+image=contrast@2+defence=nfkc,confusables"]


@pytest.mark.parametrize("defence, says", [
    ('text = ["nfkc", "no_such_thing"]', "no_such_thing"),
    ("text = []", "non-empty list"),
    ('text = "nfkc"', "non-empty list"),
    ('image = ["jpeg"]', "unknown image defence 'jpeg'; known: area_resize, median_filter"),
    ('text = ["area_resize"]', "unknown text defence 'area_resize'"),
    ('audio = ["jpeg"]', "takes only 'text'"),
])
def test_a_bad_defence_table_is_refused_naming_the_culprit(defence, says):
    with pytest.raises(SuiteError, match=says) as caught:
        _suite(defence=defence)
    assert "memerobust-d.toml" in str(caught.value)


class RecordingDetector:
    """A caption-only detector whose answer is the share of upper-case letters: it records what it was shown."""

    modalities = ("text",)
    classes = ("benign", "harmful")
    device = "cpu"

    def __init__(self):
        self.seen = []

    def predict_proba(self, images, texts):
        self.seen += list(texts)
        upper = np.array([sum(ch.isupper() for ch in t) / max(1, len(t)) for t in texts])
        return np.stack([1 - upper, upper], axis=1)


def _memes(n=12):
    return load_dataset("demo").head(n)


def test_the_detector_reads_every_caption_through_the_defence():
    detector, dataset = RecordingDetector(), _memes()
    engine = Engine(detector, dataset, asking=EncodingSettings(defence=Defence.parse("case")))
    proba = engine.predict(Condition(text="case_mixing", text_severity=3, defence="case"))
    assert detector.seen and all(t == t.lower() for t in detector.seen)
    assert np.allclose(proba[:, 1], 0.0)  # lower-cased: no upper-case letter reaches the detector
    undefended = Engine(detector, dataset).predict(Condition(text="case_mixing", text_severity=3))
    assert undefended[:, 1].max() > 0.1
    assert np.allclose(engine.probabilities([None] * 2, ["AB", "Cd"])[:, 1], 0.0)


def test_an_engine_refuses_a_condition_of_another_defence():
    engine = Engine(RecordingDetector(), _memes(), asking=EncodingSettings(defence=Defence.parse("case")))
    with pytest.raises(ValueError, match="another defence"):
        engine.predict(Condition(text="typos", text_severity=1))


def test_caption_edits_are_rechosen_against_the_defence():
    dataset, defence = _memes(40), Defence.parse("confusables")
    plain = Engine(RecordingDetector(), dataset).inputs("text", "homoglyphs", 3)
    adaptive = Engine(RecordingDetector(), dataset,
                      asking=EncodingSettings(defence=defence)).inputs("text", "homoglyphs", 3)
    clean = [m.text for m in dataset.memes]
    undone_plain = sum(undoes(defence, c, p) for c, p in zip(clean, plain))
    undone_adaptive = sum(undoes(defence, c, a) for c, a in zip(clean, adaptive))
    assert undone_adaptive < undone_plain
    # a caption whose edits the defence left alone keeps its first draw: the same as the undefended run's
    for c, p, a in zip(clean, plain, adaptive):
        words = list(zip(c.split(" "), p.split(" ")))
        if all(w == e or defence(e) != defence(w) for w, e in words):
            assert a == p


def test_the_defended_detector_normalises_what_attacks_ask_and_is_cached_apart():
    inner = RecordingDetector()
    inner.fingerprint = "abc"
    defended = DefendedDetector(inner, Defence.parse("case"))
    assert defended.fingerprint == "abc+defence=case"
    defended.predict_proba([None], ["HeLLo"])
    assert inner.seen == ["hello"]
    assert defended.classes == inner.classes
    assert not hasattr(defended, "predict_with_abstentions")  # only a detector that can decline has it


def test_a_session_scores_defended_cases_against_the_defended_clean_memes():
    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=48),
                                        compute=ComputeOptions(cache=CacheOptions(features=False))))
    defence = "nfkc+confusables+zero_width+leetspeak"
    plain = session.evaluate("demo", Condition(text="zero_width", text_severity=3))
    behind = session.evaluate("demo", Condition(text="zero_width", text_severity=3, defence=defence))
    clean_behind = session.outcomes.results[("demo", "demo", f"defence={defence.replace('+', ',')}")]
    assert np.array_equal(behind.answers.proba_clean, clean_behind.answers.proba)
    assert plain.flip_rate > 0 and behind.flip_rate == 0  # invisible characters: stripped before the detector
    # the defended engine reads the undefended one's encoded features where the captions are the same
    engine = session.engine("demo", "demo", None, defence)
    assert engine.features is session.engine("demo", "demo").features
    assert isinstance(run_notes(session), list)  # the notes read every engine, defended ones too


def test_defence_verdicts():
    assert defence_verdict(0.2, 0.0) == "neutralised"
    assert defence_verdict(0.2, 0.19) == "survives"
    assert defence_verdict(0.2, 0.1) == "partly"
    assert defence_verdict(0.0, 0.0) == "no effect"
    assert defence_verdict(float("nan"), 0.1) == "undefined"


def _row(condition, accuracy, flip, defence=None, kind="text"):
    return {"condition": condition, "kind": kind, "defence": defence, "metrics": {"accuracy": accuracy,
            "auroc": accuracy, "macro_f1": accuracy}, "flip_rate": flip, "flip_rate_ci": [flip, flip],
            "relative_robustness": {"accuracy": accuracy / 0.8}, "relative_robustness_ci": {"accuracy": [0.5, 1]}}


def test_defence_summary_pairs_each_attack_with_its_defended_run():
    clean = _row("clean", 0.8, 0.0, kind="clean")
    results = [_row("text=homoglyphs@3", 0.6, 0.25), _row("text=typos@3", 0.7, 0.1), _row("image=contrast@2", 0.7, 0.1)]
    defended = [_row("defence=confusables", 0.78, 0.0, "confusables", "clean"),
                _row("text=homoglyphs@3+defence=confusables", 0.78, 0.0, "confusables"),
                _row("text=typos@3+defence=confusables", 0.7, 0.1, "confusables")]
    [entry] = defence_summary(clean, results, defended)
    assert entry["defence"] == "confusables"
    assert entry["clean"]["accuracy"] == pytest.approx({"undefended": 0.8, "defended": 0.78, "cost": 0.02})
    assert [(r["condition"], r["verdict"]) for r in entry["rows"]] == [("text=homoglyphs@3", "neutralised"),
                                                                        ("text=typos@3", "survives")]
    assert entry["rows"][0]["defended"]["flip_rate"] == 0.0
    assert entry["rows"][0]["undefended"]["accuracy"] == 0.6


DEFENDED_SUITE = """
[suite]
name = "defended"
[thresholds]
max_flip_rate = 0.03
[text]
zero_width = [3]
typos = [3]
[image]
contrast = [2]
[defence]
text = ["nfkc", "zero_width"]
"""


def test_a_defended_suite_runs_both_ways_and_reports_the_defence_table(pytester):
    pytester.makefile(".toml", **{"memerobust-defended": DEFENDED_SUITE})
    js = pytester.path / "r.json"
    result = pytester.runpytest("--memerobust-model=demo", "-v", "--memerobust-tables=full", *QUICK, f"--memerobust-report={js}", ".")
    out = result.stdout.str()
    assert result.ret in (0, 1) and "INTERNALERROR" not in out  # the summary reads defended engines too
    for name in ("clean", "zero_width-3", "typos-3", "contrast-2", "defended", "zero_width-3+defended",
                 "typos-3+defended"):
        assert f"::demo::{name} " in out
    assert "contrast-2+defended" not in out  # the defence leaves pictures alone
    assert "zero_width-3+defended PASSED" in out  # stripped: nothing left to flip
    assert "behind the defence nfkc+zero_width" in out
    [group] = json.loads(js.read_text())["groups"]
    [entry] = group["defences"]
    verdicts = {r["condition"]: r["verdict"] for r in entry["rows"]}
    assert verdicts["text=zero_width@3"] == "neutralised"
    assert set(verdicts) == {"text=zero_width@3", "text=typos@3"}
    assert all(not r.get("defence") for r in group["results"])  # the main tables stay undefended

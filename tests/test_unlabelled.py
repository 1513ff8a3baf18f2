"""Memes without labels (issue 63): a folder of pictures as they come is measured by the label-free measures (flips
against the clean prediction, the confidence drop, the gate's flips of two checkpoints), every label-bound one
(accuracy, AUROC, F1, their robustness, attack success) "not judged: no labels" in the record, the tables and the
gate, and the verdict says what such a run cannot show."""
import json

import numpy as np
import pytest
import torch  # noqa: F401  (imported once, before pytester runs: see tests/test_plugin.py)
from PIL import Image

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.data import demo_dataset
from pytest_memerobust.data.loaders import load_dataset
from pytest_memerobust.data.meme import NO_LABEL
from pytest_memerobust.judge.gate import PairedCell, judge_family
from pytest_memerobust.judge.ledger import flip_ledger
from pytest_memerobust.judge.results import Answers, ConditionResult, Memes, StatsConfig
from pytest_memerobust.judge.thresholds import (NO_LABELS, MetricThresholds, Thresholds, assess, judged_count,
                                                not_judged, verdict)
from pytest_memerobust.perturb.conditions import Condition

N = 40
SUITE = """
[suite]
name = "unlabelled"
[thresholds]
max_flip_rate = 0.5
min_relative_robustness = { accuracy = 0.9 }
[text]
typos = [5]
[image]
contrast = [3]
"""


def _outputs(flip_share: float, seed: int = 0) -> dict:
    """A confident detector's clean and perturbed probabilities of N unlabelled memes, `flip_share` of them flipped."""
    rng = np.random.default_rng(seed)
    clean = np.where(rng.integers(0, 2, N)[:, None] == np.arange(2), 0.8, 0.2)
    perturbed = clean.copy()
    flipped = rng.choice(N, int(flip_share * N), replace=False)
    perturbed[flipped] = perturbed[flipped][:, ::-1]
    return {"y": np.full(N, NO_LABEL), "clean": clean, "perturbed": perturbed}


def test_a_result_of_unlabelled_memes_measures_flips_and_the_confidence_drop_and_no_accuracy():
    cell = _outputs(0.25)
    result = ConditionResult("demo", "folder:memes", Condition.parse("text=typos@5"), Memes(cell["y"]),
                             Answers(cell["clean"], cell["perturbed"]), StatsConfig(n_resamples=200))
    record = result.as_dict()
    assert record["labelled"] is False and record["n"] == N
    assert record["flip_rate"] == 0.25 and record["flip_rate_ci"][0] < 0.25 < record["flip_rate_ci"][1]
    assert record["confidence_drop"] == pytest.approx(0.25 * 0.6)  # 10 memes from 0.8 to 0.2 of their clean class
    assert all(np.isnan(v) for v in record["metrics"].values())
    assert np.isnan(record["attack_success_rate"]) and np.isnan(record["mcnemar_p"])

    floors = Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.9}), max_flip_rate=0.1,
                        max_confidence_drop=0.5)
    assert [v.what for v in assess(result, floors)] == ["flip rate"]  # judged, and above its ceiling
    assert not_judged(result, floors) == [("relative robustness of accuracy", NO_LABELS)]
    assert judged_count(result, floors) == 2
    lenient = Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.9}), max_flip_rate=0.5)
    assert verdict(assess(result, lenient), not_judged(result, lenient), judged_count(result, lenient)) == "pass"
    only_accuracy = Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.9}))
    assert verdict([], not_judged(result, only_accuracy), judged_count(result, only_accuracy)) == "not judged"


def test_the_gate_compares_flips_of_two_checkpoints_and_leaves_accuracy_unjudged():
    """The candidate flips 30% of the memes where the baseline flipped 5%: the flip rule regresses beyond noise;
    an equal candidate does not; accuracy, AUROC and F1 are not judged: no labels."""
    then = _outputs(0.05)
    worse = {**then, "perturbed": _outputs(0.30, seed=0)["perturbed"]}
    for now, regressed in ((worse, True), (then, False)):
        comparisons = judge_family([PairedCell("demo", "folder:memes", "text=typos@5", "text", now, then)],
                                   n_resamples=2000)
        by_rule = {c.subject.rule: c for c in comparisons}
        assert by_rule["flip"].decision.regressed is regressed
        assert {by_rule[r].decision.state for r in ("acc", "auroc", "f1")} == {NO_LABELS}

    ledger = flip_ledger([("demo", "folder:memes", "text=typos@5", then, worse, [str(i) for i in range(N)], None)])
    entry = ledger["conditions"][0]
    assert entry["basis"] == "clean prediction" and entry["n_newly_wrong"] > entry["n_newly_right"]


def _unlabelled_folder(folder):
    """N demo memes as pictures with their captions in a metadata.csv and no labels."""
    folder.mkdir()
    lines = ["file_name,text"]
    for meme in demo_dataset("test").head(N).memes:
        Image.fromarray(meme.image).save(folder / f"{meme.id}.png")
        lines.append(f"{meme.id}.png,{meme.text}")
    (folder / "metadata.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_a_gated_run_on_an_unlabelled_folder_fails_a_candidate_that_flips_more(pytester, tmp_path):
    """The issue's scenario: a baseline saved from a checkpoint that contrast does not move (one epoch of training),
    then the demo checkpoint, which contrast flips on about a fifth of the memes: the gate fails it on flips, and
    accuracy is "no labels" in the terminal, the JSON, the Markdown and the HTML."""
    folder = _unlabelled_folder(tmp_path / "memes")
    dataset = load_dataset(f"folder:{folder}")
    assert dataset.unlabelled and len(dataset) == N and dataset.labels("hate").tolist() == [NO_LABEL] * N
    steady = tmp_path / "steady.safetensors"
    assert cli_main(["train", "demo", "--no-cache", "--data", "demo", "--epochs", "1", "--lr", "1e-4",
                     "--out", str(steady), "--quiet"]) == 0
    pytester.makefile(".toml", **{"memerobust-unlabelled": SUITE})
    run = ["--memerobust-model=demo", f"--memerobust-data=folder:{folder}", "--memerobust-bootstrap=200",
           "-p", "no:cacheprovider"]
    base = tmp_path / "base.json"
    saved = pytester.runpytest(*run, f"--memerobust-checkpoint={steady}", f"--memerobust-save-baseline={base}", ".")
    saved.assert_outcomes(passed=3)
    reports = [tmp_path / f"report.{suffix}" for suffix in ("json", "md", "html")]
    gated = pytester.runpytest(*run, f"--memerobust-baseline={base}", *(f"--memerobust-report={r}" for r in reports),
                               ".")
    assert gated.ret == 1
    gated.stdout.fnmatch_lines(["*unlabelled memes (flips judged, accuracy not)*",
                                "REGRESSED*contrast@3*flip*",
                                "not judged*clean*acc*no labels*",
                                "unlabelled: the memes have no labels*",
                                "FAILED: 1 robustness test failed the gate*"])
    data = json.loads(reports[0].read_text())
    contrast = next(r for g in data["groups"] for r in g["results"] if r["condition"] == "image=contrast@3")
    assert contrast["labelled"] is False and contrast["flip_rate"] > 0.1 and np.isnan(contrast["metrics"]["accuracy"])
    assert "the memes have no labels" in data["verdict"]["summary"]
    worst = data["groups"][0]["worst_examples"][0]  # against the detector's own clean answer, never a made-up label
    assert worst["label_basis"] == "clean prediction" and worst["p_true_clean"] > worst["p_true_perturbed"]
    for report in reports[1:]:
        text = report.read_text()
        assert "no labels" in text and "the memes have no labels" in text

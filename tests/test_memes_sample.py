"""--memerobust-sample=N (issue 62): a seeded sample of the split stratified by label, the same memes on any machine
and in any row order; a --memerobust-limit whose first memes hold one class of the split's two warns, naming it."""
import collections
import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_memerobust.data.meme import Dataset, Meme
from pytest_memerobust.data.selection import one_class_head, quotas, stratified_sample
from pytest_memerobust.errors import ConfigError

REAL_PRIDEMM = Path(__file__).resolve().parents[2] / "shared" / "data" / "pridemm"
QUICK = ["--memerobust-model=demo", "--memerobust-task=label", "--memerobust-bootstrap=20", "--memerobust-workers=1",
         "-p", "no:cacheprovider",
         "-k", "rainbow and clean"]


def _memes(labels, start: int = 0) -> Dataset:
    memes = [Meme(id=f"m{start + i}", text=f"caption {i}", labels={"label": y}) for i, y in enumerate(labels)]
    return Dataset("toy", memes, {"label": ["0", "1"]})


def _counts(dataset: Dataset) -> dict:
    return dict(collections.Counter(m.labels["label"] for m in dataset.memes))


def test_quotas_keep_each_class_s_share_and_one_of_each_while_n_allows():
    assert quotas([260, 247], 40) == [21, 19]  # PrideMM's test split: 20.5 and 19.5, the larger remainder first
    assert quotas([98, 1, 1], 3) == [1, 1, 1]  # at least one of each class
    assert quotas([98, 1, 1], 2) == [2, 0, 0]  # fewer memes than classes: by share
    assert quotas([5, 5], 10) == [5, 5]


def test_a_sample_is_stratified_seeded_by_meme_ids_and_the_same_in_any_row_order():
    data = _memes([0] * 30 + [1] * 10)  # sorted by label, as the files the limit misleads on
    sample = stratified_sample(data, 8, 0, ["label"], "toy")
    assert _counts(sample) == {0: 6, 1: 2} and len(sample) == 8
    chosen = {m.id for m in sample.memes}
    assert [m.id for m in sample.memes] == [m.id for m in data.memes if m.id in chosen]  # the file's order
    shuffled = replace(data, memes=list(reversed(data.memes[::2])) + list(data.memes[1::2]))
    assert {m.id for m in stratified_sample(shuffled, 8, 0, ["label"], "toy").memes} == {m.id for m in sample.memes}
    again = stratified_sample(data, 8, 0, ["label"], "toy")
    assert [m.id for m in again.memes] == [m.id for m in sample.memes]
    other = {m.id for m in stratified_sample(data, 8, 1, ["label"], "toy").memes}
    assert other != {m.id for m in sample.memes}  # another seed, other memes
    # a task the data lacks (the card's `hate` on a generic csv): stratified by the data's own tasks
    assert _counts(stratified_sample(data, 8, 0, ["hate"], "toy")) == {0: 6, 1: 2}
    assert stratified_sample(data, 40, 0, ["label"], "toy").memes == data.memes
    with pytest.raises(ConfigError, match=r"--memerobust-sample=41: toy holds 40 memes, fewer than the sample asks "
                                          r"for; sample at most 40"):
        stratified_sample(data, 41, 0, ["label"], "toy")


def test_a_limit_whose_first_memes_hold_one_class_says_so_naming_the_sample():
    data = _memes([0] * 30 + [1] * 10)
    said = one_class_head(data, 12, ["label"], "csv:memes.csv")
    assert said == ("--memerobust-limit=12: the first 12 memes of csv:memes.csv hold one class of task 'label' (0) "
                    "while the split holds 2, so the metrics that compare classes (AUROC, macro-F1) judge nothing; "
                    "--memerobust-sample=12 evaluates 12 memes stratified by label")
    assert one_class_head(data, 31, ["label"], "x") is None  # both classes among them
    assert one_class_head(data, None, ["label"], "x") is None
    assert one_class_head(_memes([0] * 10), 3, ["label"], "x") is None  # the split itself holds one class


@pytest.mark.skipif(not (REAL_PRIDEMM / "PrideMM.csv").is_file(), reason="needs ../shared/data/pridemm (PrideMM.csv)")
def test_a_sample_of_real_pridemm_keeps_its_hateful_share():
    from pytest_memerobust.data.reading import load_memes

    test = load_memes(f"pridemm:{REAL_PRIDEMM}:test", require_captions=True, require_images=False)
    sample = stratified_sample(test, 50, 0, ["hate"], "pridemm")
    hateful = sum(m.labels["hate"] for m in sample.memes)
    assert len(test) == 507 and len(sample) == 50 and hateful == round(50 * 247 / 507)  # 24 of 50, 247 of 507


def _sorted_csv(folder: Path, n: int = 24) -> Path:
    """`n` memes with pictures, every label 0 first: a file sorted by label."""
    from PIL import Image

    path = folder / "memes.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text", "label", "image"])
        for i in range(n):
            Image.new("RGB", (16, 16), (9 * i, 80, 160)).save(folder / f"m{i}.png")
            writer.writerow([f"m{i}", f"caption number {i}", int(i >= n // 2), f"m{i}.png"])
    return path


def test_a_run_samples_both_classes_where_the_limit_warned_of_one(pytester):
    data = f"--memerobust-data=csv:{_sorted_csv(pytester.path)}"
    limited = pytester.runpytest(*QUICK, data, "--memerobust-limit=6", "--memerobust-report=limited.json")
    limited.stdout.fnmatch_lines(["*SelectionWarning: --memerobust-limit=6: the first 6 memes of csv:*memes.csv hold "
                                  "one class of task 'label' (0) while the split holds 2*--memerobust-sample=6 "
                                  "evaluates 6 memes stratified by label"])
    assert limited.stdout.str().count("SelectionWarning") == 1
    sampled = pytester.runpytest(*QUICK, data, "--memerobust-sample=6", "--memerobust-report=sampled.json")
    sampled.stdout.fnmatch_lines(["memerobust: models demo; data csv:*; seed 0; device auto; a sample of 6 memes "
                                  "stratified by label"])
    assert "SelectionWarning" not in sampled.stdout.str()
    report = json.loads((pytester.path / "sampled.json").read_text())
    (group,) = report["groups"]
    assert report["options"]["sample"] == 6 and group["clean"]["n"] == 6
    assert 0 <= group["clean"]["metrics"]["auroc"] <= 1  # two classes, three memes each: AUROC is defined
    (limited_group,) = json.loads((pytester.path / "limited.json").read_text())["groups"]
    assert limited_group["clean"]["metrics"]["auroc"] in (None, "NaN") or math.isnan(
        limited_group["clean"]["metrics"]["auroc"])  # one class


@pytest.mark.parametrize("args, says", [
    (["--memerobust-sample=1"], "argument --memerobust-sample: expected a number of memes >= 2 (a sample of one meme "
                                "holds one class), got '1'"),
    (["--memerobust-sample=25"], "--memerobust-sample=25: csv:*memes.csv holds 24 memes, fewer than the sample asks "
                                 "for; sample at most 24"),
    (["--memerobust-sample=6", "--memerobust-limit=6"], "--memerobust-limit=6 and --memerobust-sample=6 both choose "
                                                       "the memes evaluated: pass one*"),
])
def test_a_sample_of_too_few_or_too_many_memes_or_beside_a_limit_is_a_usage_error(pytester, args, says):
    result = pytester.runpytest(*QUICK, f"--memerobust-data=csv:{_sorted_csv(pytester.path)}", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{says}*"])
    assert "Traceback" not in result.stderr.str()
